package cli

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/engine/lab"
	"github.com/coupond/coupond/policy"
)

// manyWorldsFlags are coupond lab's --worlds options.
type manyWorldsFlags struct {
	worlds   int
	seeds    string // "report" or "tune"
	base     uint64 // set from --seed when given
	parallel int
	// customers and weeks replace the drawn sizes when given.
	customers, weeks int
	// model is the engine's decision model: "regression" (the default
	// configuration: the regression's choices behind the send gate),
	// or "zrule" (the send rule before the gate, policy.ZRuleConfig).
	model string
	// set changes fields of the model's configuration (setPolicyFields),
	// one --set flag each.
	set []string
	// overHTTP drives each world's engine over HTTP (httpOpener).
	overHTTP bool
	// outcomes is every world's outcome stream (lab.Family.Outcomes).
	outcomes uint64
	// redraws, when above 0, runs each failing world again under that
	// many other outcome streams (redrawFailures).
	redraws int
}

// policyConfig is the engine's policy configuration that --model and
// every --set, in order, ask for.
func (mw *manyWorldsFlags) policyConfig() (policy.Config, error) {
	pc := policy.DefaultConfig()
	switch mw.model {
	case "", "regression":
	case "zrule":
		pc = policy.ZRuleConfig()
	default:
		return pc, fmt.Errorf("--model: %q is neither regression nor zrule", mw.model)
	}
	return pc, setPolicyFields(&pc, strings.Join(mw.set, ","))
}

// worldsOutput is --worlds --json's document.
type worldsOutput struct {
	SeedBase uint64 `json:"seed_base"`
	OverHTTP bool   `json:"over_http"`
	// Outcomes is the worlds' outcome stream (lab.Family.Outcomes; 0:
	// the worlds' own draws).
	Outcomes uint64             `json:"outcomes,omitempty"`
	Worlds   []*lab.WorldReport `json:"worlds"`
	Summary  lab.WorldsSummary  `json:"summary"`
	// Redraws are the failing worlds drawn again with other luck
	// (--redraw-failures; empty without it).
	Redraws []redraw `json:"redraws,omitempty"`
}

// runManyWorlds runs and prints the many-worlds lab.
func runManyWorlds(cmd *cobra.Command, mw manyWorldsFlags, asJSON bool) error {
	base := mw.base
	if base == 0 {
		switch mw.seeds {
		case "report":
			base = lab.ReportSeedBase
		case "tune":
			base = lab.TuneSeedBase
		default:
			return fmt.Errorf("--seeds must be report or tune, not %q", mw.seeds)
		}
	}
	var mu sync.Mutex
	done := 0
	cfg := lab.WorldsConfig{Base: base, N: mw.worlds, Parallel: mw.parallel, Customers: mw.customers, Weeks: mw.weeks, Outcomes: mw.outcomes}
	pc, err := mw.policyConfig()
	if err != nil {
		return err
	}
	cfg.Policy = &pc
	if mw.overHTTP {
		cfg.Open = httpOpener(cmd.ErrOrStderr())
	}
	reps, err := lab.RunWorlds(cmd.Context(), cfg, func(r *lab.WorldReport) {
		mu.Lock()
		defer mu.Unlock()
		done++
		fmt.Fprintf(cmd.ErrOrStderr(), "world %d done (%d/%d): engine capture %.3f\n", r.Family.Seed, done, mw.worlds, r.Capture.Engine)
	})
	if err != nil {
		return err
	}
	out := worldsOutput{SeedBase: base, OverHTTP: mw.overHTTP, Outcomes: mw.outcomes, Worlds: reps, Summary: lab.Summarize(reps)}
	if out.Redraws, err = redrawFailures(cmd, cfg, reps, mw.redraws); err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), jsonSafe(out))
	}
	return printWorlds(cmd.OutOrStdout(), out)
}

