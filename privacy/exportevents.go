package privacy

import (
	"bytes"
	"errors"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// A cliente_ref that a point of sale uses for every walk-in sale holds
// millions of events: an export held whole took 1.5 GB of heap for
// 1,000,000 of them. So the export walks the customer's event index a
// chunk of exportChunk entries at a time (one GetMany per chunk) and hands
// each event on as it is read; what it keeps across chunks is only what
// the rest of the document needs: the coupons the events name (for the
// links) and the customer's damaged records (for en_cuarentena).

// defaultExportChunk is the index entries one chunk of an export reads.
const defaultExportChunk = 1000

// exportChunkSize is the index entries one chunk of an export reads.
func (s *Service) exportChunkSize() int {
	if s.exportChunk <= 0 {
		return defaultExportChunk
	}
	return s.exportChunk
}

// eventsWalk is what the walk of a customer's events keeps for the rest of
// the export.
type eventsWalk struct {
	// cupons are the coupons the customer's events name.
	cupons map[string]bool
	// damaged are the keys of the customer's quarantined records found so
	// far (CustomerDamaged), as a set: each is counted once.
	damaged map[string]bool
}

// addDamaged adds to w the customer's damaged records: those that name
// ref, and those whose original key is one of keys.
func (w *eventsWalk) addDamaged(s *Service, tenant, ref string, keys [][]byte) error {
	q, err := s.rec.CustomerDamaged(tenant, ref, keys)
	for _, k := range q {
		w.damaged[string(k)] = true
	}
	return err
}

// exportEvents calls emit with each of the customer's events, in index
// order (a damaged one goes to quarantine instead), a chunk at a time.
func (s *Service) exportEvents(r store.Reader, tenant, ref string, emit func(*client.EventoExportado) error) (*eventsWalk, error) {
	n := s.exportChunkSize()
	w := &eventsWalk{cupons: map[string]bool{}, damaged: map[string]bool{}}
	lo, hi := store.CustomerEventSpan(tenant, ref)
	for lo != nil {
		next, err := s.exportEventChunk(r, tenant, ref, lo, hi, n, w, emit)
		if err != nil {
			return nil, err
		}
		lo = next
		if s.afterExportChunk != nil {
			if err := s.afterExportChunk(); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// exportEventChunk emits the events of up to n index entries of ref from
// lo, adds what they name to w, and returns where the next chunk starts
// (nil after the last).
func (s *Service) exportEventChunk(r store.Reader, tenant, ref string, lo, hi []byte, n int, w *eventsWalk,
	emit func(*client.EventoExportado) error) ([]byte, error) {
	_, keys, next, err := s.eventIndexChunk(r, tenant, ref, lo, hi, n)
	if err != nil {
		return nil, err
	}
	vals, found := make([][]byte, len(keys)), make([]bool, len(keys))
	if err := r.GetMany(keys, func(i int, v []byte) error {
		vals[i], found[i] = bytes.Clone(v), true
		return nil
	}); err != nil {
		return nil, err
	}
	var missing [][]byte // gone or damaged: perhaps in quarantine
	for i, v := range vals {
		if !found[i] {
			missing = append(missing, keys[i])
			continue
		}
		ev, ok := engine.Event{}, len(v) >= 32
		if ok {
			ev, ok = engine.DecodeEvent(v[32:])
		}
		if !ok {
			s.rec.Quarantine(tenant, keys[i], v, errors.New("event record: does not decode"))
			missing = append(missing, keys[i])
			continue
		}
		if ev.ClienteRef != ref {
			continue
		}
		if ev.CuponEmitidoID != "" {
			w.cupons[ev.CuponEmitidoID] = true
		}
		out := exportEvent(&ev)
		if err := emit(&out); err != nil {
			return nil, err
		}
	}
	if len(missing) == 0 {
		return next, nil
	}
	return next, w.addDamaged(s, tenant, ref, missing)
}

// eventIndexChunk reads up to n entries of ref's event index from lo (hi
// its end): their keys, the keys of the events they name, and where the
// next chunk starts (nil after the last), as r holds them. Exports and
// erasures walk a long history this way.
func (s *Service) eventIndexChunk(r store.Reader, tenant, ref string, lo, hi []byte, n int) (idx, evKeys [][]byte, next []byte, err error) {
	err = r.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, id, ok := store.ParseCustomerEventKey(tenant, k); ok {
			idx, evKeys = append(idx, bytes.Clone(k)), append(evKeys, s.rec.EventKey(tenant, id))
		}
		if len(idx) >= n {
			next = append(bytes.Clone(k), 0)
			return store.ErrStop
		}
		return nil
	})
	return idx, evKeys, next, err
}
