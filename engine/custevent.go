package engine

import (
	"encoding/binary"
	"time"

	"github.com/coupond/coupond/store"
)

// The customer event index (TableCustomerEvent, key = cliente_ref, ts,
// event_id) lets rewards, export and deletion find a customer's events by
// time with one bounded scan. Its value is a small summary:
//
//	byte 0     version (1)
//	byte 1     event type (EventType's index in eventTypes)
//	byte 2     flags: bit 0 = BAJA comunicaciones
//	bytes 3-10 margin in cents (COMPRA_CAT), big-endian int64
type eventSummary struct {
	Tipo        EventType
	MarginCents int64
	OptOut      bool // BAJA comunicaciones
}

func (s eventSummary) encode() []byte {
	b := make([]byte, 11)
	b[0] = 1
	b[1] = s.Tipo.index()
	if s.OptOut {
		b[2] = 1
	}
	binary.BigEndian.PutUint64(b[3:], uint64(s.MarginCents))
	return b
}

func decodeEventSummary(b []byte) (eventSummary, bool) {
	if len(b) != 11 || b[0] != 1 {
		return eventSummary{}, false
	}
	t, ok := eventTypeAt(b[1])
	if !ok {
		return eventSummary{}, false
	}
	return eventSummary{Tipo: t, OptOut: b[2]&1 != 0, MarginCents: int64(binary.BigEndian.Uint64(b[3:]))}, true
}

func customerEventKey(tenant, clienteRef string, ts time.Time, eventID string) []byte {
	return store.CustomerEventKey(tenant, clienteRef, ts, eventID)
}

// windowOutcome sums a customer's purchase margin and notes opt-outs with
// ts in [from, to).
func (e *core) windowOutcome(tenant, clienteRef string, from, to time.Time) (marginCents int64, optOut bool, err error) {
	lo := customerEventKey(tenant, clienteRef, from, "")
	lo = lo[:len(lo)-1] // drop the empty event_id terminator: every event_id at from sorts after
	hi := customerEventKey(tenant, clienteRef, to, "")
	hi = hi[:len(hi)-1]
	err = e.db.Scan(lo, hi, func(_, v []byte) error {
		s, ok := decodeEventSummary(v)
		if !ok {
			return nil
		}
		switch {
		case s.Tipo == CompraCat:
			marginCents += s.MarginCents
		case s.OptOut:
			optOut = true
		}
		return nil
	})
	return marginCents, optOut, err
}
