package engine

import (
	"errors"
	"fmt"
	"maps"
	"strings"
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
//
// Features written by requests that were committed stay in the overlay, up
// to the limit of budget, shared by every tenant (featBudget), as a cache of the store's feature records: the next
// request of the same customer reads them there instead of with a Get
// (the largest share of an event's CPU after the memtable inserts). An
// entry is kept only while it provably equals the stored record: ingestion
// is the only writer of feature records but for customer erasure, which
// takes Lock (the cache is dropped), and quarantine, which deletes a
// damaged record and moves featEpoch around its commit (see
// featuresRemoved), after which every committed entry is dropped. A failed
// commit drops them too, and nothing survives the process.
type ingestTurn struct {
	mu      sync.Mutex // fold stage; exclusive users hold it throughout
	applyMu sync.Mutex // apply stage

	// Guarded by mu.
	gone    bool                    // its tenant was deleted (ForgetTenant): no fold may keep features again
	lastGen uint64                  // generation of the last folded request that applies
	events  map[string]pendingEvent // event_id → content hash, pending
	feats   map[string]pendingFeats // cliente_ref → encoded features, pending or committed (gen <= doneGen)
	attrs   map[string]pendingAttr  // cupon_emitido_id → link, pending
	quality *Quality                // the counters after the last folded request; nil: read the store
	queue   []pendingGen            // pending generations, oldest first

	featBytes  int         // what feats holds, in bytes (keys, encodings, entry overhead)
	featsPeak  int         // the most entries feats held since it was made (see shrinkFeats)
	budget     *featBudget // bounds featBytes of every tenant together; nil: none kept
	cacheEpoch uint64      // featEpoch at the last beginFold
	// Generations up to dropUpTo do not keep their features once applied:
	// they were folded before a feature record was deleted outside
	// ingestion, and may be committed before the deletion.
	dropUpTo uint64

	// spares are Features of earlier folds, every tenant's, reused for
	// their memory (their buckets) by the next folds' decoding; nil: none
	// kept.
	spares *featSpares

	// beforeApply, when set (tests), runs in the apply stage before the
	// batch is applied: it widens the window in which the next request
	// folds on the overlay. afterCommit (tests) runs after a commit that
	// succeeded, before the generation counts as applied.
	beforeApply, afterCommit func()

	failure error // the commit that set broken failed with it; guarded by applyMu

	doneGen atomic.Uint64 // the last generation applied or failed (written under applyMu)
	broken  atomic.Bool   // a commit failed: requests folded on the overlay fail too

	// featEpoch is odd while a feature record is being deleted outside
	// ingestion (featuresRemoved) and moves on when that is committed.
	featEpoch atomic.Uint64

	// lastFold is budget.folds when a fold last began (written under mu):
	// the turns that folded least recently give their entries first.
	lastFold atomic.Uint64
	joined   bool // listed in budget.turns; guarded by budget.mu
}

type pendingEvent struct {
	gen uint64
	sum [32]byte
}

type pendingFeats struct {
	gen uint64
	ref string // the entry's key, a copy of its own (see publish)
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

// featEntryOverhead approximates the bytes of a feats entry beyond its key
// and encoding (map slot, string and slice headers, allocation rounding),
// so that the budget (--features-cache-mib) is the heap it costs: a map of
// pendingFeats measured 108-188 bytes an entry beyond them (1,000 to
// 150,000 entries, 20-byte keys, encodings of 150 and 1,500 bytes; Go
// 1.26). At 64 the 32 MiB budget held about 47 MB (a heap profile).
const featEntryOverhead = 160

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

// awaitApplied waits, with mu held, until the request being applied (the
// only one left: a folded request takes applyMu before it releases mu) is
// applied, and returns errIngestAborted if its commit failed: the
// overlay's pending writes are then not in the store.
func (t *ingestTurn) awaitApplied() error {
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	if t.broken.Load() {
		return fmt.Errorf("%w: %w", errIngestAborted, t.failure)
	}
	return nil
}

// Unlock ends Lock.
func (t *ingestTurn) Unlock() { t.mu.Unlock() }

// reset drops the overlay; with mu held and nothing pending.
func (t *ingestTurn) reset() {
	t.events, t.feats, t.attrs, t.quality, t.queue = nil, nil, nil, nil, nil
	t.addFeatBytes(-t.featBytes)
	t.featsPeak = 0
	t.broken.Store(false)
}

// beginFold starts a request's fold (mu held): it drops what applied
// requests left in the overlay, but for the features it keeps as a cache
// (see ingestTurn), and reports whether the request depends on pending
// ones.
//
// When a feature record was deleted outside ingestion since the last fold
// began, or is being deleted (featEpoch odd), the kept features are
// dropped, and so are, once applied, those of every generation folded so
// far: a deletion committed after a kept record was read or written leaves
// the next fold's begin at featEpoch moved or odd, and then nothing
// written before it is kept.
func (t *ingestTurn) beginFold() (dependent bool) {
	done := t.doneGen.Load()
	if t.lastGen == done && t.broken.Load() {
		t.reset()
	}
	if epoch := t.featEpoch.Load(); epoch != t.cacheEpoch || epoch%2 == 1 {
		t.dropCommittedFeats(done)
		t.cacheEpoch, t.dropUpTo = epoch, t.lastGen
	}
	if t.lastGen == done {
		// Applied entries are in the store too.
		t.events, t.attrs = nil, nil
	}
	if t.budget != nil {
		t.lastFold.Store(t.budget.folds.Add(1))
	}
	keepable := !t.broken.Load() && t.budget.keeps()
	n := 0
	for n < len(t.queue) && t.queue[n].gen <= done {
		g := &t.queue[n]
		if t.lastGen != done {
			t.retire(g)
		}
		keep := keepable && g.gen > t.dropUpTo
		for _, k := range g.refs {
			if p, ok := t.feats[k]; ok && p.gen == g.gen && !keep {
				t.dropFeats(k, p)
			}
		}
		n++
	}
	if n == len(t.queue) {
		t.queue = t.queue[:0] // reuse the array
	} else {
		t.queue = t.queue[n:]
	}
	if t.budget.over() {
		t.budget.evict(t, done)
	}
	return t.lastGen != done
}

// retire drops the applied generation g's event ids and attribution links
// from the overlay.
func (t *ingestTurn) retire(g *pendingGen) {
	for _, k := range g.events {
		if t.events[k].gen == g.gen {
			delete(t.events, k)
		}
	}
	for _, k := range g.cups {
		if t.attrs[k].gen == g.gen {
			delete(t.attrs, k)
		}
	}
}

// dropFeats deletes the feats entry of ref, p.
func (t *ingestTurn) dropFeats(ref string, p pendingFeats) {
	t.addFeatBytes(-featEntrySize(ref, p.enc))
	delete(t.feats, ref)
}

// addFeatBytes counts n more bytes in feats (mu held), in the budget too.
func (t *ingestTurn) addFeatBytes(n int) {
	t.featBytes += n
	if t.budget != nil {
		t.budget.used.Add(int64(n))
	}
}

func featEntrySize(ref string, enc []byte) int { return len(ref) + cap(enc) + featEntryOverhead }

// dropCommittedFeats deletes every committed entry of feats (generation at
// most done), keeping the pending ones.
func (t *ingestTurn) dropCommittedFeats(done uint64) {
	for ref, p := range t.feats {
		if p.gen <= done {
			t.dropFeats(ref, p)
		}
	}
	t.shrinkFeats()
}

// shrinkFeats moves feats to a map of its size once deletions left it
// with at most a quarter of the most entries it held (mu held): a Go map
// keeps the memory of the most it ever held, and a tenant whose entries
// the budget evicted (featBudget) kept that of its peak, its bulk load's.
func (t *ingestTurn) shrinkFeats() {
	switch {
	case len(t.feats) > t.featsPeak/4:
	case len(t.feats) == 0:
		t.feats, t.featsPeak = nil, 0
	default:
		m := make(map[string]pendingFeats, len(t.feats))
		maps.Copy(m, t.feats)
		t.feats, t.featsPeak = m, len(m)
	}
}

// evictFeats deletes committed entries of feats (mu held, done the last
// generation applied), in the map's (random) order, until every tenant's
// together take at most target bytes of the budget.
func (t *ingestTurn) evictFeats(done uint64, target int64) {
	for ref, p := range t.feats {
		if t.budget.used.Load() <= target {
			break
		}
		if p.gen <= done {
			t.dropFeats(ref, p)
		}
	}
	t.shrinkFeats()
}

// featuresRemoved runs commit, which deletes feature records of the
// tenant outside ingestion, with featEpoch odd, and moves it on after (see
// beginFold).
func (t *ingestTurn) featuresRemoved(commit func() error) error {
	t.featEpoch.Add(1)
	defer t.featEpoch.Add(1)
	return commit()
}

// publish puts a folded request's writes in the overlay as generation
// lastGen+1 (mu held) and returns that generation: the content hashes of
// the accepted events (indexes in events), the customers' encoded
// features and the coupons' links.
func (t *ingestTurn) publish(events []IngestEvent, accepted []int, feats map[string][]byte, attrs map[string]*attribution, q *Quality) uint64 {
	t.lastGen++
	g := pendingGen{gen: t.lastGen, events: make([]string, 0, len(accepted)), refs: make([]string, 0, len(feats))}
	if t.events == nil {
		t.events, t.attrs = map[string]pendingEvent{}, map[string]pendingAttr{}
	}
	if t.feats == nil {
		t.feats = map[string]pendingFeats{}
		if t.budget != nil {
			t.budget.join(t)
		}
	}
	for _, k := range accepted {
		id := events[k].Event.ID
		t.events[id] = pendingEvent{g.gen, events[k].sum}
		g.events = append(g.events, id)
	}
	for ref, enc := range feats {
		// A key of its own: ref may point into the request's body, which
		// a kept entry must not hold on to.
		key := ref
		if p, ok := t.feats[ref]; ok {
			t.addFeatBytes(-featEntrySize(p.ref, p.enc))
			key = p.ref
		} else {
			key = strings.Clone(ref)
		}
		t.feats[key] = pendingFeats{g.gen, key, enc}
		t.addFeatBytes(featEntrySize(key, enc))
		g.refs = append(g.refs, key)
	}
	for c, a := range attrs {
		t.attrs[c] = pendingAttr{g.gen, *a}
		g.cups = append(g.cups, c)
	}
	t.featsPeak = max(t.featsPeak, len(t.feats))
	t.quality = q
	t.queue = append(t.queue, g)
	return g.gen
}

// spareFeatures returns a Features to decode into (mu held): a spare one,
// whose memory Decode reuses, or a new one.
func (t *ingestTurn) spareFeatures() *Features {
	if f := t.spares.get(); f != nil {
		return f
	}
	return new(Features)
}

// recycleFeatures keeps f, which the fold is done with, for spareFeatures
// (mu held): its buckets, without a string (Apply's may point into a
// request's body, which a spare must not hold on to).
func (t *ingestTurn) recycleFeatures(f *Features) {
	if t.spares == nil {
		return
	}
	cats := f.cats[:cap(f.cats)]
	for i := range cats {
		cats[i].name = ""
	}
	*f = Features{days: f.days[:0], tickets: f.tickets[:0], cats: cats[:0], oldTickets: f.oldTickets[:0]}
	t.spares.put(f)
}
