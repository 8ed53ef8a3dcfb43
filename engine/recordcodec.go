package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"slices"
)

// Stored form of a DecisionRecord. Every decision path writes one record,
// so its size is what the store flushes and compacts: a compact binary
// encoding (about a third of the JSON form) instead of JSON. Records
// written by earlier versions as JSON (first byte '{') are still read.
//
// Layout: the format byte recordFormat, then the fields in the order of
// appendRecord, with the primitives of the event encoding (binAppendString,
// binAppendTime, binReader). Strings and lists are length-prefixed (uvarint); integers
// are zigzag varints; floats are 8-byte IEEE 754 (big endian, finite), except
// in float lists whose every value is a whole number below 2⁵³, which are
// stored as varints (the rounded cents of Mu and Priors), or which have
// zeros and repeats enough to tag them (appendFloats); times are Unix
// seconds and nanoseconds in UTC, the zero time included.
const recordFormat byte = 1

// Presence flags of optional fields.
const (
	flagExplorado byte = 1 << iota
	flagEnControl
	flagEnRespaldo
	flagEnSombra
	flagAccionReal
	flagTsEjecucion
	flagConfirmadaEn
	flagRecompensa
)

// Second flag byte. Decoders ignore the bits they do not know, so a flag
// without a field of its own is read by older code too.
const (
	flagAprendida    byte = 1
	flagPolicyInputs byte = 2 // Shares and Aff follow the reward
	flagEleccion     byte = 4 // Eleccion follows them
	flagDowns        byte = 8 // Downs follow Eleccion
	flagAnulada      byte = 16
	// flagVoidKnown is set in every record written since Anulada exists:
	// without it (an older record) Anulada is read from motivo_rechazo
	// (legacyVoided).
	flagVoidKnown byte = 32
	flagCosto     byte = 64  // CostoEnvioCents follows Downs
	flagArms      byte = 128 // Arms follow CostoEnvioCents
)

// errRecord reports a damaged stored decision record.
var errRecord = errors.New("decision record: damaged")

// marshalRecord returns the stored form of r.
func marshalRecord(r *DecisionRecord) []byte { return encodeRecord(nil, r) }

// encodeRecord is marshalRecord in dst's memory (grown as needed).
func encodeRecord(dst []byte, r *DecisionRecord) []byte {
	b := slices.Grow(dst[:0], 160+len(r.Motivo)+8*len(r.X)+36*len(r.Candidates))
	return appendRecord(b, r)
}

func appendRecord(b []byte, r *DecisionRecord) []byte {
	b = append(b, recordFormat)
	b = binAppendString(b, r.Nonce)
	b = binAppendString(b, r.ClienteRef)
	b = binAppendTime(b, r.At)
	b = binAppendString(b, r.Canal)
	b = binAppendString(b, r.CampanaID)
	b = binAppendString(b, r.JobID)
	b = binary.AppendVarint(b, int64(r.Accion))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.Propension))
	b = binAppendString(b, r.Version)
	f, f2 := recordFlags(r)
	b = append(b, f, f2)
	b = binAppendTime(b, r.CaducaEn)
	b = binAppendString(b, r.Motivo)
	b = appendFloats(b, r.X)
	b = binary.AppendUvarint(b, uint64(len(r.Candidates)))
	for _, c := range r.Candidates {
		b = binary.AppendVarint(b, int64(c))
	}
	b = appendFloats(b, r.Probs)
	b = appendFloats(b, r.Mu)
	b = appendFloats(b, r.Priors)
	b = binary.AppendVarint(b, r.BudgetCents)
	b = binAppendString(b, r.Estado)
	if r.AccionReal != nil {
		b = binary.AppendVarint(b, int64(*r.AccionReal))
	}
	b = binAppendString(b, r.MotivoRechazo)
	if r.TsEjecucion != nil {
		b = binAppendTime(b, *r.TsEjecucion)
	}
	if r.ConfirmadaEn != nil {
		b = binAppendTime(b, *r.ConfirmadaEn)
	}
	if r.Recompensa != nil {
		b = binary.AppendVarint(b, *r.Recompensa)
	}
	if f2&flagPolicyInputs != 0 {
		b = appendFloats(b, r.Shares)
		b = appendFloats(b, r.Aff)
	}
	if r.Eleccion != nil {
		b = binary.AppendVarint(b, int64(*r.Eleccion))
	}
	if len(r.Downs) > 0 {
		b = appendFloats(b, r.Downs)
	}
	if r.CostoEnvioCents != nil {
		b = binary.AppendVarint(b, *r.CostoEnvioCents)
	}
	if len(r.Arms) > 0 {
		b = binary.AppendUvarint(b, uint64(len(r.Arms)))
		for _, a := range r.Arms {
			b = binary.AppendVarint(b, int64(a))
		}
	}
	return b
}

