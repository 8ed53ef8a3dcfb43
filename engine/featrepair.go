package engine

import (
	"bytes"
	"errors"

	"github.com/coupond/coupond/store"
)

// rebuildFeatures answers for ref's feature record damaged, which did not
// decode: it is quarantined and ref's features are replayed from her
// stored events (replayFeatures). Read as a customer without history, she
// would lose her opt-outs and her account closure, and be sent the coupons
// she refused (contract §8: a damaged record is read conservatively).
//
// The rebuilt record takes the damaged one's place when no ingestion can
// write ref's record meanwhile: the caller is an ingestion fold (folding),
// or the tenant's fold stage is free and has no write of ref pending. The stage is
// only tried, never waited for: readers may hold a customer lock, which
// erasure takes after the fold stage (Records.LockCustomer). Otherwise
// the damaged record stays for the next reader, and this one reads the
// rebuilt features.
func (e *core) rebuildFeatures(tenant, ref string, damaged []byte, folding bool) (Features, error) {
	key := store.FeaturesKey(tenant, ref)
	if !folding {
		ts, err := e.state(tenant)
		if err != nil {
			return Features{}, err
		}
		t := &ts.ingestMu
		if t.mu.TryLock() {
			defer t.mu.Unlock()
			cur, err := e.db.Get(key)
			p, kept := t.feats[ref]
			pending := kept && p.gen > t.doneGen.Load() // a committed one is only a cache
			folding = err == nil && !pending && bytes.Equal(cur, damaged)
		}
	}
	f, err := e.replayFeatures(tenant, ref)
	if err != nil {
		return Features{}, err
	}
	cause := errors.New("features: do not decode (rebuilt from the customer's events)")
	if folding {
		e.quarantineAs(tenant, key, damaged, cause, f.AppendEncode(nil))
	}
	return f, nil
}

// repairFeatures is admin check's repair of the damaged feature record
// damaged at key (cause: why it failed): with the tenant's fold stage
// taken (Check holds no customer lock), a record still damaged is
// quarantined and replaced by the features rebuilt from the customer's
// events (rebuildFeatures says why); one rewritten or erased meanwhile is
// left as it is.
func (e *core) repairFeatures(tenant string, key, damaged []byte, cause error) error {
	ref, ok := store.FeaturesRef(tenant, key)
	if !ok {
		return e.quarantine(tenant, key, damaged, cause)
	}
	ts, err := e.state(tenant)
	if err != nil {
		return err
	}
	ts.ingestMu.Lock()
	defer ts.ingestMu.Unlock()
	cur, err := e.db.Get(key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case !bytes.Equal(cur, damaged):
		return nil
	}
	f, err := e.replayFeatures(tenant, string(ref))
	if err != nil {
		return err
	}
	return e.quarantineAs(tenant, key, damaged, cause, f.AppendEncode(nil))
}

// replayChunk is how many events replayFeatures reads at a time.
const replayChunk = 1000

// replayFeatures rebuilds ref's features from her stored events, applied
// in the order of her event index (by ts). An event record that does not
// decode is left out, but for an opt-out, which its index summary still
// tells: it is applied as an opt-out from every channel, erring on the
// side of consent. It holds one chunk of the index at a time: a walk-in
// cliente_ref has millions of events (measured: 1,000,000 held whole were
// hundreds of MB on the decision path that met her damaged record).
func (e *core) replayFeatures(tenant, ref string) (Features, error) {
	var f Features
	lo, hi := store.CustomerEventSpan(tenant, ref)
	for lo != nil {
		next, err := e.replayChunk(tenant, ref, lo, hi, &f)
		if err != nil {
			return Features{}, err
		}
		lo = next
	}
	return f, nil
}

// replayChunk applies to f the events of up to replayChunk entries of ref's
// event index from lo, and returns where the next chunk starts (nil after
// the last).
func (e *core) replayChunk(tenant, ref string, lo, hi []byte, f *Features) (next []byte, err error) {
	type entry struct {
		optOut bool
		ev     Event
		ok     bool
	}
	var entries []entry
	var keys [][]byte
	err = e.db.Scan(lo, hi, func(k, v []byte) error {
		if _, _, id, ok := store.ParseCustomerEventKey(tenant, k); ok {
			s, _ := decodeEventSummary(v)
			entries, keys = append(entries, entry{optOut: s.OptOut}), append(keys, store.EventKey(tenant, id))
		}
		if len(entries) >= replayChunk {
			next = append(bytes.Clone(k), 0)
			return store.ErrStop
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = e.db.GetMany(keys, func(i int, v []byte) error {
		if len(v) >= 32 {
			entries[i].ev, entries[i].ok = DecodeEvent(v[32:])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range entries {
		switch {
		case entries[i].ok && entries[i].ev.ClienteRef == ref:
			f.Apply(&entries[i].ev)
		case entries[i].optOut:
			f.optOutChannel("")
		}
	}
	return next, nil
}
