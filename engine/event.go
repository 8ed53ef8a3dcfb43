package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/coupond/coupond/store"
)

// EventType is the tipo of an event, spelled as on the wire.
type EventType string

// The six event types of the event contract v1.
const (
	CompraCat     EventType = "COMPRA_CAT"     // purchases of one ticket in one category
	CuponRecibido EventType = "CUPON_RECIBIDO" // a coupon was sent to the customer
	CuponRedimido EventType = "CUPON_REDIMIDO" // a coupon was redeemed in a ticket
	CuponCaducado EventType = "CUPON_CADUCADO" // a coupon expired unused
	Baja          EventType = "BAJA"           // opt-out from communications, or account closure
	Alta          EventType = "ALTA"           // sign-up
)

// Claves of a BAJA event.
const (
	BajaComunicaciones = "comunicaciones" // opt-out from communications (one channel or all)
	BajaCuenta         = "cuenta"         // account closure
)

// eventTypes gives every event type its persistent one-byte code: the
// position in this array. The order is part of the stored formats (events,
// the customer event index): append only, never reorder.
var eventTypes = [...]EventType{CompraCat, CuponRecibido, CuponRedimido, CuponCaducado, Baja, Alta}

// index returns the persistent code of t, or 0xFF for an unknown type.
func (t EventType) index() byte {
	for i, et := range eventTypes {
		if et == t {
			return byte(i)
		}
	}
	return 0xFF
}

// eventTypeAt is the inverse of index.
func eventTypeAt(b byte) (EventType, bool) {
	if int(b) >= len(eventTypes) {
		return "", false
	}
	return eventTypes[b], true
}

// Valid reports whether t is one of the six event types.
func (t EventType) Valid() bool { return t.index() != 0xFF }

// Event is an event as the engine sees it: already decoded and validated
// against the event contract v1 by the caller (the HTTP layer), money in
// integer cents and times in UTC. Fields that the event's tipo does not
// carry are zero. Optional numbers whose absence differs from 0 have a Has
// flag.
type Event struct {
	ID         string    // event_id
	ClienteRef string    // cliente_ref
	TS         time.Time // ts, UTC
	Tipo       EventType
	Clave      string // category, coupon type, BAJA clave or sign-up channel, by Tipo
	DecisionID string // decision_id; "" when absent
	ValorCents int64  // valor in cents (0 when absent)

	// COMPRA_CAT (TicketID also CUPON_REDIMIDO).
	TicketID         string
	MargenCents      int64
	Cantidad         float64
	HasCantidad      bool
	Tienda           string
	Canal            string // also CUPON_RECIBIDO and BAJA (the unsubscribed channel)
	TicketTotalCents int64
	HasTicketTotal   bool

	// CUPON_RECIBIDO (CuponEmitidoID also CUPON_REDIMIDO and CUPON_CADUCADO).
	CuponEmitidoID  string
	CampanaID       string
	Caducidad       time.Time // UTC; zero when absent
	DescuentoPct    float64
	HasDescuentoPct bool

	// ALTA.
	Segmento string
	Perfil   string
}

// eventVersion is the first byte of an encoded event.
const eventVersion = 1

// Presence bits of the optional fields of an encoded event.
const (
	evDecisionID = 1 << iota
	evValor
	evTicketID
	evMargen
	evCantidad
	evTienda
	evCanal
	evTicketTotal
	evCuponEmitidoID
	evCampanaID
	evCaducidad
	evDescuentoPct
	evSegmento
	evPerfil
	evAllBits = 1<<iota - 1
)