// recordFlags are the two flag bytes of r's encoding: which booleans are
// set and which optional fields follow.
func recordFlags(r *DecisionRecord) (f, f2 byte) {
	for _, s := range []struct {
		on   bool
		flag byte
	}{{r.Explorado, flagExplorado}, {r.EnControl, flagEnControl}, {r.EnRespaldo, flagEnRespaldo}, {r.EnSombra, flagEnSombra},
		{r.AccionReal != nil, flagAccionReal}, {r.TsEjecucion != nil, flagTsEjecucion}, {r.ConfirmadaEn != nil, flagConfirmadaEn},
		{r.Recompensa != nil, flagRecompensa}} {
		if s.on {
			f |= s.flag
		}
	}
	f2 = flagVoidKnown
	for _, s := range []struct {
		on   bool
		flag byte
	}{{r.Aprendida, flagAprendida}, {r.Anulada, flagAnulada}, {len(r.Shares) > 0 || len(r.Aff) > 0, flagPolicyInputs},
		{r.Eleccion != nil, flagEleccion}, {len(r.Downs) > 0, flagDowns}, {r.CostoEnvioCents != nil, flagCosto}, {len(r.Arms) > 0, flagArms}} {
		if s.on {
			f2 |= s.flag
		}
	}
	return f, f2
}

const maxExactInt = 1 << 53

