package lab

import (
	"context"
	"math"
	"slices"
	"sync"

	policypkg "github.com/coupond/coupond/policy"
)

// Seed sets of the many-worlds lab. Policies are tuned on TuneSeeds and
// reported on ReportSeeds; nobody tunes on the report seeds.
const (
	TuneSeedBase   = 1
	ReportSeedBase = 1001
)

// WorldsConfig sets up a many-worlds run: the worlds of seeds Base,
// Base+1, …, Base+N-1, Parallel at a time. Customers and Weeks, when not
// zero, replace the drawn ones (quick runs; the report uses the drawn
// sizes).
type WorldsConfig struct {
	Base             uint64
	N, Parallel      int
	Customers, Weeks int
	// Policy, if not nil, is the engine's policy configuration in every
	// world (and greedy's, which is the engine's model); nil is
	// policy.DefaultConfig().
	Policy *policypkg.Config
	// Open opens each world's engine under test (nil: InProcess).
	Open Opener
	// Outcomes is every world's Family.Outcomes (0: the worlds' own
	// outcome draws).
	Outcomes uint64
}

// RunWorlds runs cfg's worlds, each on its own in-memory store and
// engine, and returns their reports in seed order. done, if not nil, is
// called after each world (from the goroutine that ran it).
func RunWorlds(ctx context.Context, cfg WorldsConfig, done func(*WorldReport)) ([]*WorldReport, error) {
	fams := make([]Family, cfg.N)
	for i := range fams {
		fams[i] = cfg.family(cfg.Base+uint64(i), cfg.Outcomes)
	}
	return runFamilies(ctx, fams, cfg, done)
}

// Redraw runs world seed, sized and configured as cfg's worlds, once under
// each outcome stream of streams (Family.Outcomes), Parallel at a time,
// and returns the reports in the order of streams: the same world with
// other luck, to tell a failure its draws made from one its mechanism
// makes.
func Redraw(ctx context.Context, cfg WorldsConfig, seed uint64, streams []uint64) ([]*WorldReport, error) {
	fams := make([]Family, len(streams))
	for i, s := range streams {
		fams[i] = cfg.family(seed, s)
	}
	return runFamilies(ctx, fams, cfg, nil)
}

// family is world seed's family as cfg runs it, drawing its outcomes from
// stream outcomes.
func (cfg *WorldsConfig) family(seed, outcomes uint64) Family {
	fam := DrawFamily(seed)
	fam.Resize(cfg.Customers, cfg.Weeks)
	fam.policy = cfg.Policy
	fam.Outcomes = outcomes
	return fam
}

// runFamilies runs fams, cfg.Parallel at a time on cfg.Open's benches, and
// returns their reports in order; done as RunWorlds's.
func runFamilies(ctx context.Context, fams []Family, cfg WorldsConfig, done func(*WorldReport)) ([]*WorldReport, error) {
	reps := make([]*WorldReport, len(fams))
	errs := make([]error, len(fams))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(cfg.Parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				reps[i], errs[i] = RunWorldOn(ctx, fams[i], cfg.Open)
				if errs[i] == nil && done != nil {
					done(reps[i])
				}
			}
		}()
	}
	for i := range fams {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return reps, nil
}

