package lab

import (
	"encoding/json"
	"fmt"
	"math"
)

// changedBy is how far a world's capture must move for Compare to list it.
const changedBy = 0.02

// Comparison is a paired comparison of two many-worlds runs on the same
// seeds, B against A, world by world: a change to the policy moves each
// world's figures by its random path as well as by the change, so the
// difference is judged on its mean and standard error over the worlds,
// not on counts that move a world at a time (POLICY.md §7.24).
type Comparison struct {
	Worlds int `json:"worlds"`
	// CaptureDiff is the mean of B's last-third capture minus A's over the
	// worlds not flat in A, each capture clipped at −1 first (as the
	// summary's mean capture), and CaptureSE its standard error; Better and
	// Worse count those worlds where B's is higher or lower by over 0.02.
	CaptureWorlds int     `json:"capture_worlds"`
	CaptureDiff   float64 `json:"capture_diff"`
	CaptureSE     float64 `json:"capture_diff_se"`
	Better        int     `json:"better"`
	Worse         int     `json:"worse"`
	// WholeDiff is the mean over every world of B's gain over never-send
	// over the whole run minus A's (fractions), WholeSE its standard
	// error; WholeMedianA and B are each run's median world.
	WholeDiff    float64 `json:"whole_run_gain_diff"`
	WholeSE      float64 `json:"whole_run_gain_diff_se"`
	WholeMedianA float64 `json:"whole_run_median_gain_a"`
	WholeMedianB float64 `json:"whole_run_median_gain_b"`
	// Pass and AboveNever count the worlds that pass issue 18's rule and
	// where the engine's last third beats never-send, in A and in B.
	PassA       int `json:"pass_a"`
	PassB       int `json:"pass_b"`
	AboveNeverA int `json:"above_never_send_a"`
	AboveNeverB int `json:"above_never_send_b"`
	// The summary's other headline figures in A and in B (Summarize):
	// median capture, median capture of the observable oracle's uplift,
	// worlds above greedy.
	MedianA      float64 `json:"median_capture_a"`
	MedianB      float64 `json:"median_capture_b"`
	ObsMedianA   float64 `json:"median_capture_vs_observable_oracle_a"`
	ObsMedianB   float64 `json:"median_capture_vs_observable_oracle_b"`
	AboveGreedyA int     `json:"above_greedy_a"`
	AboveGreedyB int     `json:"above_greedy_b"`
	// EffectBiasA and EffectBiasB are each run's mean bias of the model's
	// coupon effects at the last week (WorldsSummary.Effects, MXN).
	EffectBiasA float64 `json:"effect_bias_mxn_a"`
	EffectBiasB float64 `json:"effect_bias_mxn_b"`
	// StuckA and StuckB count the separable worlds where the engine is not
	// above never-send, UnopenableA and UnopenableB those of them where no
	// test could have opened (WorldsSummary.SeparableStuck and
	// StuckUnopenable): a change to the model's choices should make stuck
	// worlds openable before it frees them.
	StuckA      int `json:"separable_stuck_a"`
	StuckB      int `json:"separable_stuck_b"`
	UnopenableA int `json:"separable_stuck_truth_never_opens_a"`
	UnopenableB int `json:"separable_stuck_truth_never_opens_b"`
	// Changed lists the worlds not flat whose capture moved by over 0.02
	// and the worlds whose pass changed, in seed order.
	Changed []WorldChange `json:"changed"`
}

// WorldChange is one world's figures in A and in B: last-third capture,
// whole-run gain over never-send and pass.
type WorldChange struct {
	Seed     uint64  `json:"seed"`
	Flat     bool    `json:"flat"`
	CaptureA float64 `json:"capture_a"`
	CaptureB float64 `json:"capture_b"`
	WholeA   float64 `json:"whole_run_gain_a"`
	WholeB   float64 `json:"whole_run_gain_b"`
	PassA    bool    `json:"pass_a"`
	PassB    bool    `json:"pass_b"`
}

