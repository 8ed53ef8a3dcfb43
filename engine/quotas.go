package engine

import (
	"errors"
	"math"
	"sync"
	"time"

	"github.com/coupond/coupond/store"
)

// Quota names: the tenant's daily quotas (operator settings).
const (
	QuotaDecisions = "decisiones" // decision requests answered online
	QuotaEvents    = "eventos"    // events accepted
)

// ErrQuota: the tenant's daily quota of a kind is used up.
var ErrQuota = errors.New("engine: tenant daily quota used up")

// DayLimitError is the answer to a request over a daily limit, the
// tenant's quota (ErrQuota) or a customer's DailyCap (ErrDailyCap):
// errors.Is finds which; RetryAfter is the wait in whole seconds until the
// next UTC midnight of the tenant clock, when the limit starts again.
type DayLimitError struct {
	Err        error
	RetryAfter int
}

func (e *DayLimitError) Error() string { return e.Err.Error() }
func (e *DayLimitError) Unwrap() error { return e.Err }

// dayLimit is err as a DayLimitError at tenant time now.
func dayLimit(err error, now time.Time) *DayLimitError {
	return &DayLimitError{Err: err, RetryAfter: secondsToMidnight(now)}
}

// secondsToMidnight is the wait until the next UTC midnight of now.
func secondsToMidnight(now time.Time) int {
	next := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	return max(1, int(math.Ceil(next.Sub(now).Seconds())))
}

// Quotas counts a tenant's daily use (decisions, events) per UTC day of the
// tenant clock against the operator's quotas: Decide takes a unit for
// each answer, Receive one for each event accepted, each checked and
// counted in one step (reserve). Counts live in memory and are written to the
// store by FlushQuotas (every few seconds and at shutdown), so a crash can
// forget at most the last few seconds of use.
type Quotas struct {
	*core
	mu     sync.Mutex
	counts map[quotaKey]*quotaCount

	// readFault, when set (tests), is the error of each read of a stored
	// count: the store's read errors, which no test file system injects.
	readFault func() error
}

// quotaKey names one count: day is the UTC day of the tenant clock, in
// days since the Unix epoch (a number, so that counting allocates nothing).
type quotaKey struct {
	tenant, kind string
	day          int64
}

func quotaDay(now time.Time) int64 { return floorDiv(now.Unix(), 24*3600) }

// date is the key's day as the store names it (YYYY-MM-DD).
func (k quotaKey) date() string {
	return time.Unix(k.day*24*3600, 0).UTC().Format(time.DateOnly)
}

type quotaCount struct {
	n     int64
	dirty bool
}

func newQuotas(c *core) *Quotas { return &Quotas{core: c, counts: map[quotaKey]*quotaCount{}} }

func (q *Quotas) get(k quotaKey) (*quotaCount, error) {
	if c, ok := q.counts[k]; ok {
		return c, nil
	}
	c := &quotaCount{}
	if q.readFault != nil {
		if err := q.readFault(); err != nil {
			return nil, err
		}
	}
	n, err := q.db.QuotaCount(k.tenant, k.date(), k.kind)
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

// quotaLimit is tenant t's daily quota of kind; 0 means none.
func quotaLimit(t *store.Tenant, kind string) int64 {
	if kind == QuotaEvents {
		return t.Settings.QuotaEventsDay
	}
	return t.Settings.QuotaDecisionsDay
}

// CheckQuota answers a DayLimitError (ErrQuota) when tenant t's daily quota
// of kind, at its clock's time now, has no room for one more unit; it takes
// nothing, so it is an early refusal only: what takes the unit (reserve)
// checks again. Quota 0 means none.
func (q *Quotas) CheckQuota(t *store.Tenant, kind string, now time.Time) error {
	lim := quotaLimit(t, kind)
	if lim <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(quotaKey{t.ID, kind, quotaDay(now)})
	if err != nil {
		return err
	}
	if c.n+1 > lim {
		return dayLimit(ErrQuota, now)
	}
	return nil
}

// Used is how many units of kind tenant has taken on now's UTC day of
// its clock (what the quota counts; replays, duplicates and refusals take
// none), whatever its quota: the operator's view ("admin tenant show").
func (q *Quotas) Used(tenant, kind string, now time.Time) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(quotaKey{tenant, kind, quotaDay(now)})
	if err != nil {
		return 0, err
	}
	return c.n, nil
}

// reserve takes n units of tenant t's daily quota of kind on now's day,
// in one step with the check, so that concurrent callers never take more
// than the quota: a DayLimitError (ErrQuota) when it has no room for all
// n, and then nothing is taken. With quota 0 (none) the units are counted
// still. A caller whose use then does not happen gives the units back
// (release).
func (q *Quotas) reserve(t *store.Tenant, kind string, now time.Time, n int64) error {
	lim := quotaLimit(t, kind)
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(quotaKey{t.ID, kind, quotaDay(now)})
	if err != nil {
		return err
	}
	if lim > 0 && c.n+n > lim {
		return dayLimit(ErrQuota, now)
	}
	c.n += n
	c.dirty = true
	return nil
}

// release gives back n units that reserve took at the same time now.
func (q *Quotas) release(tenant, kind string, now time.Time, n int64) error {
	if n == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.get(quotaKey{tenant, kind, quotaDay(now)})
	if err != nil {
		return err
	}
	c.n = max(0, c.n-n)
	c.dirty = true
	return nil
}

// FlushQuotas writes the changed counts to the store.
func (q *Quotas) FlushQuotas() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.db.NewBatch()
	defer b.Close()
	for k, c := range q.counts {
		if c.dirty {
			b.SetQuotaCount(k.tenant, k.date(), k.kind, c.n)
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
