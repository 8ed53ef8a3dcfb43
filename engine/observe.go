package engine

import (
	"time"

	"github.com/coupond/coupond/store"
)

// ObserveLearn makes every learner pass that committed call fn with what it
// did (for the business metrics). Call it before RunLearner; fn runs on the
// learner's goroutine and must not block.
func (e *Learner) ObserveLearn(fn func(tenant string, st LearnStats)) { e.onLearn = fn }

// LearnerBacklog is the learner's lag for a tenant: the rewards whose window
// and grace have passed by the tenant clock but that no learner pass has
// made final yet, and how long the oldest of them has been due.
type LearnerBacklog struct {
	Pending int           // due rewards not yet folded (at most the limit given)
	Lag     time.Duration // tenant clock minus the oldest due time; 0 when none
}

// Backlog reads the tenant's learner backlog, counting at most limit
// entries (the queue is empty or nearly so when the learner keeps up, so
// the read is short; the limit bounds it when it does not).
func (e *Learner) Backlog(tenant string, limit int) (LearnerBacklog, error) {
	var bl LearnerBacklog
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return bl, err
	}
	lo, hi := store.RewardQueueDueSpan(tenant, now)
	err = e.db.Scan(lo, hi, func(k, _ []byte) error {
		due, kind, _, ok := store.ParseRewardQueueKey(tenant, k)
		if !ok || kind != queueReward_ {
			return nil
		}
		if bl.Pending == 0 {
			bl.Lag = max(0, now.Sub(due))
		}
		bl.Pending++
		if bl.Pending >= limit {
			return store.ErrStop
		}
		return nil
	})
	return bl, err
}
