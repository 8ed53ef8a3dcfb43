package cli

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// maxReplicates is the most bootstrap replicates ope takes.
const maxReplicates = 100000

func evaluateCmd(a *app) *cobra.Command {
	var campana string
	var replicates int
	var seed uint64
	cmd := a.tenantCmd("evaluate --tenant ID [--campana ID]", "Off-policy estimates (IPS, SNIPS, DR with 95% intervals) of the current policy, never-send, each action and the logged behaviour", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		ev, err := e.svc.engine.Evaluator.Evaluate(t.ID, engine.EvalOptions{Campana: campana, Replicates: replicates, Seed: seed})
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), jsonSafe(ev))
		}
		return printEvaluation(cmd.OutOrStdout(), ev)
	})
	cmd.Flags().StringVar(&campana, "campana", "", "only decisions of this campaign")
	cmd.Flags().IntVar(&replicates, "replicates", 100, "bootstrap replicates, 2 to 100000")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if err := checkAtLeast(flagMin{"replicates", replicates, 2}); err != nil {
			return err
		}
		return checkAtMost(flagMax{"replicates", replicates, maxReplicates})
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "bootstrap seed")
	return cmd
}

// interval prints an estimate with its interval: n/a when it has no
// value, "no interval" when its spread cannot be estimated.
func interval(e ope.Estimate) string {
	switch {
	case math.IsNaN(e.Value):
		return "n/a"
	case math.IsNaN(e.Lo) || math.IsNaN(e.Hi):
		return fmt.Sprintf("%9.2f %-20s", cents(e.Value), "(no interval)")
	}
	return fmt.Sprintf("%9.2f [%8.2f, %8.2f]", cents(e.Value), cents(e.Lo), cents(e.Hi))
}

// cents returns an amount in MXN to print with two decimals: 0 when it
// rounds to zero cents, which %.2f would print as -0.00 for a tiny
// negative (or −0); else v.
func cents(v float64) float64 {
	if v > -0.005 && v <= 0 {
		return 0
	}
	return v
}

