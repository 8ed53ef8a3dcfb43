package engine

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// featBudget bounds the feature records that every tenant's ingestion
// keeps in memory (ingestTurn.feats) together: the bound is the process's,
// not a tenant's. A bound per tenant let a server whose tenants had each
// ingested a bulk load keep a cache per tenant for good, hundreds of MiB
// beside serve's 192 MiB heap limit, and the collector then ran nearly
// without pause, its assists landing on every tenant's decisions.
//
// used is the sum of the turns' featBytes, pending entries included (they
// cannot be evicted until committed). Beyond limit the committed entries
// of the tenants that folded least recently are evicted first, the folding
// tenant's own last (evict).
type featBudget struct {
	limit int64 // bytes; 0: none kept
	used  atomic.Int64
	folds atomic.Uint64 // a count of folds: the turns' recency

	mu    sync.Mutex
	turns []*ingestTurn // every tenant's, once it has kept an entry
}

// newFeatBudget returns a budget of limit bytes (0 or less: none kept).
func newFeatBudget(limit int) *featBudget {
	return &featBudget{limit: int64(max(limit, 0))}
}

// keeps reports whether committed entries may be kept at all.
func (b *featBudget) keeps() bool { return b != nil && b.limit > 0 }

// over reports whether the turns together hold more than the limit, when
// any are kept: with none kept (limit 0) used counts only pending entries,
// which no eviction can take, and every fold would walk every turn for
// nothing.
func (b *featBudget) over() bool { return b.keeps() && b.used.Load() > b.limit }

// join lists t among the turns evict may take bytes from (once).
func (b *featBudget) join(t *ingestTurn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !t.joined {
		t.joined = true
		b.turns = append(b.turns, t)
	}
}

// evict brings used down to seven eighths of the limit, or as near as the
// committed entries allow: the turns that folded least recently give
// theirs first, self (whose fold stage the caller holds, at generation
// done) last. Another turn gives only when its fold stage is free
// (TryLock): a turn in its fold evicts itself when it next begins one, and
// no fold ever waits for another tenant's.
func (b *featBudget) evict(self *ingestTurn, done uint64) {
	target := b.limit - b.limit/8
	type byFold struct {
		t    *ingestTurn
		fold uint64
	}
	b.mu.Lock()
	turns := make([]byFold, len(b.turns))
	for i, t := range b.turns {
		turns[i] = byFold{t, t.lastFold.Load()} // read once: other folds move it
	}
	b.mu.Unlock()
	slices.SortFunc(turns, func(x, y byFold) int { return cmp.Compare(x.fold, y.fold) })
	for _, bf := range turns {
		t := bf.t
		if b.used.Load() <= target {
			return
		}
		if t == self || !t.mu.TryLock() {
			continue
		}
		t.evictFeats(t.doneGen.Load(), target)
		t.mu.Unlock()
	}
	self.evictFeats(done, target)
}

// maxSpareFeatures bounds featSpares: about the customers of two requests
// of 1,000 events.
const maxSpareFeatures = 1024

// featSpares are the Features that folds are done with, kept for their
// memory (their buckets) by every tenant's ingestion together: at most
// maxSpareFeatures in the process. A list per tenant kept up to that many
// for every tenant that had ever ingested (0.6 MB a tenant of "coupond
// bench events" customers, more for customers with a year of tickets),
// beside serve's 192 MiB heap limit.
type featSpares struct {
	mu   sync.Mutex
	list []*Features
}

// get returns a spare Features, or nil when there is none (or s is nil).
func (s *featSpares) get() *Features {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.list)
	if n == 0 {
		return nil
	}
	f := s.list[n-1]
	s.list[n-1] = nil
	s.list = s.list[:n-1]
	return f
}

// put keeps f, emptied by the caller, unless maxSpareFeatures are kept.
func (s *featSpares) put(f *Features) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.list) < maxSpareFeatures {
		s.list = append(s.list, f)
	}
}

// len is how many are kept.
func (s *featSpares) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.list)
}