// Compare compares b against a. Both must hold the same worlds (seeds and
// weeks, in the same order); otherwise it returns an error saying which
// world differs.
func Compare(a, b []*WorldReport) (Comparison, error) {
	if len(a) != len(b) {
		return Comparison{}, fmt.Errorf("lab compare: A has %d worlds, B %d: compare runs of the same seeds", len(a), len(b))
	}
	c := Comparison{Worlds: len(a)}
	var caps, wholes []float64
	for i := range a {
		x, y := a[i], b[i]
		if x.Family.Seed != y.Family.Seed || len(x.Weeks) != len(y.Weeks) {
			return Comparison{}, fmt.Errorf("lab compare: world %d is seed %d (%d weeks) against seed %d (%d weeks)",
				i+1, x.Family.Seed, len(x.Weeks), y.Family.Seed, len(y.Weeks))
		}
		gx, gy := x.wholeGain(), y.wholeGain()
		if !math.IsNaN(gx) && !math.IsNaN(gy) {
			wholes = append(wholes, gy-gx)
		}
		d := max(y.Capture.Engine, -1) - max(x.Capture.Engine, -1)
		if !x.Flat && !math.IsNaN(d) {
			caps = append(caps, d)
			c.Better += count(d > changedBy)
			c.Worse += count(d < -changedBy)
		}
		if !x.Flat && math.Abs(d) > changedBy || x.Pass != y.Pass {
			c.Changed = append(c.Changed, WorldChange{Seed: x.Family.Seed, Flat: x.Flat, CaptureA: x.Capture.Engine,
				CaptureB: y.Capture.Engine, WholeA: gx, WholeB: gy, PassA: x.Pass, PassB: y.Pass})
		}
	}
	c.CaptureWorlds = len(caps)
	c.CaptureDiff, c.CaptureSE = MeanSE(caps)
	c.WholeDiff, c.WholeSE = MeanSE(wholes)
	sa, sb := Summarize(a), Summarize(b)
	c.WholeMedianA, c.WholeMedianB = sa.Whole.EngineMedian, sb.Whole.EngineMedian
	c.PassA, c.PassB, c.AboveNeverA, c.AboveNeverB = sa.Pass, sb.Pass, sa.EngineAboveNever, sb.EngineAboveNever
	c.MedianA, c.MedianB, c.ObsMedianA, c.ObsMedianB = sa.Median.Engine, sb.Median.Engine, sa.MedianObs.Engine, sb.MedianObs.Engine
	c.AboveGreedyA, c.AboveGreedyB = sa.EngineAboveGreedy, sb.EngineAboveGreedy
	c.EffectBiasA, c.EffectBiasB = sa.Effects.Bias, sb.Effects.Bias
	c.StuckA, c.StuckB, c.UnopenableA, c.UnopenableB = sa.SeparableStuck, sb.SeparableStuck, sa.StuckUnopenable, sb.StuckUnopenable
	return c, nil
}

// wholeGain is the engine's gain over never-send over every week (NaN
// where never-send earns nothing).
func (r *WorldReport) wholeGain() float64 {
	t := r.mean(0)
	if !(t.Never > 0) {
		return math.NaN()
	}
	return t.Engine/t.Never - 1
}

// meanSE returns the mean of xs and its standard error (NaN for none; an
// infinite error for one).
func MeanSE(xs []float64) (mean, se float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x / float64(len(xs))
	}
	if len(xs) < 2 {
		return mean, math.Inf(1)
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}

// UnmarshalJSON reads Captures as --json writes them, where a capture that
// is not a number (NaN: nothing to capture) is null: null reads back as
// NaN, not as a capture of 0.
func (c *Captures) UnmarshalJSON(b []byte) error {
	var v struct {
		Engine     *float64 `json:"engine"`
		Reference  *float64 `json:"reference"`
		Greedy     *float64 `json:"greedy"`
		BestSingle *float64 `json:"best_single_action"`
		Random     *float64 `json:"uniform_random"`
		ObsOracle  *float64 `json:"observable_oracle"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	get := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*c = Captures{Engine: get(v.Engine), Reference: get(v.Reference), Greedy: get(v.Greedy),
		BestSingle: get(v.BestSingle), Random: get(v.Random), ObsOracle: get(v.ObsOracle)}
	return nil
}
