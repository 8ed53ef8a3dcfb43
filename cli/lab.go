package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/engine/lab"
)

func newLabCmd() *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run a simulated retailer against the real engine and compare it with baselines",
		Long: `lab runs a simulated retailer (persuadable customers, sure things, lost causes and
customers who opt out when contacted; several coupons; purchases spread over the window) against
the real decider, learner and evaluator in process, on a simulated clock with 7-day reward windows,
and prints a weekly table of reward per decision (MXN) for the engine and the baselines, then the
uplift capture (engine - never) / (oracle - never) over the last third of the run.

A run's capture moves by several hundredths with its random path alone. --runs N runs seeds
--seed .. --seed+N-1 and prints each run's captures with their means and standard errors:
compare policies on means, not on one seed.

--worlds N runs N worlds drawn at random from families the engine never sees (segment mix,
response tied to category affinity or not, effects rising or falling with purchase frequency,
customers who never redeem or opt out when contacted, an economic prior wrong either way,
conversion 1-30 % with lognormal spend, 2 to 8 coupons with or without categorias, new coupons,
drift, control share; some customer types share their history). Each world compares, on the
same customers each week: the engine, never-send, the best single action in hindsight, uniform
random, greedy (the engine's model without exploration), a textbook reference learner, the
oracle and the observable oracle. It prints each world's captures over the last third and a
summary. Seeds: --seeds report (1001..1000+N, the default: nobody tunes on them) or --seeds tune
(1..N, for tuning); --seed S starts at S instead. Two worlds run at a time (--parallel).
--customers and --weeks, when given, replace each world's drawn sizes (quick looks only).
--outcomes N redraws every world's luck (purchases, amounts, redemptions, opt-outs) from
stream N on the same customers, history, catalog and engine seed: a world that fails under
most streams fails by its mechanism, one that fails under its own alone by its draws.
--redraw-failures N does that after the run for every failing world, with the N streams
after the run's own, and prints the verdict under the summary.
--over-http drives each world's engine as a retailer would, through the HTTP API with the Go
client: a coupond server of its own per world in this process (serve's wiring on a data dir
in the system's temporary directory, its learner loop on the real clock), the week's events
published as the API accepts them and the sandbox clock moved as admin clock advance moves a
running server's. The world's measurements still read the server's store. Compare its --json
with the in-process run's with coupond lab compare.
coupond lab compare A.json B.json compares two such runs (--json) world by world.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return lf.run(cmd) },
	}
	f := cmd.Flags()
	f.IntVar(&lf.cfg.Customers, "customers", 2000, "simulated customers")
	f.IntVar(&lf.cfg.Weeks, "weeks", 12, "weeks to simulate (one decision per customer per week)")
	f.Uint64Var(&lf.cfg.Seed, "seed", 1, "random seed (world and engine)")
	f.StringVar(&lf.cfg.Scenario, "scenario", "base", "base, new-coupon (a coupon appears at mid-run) or drift (responses change at mid-run)")
	f.StringVar(&lf.plot, "plot", "", "write the learning curve as an SVG file")
	f.BoolVar(&lf.asJSON, "json", false, "machine-readable output")
	f.IntVar(&lf.runs, "runs", 1, "runs with consecutive seeds from --seed, summarised by their mean captures")
	f.IntVar(&lf.mw.worlds, "worlds", 0, "run N simulated retailers drawn at random (lab --help describes them) instead of the single world")
	f.StringVar(&lf.mw.seeds, "seeds", "report", "with --worlds: report (seeds 1001..) or tune (seeds 1..)")
	f.IntVar(&lf.mw.parallel, "parallel", 2, "with --worlds: worlds run at a time")
	f.StringArrayVar(&lf.mw.set, "set", nil, "with --worlds: change constants of the engine's policy configuration, as Field=value[,Field=value…] (policy.Config's field names, e.g. NeverShare=0.2,GateZ=1.5; the flag may be repeated, and every change applies, in order): to probe a constant on many worlds without editing code")
	f.BoolVar(&lf.mw.overHTTP, "over-http", false, "with --worlds: drive each world's engine through the HTTP API (a coupond server of its own in this process, its learner loop on the real clock, the clock moved as admin clock advance moves it) instead of in process")
	f.IntVar(&lf.mw.redraws, "redraw-failures", 0, "with --worlds: after the run, draw each failing world again under N other outcome streams (as --outcomes) and say whether it fails under most (its mechanism) or passes under most (its luck)")
	f.Uint64Var(&lf.mw.outcomes, "outcomes", 0, "with --worlds: draw every world's outcomes (purchases, amounts, redemptions, opt-outs; the engine's and the compared policies') from stream N instead of the world's own (0): the same customers, history, catalog and engine seed with other luck, to tell a world's loss its draws made from one its mechanism makes")
	f.StringVar(&lf.mw.model, "model", "regression", "with --worlds: the engine's model, regression (the default: the regression's choices behind the send gate) or zrule (the per-customer send rule before the gate; policy/POLICY.md 7.7)")
	cmd.AddCommand(newLabCompareCmd())
	return cmd
}

// labFlags are the flags of "lab".
type labFlags struct {
	cfg    lab.Config
	plot   string
	asJSON bool
	runs   int
	mw     manyWorldsFlags
}

// run runs the many worlds (--worlds), the single world with several
// seeds (--runs) or the single world once.
func (lf *labFlags) run(cmd *cobra.Command) error {
	if err := lf.check(); err != nil {
		return err
	}
	switch {
	case lf.mw.worlds > 0:
		return lf.runWorlds(cmd)
	case cmd.Flags().Changed("model"), cmd.Flags().Changed("set"), cmd.Flags().Changed("over-http"), cmd.Flags().Changed("outcomes"), cmd.Flags().Changed("redraw-failures"):
		return fmt.Errorf("--model, --set, --over-http, --outcomes and --redraw-failures apply to the many worlds: use them with --worlds")
	case lf.runs > 1:
		return lf.runSeeds(cmd)
	}
	return lf.runOne(cmd)
}

// check refuses sizes the lab cannot run, naming the flag (a value out of
// range used to fall back to the default without a word; one of 2⁶²
// customers or worlds panicked allocating them).
func (lf *labFlags) check() error {
	if err := checkAtLeast(flagMin{"customers", lf.cfg.Customers, 10}, flagMin{"weeks", lf.cfg.Weeks, 1}, flagMin{"runs", lf.runs, 1},
		flagMin{"worlds", lf.mw.worlds, 0}, flagMin{"parallel", lf.mw.parallel, 1}); err != nil {
		return err
	}
	return checkAtMost(flagMax{"customers", lf.cfg.Customers, labMaxCustomers}, flagMax{"weeks", lf.cfg.Weeks, labMaxWeeks},
		flagMax{"runs", lf.runs, labMaxRuns}, flagMax{"worlds", lf.mw.worlds, labMaxWorlds}, flagMax{"parallel", lf.mw.parallel, labMaxParallel})
}

// The lab's largest sizes: far beyond any study (the defaults are 2,000
// customers, 12 weeks, worlds two at a time), and small enough that a
// typo is refused instead of allocating without end or running for days.
const (
	labMaxCustomers = 1_000_000
	labMaxWeeks     = 520
	labMaxRuns      = 10_000
	labMaxWorlds    = 100_000
	labMaxParallel  = 256
)

// runWorlds runs --worlds; the single world's --seed, --customers and
// --weeks, when given, apply to every world.
func (lf *labFlags) runWorlds(cmd *cobra.Command) error {
	mw := lf.mw
	for _, name := range []string{"runs", "plot", "scenario"} {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s applies to the single world: use it without --worlds", name)
		}
	}
	if cmd.Flags().Changed("seed") {
		mw.base = lf.cfg.Seed
	}
	if cmd.Flags().Changed("customers") {
		mw.customers = lf.cfg.Customers
	}
	if cmd.Flags().Changed("weeks") {
		mw.weeks = lf.cfg.Weeks
	}
	return runManyWorlds(cmd, mw, lf.asJSON)
}

// runSeeds runs the single world with --runs consecutive seeds and prints
// their captures with means and standard errors.
func (lf *labFlags) runSeeds(cmd *cobra.Command) error {
	if lf.plot != "" {
		return fmt.Errorf("--plot draws one run: use it without --runs")
	}
	var reps []*lab.Report
	for i := 0; i < lf.runs; i++ {
		c := lf.cfg
		c.Seed = lf.cfg.Seed + uint64(i)
		rep, err := lab.Run(cmd.Context(), c, nil)
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	}
	sum := summarizeRuns(reps)
	if lf.asJSON {
		return printJSON(cmd.OutOrStdout(), sum)
	}
	return printRuns(cmd.OutOrStdout(), sum)
}

// runOne runs the single world once, with its progress on stderr.
func (lf *labFlags) runOne(cmd *cobra.Command) error {
	rep, err := lab.Run(cmd.Context(), lf.cfg, func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...)
	})
	if err != nil {
		return err
	}
	if lf.plot != "" {
		if err := writePlot(lf.plot, rep); err != nil {
			return err
		}
	}
	if lf.asJSON {
		return printJSON(cmd.OutOrStdout(), rep)
	}
	return printLab(cmd.OutOrStdout(), rep)
}

func printLab(w io.Writer, rep *lab.Report) error {
	fmt.Fprintf(w, "coupond lab: %d customers, %d weeks, scenario %s, seed %d (reward per decision, MXN over a 7-day window)\n",
		rep.Config.Customers, rep.Config.Weeks, rep.Config.Scenario, rep.Config.Seed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	hdr := "WEEK\tENGINE\tNEVER\tBEST SINGLE\tRANDOM\tGREEDY\tEPS-GREEDY 0.05\tORACLE\tEFFECT ERROR\t"
	if rep.Config.Scenario == "new-coupon" {
		hdr += "NEW COUPON SHARE\tORACLE SHARE\t"
	}
	fmt.Fprintln(tw, hdr)
	for _, r := range rep.Rows {
		line := fmt.Sprintf("%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t", r.Week, r.Engine, r.Never, r.BestSingle, r.Random, r.Greedy, r.EpsGreedy, r.Oracle, r.EffectError)
		if rep.Config.Scenario == "new-coupon" {
			line += fmt.Sprintf("%.3f\t%.3f\t", r.NewShare, r.OracleNewShare)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintf(w, "uplift capture over the last third: engine %.3f, greedy %.3f, epsilon-greedy %.3f\n", rep.UpliftCapture, rep.GreedyCapture, rep.EpsCapture)
	fmt.Fprintf(w, "engine's top-ranked action, without exploring: %.3f (the difference is what exploration cost)\n", rep.TopCapture)
	if rep.Config.Scenario == "new-coupon" {
		if rep.WeeksToOracleShare >= 0 {
			fmt.Fprintf(w, "new coupon reached half the oracle's share %d week(s) after it appeared\n", rep.WeeksToOracleShare)
		} else {
			fmt.Fprintln(w, "new coupon did not reach half the oracle's share")
		}
	}
	printWeeklyGate(w, rep.Rows)
	printLosses(w, rep.Losses)
	return nil
}

// printWeeklyGate prints the send gate at each week's end: why the engine holds
// back a model whose top-ranked action would earn more.
func printWeeklyGate(w io.Writer, rows []lab.Row) {
	if len(rows) == 0 || rows[0].Gate == "" {
		return
	}
	fmt.Fprintln(w, "\nsend gate at each week's end (frequency band: state, its choices against never-send in MXN per decision ± SE, share sent):")
	for _, r := range rows {
		fmt.Fprintf(w, "%5d  %s; guard %s\n", r.Week, r.Gate, r.Guard)
	}
}

// printLosses prints where the engine fell short of the oracle over the
// last third, by customer kind.
func printLosses(w io.Writer, losses []lab.Loss) {
	if len(losses) == 0 {
		return
	}
	fmt.Fprintln(w, "\nwhere the engine loses over the last third (MXN per decision; the kinds are the lab's truth, unseen by the engine):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tDECISIONS\tLOSS\tTOP-ACTION LOSS\tCOSTLIEST (TOP → ORACLE: LOSS)\tEFFECT BIAS (ESTIMATED − TRUE, MXN)\t")
	for _, l := range losses {
		var ms []string
		for _, m := range l.Mistakes {
			ms = append(ms, fmt.Sprintf("%d → %d: %.2f", m.Engine, m.Oracle, m.RegretMXN))
		}
		var bs []string
		for _, name := range slices.Sorted(maps.Keys(l.EffectBiasMXN)) {
			bs = append(bs, fmt.Sprintf("%s %+.1f", name, l.EffectBiasMXN[name]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%s\t\n", l.Kind, l.Decisions, l.RegretMXN, l.TopRegretMXN, strings.Join(ms, ", "), strings.Join(bs, ", "))
	}
	tw.Flush()
}

// runsSummary is the outcome of several lab runs that differ only in seed.
type runsSummary struct {
	Runs []runCaptures `json:"runs"`
	// Mean and StdErr are per column: the mean over runs and its standard
	// error (sample standard deviation / √runs).
	Mean   runCaptures `json:"mean"`
	StdErr runCaptures `json:"std_error"`
	// BeatsBoth counts the runs where the engine's capture is above both
	// greedy baselines'.
	BeatsBoth int `json:"engine_above_greedy_and_epsilon"`
}

// runCaptures are one run's uplift captures over the last third.
type runCaptures struct {
	Seed   uint64  `json:"seed,omitempty"`
	Engine float64 `json:"engine"`
	Top    float64 `json:"engine_top_action"`
	Greedy float64 `json:"greedy"`
	Eps    float64 `json:"epsilon_greedy_0_05"`
}

func summarizeRuns(reps []*lab.Report) runsSummary {
	var s runsSummary
	for _, r := range reps {
		c := runCaptures{Seed: r.Config.Seed, Engine: r.UpliftCapture, Top: r.TopCapture, Greedy: r.GreedyCapture, Eps: r.EpsCapture}
		s.Runs = append(s.Runs, c)
		if c.Engine > c.Greedy && c.Engine > c.Eps {
			s.BeatsBoth++
		}
	}
	if len(s.Runs) == 0 {
		return s
	}
	cols := func(c *runCaptures) []*float64 { return []*float64{&c.Engine, &c.Top, &c.Greedy, &c.Eps} }
	mean, se := cols(&s.Mean), cols(&s.StdErr)
	for i := range mean {
		xs := make([]float64, len(s.Runs))
		for j := range s.Runs {
			xs[j] = *cols(&s.Runs[j])[i]
		}
		*mean[i], *se[i] = lab.MeanSE(xs) // runs > 1: a finite error
	}
	return s
}

func printRuns(w io.Writer, s runsSummary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SEED\tENGINE\tENGINE TOP ACTION\tGREEDY\tEPS-GREEDY 0.05\t")
	for _, r := range s.Runs {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.3f\t%.3f\t\n", r.Seed, r.Engine, r.Top, r.Greedy, r.Eps)
	}
	m, e := s.Mean, s.StdErr
	fmt.Fprintf(tw, "mean\t%.3f ± %.3f\t%.3f ± %.3f\t%.3f ± %.3f\t%.3f ± %.3f\t\n", m.Engine, e.Engine, m.Top, e.Top, m.Greedy, e.Greedy, m.Eps, e.Eps)
	tw.Flush()
	_, err := fmt.Fprintf(w, "uplift capture over the last third; engine above both greedy baselines in %d of %d runs\n", s.BeatsBoth, len(s.Runs))
	return err
}

// writePlot draws the weekly reward per decision of each policy as an SVG
// line chart.
func writePlot(path string, rep *lab.Report) error {
	const W, H, pad = 800.0, 450.0, 60.0
	series := []struct {
		name, color string
		get         func(lab.Row) float64
	}{
		{"engine", "#d62728", func(r lab.Row) float64 { return r.Engine }},
		{"oracle", "#2ca02c", func(r lab.Row) float64 { return r.Oracle }},
		{"never send", "#7f7f7f", func(r lab.Row) float64 { return r.Never }},
		{"best single", "#9467bd", func(r lab.Row) float64 { return r.BestSingle }},
		{"greedy", "#1f77b4", func(r lab.Row) float64 { return r.Greedy }},
		{"eps-greedy", "#17becf", func(r lab.Row) float64 { return r.EpsGreedy }},
		{"random", "#bcbd22", func(r lab.Row) float64 { return r.Random }},
	}
	lo, hi := 1e18, -1e18
	for _, s := range series {
		for _, r := range rep.Rows {
			v := s.get(r)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi <= lo {
		hi = lo + 1
	}
	n := max(len(rep.Rows)-1, 1)
	x := func(i int) float64 { return pad + float64(i)*(W-2*pad)/float64(n) }
	y := func(v float64) float64 { return H - pad - (v-lo)/(hi-lo)*(H-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="24" font-size="15">coupond lab: reward per decision (MXN), scenario %s</text>`+"\n", pad, rep.Config.Scenario)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n",
		pad, H-pad, W-pad, H-pad, pad, pad, pad, H-pad)
	for k := 0; k <= 4; k++ {
		v := lo + float64(k)*(hi-lo)/4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.1f</text>`+"\n", pad-6, y(v)+4, v)
	}
	for i, r := range rep.Rows {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%d</text>`+"\n", x(i), H-pad+16, r.Week)
	}
	for si, s := range series {
		var pts []string
		for i, r := range rep.Rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(s.get(r))))
		}
		width := 1.5
		if s.name == "engine" {
			width = 3
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", s.color, width, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", W-pad-90, pad+float64(si)*16, s.color, s.name)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">week</text></svg>`+"\n", W/2, H-16)
	return atomicfile.WriteBytes(path, 0o600, []byte(b.String()))
}