// WorldsSummary sums up a many-worlds run, as issue 18's "Done when"
// lines read it. Captures are over the last third of each world's weeks.
type WorldsSummary struct {
	Worlds int `json:"worlds"`
	// Median and Worst capture per policy over the worlds that are not
	// flat (in a flat world the oracle's gain is under 2 % and a capture
	// is a ratio of noise; the rule there is EngineGain within 2 %).
	Median Captures `json:"median_capture"`
	Worst  Captures `json:"worst_capture"`
	// MedianObs is the median capture against the observable oracle, over
	// the ObsWorlds worlds where it beats never-send by at least flatGain.
	MedianObs Captures `json:"median_capture_vs_observable_oracle"`
	ObsWorlds int      `json:"worlds_with_observable_gain"`
	// Counts of worlds where the engine's last-third reward is above
	// never-send, the best single action, greedy and the reference; and
	// where the reference's is above never-send.
	EngineAboveNever      int `json:"engine_above_never_send"`
	EngineAboveBestSingle int `json:"engine_above_best_single_action"`
	EngineAboveGreedy     int `json:"engine_above_greedy"`
	EngineAboveReference  int `json:"engine_above_reference"`
	ReferenceAboveNever   int `json:"reference_above_never_send"`
	// Flat and Separable count those worlds; SeparableEngineAboveNever
	// the separable worlds where the engine beat never-send. Pass and
	// RefPass count the worlds that pass issue 18's rule.
	Flat                      int `json:"flat"`
	Separable                 int `json:"separable"`
	SeparableEngineAboveNever int `json:"separable_engine_above_never_send"`
	// SeparableStuck counts the separable worlds where the engine is not
	// above never-send over the last third; StuckUnopenable those of them
	// where no judged gate check, in any week or band, had the choices'
	// true effect GateZ standard errors above 0 (GateCheck.TruthOpens):
	// there no test, however lucky, would have opened a band, and what
	// held the engine at never-send was the choices the model made (too
	// few to measure, or not the coupons that pay), not the gate's test.
	SeparableStuck  int `json:"separable_engine_not_above_never_send"`
	StuckUnopenable int `json:"separable_stuck_truth_never_opens"`
	Pass            int `json:"engine_pass"`
	RefPass         int `json:"reference_pass"`
	// The engine's money, over the last third: MeanCapture is the mean of
	// its capture over the worlds not flat, each clipped at -1 (one world
	// of tiny oracle gain cannot swamp it); WorstGain its lowest gain over
	// never-send, (engine - never)/never, in any world; BelowHalfPercent
	// the worlds where that gain is below -0.5 %; TotalGain the gain of
	// all worlds together (each world's reward per decision summed).
	MeanCapture      float64 `json:"engine_mean_capture"`
	WorstGain        float64 `json:"engine_worst_gain"`
	BelowHalfPercent int     `json:"engine_worlds_below_half_percent"`
	TotalGain        float64 `json:"engine_total_gain"`
	// The money over the whole run, every week from the first, so the
	// weeks of testing count as well as what their evidence earns later:
	// the engine's and the reference's gain over never-send per world
	// (Median and Worst across worlds) and of all worlds together (Total).
	Whole WholeRun `json:"whole_run"`
	// The gate's tests against the truth (GateCheck), over every world's
	// weekly checks with the evidence the gate acts on (Judged):
	// GateChecks counts them, GateWithin2SE is the share whose truth lies
	// within two standard errors of the test (0.95 for an honest test of
	// normal errors), GateMeanZ the mean of (test − truth)/SE (0 for an
	// unbiased one). Weeks of one world are not independent.
	GateChecks    int     `json:"gate_test_checks"`
	GateWithin2SE float64 `json:"gate_test_within_2se"`
	GateMeanZ     float64 `json:"gate_test_mean_z"`
	// The model's coupon effects at each world's last week against the
	// truth (CouponWeek, each coupon's mean over its candidates, MXN):
	// Effects.Bias is the mean of ModelEffect − TrueEffect over the
	// Effects.Coupons coupons with candidates; PayingTrue and PayingModel
	// the mean true and model effects of the Paying coupons whose true
	// effect is above 1 MXN (POLICY.md §7.25: under the engine's own, adaptive
	// allocation the model's effects run low, most of all for coupons that
	// pay and were seldom sent).
	Effects EffectBias `json:"effect_bias"`
}