// AppendEncode appends the storage encoding of e to buf and returns the
// extended buffer. The format is persistent (change it only with a new
// version byte and a decoder for the old one):
//
//	byte     version (1)
//	byte     tipo, as its code in eventTypes
//	uvarint  presence bits of the optional fields (evDecisionID ...)
//	string   ID, ClienteRef            (uvarint length + bytes)
//	time     TS                        (varint Unix seconds + uvarint nanoseconds)
//	string   Clave
//	then, in bit order, each optional field whose bit is set: strings as
//	above, cents as varint, floats as 8 bytes big-endian IEEE 754, times as TS.
//
// A field is written when it is non-zero or, for the fields with a Has flag,
// when the flag is set. An unknown Tipo is written as code 0xFF, which
// DecodeEvent refuses.
func (e *Event) AppendEncode(buf []byte) []byte {
	bits := e.presence()
	buf = append(buf, eventVersion, e.Tipo.index())
	buf = binary.AppendUvarint(buf, bits)
	buf = binAppendString(buf, e.ID)
	buf = binAppendString(buf, e.ClienteRef)
	buf = binAppendTime(buf, e.TS)
	buf = binAppendString(buf, e.Clave)
	return e.appendOptional(buf, bits)
}

// presence is the encoding's presence bits: one per optional field set.
func (e *Event) presence() uint64 {
	return bitIf(e.DecisionID != "", evDecisionID) | bitIf(e.ValorCents != 0, evValor) |
		bitIf(e.TicketID != "", evTicketID) | bitIf(e.MargenCents != 0, evMargen) |
		bitIf(e.HasCantidad, evCantidad) | bitIf(e.Tienda != "", evTienda) |
		bitIf(e.Canal != "", evCanal) | bitIf(e.HasTicketTotal, evTicketTotal) |
		bitIf(e.CuponEmitidoID != "", evCuponEmitidoID) | bitIf(e.CampanaID != "", evCampanaID) |
		bitIf(!e.Caducidad.IsZero(), evCaducidad) | bitIf(e.HasDescuentoPct, evDescuentoPct) |
		bitIf(e.Segmento != "", evSegmento) | bitIf(e.Perfil != "", evPerfil)
}

// bitIf is bit when set holds, else 0.
func bitIf(set bool, bit uint64) uint64 {
	if set {
		return bit
	}
	return 0
}

// appendOptional appends the optional fields bits names, in bit order.
func (e *Event) appendOptional(buf []byte, bits uint64) []byte {
	buf = binAppendStringIf(buf, bits, evDecisionID, e.DecisionID)
	buf = binAppendVarintIf(buf, bits, evValor, e.ValorCents)
	buf = binAppendStringIf(buf, bits, evTicketID, e.TicketID)
	buf = binAppendVarintIf(buf, bits, evMargen, e.MargenCents)
	buf = binAppendFloatIf(buf, bits, evCantidad, e.Cantidad)
	buf = binAppendStringIf(buf, bits, evTienda, e.Tienda)
	buf = binAppendStringIf(buf, bits, evCanal, e.Canal)
	buf = binAppendVarintIf(buf, bits, evTicketTotal, e.TicketTotalCents)
	buf = binAppendStringIf(buf, bits, evCuponEmitidoID, e.CuponEmitidoID)
	buf = binAppendStringIf(buf, bits, evCampanaID, e.CampanaID)
	if bits&evCaducidad != 0 {
		buf = binAppendTime(buf, e.Caducidad)
	}
	buf = binAppendFloatIf(buf, bits, evDescuentoPct, e.DescuentoPct)
	buf = binAppendStringIf(buf, bits, evSegmento, e.Segmento)
	buf = binAppendStringIf(buf, bits, evPerfil, e.Perfil)
	return buf
}