// cell prints v with format, or n/a when v is not a number (no records).
func cell(format string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

// printEvaluation prints ev as text: a header naming the tenant, the
// campaign evaluated ("(all)" without --campana), the policy version and
// the records used, then the estimates.
func printEvaluation(w io.Writer, ev *engine.Evaluation) error {
	campana := ev.Campana
	if campana == "" {
		campana = "(all)"
	}
	fmt.Fprintf(w, "tenant %s  campana %s  politica_version %s  records %d  (MXN of reward per decision over the reward window)\n",
		ev.Tenant, campana, ev.PoliticaVersion, ev.Records)
	if len(ev.Excluded) > 0 {
		var out []string
		for _, why := range slices.Sorted(maps.Keys(ev.Excluded)) {
			out = append(out, fmt.Sprintf("%s %d", why, ev.Excluded[why]))
		}
		fmt.Fprintf(w, "left out: %s\n", strings.Join(out, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tIPS [95%]\tSNIPS [95%]\tDR [95%]\tESS\tMAX WEIGHT")
	for _, p := range ev.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Policy, interval(p.IPS), interval(p.SNIPS), interval(p.DR), cell("%.0f", p.ESS), cell("%.1f", p.MaxWeight))
	}
	tw.Flush()
	fmt.Fprintf(w, "logged behaviour (measured): %s  n=%d\n", measured(ev.Logged), ev.Logged.N)
	fmt.Fprintf(w, "control group (measured):    %s  n=%d\n", measured(ev.Control), ev.Control.N)
	printGuard(w, ev.Guard)
	return nil
}

// printGuard prints the policy guard's state and its running doubly robust
// estimates (faded over about a reward window).
func printGuard(w io.Writer, g policy.GuardStatus) {
	state := "inactive"
	if g.Active {
		state = fmt.Sprintf("ACTIVE: exploiting baseline %d (0 = never send)", g.Baseline)
	}
	fmt.Fprintf(w, "policy guard: %s  switches %d  learned policy %.2f MXN  effective rewards %.0f\n", state, g.Switches, cents(g.Policy), g.Rewards)
	for _, b := range g.Baselines {
		fmt.Fprintf(w, "  baseline %d: %.2f MXN  policy − baseline %+.2f (SE %s)\n", b.Accion, cents(b.Value), cents(b.Diff), seText(b.SE))
	}
	printGate(w, g.Gate)
}

// printGate prints the send gate: its state, the share of the model's
// coupon choices it sends, and its test of those choices against
// never-send.
func printGate(w io.Writer, g *policy.GateStatus) {
	if g == nil {
		return
	}
	fmt.Fprintf(w, "send gate: %s  choice − never-send %+.2f MXN (SE %s) over %.0f effective decisions\n", g.State, cents(g.Diff), seText(g.SE), g.N)
	for i, b := range g.Bands {
		fmt.Fprintf(w, "  band %d (%s tickets a year): %s  sends %.0f %% of the coupon choices  choice − never-send %+.2f MXN (SE %s) over %.0f\n",
			i, b.Tickets, b.State, 100*b.Sending, cents(b.Diff), seText(b.SE), b.N)
	}
}

// seText prints a policy estimate's standard error in MXN; policy reports
// one that cannot be estimated yet as nil: "n/a".
func seText(x *float64) string {
	if x == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *x)
}

func measured(m engine.MeasuredValue) string {
	if math.IsNaN(m.Mean) {
		return "n/a"
	}
	if math.IsNaN(m.Lo) {
		return fmt.Sprintf("%.2f", cents(m.Mean))
	}
	return fmt.Sprintf("%.2f [%.2f, %.2f]", cents(m.Mean), cents(m.Lo), cents(m.Hi))
}

func shadowReportCmd(a *app) *cobra.Command {
	return a.tenantCmd("report --tenant ID", "Confirmation and labelling shares, agreement, and engine vs caller rule, with a verdict", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		rep, err := e.svc.engine.Evaluator.Shadow(t.ID)
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), jsonSafe(rep))
		}
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "tenant %s: %d shadow decisions\n", rep.Tenant, rep.Decisions)
		if rep.Damaged > 0 {
			plural := "s"
			if rep.Damaged == 1 {
				plural = ""
			}
			fmt.Fprintf(w, "%d decision record%s that did not decode, skipped (admin check lists them)\n", rep.Damaged, plural)
		}
		fmt.Fprintf(w, "confirmed:               %s  (%d; spec: at least 95%%)\n", percentOf(rep.ConfirmedShare, rep.Decisions), rep.Confirmed)
		fmt.Fprintf(w, "coupons with decision_id: %s  (%d of %d; spec: at least 95%%)\n", percentOf(rep.LabelledShare, int(rep.CouponsReceived)), rep.CouponsLabelled, rep.CouponsReceived)
		fmt.Fprintf(w, "agreement engine/caller: %s  (%d compared)\n", percentOf(rep.Agreement, rep.Compared), rep.Compared)
		fmt.Fprintf(w, "value per decision (MXN, %d final rewards): caller rule %s, engine %s\n", rep.RewardsFinal, measured(rep.CallerRule), measured(rep.Engine))
		fmt.Fprintf(w, "engine − caller rule:    %s\n", measured(rep.Lift))
		fmt.Fprintf(w, "verdict: %s\n", rep.Verdict)
		for _, r := range rep.Reasons {
			fmt.Fprintf(w, "  - %s\n", r)
		}
		return nil
	})
}

// percentOf prints share as a percentage, or n/a when it is a share of
// nothing (n is its denominator).
func percentOf(share float64, n int) string {
	if n == 0 {
		return "  n/a"
	}
	return fmt.Sprintf("%5.1f%%", 100*share)
}
