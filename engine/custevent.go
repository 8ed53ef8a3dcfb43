package engine

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"time"

	"github.com/coupond/coupond/store"
)

// The customer event index (TableCustomerEvent, key = cliente_ref, ts,
// event_id) lets rewards, export and deletion find a customer's events by
// time with one bounded scan. Its value is a small summary:
//
//	byte 0      version (2; 1 before tickets and discounts were kept)
//	byte 1      event type (EventType's index in eventTypes)
//	byte 2      flags: bit 0 = BAJA comunicaciones
//	bytes 3-10  cents, big-endian int64: the margin of a COMPRA_CAT, the
//	            discount (valor) of a CUPON_REDIMIDO, else 0
//	bytes 11-18 (version 2) FNV-1a hash of a COMPRA_CAT's ticket_id, else 0
//
// A version 1 summary (11 bytes) still decodes; its redemptions have no
// discount and its purchases no ticket (Full false).
type eventSummary struct {
	Tipo  EventType
	Cents int64 // margin (COMPRA_CAT) or discount (CUPON_REDIMIDO)
	// Ticket is the hash of a COMPRA_CAT's ticket_id: the tickets of a
	// reward window are its distinct hashes.
	Ticket uint64
	OptOut bool // BAJA comunicaciones
	Full   bool // version 2: Cents and Ticket are as above
}

// summaryOf is the index summary of an accepted event.
func summaryOf(ev *Event) eventSummary {
	s := eventSummary{Tipo: ev.Tipo, Full: true, OptOut: ev.Tipo == Baja && ev.Clave == BajaComunicaciones}
	switch ev.Tipo {
	case CompraCat:
		s.Cents = ev.MargenCents
		h := fnv.New64a()
		h.Write([]byte(ev.TicketID))
		s.Ticket = h.Sum64()
	case CuponRedimido:
		s.Cents = ev.ValorCents
	}
	return s
}

func (s eventSummary) encode() []byte {
	b := make([]byte, 19)
	b[0] = 2
	b[1] = s.Tipo.index()
	if s.OptOut {
		b[2] = 1
	}
	binary.BigEndian.PutUint64(b[3:], uint64(s.Cents))
	binary.BigEndian.PutUint64(b[11:], s.Ticket)
	return b
}

func decodeEventSummary(b []byte) (eventSummary, bool) {
	full := len(b) == 19 && b[0] == 2
	if !full && (len(b) != 11 || b[0] != 1) {
		return eventSummary{}, false
	}
	t, ok := eventTypeAt(b[1])
	if !ok {
		return eventSummary{}, false
	}
	s := eventSummary{Tipo: t, OptOut: b[2]&1 != 0, Cents: int64(binary.BigEndian.Uint64(b[3:])), Full: full}
	if full {
		s.Ticket = binary.BigEndian.Uint64(b[11:])
	} else if t != CompraCat {
		s.Cents = 0
	}
	return s, true
}

// windowSums is what a customer's reward window showed.
type windowSums struct {
	MarginCents   int64 // COMPRA_CAT margins (net of discounts, contract §5)
	DiscountCents int64 // CUPON_REDIMIDO discounts
	Tickets       int   // distinct tickets with a COMPRA_CAT
	OptOut        bool  // a BAJA comunicaciones
	// Full: every summary in the window was version 2, so DiscountCents
	// and Tickets are complete.
	Full bool
}

// windowSpan is the span of a customer's event summaries with ts in
// [from, to).
func windowSpan(tenant, clienteRef string, from, to time.Time) store.Span {
	lo := store.CustomerEventKey(tenant, clienteRef, from, "")
	lo = lo[:len(lo)-1] // drop the empty event_id terminator: every event_id at from sorts after
	hi := store.CustomerEventKey(tenant, clienteRef, to, "")
	return store.Span{Lower: lo, Upper: hi[:len(hi)-1]}
}

// windowAcc adds up one window's event summaries (the learner's windows,
// read together by learnPass.load); its zero value is an empty window.
type windowAcc struct {
	out     windowSums
	partial bool // some summary was version 1
	tickets ticketSet
}

// add adds one stored event summary; one that does not decode is skipped.
func (a *windowAcc) add(v []byte) {
	s, ok := decodeEventSummary(v)
	if !ok {
		return
	}
	a.partial = a.partial || !s.Full
	switch {
	case s.Tipo == CompraCat:
		a.out.MarginCents = featAdd(a.out.MarginCents, s.Cents)
		a.tickets.add(s.Ticket)
	case s.Tipo == CuponRedimido:
		a.out.DiscountCents = featAdd(a.out.DiscountCents, s.Cents)
	case s.OptOut:
		a.out.OptOut = true
	}
}

// sums returns the window's sums.
func (a *windowAcc) sums() windowSums {
	out := a.out
	out.Full, out.Tickets = !a.partial, a.tickets.n()
	return out
}

// ticketSet counts distinct ticket hashes: a short list for the few
// tickets of most windows, a map once a window holds many (a shared
// walk-in cliente_ref can hold thousands).
type ticketSet struct {
	few  []uint64
	many map[uint64]struct{}
}

func (t *ticketSet) add(h uint64) {
	switch {
	case t.many != nil:
		t.many[h] = struct{}{}
	case slices.Contains(t.few, h):
	case len(t.few) < 32:
		t.few = append(t.few, h)
	default:
		t.many = make(map[uint64]struct{}, 2*len(t.few))
		for _, x := range t.few {
			t.many[x] = struct{}{}
		}
		t.many[h] = struct{}{}
	}
}

func (t *ticketSet) n() int {
	if t.many != nil {
		return len(t.many)
	}
	return len(t.few)
}