// printWorlds prints one row per world and the summary.
func printWorlds(w io.Writer, out worldsOutput) error {
	weeks := 0
	if len(out.Worlds) > 0 {
		weeks = out.Worlds[0].Family.Weeks
	}
	way := ""
	if out.OverHTTP {
		way = " over HTTP"
	}
	if out.Outcomes != 0 {
		way += fmt.Sprintf(" --outcomes %d", out.Outcomes)
	}
	fmt.Fprintf(w, "coupond lab --worlds %d%s, seeds %d..%d: uplift capture over the last third of %d weeks\n",
		len(out.Worlds), way, out.SeedBase, out.SeedBase+uint64(len(out.Worlds))-1, weeks)
	fmt.Fprintln(w, "capture = (policy - never) / (oracle - never); OBS: against the observable oracle (- where it gains < 2 %);")
	fmt.Fprintln(w, "GAIN = (policy - never) / never; flat: oracle gain < 2 %, where a capture is noise and the rule is gain >= -2 %")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEED\tENGINE\tREFERENCE\tGREEDY\tBEST SINGLE\tOBS ORACLE\tENGINE OBS\tREF OBS\tORACLE GAIN\tENGINE GAIN\tREF GAIN\tFLAT\tPASS\tREF PASS\tFAMILY")
	for _, r := range out.Worlds {
		c, o := r.Capture, r.ObsCapture
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Family.Seed, f3(c.Engine), f3(c.Reference),
			f3(c.Greedy), f3(c.BestSingle), f3(c.ObsOracle), f3(o.Engine), f3(o.Reference), pct(r.OracleGain), pct(r.EngineGain),
			pct(r.RefGain), yes(r.Flat), yes(r.Pass), yes(r.RefPass), r.Summary)
	}
	tw.Flush()
	s := out.Summary
	fmt.Fprintf(w, "\nsummary over %d worlds (%d flat, %d separable: observable oracle gain >= 5 %%); captures over the %d worlds not flat:\n",
		s.Worlds, s.Flat, s.Separable, s.Worlds-s.Flat)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tENGINE\tREFERENCE\tGREEDY\tBEST SINGLE\tRANDOM\t")
	for _, row := range []struct {
		name string
		c    lab.Captures
	}{{"median capture", s.Median}, {"worst capture", s.Worst}, {fmt.Sprintf("median vs observable oracle (%d worlds)", s.ObsWorlds), s.MedianObs}} {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", row.name, f3(row.c.Engine), f3(row.c.Reference), f3(row.c.Greedy), f3(row.c.BestSingle), f3(row.c.Random))
	}
	tw.Flush()
	fmt.Fprintf(w, "engine above never-send in %d of %d worlds (reference: %d); above the best single action in %d, greedy in %d, the reference in %d\n",
		s.EngineAboveNever, s.Worlds, s.ReferenceAboveNever, s.EngineAboveBestSingle, s.EngineAboveGreedy, s.EngineAboveReference)
	fmt.Fprintf(w, "engine above never-send in %d of the %d separable worlds; passes (capture >= -0.05, flat: within 2 %% of never) in %d of %d (reference: %d)\n",
		s.SeparableEngineAboveNever, s.Separable, s.Pass, s.Worlds, s.RefPass)
	fmt.Fprintf(w, "engine's money: mean capture %s (worlds not flat, each clipped at -1); worst gain over never-send %s; worlds below -0.5 %%: %d; all worlds together %s\n",
		f3(s.MeanCapture), pctN(s.WorstGain, 2), s.BelowHalfPercent, pctN(s.TotalGain, 2))
	wr := s.Whole
	fmt.Fprintf(w, "over the whole run, testing weeks included: engine gain over never-send median %s, worst %s, all worlds together %s (reference: %s, %s, %s)\n",
		pctN(wr.EngineMedian, 2), pctN(wr.EngineWorst, 2), pctN(wr.EngineTotal, 2), pctN(wr.ReferenceMedian, 2), pctN(wr.ReferenceWorst, 2), pctN(wr.ReferenceTotal, 2))
	fmt.Fprintf(w, "the gate's tests against the truth of the choices they test: %d weekly checks, %s within 2 standard errors, mean z %s\n",
		s.GateChecks, pct0(s.GateWithin2SE), f3(s.GateMeanZ))
	e := s.Effects
	fmt.Fprintf(w, "the model's coupon effects at the last week against the truth (MXN over the window, mean over each coupon's candidates): bias %s over %d coupons; the %d coupons that pay over 1 MXN: truth %s, model %s\n",
		signed(e.Bias, 2), e.Coupons, e.Paying, signed(e.PayingTrue, 2), signed(e.PayingModel, 2))
	fmt.Fprintf(w, "separable worlds where the engine is not above never-send: %d; in %d of them the true effect of the model's choices, over the gate's own standard error, never cleared the opening bar in any week or band: no test of those choices could have opened\n",
		s.SeparableStuck, s.StuckUnopenable)
	if out.OverHTTP {
		printLearnerLag(w, out.Worlds)
	}
	printRedraws(w, out.Redraws)
	return nil
}

