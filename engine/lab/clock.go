package lab

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// openedLab is the store, clock and engine of one in-process lab run.
type openedLab struct {
	db  *store.DB
	clk *clock.Fake
	eng *engine.Engine
}

// openLab opens the store of one lab run on store.NewMemFS (so runs may go
// concurrently) with s's tenant, the lab's clock (see advance) and an
// engine on both with s's seed and policy (nil: the default). The tenant's
// clock and the lab's start together: clk.Now() is the run's start. The
// caller closes db; on an error nothing is left open.
func openLab(s BenchSetup) (*openedLab, error) {
	db, err := store.Open("lab", store.NewMemFS())
	if err != nil {
		return nil, err
	}
	if err := db.CreateTenant(s.Tenant); err != nil {
		db.Close()
		return nil, err
	}
	clk := clock.NewFake(s.Tenant.ClockNow)
	eng := engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clk.Now, Seed: s.Seed, Policy: s.Policy})
	return &openedLab{db: db, clk: clk, eng: eng}, nil
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

// advanceAndLearn moves the lab clock d and runs the engine's learner
// until a pass finds nothing due.
func advanceAndLearn(l *openedLab, d time.Duration) error {
	if err := advance(l.db, l.clk, d); err != nil {
		return err
	}
	for {
		st, err := l.eng.Learner.Learn(labTenant)
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
