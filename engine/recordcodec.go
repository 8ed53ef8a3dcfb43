package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"time"
)

// Stored form of a DecisionRecord. Every decision path writes one record,
// so its size is what the store flushes and compacts: a compact binary
// encoding (about a third of the JSON form) instead of JSON. Records
// written by earlier versions as JSON (first byte '{') are still read.
//
// Layout: the format byte recordFormat, then the fields in the order of
// appendRecord. Strings and lists are length-prefixed (uvarint); integers
// are zigzag varints; floats are 8-byte IEEE 754 (little endian), except
// float lists whose every value is a whole number below 2⁵³, which are
// stored as varints (the rounded cents of Mu and Priors); times are Unix
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

const flagAprendida byte = 1 // second flag byte

// errRecord reports a damaged stored decision record.
var errRecord = errors.New("decision record: damaged")

// marshalRecord returns the stored form of r.
func marshalRecord(r *DecisionRecord) []byte {
	b := make([]byte, 0, 160+len(r.Motivo)+8*len(r.X)+28*len(r.Candidates))
	return appendRecord(b, r)
}

func appendRecord(b []byte, r *DecisionRecord) []byte {
	b = append(b, recordFormat)
	b = appendString(b, r.Nonce)
	b = appendString(b, r.ClienteRef)
	b = appendTime(b, r.At)
	b = appendString(b, r.Canal)
	b = appendString(b, r.CampanaID)
	b = appendString(b, r.JobID)
	b = binary.AppendVarint(b, int64(r.Accion))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Propension))
	b = appendString(b, r.Version)
	var f byte
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
	var f2 byte
	if r.Aprendida {
		f2 |= flagAprendida
	}
	b = append(b, f, f2)
	b = appendTime(b, r.CaducaEn)
	b = appendString(b, r.Motivo)
	b = appendFloats(b, r.X)
	b = binary.AppendUvarint(b, uint64(len(r.Candidates)))
	for _, c := range r.Candidates {
		b = binary.AppendVarint(b, int64(c))
	}
	b = appendFloats(b, r.Probs)
	b = appendFloats(b, r.Mu)
	b = appendFloats(b, r.Priors)
	b = binary.AppendVarint(b, r.BudgetCents)
	b = appendString(b, r.Estado)
	if r.AccionReal != nil {
		b = binary.AppendVarint(b, int64(*r.AccionReal))
	}
	b = appendString(b, r.MotivoRechazo)
	if r.TsEjecucion != nil {
		b = appendTime(b, *r.TsEjecucion)
	}
	if r.ConfirmadaEn != nil {
		b = appendTime(b, *r.ConfirmadaEn)
	}
	if r.Recompensa != nil {
		b = binary.AppendVarint(b, *r.Recompensa)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

const maxExactInt = 1 << 53

// appendFloats writes a float list: its length, a kind byte (0: IEEE 754,
// 1: whole numbers as varints), the values.
func appendFloats(b []byte, v []float64) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	if len(v) == 0 {
		return b
	}
	whole := true
	for _, x := range v {
		if x != math.Trunc(x) || math.Abs(x) >= maxExactInt || (x == 0 && math.Signbit(x)) {
			whole = false
			break
		}
	}
	if whole {
		b = append(b, 1)
		for _, x := range v {
			b = binary.AppendVarint(b, int64(x))
		}
		return b
	}
	b = append(b, 0)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// unmarshalRecord decodes a stored record (binary or the older JSON) into
// r. Damaged input gives an error, never a panic.
func unmarshalRecord(b []byte, r *DecisionRecord) error {
	if len(b) > 0 && b[0] == '{' {
		*r = DecisionRecord{}
		return json.Unmarshal(b, r)
	}
	if len(b) == 0 || b[0] != recordFormat {
		return errRecord
	}
	d := recordDecoder{b: b[1:]}
	*r = DecisionRecord{}
	r.Nonce = d.string()
	r.ClienteRef = d.string()
	r.At = d.time()
	r.Canal = d.string()
	r.CampanaID = d.string()
	r.JobID = d.string()
	r.Accion = d.int()
	r.Propension = d.float()
	r.Version = d.string()
	f, f2 := d.byte(), d.byte()
	r.Explorado = f&flagExplorado != 0
	r.EnControl = f&flagEnControl != 0
	r.EnRespaldo = f&flagEnRespaldo != 0
	r.EnSombra = f&flagEnSombra != 0
	r.Aprendida = f2&flagAprendida != 0
	r.CaducaEn = d.time()
	r.Motivo = d.string()
	r.X = d.floats()
	if n := d.count(1); n > 0 {
		r.Candidates = make([]int, n)
		for i := range r.Candidates {
			r.Candidates[i] = d.int()
		}
	}
	r.Probs = d.floats()
	r.Mu = d.floats()
	r.Priors = d.floats()
	r.BudgetCents = d.varint()
	r.Estado = d.string()
	if f&flagAccionReal != 0 {
		v := d.int()
		r.AccionReal = &v
	}
	r.MotivoRechazo = d.string()
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
	if d.bad || len(d.b) != 0 {
		return errRecord
	}
	return nil
}

// recordDecoder reads the binary layout; after the first short or invalid
// read every read returns zero and bad is set.
type recordDecoder struct {
	b   []byte
	bad bool
}

func (d *recordDecoder) fail() { d.bad, d.b = true, nil }

func (d *recordDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) int() int {
	v := d.varint()
	if v != int64(int(v)) {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *recordDecoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *recordDecoder) float() float64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

// count reads a length whose items take at least min bytes each, so a
// damaged length cannot make a huge allocation.
func (d *recordDecoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/min) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *recordDecoder) string() string {
	n := d.count(1)
	if d.bad {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *recordDecoder) time() time.Time {
	sec := d.varint()
	ns := d.uvarint()
	if ns >= 1e9 {
		d.fail()
		return time.Time{}
	}
	return time.Unix(sec, int64(ns)).UTC()
}

func (d *recordDecoder) floats() []float64 {
	n := d.count(1)
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
	default:
		d.fail()
	}
	if d.bad {
		return nil
	}
	return v
}