// EffectBias compares the model's coupon effects with the truth (see
// WorldsSummary.Effects).
type EffectBias struct {
	Coupons     int     `json:"coupons"`
	Bias        float64 `json:"mean_bias_mxn"`
	Paying      int     `json:"paying_coupons"`
	PayingTrue  float64 `json:"paying_true_mxn"`
	PayingModel float64 `json:"paying_model_mxn"`
}

// effectBias sums up the last week's CouponWeek rows of reps (NaN
// figures where there are none).
func effectBias(reps []*WorldReport) EffectBias {
	var bias, payTrue, payModel []float64
	for _, r := range reps {
		if len(r.Weeks) == 0 {
			continue
		}
		for _, c := range r.Weeks[len(r.Weeks)-1].Coupons {
			if c.Candidates == 0 {
				continue
			}
			bias = append(bias, c.ModelEffect-c.TrueEffect)
			if c.TrueEffect > 1 {
				payTrue, payModel = append(payTrue, c.TrueEffect), append(payModel, c.ModelEffect)
			}
		}
	}
	e := EffectBias{Coupons: len(bias), Paying: len(payTrue)}
	e.Bias, _ = MeanSE(bias)
	e.PayingTrue, _ = MeanSE(payTrue)
	e.PayingModel, _ = MeanSE(payModel)
	return e
}

// WholeRun is the engine's and the reference's gain over never-send,
// (policy − never)/never, over every week of the run.
type WholeRun struct {
	EngineMedian    float64 `json:"engine_median_gain"`
	EngineWorst     float64 `json:"engine_worst_gain"`
	EngineTotal     float64 `json:"engine_total_gain"`
	ReferenceMedian float64 `json:"reference_median_gain"`
	ReferenceWorst  float64 `json:"reference_worst_gain"`
	ReferenceTotal  float64 `json:"reference_total_gain"`
}

// wholeRun computes WholeRun over reps (NaN figures without any world
// whose never-send earns).
func wholeRun(reps []*WorldReport) WholeRun {
	var eg, rg []float64
	var e, ref, never float64
	for _, r := range reps {
		t := r.mean(0)
		if !(t.Never > 0) {
			continue
		}
		eg, rg = append(eg, t.Engine/t.Never-1), append(rg, t.Reference/t.Never-1)
		e, ref, never = e+t.Engine, ref+t.Reference, never+t.Never
	}
	w := WholeRun{EngineMedian: median(eg), EngineWorst: minNaN(eg), ReferenceMedian: median(rg), ReferenceWorst: minNaN(rg),
		EngineTotal: math.NaN(), ReferenceTotal: math.NaN()}
	if never > 0 {
		w.EngineTotal, w.ReferenceTotal = e/never-1, ref/never-1
	}
	return w
}

