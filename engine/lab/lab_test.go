package lab

import (
	"context"
	"testing"
)

// TestLabEngineLearns runs small worlds with fixed seeds and checks that
// the engine ends above never-send and that its reward improves from the
// first week (the economic prior alone) to the last (it learns).
func TestLabEngineLearns(t *testing.T) {
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
		for _, r := range rep.Rows {
			t.Logf("week %d engine %.2f top %.2f", r.Week, r.Engine, r.EngineTop)
		}
		if !(last.Engine > last.Never) {
			t.Errorf("seed %d: engine %.2f does not beat never-send %.2f after %d weeks", cfg.Seed, last.Engine, last.Never, last.Week)
		}
		if !(last.Engine > first.Engine) {
			t.Errorf("seed %d: engine did not improve: week 1 %.2f, week %d %.2f", cfg.Seed, first.Engine, last.Week, last.Engine)
		}
		if last.Oracle < last.Engine || last.Oracle < last.BestSingle || last.Oracle < last.EngineTop {
			t.Errorf("seed %d: oracle %.2f below engine %.2f, its top action %.2f or best single %.2f: the oracle is wrong",
				cfg.Seed, last.Oracle, last.Engine, last.EngineTop, last.BestSingle)
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
