package engine

import (
	"time"

	"github.com/coupond/coupond/store"
)

// Records is the narrow door through which the privacy package reads and
// erases one customer's records in the engine's own tables (events,
// features, decisions, attribution links, customer state, quarantine). The
// engine keeps the codecs and the locks; privacy decides what to export and
// what to delete. Obtain it with Engine.Records.
type Records struct{ e *Engine }

// Records returns the engine's record door for the privacy package.
func (e *Engine) Records() Records { return Records{e} }

// Attribution links a coupon sent to the decision that chose it (the
// TableAttribution value).
type Attribution = attribution

// EventKey is the key of a stored event.
func (Records) EventKey(tenant, id string) []byte { return store.EventKey(tenant, id) }

// FeaturesKey is the key of a customer's features.
func (Records) FeaturesKey(tenant, ref string) []byte { return store.FeaturesKey(tenant, ref) }

// DecisionKey is the key of a decision record.
func (Records) DecisionKey(tenant, nonce string) []byte { return decisionKey(tenant, nonce) }

// CustomerStateKey is the key of a customer's decision state.
func (Records) CustomerStateKey(tenant, ref string) []byte { return customerStateKey(tenant, ref) }

// AttributionKey is the key of a coupon's attribution link.
func (Records) AttributionKey(tenant, cupon string) []byte {
	return store.AttributionKey(tenant, cupon)
}

// LoadDecision reads a decision record; ErrNotFound when it is gone or
// damaged (a damaged one is moved to quarantine on the way).
func (r Records) LoadDecision(tenant, nonce string) (*DecisionRecord, error) {
	return r.e.loadDecision(tenant, nonce)
}

// DecodeDecision decodes the value stored at a decision's key (what
// LoadDecision reads, for a caller that read many at once: store.GetMany).
// An error means the record is damaged: the caller moves it to quarantine
// (Quarantine, with the error as its cause), as LoadDecision does.
func (Records) DecodeDecision(v []byte) (*DecisionRecord, error) {
	var r DecisionRecord
	if err := unmarshalRecord(v, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecisionID is the public decision_id of the record with nonce.
func (r Records) DecisionID(tenant, nonce string) string { return r.e.ids.issue(tenant, nonce) }

// Quarantine moves a damaged record to the tenant's quarantine (see
// quarantine.go); best effort, the caller goes on.
func (r Records) Quarantine(tenant string, key, v []byte, cause error) error {
	return r.e.quarantine(tenant, key, v, cause)
}

// NamesRef reports whether the bytes b, a record that may not decode, name
// ref as a whole identifier, not inside a longer one (ana-0000001 is not
// named by ana-00000012): the test by which CustomerDamaged picks the
// quarantine's records, for the damaged records privacy erases elsewhere.
func (Records) NamesRef(b []byte, ref string) bool { return namesRef(b, ref) }

// CustomerDamaged returns the keys of the quarantine entries that name ref
// as a whole identifier (not inside a longer one) or whose original key is
// one of keys.
func (r Records) CustomerDamaged(tenant, ref string, keys [][]byte) ([][]byte, error) {
	return r.e.Quarantine.customerDamaged(tenant, ref, keys)
}

// DamagedRefs calls fn with every identifier of a cliente_ref's length that
// the tenant's quarantined damaged records name as a whole (as
// CustomerDamaged matches them), for a deletion known only by keyed hash.
func (r Records) DamagedRefs(tenant string, fn func(ref string)) error {
	return r.e.Quarantine.damagedRefs(tenant, fn)
}

// LockCustomer takes the tenant's learner, held-release, ingestion and
// customer locks, in the one order every path takes them, so that no
// writer (a release of the abuse quarantine included) puts back a record
// of ref while it is being erased; and the budget gate before the customer
// lock (ForgetDecision may give a send back to its campaign: after a batch
// chunk's commit). Call the returned func to release them.
func (r Records) LockCustomer(tenant, ref string) (unlock func(), err error) {
	ts, err := r.e.state(tenant)
	if err != nil {
		return nil, err
	}
	lock := ts.custLock(r.e.seed, ref)
	ts.learnMu.Lock()
	ts.heldMu.Lock()
	ts.ingestMu.Lock()
	ts.budgetGate.RLock()
	lock.Lock()
	return func() {
		lock.Unlock()
		ts.budgetGate.RUnlock()
		ts.ingestMu.Unlock()
		ts.heldMu.Unlock()
		ts.learnMu.Unlock()
	}, nil
}

// ForgetDecision deletes, through del, the learner's queue entries of the
// decision rec (stored under nonce), and when its send was still pending
// gives its budget back in rel (as its expiry would have), which the
// erasure then passes to CommitErasure. Call under LockCustomer.
func (r Records) ForgetDecision(rel Releases, tenant, nonce string, s store.Settings, rec *DecisionRecord, del func([]byte)) error {
	del(queueKey(tenant, rec.At.Add(s.RewardWindow+s.RewardGrace), queueReward_, nonce))
	if rec.Accion == 0 || rec.CampanaID == "" {
		return nil
	}
	xk := queueKey(tenant, rec.CaducaEn, queueExpiry, nonce)
	pendingSend, err := r.e.db.Has(xk)
	if err != nil {
		return err
	}
	if pendingSend && rec.Estado == EstadoPendiente && !rec.EnRespaldo {
		rel.add(rec)
	}
	del(xk)
	return nil
}

// CommitErasure commits an erasure's batch b with the sends ForgetDecision
// gave back (rel) taken off their campaigns' counters as they stand at the
// commit, in the budget lock's order (Campaigns.commitBudgets), as every
// writer of budget counters commits: a batch that kept the counters seen
// at the release would put back an older budget over a send counted
// meanwhile by another customer's decision. Call under LockCustomer.
func (r Records) CommitErasure(tenant string, b *store.Batch, rel Releases) error {
	ts, err := r.e.state(tenant)
	if err != nil {
		return err
	}
	return r.e.Campaigns.commitBudgets(ts, tenant, b, nil, rel)
}

// TenantNow is the tenant's clock now (its offset applied to the engine's
// real clock).
func (r Records) TenantNow(tenant string) (time.Time, error) {
	_, now, err := r.e.tenantNow(tenant)
	return now, err
}