// appendFloats writes a float list: its length, a kind byte, the values.
// Kinds: 0, IEEE 754; 1, whole numbers as varints; 2, per value a tag
// byte (floatZero: +0; floatRepeat: the previous value again; floatRaw:
// IEEE 754 follows), used when it is shorter than kind 0 (feature vectors
// hold many zeros, and probabilities repeat the exploration floor).
func appendFloats(b []byte, v []float64) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	if len(v) == 0 {
		return b
	}
	if allWhole(v) {
		b = append(b, 1)
		for _, x := range v {
			b = binary.AppendVarint(b, int64(x))
		}
		return b
	}
	raw := 0 // values kind 2 writes in full
	for i := range v {
		if floatTag(v, i) == floatRaw {
			raw++
		}
	}
	if len(v)+8*raw < 8*len(v) {
		b = append(b, 2)
		for i, x := range v {
			tag := floatTag(v, i)
			b = append(b, tag)
			if tag == floatRaw {
				b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
			}
		}
		return b
	}
	b = append(b, 0)
	for _, x := range v {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// allWhole reports whether every value of v is a whole number below 2⁵³
// in magnitude, and not -0 (whose bits, alone, are those of 1<<63): the
// values kind 1 writes exactly.
func allWhole(v []float64) bool {
	for _, x := range v {
		if x != math.Trunc(x) || math.Abs(x) >= maxExactInt || math.Float64bits(x) == 1<<63 {
			return false
		}
	}
	return true
}

// Tags of the values of a kind 2 float list.
const (
	floatZero byte = iota
	floatRepeat
	floatRaw
)

// floatTag is the kind 2 tag of v[i]; values are compared bit for bit.
func floatTag(v []float64, i int) byte {
	bits := math.Float64bits(v[i])
	switch {
	case bits == 0:
		return floatZero
	case i > 0 && bits == math.Float64bits(v[i-1]):
		return floatRepeat
	default:
		return floatRaw
	}
}

// openStored starts decoding b, a stored value in the binary form whose
// first byte is format or in the JSON form of earlier versions (first byte
// '{'). A JSON b it decodes into v itself; then, and when b is neither
// (damaged is returned), ok is false and err is the decoding's result.
// Otherwise ok is true and d is positioned after the format byte.
func openStored(b []byte, format byte, v any, damaged error) (d binReader, ok bool, err error) {
	if len(b) > 0 && b[0] == '{' {
		return d, false, json.Unmarshal(b, v)
	}
	if len(b) == 0 || b[0] != format {
		return d, false, damaged
	}
	return binReader{b: b, pos: 1}, true, nil
}

// unmarshalRecord decodes a stored record (binary or the older JSON) into
// r, which it zeroes first. Damaged input gives an error, never a panic.
// A record older than DecisionRecord.Anulada (JSON, or binary without
// flagVoidKnown) has it from legacyVoided.
func unmarshalRecord(b []byte, r *DecisionRecord) error {
	*r = DecisionRecord{}
	d, ok, err := openStored(b, recordFormat, r, errRecord)
	if !ok {
		if err == nil {
			r.Anulada = r.Anulada || legacyVoided(r)
		}
		return err
	}
	r.Nonce = d.str()
	r.ClienteRef = d.str()
	r.At = d.time()
	r.Canal = d.str()
	r.CampanaID = d.str()
	r.JobID = d.str()
	r.Accion = recordInt(&d)
	r.Propension = d.float()
	r.Version = d.str()
	f, f2 := d.byte(), d.byte()
	r.Explorado = f&flagExplorado != 0
	r.EnControl = f&flagEnControl != 0
	r.EnRespaldo = f&flagEnRespaldo != 0
	r.EnSombra = f&flagEnSombra != 0
	r.Aprendida = f2&flagAprendida != 0
	r.CaducaEn = d.time()
	r.Motivo = d.str()
	r.X = recordFloats(&d)
	r.Candidates = recordInts(&d)
	r.Probs = recordFloats(&d)
	r.Mu = recordFloats(&d)
	r.Priors = recordFloats(&d)
	r.BudgetCents = d.varint()
	r.Estado = d.str()
	if f&flagAccionReal != 0 {
		v := recordInt(&d)
		r.AccionReal = &v
	}
	r.MotivoRechazo = d.str()
	if f&flagTsEjecucion != 0 {
		t := d.time()
		r.TsEjecucion = &t
	}
	if f&flagConfirmadaEn != 0 {
		t := d.time()
		r.ConfirmadaEn = &t
	}
	if f&flagRecompensa != 0 {
		v := d.varint()
		r.Recompensa = &v
	}
	if f2&flagPolicyInputs != 0 {
		r.Shares = recordFloats(&d)
		r.Aff = recordFloats(&d)
	}
	if f2&flagEleccion != 0 {
		v := recordInt(&d)
		r.Eleccion = &v
	}
	if f2&flagDowns != 0 {
		r.Downs = recordFloats(&d)
	}
	if f2&flagCosto != 0 {
		v := d.varint()
		r.CostoEnvioCents = &v
	}
	if f2&flagArms != 0 {
		r.Arms = recordInts(&d)
	}
	if !d.done() {
		return errRecord
	}
	r.Anulada = f2&flagAnulada != 0 || f2&flagVoidKnown == 0 && legacyVoided(r)
	return nil
}

// recordInts reads a list of ints: its length, the varints; nil when
// empty.
func recordInts(d *binReader) []int {
	n := recordCount(d)
	if n == 0 {
		return nil
	}
	v := make([]int, n)
	for i := range v {
		v[i] = recordInt(d)
	}
	return v
}

func recordInt(d *binReader) int {
	v := d.varint()
	if v != int64(int(v)) {
		d.fail()
		return 0
	}
	return int(v)
}

// recordCount reads a list length; every item takes at least one byte, so
// a damaged length cannot make a huge allocation.
func recordCount(d *binReader) int {
	n := d.uvarint()
	if n > uint64(d.left()) {
		d.fail()
		return 0
	}
	return int(n)
}

func recordFloats(d *binReader) []float64 {
	n := recordCount(d)
	if n == 0 || d.bad {
		return nil
	}
	v := make([]float64, n)
	switch d.byte() {
	case 0:
		for i := range v {
			v[i] = d.float()
		}
	case 1:
		for i := range v {
			v[i] = float64(d.varint())
		}
	case 2:
		for i := range v {
			switch d.byte() {
			case floatZero:
			case floatRepeat:
				if i == 0 {
					d.fail()
					break
				}
				v[i] = v[i-1]
			case floatRaw:
				v[i] = d.float()
			default:
				d.fail()
			}
		}
	default:
		d.fail()
	}
	if d.bad {
		return nil
	}
	return v
}
