package lab

import (
	"sync/atomic"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// labClock is the engine's wall clock in the lab (engine.Config.Now): the
// sandbox tenant's clock, moved only by advance. With the real clock, the
// learner's pacing (engine/pacing.go) chose its batch size from how long
// ago the last decision was answered in real time, so the number of
// learner passes, and with it the model's path, varied from run to run.
// On the lab's clock every run of a seed is the same: decisions are a
// window old when the learner runs, so it folds full batches.
type labClock struct{ ns atomic.Int64 }

func newLabClock(t time.Time) *labClock {
	c := &labClock{}
	c.ns.Store(t.UnixNano())
	return c
}

// Now is the lab's time.
func (c *labClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// advance moves the tenant's sandbox clock and the lab's clock by d.
func advance(db *store.DB, clk *labClock, d time.Duration) error {
	_, err := db.UpdateTenant(labTenant, func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil })
	if err == nil {
		clk.ns.Add(int64(d))
	}
	return err
}

// advanceAndLearn moves the lab clock one window and runs the engine's
// learner until a pass finds nothing due.
func advanceAndLearn(db *store.DB, clk *labClock, eng *engine.Engine) error {
	if err := advance(db, clk, window); err != nil {
		return err
	}
	for {
		st, err := eng.Learner.Learn(labTenant)
		if err != nil {
			return err
		}
		if !st.Worked() {
			return nil
		}
	}
}