// DecodeEvent decodes what Event.AppendEncode wrote. It reports false for
// anything else: another version, an unknown tipo or presence bit, a
// truncated or over-long input, a float that is not finite, nanoseconds out
// of range. The strings of the returned event share one allocation and do
// not alias b.
func DecodeEvent(b []byte) (Event, bool) {
	var e Event
	if len(b) < 2 || b[0] != eventVersion {
		return Event{}, false
	}
	t, ok := eventTypeAt(b[1])
	if !ok {
		return Event{}, false
	}
	e.Tipo = t
	d := binReader{b: b, pos: 2, s: string(b)}
	bits := d.uvarint()
	if bits&^evAllBits != 0 {
		return Event{}, false
	}
	e.ID = d.str()
	e.ClienteRef = d.str()
	e.TS = d.time()
	e.Clave = d.str()
	d.strIf(bits, evDecisionID, &e.DecisionID)
	d.varintIf(bits, evValor, &e.ValorCents)
	d.strIf(bits, evTicketID, &e.TicketID)
	d.varintIf(bits, evMargen, &e.MargenCents)
	e.HasCantidad = d.floatIf(bits, evCantidad, &e.Cantidad)
	d.strIf(bits, evTienda, &e.Tienda)
	d.strIf(bits, evCanal, &e.Canal)
	e.HasTicketTotal = d.varintIf(bits, evTicketTotal, &e.TicketTotalCents)
	d.strIf(bits, evCuponEmitidoID, &e.CuponEmitidoID)
	d.strIf(bits, evCampanaID, &e.CampanaID)
	if bits&evCaducidad != 0 {
		e.Caducidad = d.time()
	}
	e.HasDescuentoPct = d.floatIf(bits, evDescuentoPct, &e.DescuentoPct)
	d.strIf(bits, evSegmento, &e.Segmento)
	d.strIf(bits, evPerfil, &e.Perfil)
	if !d.done() {
		return Event{}, false
	}
	return e, true
}

// binAppendString appends s as a uvarint length and its bytes.
func binAppendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// binAppendTime appends t as varint Unix seconds and uvarint nanoseconds, which
// round-trips every instant (the location is dropped: decoded times are UTC).
func binAppendTime(buf []byte, t time.Time) []byte {
	buf = binary.AppendVarint(buf, t.Unix())
	return binary.AppendUvarint(buf, uint64(t.Nanosecond()))
}

// binAppendStringIf, binAppendVarintIf and binAppendFloatIf append v as
// its kind is written when bits holds bit (an optional field that is
// present), and return buf unchanged otherwise; binReader's strIf, varintIf
// and floatIf read them back.
func binAppendStringIf(buf []byte, bits, bit uint64, v string) []byte {
	if bits&bit == 0 {
		return buf
	}
	return binAppendString(buf, v)
}

func binAppendVarintIf(buf []byte, bits, bit uint64, v int64) []byte {
	if bits&bit == 0 {
		return buf
	}
	return binary.AppendVarint(buf, v)
}

func binAppendFloatIf(buf []byte, bits, bit uint64, v float64) []byte {
	if bits&bit == 0 {
		return buf
	}
	return binary.BigEndian.AppendUint64(buf, math.Float64bits(v))
}

// binReader reads the primitives of the encodings in this package. After
// the first error every read returns zero and done reports false.
type binReader struct {
	b   []byte
	pos int
	bad bool
	// s, when set, is string(b): str then returns substrings of it, so that
	// all decoded strings share one allocation.
	s string
}

func (d *binReader) fail() { d.bad, d.pos = true, len(d.b) }

// done reports whether the whole input was read without error.
func (d *binReader) done() bool { return !d.bad && d.pos == len(d.b) }

// left is how many bytes are unread.
func (d *binReader) left() int { return len(d.b) - d.pos }

// uvarint reads an unsigned varint; one-byte values take an inlined fast
// path.
func (d *binReader) uvarint() uint64 {
	if d.pos < len(d.b) && d.b[d.pos] < 0x80 {
		d.pos++
		return uint64(d.b[d.pos-1])
	}
	return d.uvarintSlow()
}

