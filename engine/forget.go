package engine

import "sync"

// ForgetTenant drops everything the engine keeps in memory of tenant,
// whose records the privacy package has just erased (a tenant's
// deletion): its state (catalog, model, campaigns and budgets, the
// learner's cursor, the features its ingestion kept, given back to the
// features cache's budget), the console counters not yet written and the
// daily quota counts, none of which may write a record of it again. A
// writer that took the tenant's state before its deletion began may still
// commit one: the deletion's sweep (store.CompleteTenantDeletion) erases
// it. It first waits for the tenant's learner pass, held-event release,
// ingestion, batch chunk and decisions under way to end, taking each of
// their locks in turn and holding none while it takes the next, so that
// no order of theirs can deadlock with it.
func (r Records) ForgetTenant(tenant string) {
	e := r.e
	e.mu.Lock()
	ts := e.tenants[tenant]
	delete(e.tenants, tenant)
	e.mu.Unlock()
	if ts != nil {
		waitFor(&ts.learnMu)
		waitFor(&ts.heldMu)
		ts.ingestMu.Lock() // resets it
		ts.ingestMu.gone = true
		ts.ingestMu.Unlock()
		waitFor(&ts.budgetGate)
		for i := range ts.custLocks {
			waitFor(&ts.custLocks[i])
		}
		e.featBudget.leave(&ts.ingestMu)
	}
	e.counters.forget(tenant)
	e.quotas.forget(tenant)
}

// waitFor returns once whoever holds l has released it.
func waitFor(l sync.Locker) {
	l.Lock()
	//lint:ignore SA2001 taking and releasing l is the wait
	l.Unlock()
}

// leave takes t off the turns evict may take bytes from.
func (b *featBudget) leave(t *ingestTurn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.turns {
		if x == t {
			b.turns = append(b.turns[:i], b.turns[i+1:]...)
			t.joined = false
			return
		}
	}
}

// forget drops the pending counters of tenant.
func (c *Counters) forget(tenant string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pending {
		if k.tenant == tenant {
			delete(c.pending, k)
		}
	}
	c.last = nil
}

// forget drops the counts of tenant, written or not.
func (q *Quotas) forget(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k := range q.counts {
		if k.tenant == tenant {
			delete(q.counts, k)
		}
	}
}
