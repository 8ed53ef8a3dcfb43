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
// side of consent.
func (e *core) replayFeatures(tenant, ref string) (Features, error) {
	type entry struct {
		key    []byte
		optOut bool
		ev     Event
		ok     bool
	}
	var entries []entry
	lo, hi := store.CustomerEventSpan(tenant, ref)
	err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if _, _, id, ok := store.ParseCustomerEventKey(tenant, k); ok {
			s, _ := decodeEventSummary(v)
			entries = append(entries, entry{key: store.EventKey(tenant, id), optOut: s.OptOut})
		}
		return nil
	})
	if err != nil {
		return Features{}, err
	}
	var f Features
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), replayChunk)]
		keys := make([][]byte, len(chunk))
		for i := range chunk {
			keys[i] = chunk[i].key
		}
		err := e.db.GetMany(keys, func(i int, v []byte) error {
			if len(v) >= 32 {
				chunk[i].ev, chunk[i].ok = DecodeEvent(v[32:])
			}
			return nil
		})
		if err != nil {
			return Features{}, err
		}
		for i := range chunk {
			switch {
			case chunk[i].ok && chunk[i].ev.ClienteRef == ref:
				f.Apply(&chunk[i].ev)
			case chunk[i].optOut:
				f.optOutChannel("")
			}
		}
		entries = entries[len(chunk):]
	}
	return f, nil
}
