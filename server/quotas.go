package server

import (
	"math"
	"sync"
	"time"

	"github.com/coupond/coupond/store"
)

// quotas counts a tenant's daily use (decisions, events) per UTC day of the
// tenant clock against the operator's quotas. Counts live in memory and are
// written to the store by flush (every few seconds and at shutdown), so a
// crash can forget at most the last few seconds of use.
type quotas struct {
	mu     sync.Mutex
	counts map[quotaKey]*quotaCount
}

type quotaKey struct {
	tenant, kind, day string
}

type quotaCount struct {
	n     int64
	dirty bool
}

func newQuotas() *quotas { return &quotas{counts: map[quotaKey]*quotaCount{}} }

// secondsToMidnight is the Retry-After for a daily cap: until the next UTC
// midnight of the tenant clock.
func secondsToMidnight(now time.Time) int {
	next := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	return max(1, int(math.Ceil(next.Sub(now).Seconds())))
}

func (q *quotas) get(db *store.DB, k quotaKey) (*quotaCount, error) {
	if c, ok := q.counts[k]; ok {
		return c, nil
	}
	c := &quotaCount{}
	n, err := db.QuotaCount(k.tenant, k.day, k.kind)
	if err != nil {
		return nil, err
	}
	c.n = n
	for old := range q.counts { // keep only today's entries of this tenant and kind
		if old.tenant == k.tenant && old.kind == k.kind && !q.counts[old].dirty {
			delete(q.counts, old)
		}
	}
	q.counts[k] = c
	return c, nil
}

// check reports whether n more units fit in today's quota (limit 0 means no
// quota), without taking them.
func (q *quotas) check(db *store.DB, tenant, kind string, limit int64, now time.Time, n int64) (bool, error) {
	if limit <= 0 {
		return true, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(db, quotaKey{tenant, kind, now.UTC().Format(time.DateOnly)})
	if err != nil {
		return false, err
	}
	return c.n+n <= limit, nil
}

// add records n units of use.
func (q *quotas) add(db *store.DB, tenant, kind string, now time.Time, n int64) error {
	if n == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(db, quotaKey{tenant, kind, now.UTC().Format(time.DateOnly)})
	if err != nil {
		return err
	}
	c.n += n
	c.dirty = true
	return nil
}

// flush writes the changed counts to the store.
func (q *quotas) flush(db *store.DB) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := db.NewBatch()
	defer b.Close()
	for k, c := range q.counts {
		if c.dirty {
			b.SetQuotaCount(k.tenant, k.day, k.kind, c.n)
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(); err != nil {
		return err
	}
	for _, c := range q.counts {
		c.dirty = false
	}
	return nil
}

// Quota names.
const (
	quotaDecisions = "decisiones"
	quotaEvents    = "eventos"
	quotaBatch     = "lotes" // one job in progress and one per hour
)

// checkQuota answers 429 when the tenant's daily quota of kind is used up,
// with Retry-After up to the next UTC midnight of the tenant clock.
func (s *Server) checkQuota(c *call, kind string) error {
	if kind == quotaBatch {
		return s.checkBatchSlot(c)
	}
	limit := c.tenant.Settings.QuotaDecisionsDay
	if kind == quotaEvents {
		limit = c.tenant.Settings.QuotaEventsDay
	}
	ok, err := s.quotas.check(s.DB, c.tenant.ID, kind, limit, c.now(), 1)
	if err != nil {
		return err
	}
	if !ok {
		return &apiError{kind: kindRateLimited, retryAfter: secondsToMidnight(c.now()), msg: "cuota diaria del inquilino agotada"}
	}
	return nil
}
