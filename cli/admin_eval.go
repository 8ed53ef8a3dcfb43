package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// maxReplicates is the most bootstrap replicates ope takes.
const maxReplicates = 100000

func evaluateCmd(a *app) *cobra.Command {
	var campana string
	var replicates int
	var seed uint64
	cmd := a.tenantCmd("evaluate --tenant ID [--campana ID]", "Off-policy estimates (IPS, SNIPS, DR with 95% intervals) of the current policy, never-send, each action and the logged behaviour", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		ev, err := e.svc.engine.Evaluator.Evaluate(cmd.Context(), t.ID, engine.EvalOptions{Campana: campana, Replicates: replicates, Seed: seed})
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), jsonSafe(ev))
		}
		if err := printEvaluation(cmd.OutOrStdout(), ev); err != nil {
			return err
		}
		if unknownCampana(e.svc.engine.Campaigns, ev) {
			fmt.Fprintf(cmd.OutOrStdout(), "no campaign %s is defined for tenant %s and no decision names it: check --campana (a campana_id of PUT /v1/campanas)\n", ev.Campana, ev.Tenant)
		}
		return nil
	})
	cmd.Flags().StringVar(&campana, "campana", "", "only decisions of this campaign")
	cmd.Flags().IntVar(&replicates, "replicates", 100, "bootstrap replicates, 2 to 100000")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		// A campana_id is of the API's ID pattern: any other value names
		// no campaign's decisions (it read "records 0" as if the campaign
		// had none), and a newline or escape in it was printed raw into the
		// report's header.
		if cmd.Flags().Changed("campana") && !schema.ValidID(campana) {
			return fmt.Errorf("--campana: want a campana_id, 1 to 128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit, got %q", campana)
		}
		if err := checkAtLeast(flagMin{"replicates", replicates, 2}); err != nil {
			return err
		}
		return checkAtMost(flagMax{"replicates", replicates, maxReplicates})
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "bootstrap seed")
	return cmd
}

// unknownCampana reports whether ev, an evaluation of one campaign, found
// no decision of it at all, not even one left out, and the tenant has no
// such campaign defined (nor a damaged one): a mistyped --campana, which
// read only "no decision to evaluate yet", as a campaign still waiting for
// its rewards does.
func unknownCampana(c *engine.Campaigns, ev *engine.Evaluation) bool {
	if ev.Campana == "" || ev.Records > 0 || len(ev.Excluded) > 0 {
		return false
	}
	_, err := c.Campaign(ev.Tenant, ev.Campana)
	return errors.Is(err, engine.ErrNotFound) && !errors.Is(err, engine.ErrDamaged)
}

