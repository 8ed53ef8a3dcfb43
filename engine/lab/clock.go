package lab

import (
	"time"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// advance moves the tenant's sandbox clock and the lab's clock by d.
//
// The lab's clock is the engine's wall clock (engine.Config.Now): a
// clock.Fake that keeps the sandbox tenant's time and moves only here. With
// the real clock, the learner's pacing (engine/pacing.go) chose its batch
// size from how long ago the last decision was answered in real time, so
// the number of learner passes, and with it the model's path, varied from
// run to run. On the lab's clock every run of a seed is the same: decisions
// are a window old when the learner runs, so it folds full batches.
func advance(db *store.DB, clk *clock.Fake, d time.Duration) error {
	_, err := db.UpdateTenant(labTenant, func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil })
	if err == nil {
		clk.Advance(d)
	}
	return err
}

// advanceAndLearn moves the lab clock one window and runs the engine's
// learner until a pass finds nothing due.
func advanceAndLearn(db *store.DB, clk *clock.Fake, eng *engine.Engine) error {
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
