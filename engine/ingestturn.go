package engine

import (
	"errors"
	"sync"
	"sync/atomic"
)

// ingestTurn orders a tenant's event ingestion as a two-stage pipeline.
// A request first takes its turn to read and fold (mu): the idempotency
// records, features, attribution links and quality counters it reads are
// those of every request before it. It then commits its batch (applyMu),
// taken before mu is released, so batches are committed in the order they
// were folded, while the next request already folds. What a folded
// request wrote but has not yet committed is kept in the pending overlay,
// which later requests read before the store.
//
// Lock and Unlock give exclusive use (the pipeline drained, the overlay
// dropped) to other writers of what ingestion reads (customer erasure).
type ingestTurn struct {
	mu      sync.Mutex // fold stage; exclusive users hold it throughout
	applyMu sync.Mutex // apply stage

	// Guarded by mu.
	lastGen uint64                  // generation of the last folded request that applies
	events  map[string]pendingEvent // event_id → content hash, pending
	feats   map[string]pendingFeats // cliente_ref → encoded features, pending
	attrs   map[string]pendingAttr  // cupon_emitido_id → link, pending
	quality *Quality                // the counters after the last folded request; nil: read the store
	queue   []pendingGen            // pending generations, oldest first

	// beforeApply, when set (tests), runs in the apply stage before the
	// batch is applied: it widens the window in which the next request
	// folds on the overlay.
	beforeApply func()

	failure error // the commit that set broken failed with it; guarded by applyMu

	doneGen atomic.Uint64 // the last generation applied or failed (written under applyMu)
	broken  atomic.Bool   // a commit failed: requests folded on the overlay fail too
}

type pendingEvent struct {
	gen uint64
	sum [32]byte
}

type pendingFeats struct {
	gen uint64
	enc []byte
}

type pendingAttr struct {
	gen uint64
	a   attribution
}

// pendingGen lists what one generation put in the overlay.
type pendingGen struct {
	gen                uint64
	events, refs, cups []string
}

// errIngestAborted answers a request folded on the pending writes of one
// whose apply failed.
var errIngestAborted = errors.New("engine: ingestion aborted: an earlier request of the tenant failed to commit")

// Lock takes the tenant's ingestion for exclusive use: no request folds,
// none is left to apply, and the next one reads only the store.
func (t *ingestTurn) Lock() {
	t.mu.Lock()
	t.applyMu.Lock() // waits for the request being applied
	//lint:ignore SA2001 taking and releasing applyMu is the wait
	t.applyMu.Unlock()
	t.reset()
}

// Unlock ends Lock.
func (t *ingestTurn) Unlock() { t.mu.Unlock() }

// reset drops the overlay; with mu held and nothing pending.
func (t *ingestTurn) reset() {
	t.events, t.feats, t.attrs, t.quality, t.queue = nil, nil, nil, nil, nil
	t.broken.Store(false)
}

// beginFold starts a request's fold (mu held): it drops what applied
// requests left in the overlay and reports whether the request depends on
// pending ones.
func (t *ingestTurn) beginFold() (dependent bool) {
	done := t.doneGen.Load()
	if t.lastGen == done {
		if t.broken.Load() {
			t.reset()
		}
		// Applied entries are in the store too; drop them all.
		t.events, t.feats, t.attrs, t.queue = nil, nil, nil, t.queue[:0]
		return false
	}
	n := 0
	for n < len(t.queue) && t.queue[n].gen <= done {
		g := &t.queue[n]
		for _, k := range g.events {
			if t.events[k].gen == g.gen {
				delete(t.events, k)
			}
		}
		for _, k := range g.refs {
			if t.feats[k].gen == g.gen {
				delete(t.feats, k)
			}
		}
		for _, k := range g.cups {
			if t.attrs[k].gen == g.gen {
				delete(t.attrs, k)
			}
		}
		n++
	}
	t.queue = t.queue[n:]
	return true
}

// publish puts a folded request's writes in the overlay as generation
// lastGen+1 (mu held) and returns that generation.
func (t *ingestTurn) publish(g pendingGen, sums map[string][32]byte, feats map[string][]byte, attrs map[string]*attribution, q *Quality) uint64 {
	t.lastGen++
	g.gen = t.lastGen
	if t.events == nil {
		t.events, t.feats, t.attrs = map[string]pendingEvent{}, map[string]pendingFeats{}, map[string]pendingAttr{}
	}
	for id, s := range sums {
		t.events[id] = pendingEvent{g.gen, s}
		g.events = append(g.events, id)
	}
	for ref, enc := range feats {
		t.feats[ref] = pendingFeats{g.gen, enc}
		g.refs = append(g.refs, ref)
	}
	for c, a := range attrs {
		t.attrs[c] = pendingAttr{g.gen, *a}
		g.cups = append(g.cups, c)
	}
	t.quality = q
	t.queue = append(t.queue, g)
	return g.gen
}