// Summarize computes the summary of reps.
func Summarize(reps []*WorldReport) WorldsSummary {
	s := WorldsSummary{Worlds: len(reps)}
	cols := func(c *Captures) []*float64 {
		return []*float64{&c.Engine, &c.Reference, &c.Greedy, &c.BestSingle, &c.Random, &c.ObsOracle}
	}
	all, obs := make([][]float64, 6), make([][]float64, 6)
	var clipped, engine, never float64
	s.WorstGain = math.NaN() // no world with a never-send reward yet
	for _, r := range reps {
		for j, p := range cols(&r.Capture) {
			if !r.Flat {
				all[j] = append(all[j], *p)
			}
		}
		for j, p := range cols(&r.ObsCapture) {
			if !math.IsNaN(*p) {
				obs[j] = append(obs[j], *p)
			}
		}
		s.ObsWorlds += count(!math.IsNaN(r.ObsCapture.Engine))
		t := r.lastThird()
		s.EngineAboveNever += count(t.Engine > t.Never)
		s.EngineAboveBestSingle += count(t.Engine > t.BestSingle)
		s.EngineAboveGreedy += count(t.Engine > t.Greedy)
		s.EngineAboveReference += count(t.Engine > t.Reference)
		s.ReferenceAboveNever += count(t.Reference > t.Never)
		s.Flat += count(r.Flat)
		s.Separable += count(r.Separable)
		s.SeparableEngineAboveNever += count(r.Separable && t.Engine > t.Never)
		s.StuckUnopenable += count(r.Separable && !(t.Engine > t.Never) && !r.truthOpens())
		s.Pass += count(r.Pass)
		s.RefPass += count(r.RefPass)
		if !r.Flat {
			clipped += max(r.Capture.Engine, -1)
		}
		if t.Never > 0 {
			g := t.Engine/t.Never - 1
			if math.IsNaN(s.WorstGain) || g < s.WorstGain {
				s.WorstGain = g
			}
			s.BelowHalfPercent += count(g < -0.005)
		}
		engine, never = engine+t.Engine, never+t.Never
	}
	s.SeparableStuck = s.Separable - s.SeparableEngineAboveNever
	s.GateChecks, s.GateWithin2SE, s.GateMeanZ = gateCalibration(reps)
	s.Whole = wholeRun(reps)
	s.Effects = effectBias(reps)
	if n := s.Worlds - s.Flat; n > 0 {
		s.MeanCapture = clipped / float64(n)
	}
	if never > 0 {
		s.TotalGain = engine/never - 1
	}
	for j := range all {
		*cols(&s.Median)[j] = median(all[j])
		*cols(&s.Worst)[j] = minNaN(all[j])
		*cols(&s.MedianObs)[j] = median(obs[j])
	}
	return s
}

// gateCalibration returns how many gate checks of reps are Judged, the share of them whose truth is within two
// standard errors of the test, and their mean z = (test − truth)/SE.
func gateCalibration(reps []*WorldReport) (n int, within, meanZ float64) {
	for _, r := range reps {
		for _, w := range r.Weeks {
			for _, g := range w.GateChecks {
				if !g.Judged || !(g.SE > 0) {
					continue
				}
				z := (g.Test - g.Truth) / g.SE
				n++
				within += float64(count(math.Abs(z) <= 2))
				meanZ += z
			}
		}
	}
	if n == 0 {
		return 0, math.NaN(), math.NaN()
	}
	return n, within / float64(n), meanZ / float64(n)
}

// truthOpens reports whether some judged gate check of r, in any week or
// band, had the choices' true effect the run's GateZ standard errors
// above 0 (GateCheck.TruthOpens).
func (r *WorldReport) truthOpens() bool {
	for _, w := range r.Weeks {
		for _, g := range w.GateChecks {
			if g.TruthOpens {
				return true
			}
		}
	}
	return false
}

// lastThird is the mean of each policy's weekly figure over the last
// third of the weeks.
func (r *WorldReport) lastThird() WorldWeek {
	return r.mean(len(r.Weeks) - len(r.Weeks)/3)
}

// mean returns the policies' mean rewards per decision over the weeks
// from index from to the end.
func (r *WorldReport) mean(from int) WorldWeek {
	var t WorldWeek
	n := float64(len(r.Weeks) - from)
	for _, w := range r.Weeks[from:] {
		t.Engine += w.Engine / n
		t.Never += w.Never / n
		t.BestSingle += w.BestSingle / n
		t.Random += w.Random / n
		t.Greedy += w.Greedy / n
		t.Reference += w.Reference / n
		t.Oracle += w.Oracle / n
		t.ObsOracle += w.ObsOracle / n
	}
	return t
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// median of xs, NaN values ranked last; NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b float64) int {
		switch {
		case math.IsNaN(a) && math.IsNaN(b):
			return 0
		case math.IsNaN(a):
			return 1
		case math.IsNaN(b):
			return -1
		}
		return cmpFloat(a, b)
	})
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// minNaN is the smallest non-NaN value of xs, NaN for none.
func minNaN(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if !math.IsNaN(x) && (math.IsNaN(m) || x < m) {
			m = x
		}
	}
	return m
}
