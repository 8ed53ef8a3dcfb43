package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
)

// lateLearner is an in-process target whose clock moves without the
// learner running (its learner runs only when the test says): a target
// whose rewards are still due when the next week's decisions come.
type lateLearner struct {
	*inProcess
}

func (l lateLearner) CloseWindow(ctx context.Context, evs []engine.IngestEvent, d time.Duration) error {
	if err := l.Publish(ctx, evs); err != nil {
		return err
	}
	return advance(l.lab.db, l.lab.clk, d)
}

// TestLearnerLag: in process the learner folds a window's rewards before
// the next week's decisions, so no decision counts as lagging; a target
// whose clock moves without folding them has every decision of the weeks
// after the first answered beside due rewards, and its report says so.
// The two agree on the first week's decisions, which no fold precedes.
func TestLearnerLag(t *testing.T) {
	const customers, weeks = 60, 3
	fam := smallFamily(1002, customers, weeks)
	late := func(ctx context.Context, s BenchSetup) (*Bench, error) {
		b, err := InProcess(ctx, s)
		if err != nil {
			return nil, err
		}
		b.Target = lateLearner{b.Target.(*inProcess)}
		return b, nil
	}
	reps := map[string]*WorldReport{}
	for _, tc := range []struct {
		name string
		open Opener
		want []int
	}{
		{"in process", InProcess, []int{0, 0, 0}},
		{"clock moved without folding", late, []int{0, customers, customers}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := RunWorldOn(context.Background(), fam, tc.open)
			if err != nil {
				t.Fatal(err)
			}
			reps[tc.name] = rep
			var lags []int
			for _, w := range rep.Weeks {
				lags = append(lags, w.LearnerLag)
			}
			if d := cmp.Diff(tc.want, lags); d != "" {
				t.Errorf("decisions answered beside due rewards per week (-want +got):\n%s", d)
			}
		})
	}
	a, b := reps["in process"], reps["clock moved without folding"]
	if a == nil || b == nil {
		t.Fatal("a world did not run")
	}
	type decided struct {
		Engine float64
		Sends  []int
	}
	if d := cmp.Diff(decided{a.Weeks[0].Engine, a.Weeks[0].EngineSends}, decided{b.Weeks[0].Engine, b.Weeks[0].EngineSends}); d != "" {
		t.Errorf("week 1's decisions differ though no fold came before them (-in process +late):\n%s", d)
	}
}

// TestRunWorldOnReportsCloseError: a bench that fails to close (over
// HTTP, a server that did not shut down) makes the world an error, not a
// report as if all went well. Fails if Close's error is dropped.
func TestRunWorldOnReportsCloseError(t *testing.T) {
	failing := func(ctx context.Context, s BenchSetup) (*Bench, error) {
		b, err := InProcess(ctx, s)
		if err != nil {
			return nil, err
		}
		closeDB := b.Close
		b.Close = func() error {
			closeDB()
			return errors.New("shutdown timed out")
		}
		return b, nil
	}
	rep, err := RunWorldOn(context.Background(), smallFamily(1002, 30, 1), failing)
	if err == nil || !strings.Contains(err.Error(), "shutdown timed out") || rep != nil {
		t.Errorf("RunWorldOn = %v, %v; want no report and the close error", rep != nil, err)
	}
}
