package lab

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	policypkg "github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// openLab opens the store of one lab run on store.NewMemFS (so runs may go
// concurrently) with the lab's one sandbox tenant: the lab's reward window,
// no grace, no rate limits, the lab's opt-out penalty and controlShare. It
// returns the store, the lab's clock (see advance) and an engine on both
// with seed seed+1 and policy (nil: the default). The tenant's clock and
// the lab's start together, at a Monday 09:00 UTC: clk.Now() is the run's
// start. The caller closes db; on an error nothing is left open.
func openLab(controlShare float64, seed uint64, policy *policypkg.Config) (*store.DB, *clock.Fake, *engine.Engine, error) {
	db, err := store.Open("lab", store.NewMemFS())
	if err != nil {
		return nil, nil, nil, err
	}
	start := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	s := store.DefaultSettings()
	s.RewardWindow, s.RewardGrace = window, 0
	s.ControlShare, s.RateLimits = controlShare, false
	s.OptoutPenaltyCents = penaltyMXN * 100
	if err := db.CreateTenant(&store.Tenant{ID: labTenant, CreatedAt: start, Sandbox: true, ClockNow: start, Settings: s}); err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	clk := clock.NewFake(start)
	eng := engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clk.Now, Seed: seed + 1, Policy: policy})
	return db, clk, eng, nil
}

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

// eachWeek calls week for weeks 1 to n in order, checking ctx before each;
// it stops at the first error (ctx's or week's) and returns it.
func eachWeek(ctx context.Context, n int, week func(int) error) error {
	for w := 1; w <= n; w++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := week(w); err != nil {
			return err
		}
	}
	return nil
}