// intervalOf prints an estimate's 95 % interval: n/a when the estimate
// has no value, "no interval" when its spread cannot be estimated.
func intervalOf(e ope.Estimate) string {
	switch {
	case math.IsNaN(e.Value):
		return "n/a"
	case math.IsNaN(e.Lo) || math.IsNaN(e.Hi):
		return "(no interval)"
	}
	return fmt.Sprintf("[%.2f, %.2f]", cents(e.Lo), cents(e.Hi))
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
// the records used, then the estimates, one line per policy and estimator
// so that the table stays within 100 columns whatever the amounts. Without
// records it says so in words instead of a table of n/a.
func printEvaluation(w io.Writer, ev *engine.Evaluation) error {
	campana := ev.Campana
	if campana == "" {
		campana = "(all)"
	}
	fmt.Fprintf(w, "tenant %s  campana %s  records %d\npolitica_version %s\n", ev.Tenant, campana, ev.Records, ev.PoliticaVersion)
	if len(ev.Excluded) > 0 {
		var out []string
		for _, why := range slices.Sorted(maps.Keys(ev.Excluded)) {
			out = append(out, fmt.Sprintf("%s %d", why, ev.Excluded[why]))
		}
		fmt.Fprintf(w, "left out: %s\n", strings.Join(out, ", "))
	}
	if ev.Records == 0 {
		fmt.Fprintln(w, "no decision to evaluate yet: none is confirmed ejecutada with its reward final outside the control group")
		if ev.Excluded["shadow"] > 0 {
			// A tenant in shadow mode has none: its caller applied its own
			// rule, which admin shadow report compares.
			fmt.Fprintln(w, "(shadow decisions are left out: admin shadow report compares them with your rule)")
		}
	} else {
		printEstimates(w, ev.Policies)
	}
	fmt.Fprintf(w, "logged behaviour (measured): %s  n=%d\n", measured(ev.Logged), ev.Logged.N)
	fmt.Fprintf(w, "control group (measured):    %s  n=%d\n", measured(ev.Control), ev.Control.N)
	printGuard(w, ev.Guard)
	return nil
}

// printEstimates prints each policy's IPS, SNIPS and DR estimates with
// their intervals, one line each, in MXN of reward per decision over the
// reward window.
func printEstimates(w io.Writer, policies []engine.PolicyValue) {
	fmt.Fprintln(w, "estimates in MXN of reward per decision over the reward window:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tESS\tMAX WEIGHT\tESTIMATOR\tVALUE\t95% INTERVAL")
	for _, p := range policies {
		for i, e := range []struct {
			name string
			est  ope.Estimate
		}{{"IPS", p.IPS}, {"SNIPS", p.SNIPS}, {"DR", p.DR}} {
			name, ess, mw := "", "", ""
			if i == 0 {
				name, ess, mw = printableName(p.Policy), cell("%.0f", p.ESS), cell("%.1f", p.MaxWeight)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, ess, mw, e.name, cell("%.2f", cents(e.est.Value)), intervalOf(e.est))
		}
	}
	tw.Flush()
}

// printableName returns s as it is when every rune of it prints as itself,
// else quoted with Go escapes (strconv.QuoteToGraphic). A policy's name
// carries the tenant's catalog nombre, free text that may hold a newline or
// a tab (the API accepts both) and format characters such as a
// right-to-left override: printed raw, they would break the table's rows
// and columns and could make tenant text pass for lines of the report.
func printableName(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// noGuardEstimate is what admin tenant show and the console say of a
// guard that has folded no live decision's reward (shadow decisions teach
// the model, not the guard).
const noGuardEstimate = "no estimate yet (no reward of a live decision folded; shadow decisions teach the model, not the guard)"

// printGuard prints the policy guard's state and its running doubly robust
// estimates (faded over about a reward window); before any reward is
// learned it says there is no estimate yet instead of a value of 0.
func printGuard(w io.Writer, g policy.GuardStatus) {
	state := "inactive"
	if g.Active {
		state = fmt.Sprintf("ACTIVE: exploiting baseline %d (0 = never send)", g.Baseline)
	}
	value := noGuardEstimate
	if g.Rewards > 0 {
		value = fmt.Sprintf("%.2f MXN over %.0f effective rewards", cents(g.Policy), g.Rewards)
	}
	fmt.Fprintf(w, "policy guard: %s  switches %d\n  learned policy: %s\n", state, g.Switches, value)
	for _, b := range g.Baselines {
		fmt.Fprintf(w, "  baseline %d: %.2f MXN  policy − baseline %+.2f (SE %s)\n", b.Accion, cents(b.Value), cents(b.Diff), seText(b.SE))
	}
	printGate(w, g.Gate)
}

// printGate prints the send gate: its state and its test of the model's
// coupon choices against never-send, then a table of the frequency bands
// with the share of the choices each sends and its own test. A test over
// no decision says so, not a difference of 0.
func printGate(w io.Writer, g *policy.GateStatus) {
	if g == nil {
		return
	}
	if g.N == 0 {
		fmt.Fprintf(w, "send gate: %s  no decision tested against never-send yet\n", g.State)
	} else {
		fmt.Fprintf(w, "send gate: %s  choice − never-send %+.2f MXN (SE %s) over %.0f effective decisions\n", g.State, cents(g.Diff), seText(g.SE), g.N)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BAND\tTICKETS A YEAR\tSTATE\tSENDS\tCHOICE − NEVER-SEND (MXN)\tSE\tEFFECTIVE DECISIONS")
	for i, b := range g.Bands {
		test := "none tested yet"
		if b.N > 0 {
			test = fmt.Sprintf("%+.2f\t%s\t%.0f", cents(b.Diff), seText(b.SE), b.N)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%.0f %%\t%s\n", i, b.Tickets, b.State, 100*b.Sending, test)
	}
	tw.Flush()
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
		rep, err := e.svc.engine.Evaluator.Shadow(cmd.Context(), t.ID)
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), jsonSafe(rep))
		}
		printShadow(cmd.OutOrStdout(), rep)
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

// printShadow prints the shadow report as text within 100 columns: the
// shares, the value per decision of the caller's rule and the engine, the
// verdict and its reasons (wrapped).
func printShadow(w io.Writer, rep *engine.ShadowReport) {
	fmt.Fprintf(w, "tenant %s: %s\n", rep.Tenant, plural(rep.Decisions, "shadow decision"))
	if rep.Damaged > 0 {
		fmt.Fprintf(w, "%s that did not decode, skipped (admin check lists them)\n", plural(rep.Damaged, "decision record"))
	}
	fmt.Fprintf(w, "confirmed:                %s  (%d; spec: at least 95%%)\n", percentOf(rep.ConfirmedShare, rep.Decisions), rep.Confirmed)
	fmt.Fprintf(w, "coupons with decision_id: %s  (%d of %d; spec: at least 95%%)\n", percentOf(rep.LabelledShare, int(rep.CouponsReceived)), rep.CouponsLabelled, rep.CouponsReceived)
	fmt.Fprintf(w, "agreement engine/caller:  %s  (%d compared)\n", percentOf(rep.Agreement, rep.Compared), rep.Compared)
	fmt.Fprintf(w, "value per decision, MXN with 95%% interval, over %s:\n", plural(rep.RewardsFinal, "final reward"))
	fmt.Fprintf(w, "  caller rule:          %s\n", measured(rep.CallerRule))
	fmt.Fprintf(w, "  engine:               %s\n", measured(rep.Engine))
	fmt.Fprintf(w, "  engine − caller rule: %s\n", measured(rep.Lift))
	fmt.Fprint(w, wrapText("verdict: ", rep.Verdict, 100, "  "))
	for _, r := range rep.Reasons {
		fmt.Fprint(w, wrapText("  - ", r, 100, "    "))
	}
}

// wrapText is prefix followed by s, broken at spaces into lines of at
// most width runes (a word longer than that stands alone), each
// continuation line starting with indent; every line ends with a newline.
func wrapText(prefix, s string, width int, indent string) string {
	var b strings.Builder
	line, empty := prefix, true
	for _, word := range strings.Fields(s) {
		switch {
		case empty:
			line += word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width:
			b.WriteString(line + "\n")
			line = indent + word
		default:
			line += " " + word
		}
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}