// redraw is one failing world drawn again under other outcome streams:
// the engine's capture and pass under each.
type redraw struct {
	Seed     uint64    `json:"seed"`
	Streams  []uint64  `json:"outcome_streams"`
	Captures []float64 `json:"captures"`
	Passes   int       `json:"passes"`
}

// redrawFailures runs every world of reps that fails again under the n
// outcome streams after the run's own (lab.Redraw), in seed order, saying
// on stderr which world it draws: nil when n is 0.
func redrawFailures(cmd *cobra.Command, cfg lab.WorldsConfig, reps []*lab.WorldReport, n int) ([]redraw, error) {
	if n <= 0 {
		return nil, nil
	}
	streams := make([]uint64, n)
	for i := range streams {
		streams[i] = cfg.Outcomes + 1 + uint64(i)
	}
	var out []redraw
	for _, r := range reps {
		if r.Pass {
			continue
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "world %d failed: drawing it again under outcome streams %d..%d\n", r.Family.Seed, streams[0], streams[n-1])
		again, err := lab.Redraw(cmd.Context(), cfg, r.Family.Seed, streams)
		if err != nil {
			return nil, err
		}
		rd := redraw{Seed: r.Family.Seed, Streams: streams}
		for _, a := range again {
			rd.Captures = append(rd.Captures, a.Capture.Engine)
			if a.Pass {
				rd.Passes++
			}
		}
		out = append(out, rd)
	}
	return out, nil
}

// printRedraws prints each redrawn failing world: how many other draws it
// passes under, and whether that makes its failure luck (more than half)
// or mechanism.
func printRedraws(w io.Writer, rds []redraw) {
	for _, rd := range rds {
		verdict := "its mechanism: it fails under most draws"
		if 2*rd.Passes > len(rd.Streams) {
			verdict = "its luck: it passes under most draws"
		}
		lo, hi := slices.Min(rd.Captures), slices.Max(rd.Captures)
		fmt.Fprintf(w, "world %d drawn again under %d other outcome streams: passes %d, captures %s to %s; failed by %s\n",
			rd.Seed, len(rd.Streams), rd.Passes, signed(lo, 3), signed(hi, 3), verdict)
	}
}

// printLearnerLag prints, over HTTP, how many decisions were answered
// while rewards come due at a clock move were not yet folded
// (WorldWeek.LearnerLag), over all worlds and at most in one week.
func printLearnerLag(w io.Writer, reps []*lab.WorldReport) {
	total, worst, decisions := 0, 0, 0
	for _, r := range reps {
		for _, wk := range r.Weeks {
			total, worst, decisions = total+wk.LearnerLag, max(worst, wk.LearnerLag), decisions+r.Family.Customers
		}
	}
	fmt.Fprintf(w, "learner lag: %d of %d decisions answered before the rewards the clock's move made due were folded (at most %d in one week)\n",
		total, decisions, worst)
}

func f3(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.3f", x)
}

func pct(x float64) string { return pctN(x, 1) }

// pctN is x as a signed percentage with prec decimals ("-" for NaN).
func pctN(x float64, prec int) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%+.*f%%", prec, 100*x)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// setPolicyFields applies spec, "Field=value[,Field=value…]", to c: each
// Field an exported bool, int or float64 field of policy.Config. An
// unknown field or a value of the wrong kind is an error naming it.
func setPolicyFields(c *policy.Config, spec string) error {
	if spec == "" {
		return nil
	}
	v := reflect.ValueOf(c).Elem()
	for _, kv := range strings.Split(spec, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f := v.FieldByName(name)
		if !ok || !f.IsValid() || !f.CanSet() {
			return fmt.Errorf("--set: %q is not Field=value with a field of policy.Config", kv)
		}
		if err := setField(f, val); err != nil {
			return fmt.Errorf("--set: %s=%q: %v", name, val, err)
		}
	}
	return nil
}

// setField sets f, a bool, int or float64 field, to val parsed; f is left
// as it was when val does not parse.
func setField(f reflect.Value, val string) error {
	switch f.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err == nil {
			f.SetBool(b)
		}
		return err
	case reflect.Int:
		n, err := strconv.ParseInt(val, 10, 64)
		if err == nil {
			f.SetInt(n)
		}
		return err
	case reflect.Float64:
		x, err := strconv.ParseFloat(val, 64)
		if err == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
			err = fmt.Errorf("not finite")
		}
		if err == nil {
			f.SetFloat(x)
		}
		return err
	}
	return fmt.Errorf("not a number or a bool field")
}

// pct0 is a share as a whole percentage ("-" for NaN).
func pct0(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100*x)
}
