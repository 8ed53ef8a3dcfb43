package batch

import (
	"time"

	"github.com/coupond/coupond/store"
)

// The runner looks for work every minute, at every job creation and at
// every tenant's resume, and job records are kept for good: reading every
// tenant's jobs each time grew without end (about 13 µs a record, so
// 110,000 records, a year of a daily job for 300 tenants, took 1.5 s of
// every minute). What follows lets nextQueued and cleanup read only what
// may have changed.

// noResultDue is resultsDue when no kept result is known.
func noResultDue() time.Time { return time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) }

// resultKept records that a completed job's result, kept from kept on,
// is due for removal ResultRetention later (runMu held).
func (r *Runner) resultKept(kept time.Time) {
	due := kept.Add(ResultRetention)
	if r.resultsDue.IsZero() || due.Before(r.resultsDue) {
		r.resultsDue = due
	}
}

// queuedTenants returns the tenants nextQueued reads the jobs of: every
// tenant until a first reading of them all (queued nil), then those
// marked since (markQueued) and not yet found without a job to run.
func (r *Runner) queuedTenants() []*store.Tenant {
	all := r.db.Tenants()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued == nil {
		r.queued = map[string]uint64{}
		for _, t := range all {
			r.gen++
			r.queued[t.ID] = r.gen
		}
		return all
	}
	var out []*store.Tenant
	for _, t := range all {
		if _, ok := r.queued[t.ID]; ok {
			out = append(out, t)
		}
	}
	return out
}

// markQueued notes that tenant may hold a job to run: one was created, or
// waits for space. The caller committed the job first.
func (r *Runner) markQueued(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markQueuedLocked(tenant)
}

// markQueuedLocked is markQueued with mu held.
func (r *Runner) markQueuedLocked(tenant string) {
	if r.queued == nil {
		return // the first nextQueued reads every tenant
	}
	r.gen++
	r.queued[tenant] = r.gen
}

// queuedGen is tenant's mark, read before its jobs are.
func (r *Runner) queuedGen(tenant string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queued[tenant]
}

// unmarkQueued drops tenant, whose jobs read after its mark gen hold none
// to run, unless it was marked again since (a job created meanwhile).
func (r *Runner) unmarkQueued(tenant string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued[tenant] == gen {
		delete(r.queued, tenant)
	}
}
