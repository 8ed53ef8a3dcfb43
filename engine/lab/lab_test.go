package lab

import (
	"context"
	"testing"
)

// TestLabEngineBeatsNever runs small worlds with fixed seeds and checks
// that the engine ends above never-send and that the oracle is what it
// claims. Whether the engine learns is TestLabEngineFollowsDrift's
// question: in these worlds the economic prior alone already picks well,
// so a week-on-week rise shows up with or without learning.
func TestLabEngineBeatsNever(t *testing.T) {
	cfgs := []Config{{Customers: 1500, Weeks: 9, Seed: 1}, {Customers: 1500, Weeks: 9, Seed: 3}}
	if testing.Short() {
		cfgs = []Config{{Customers: 1000, Weeks: 8, Seed: 1}, {Customers: 1000, Weeks: 8, Seed: 3}}
	}
	for _, cfg := range cfgs {
		rep, err := Run(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		first, last := rep.Rows[0], rep.Rows[len(rep.Rows)-1]
		t.Logf("seed %d: week 1 engine %.2f, week %d engine %.2f, never %.2f, oracle %.2f, capture %.3f",
			cfg.Seed, first.Engine, last.Week, last.Engine, last.Never, last.Oracle, rep.UpliftCapture)
		if !(last.Engine > last.Never) {
			t.Errorf("seed %d: engine %.2f does not beat never-send %.2f after %d weeks", cfg.Seed, last.Engine, last.Never, last.Week)
		}
		if last.Oracle < last.Engine || last.Oracle < last.BestSingle || last.Oracle < last.EngineTop {
			t.Errorf("seed %d: oracle %.2f below engine %.2f, its top action %.2f or best single %.2f: the oracle is wrong",
				cfg.Seed, last.Oracle, last.Engine, last.EngineTop, last.BestSingle)
		}
	}
}

// TestLabEngineFollowsDrift checks that the engine learns: at mid-run
// the persuadables' response changes (scenario drift) and the economic
// prior no longer knows the best coupon, so only what the learner folds
// can lift the reward. From the first week after the change to the mean of
// the last two, the engine must close at least 15 % of its gap to the
// oracle. Tried: seeds 1 and 3 close 39 % and 25 % of it; with the
// learner's update turned off, 2 % each.
func TestLabEngineFollowsDrift(t *testing.T) {
	for _, seed := range []uint64{1, 3} {
		rep, err := Run(context.Background(), Config{Customers: 1000, Weeks: 8, Seed: seed, Scenario: "drift"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := len(rep.Rows)
		after := rep.Rows[n/2] // the first week with the new response
		late := (rep.Rows[n-2].Engine + rep.Rows[n-1].Engine) / 2
		closed := (late - after.Engine) / (after.Oracle - after.Engine)
		t.Logf("seed %d: week %d engine %.2f, oracle %.2f; last two weeks %.2f: closed %.0f %% of the gap",
			seed, after.Week, after.Engine, after.Oracle, late, 100*closed)
		if !(closed >= 0.15) {
			t.Errorf("seed %d: the engine closed %.0f %% of its gap to the oracle after the drift, want at least 15 %%", seed, 100*closed)
		}
	}
}

func TestLabScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("scenarios run in the long suite")
	}
	for _, sc := range []string{"new-coupon", "drift"} {
		rep, err := Run(context.Background(), Config{Customers: 800, Weeks: 8, Seed: 5, Scenario: sc}, nil)
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		if sc == "new-coupon" && rep.Rows[len(rep.Rows)-1].NewShare == 0 {
			t.Errorf("new coupon never sent")
		}
	}
}