func (d *binReader) uvarintSlow() uint64 {
	v, n := binary.Uvarint(d.b[d.pos:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.pos += n
	return v
}

func (d *binReader) varint() int64 { return binUnzigzag(d.uvarint()) }

func binUnzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func binZigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func (d *binReader) byte() byte {
	if d.pos >= len(d.b) {
		d.fail()
		return 0
	}
	c := d.b[d.pos]
	d.pos++
	return c
}

// next returns the next n bytes, or nil (and fails) if there are fewer.
func (d *binReader) next(n uint64) []byte {
	if n > uint64(d.left()) {
		d.fail()
		return nil
	}
	v := d.b[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return v
}

func (d *binReader) uint32() uint32 {
	v := d.next(4)
	if v == nil {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

// str reads a uvarint length and that many bytes.
func (d *binReader) str() string {
	n := d.uvarint()
	start := d.pos
	v := d.next(n)
	if len(v) == 0 {
		return ""
	}
	if d.s != "" {
		return d.s[start : start+len(v)]
	}
	return string(v)
}

// strs fills dst with consecutive strings (as str reads them), sharing one
// allocation.
func (d *binReader) strs(dst []string) {
	var stack [2 * (3 + featMaxOptOut + featMaxCats + 1)]int
	bounds := stack[:0]
	start, total := d.pos, 0
	for range dst {
		n := d.uvarint()
		from := d.pos
		d.next(n)
		bounds = append(bounds, from, d.pos)
		total += d.pos - from
	}
	if d.bad || total == 0 {
		return
	}
	all := string(d.b[start:d.pos])
	for i := range dst {
		dst[i] = all[bounds[2*i]-start : bounds[2*i+1]-start]
	}
}

// strIf, varintIf and floatIf read an optional field into *dst when bits
// holds bit, leave *dst alone otherwise, and report whether they read it.
func (d *binReader) strIf(bits, bit uint64, dst *string) bool {
	if bits&bit == 0 {
		return false
	}
	*dst = d.str()
	return true
}

func (d *binReader) varintIf(bits, bit uint64, dst *int64) bool {
	if bits&bit == 0 {
		return false
	}
	*dst = d.varint()
	return true
}

func (d *binReader) floatIf(bits, bit uint64, dst *float64) bool {
	if bits&bit == 0 {
		return false
	}
	*dst = d.float()
	return true
}

// float reads 8 bytes big-endian IEEE 754 and refuses NaN and infinities.
func (d *binReader) float() float64 {
	v := d.next(8)
	if v == nil {
		return 0
	}
	f := math.Float64frombits(binary.BigEndian.Uint64(v))
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail()
		return 0
	}
	return f
}

// Bounds of the Unix seconds a decoded time may have: years 1 to 9999, where
// the encoding round-trips exactly (time.Time{} is year 1).
const (
	minUnixSec = -62135596800
	maxUnixSec = 253402300799
)

// writeEvents writes the event records of the accepted events (keys[k] is
// event k's key) to b in key order; buf is reused for the encoding and
// returned. A record is the event's content hash, then its encoding.
func writeEvents(b *store.Batch, events []IngestEvent, accepted []int, keys [][]byte, buf []byte) []byte {
	order := slices.Clone(accepted)
	slices.SortFunc(order, func(x, y int) int { return bytes.Compare(keys[x], keys[y]) })
	for _, k := range order {
		it := &events[k]
		buf = it.Event.AppendEncode(append(buf[:0], it.sum[:]...))
		b.Set(keys[k], buf)
	}
	return buf
}

// storableTime reports whether t round-trips through binAppendTime and
// binReader.time (years 1 to 9999 in UTC). Writers refuse other times, so
// that the store never holds a record it cannot read back.
func storableTime(t time.Time) bool {
	s := t.Unix()
	return s >= minUnixSec && s <= maxUnixSec
}

// unstorableField names the first time field of ev that the event encoding
// cannot read back ("" when every one can; see storableTime).
func unstorableField(ev *Event) string {
	switch {
	case !storableTime(ev.TS):
		return "ts"
	case !ev.Caducidad.IsZero() && !storableTime(ev.Caducidad):
		return "extra.caducidad"
	}
	return ""
}

// ErrUnstorableTime reports a time a record cannot hold (see storableTime);
// the API refuses such times before they reach the engine.
var ErrUnstorableTime = errors.New("engine: time outside years 1 to 9999")

func (d *binReader) time() time.Time {
	sec := d.varint()
	nsec := d.uvarint()
	if nsec >= 1e9 || sec < minUnixSec || sec > maxUnixSec {
		d.fail()
		return time.Time{}
	}
	if d.bad {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}
