package cli

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// TestPrintGuardShowsGate: admin evaluate and admin tenant show print the
// send gate under the guard: its state, its test over all customers and
// each frequency band's state, sending share and test.
func TestPrintGuardShowsGate(t *testing.T) {
	g := policy.GuardStatus{Policy: 12.5, Rewards: 900, Gate: &policy.GateStatus{State: "abierta", Diff: 3.2, SE: new(1.1), N: 4000,
		Bands: []policy.GateBandStatus{{Tickets: "0-1", State: "probando", Diff: -0.4, SE: new(2.0), N: 900, Sending: 0.25},
			{Tickets: "2-7", State: "abierta", Diff: 5.5, SE: new(1.5), N: 3100, Sending: 0.9},
			{Tickets: "8-25", State: "probando", Sending: 0.25}}}}
	var b strings.Builder
	printGuard(&b, g)
	want := `policy guard: inactive  switches 0  learned policy 12.50 MXN  effective rewards 900
send gate: abierta  choice − never-send +3.20 MXN (SE 1.10) over 4000 effective decisions
  band 0 (0-1 tickets a year): probando  sends 25 % of the coupon choices  choice − never-send -0.40 MXN (SE 2.00) over 900
  band 1 (2-7 tickets a year): abierta  sends 90 % of the coupon choices  choice − never-send +5.50 MXN (SE 1.50) over 3100
  band 2 (8-25 tickets a year): probando  sends 25 % of the coupon choices  choice − never-send +0.00 MXN (SE n/a) over 0
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printGuard (-want +got):\n%s", diff)
	}
}

// TestInterval: an estimate prints with its interval, without one when its
// spread is unknown, and as n/a when it has no value.
// TestCell: ESS and the largest weight of an evaluation without records
// print n/a, not NaN.
func TestCell(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{12.4, "12"}, {math.NaN(), "n/a"}, {math.Inf(1), "n/a"}} {
		if got := cell("%.0f", tc.v); got != tc.want {
			t.Errorf("cell(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestInterval(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		e    ope.Estimate
		want string
	}{
		{ope.Estimate{Value: 1.5, Lo: 1, Hi: 2}, "     1.50 [    1.00,     2.00]"},
		{ope.Estimate{Value: -0.5, Lo: nan, Hi: nan}, "    -0.50 (no interval)       "},
		{ope.Estimate{Value: nan, Lo: nan, Hi: nan}, "n/a"},
		{ope.Estimate{Value: -0.001, Lo: -0.004, Hi: 0.002}, "     0.00 [    0.00,     0.00]"},
		{ope.Estimate{Value: -0.001, Lo: nan, Hi: nan}, "     0.00 (no interval)       "},
	} {
		if got := interval(tc.e); got != tc.want {
			t.Errorf("interval(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}

// TestEvaluateReplicatesBounded: --replicates out of 2..100000 is an error
// naming the flag, before any store is opened. Below 0 and above 100000
// failed with the engine's "ope: invalid options: Replicates N", which
// named no flag, and 0 silently ran the default 100.
func TestEvaluateReplicatesBounded(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, v := range []string{"-1", "0", "1", "100001"} {
		_, _, err := runCLI(t, "admin", "evaluate", "--tenant", "acme", "--replicates", v, "--data-dir", dir)
		if err == nil || !strings.Contains(err.Error(), "--replicates") {
			t.Errorf("evaluate --replicates %s: %v; want an error naming --replicates", v, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, _, err := runCLI(t, "admin", "evaluate", "--tenant", "acme", "--replicates", "0", "--data-dir", missing); err == nil || !strings.Contains(err.Error(), "--replicates") {
		t.Errorf("evaluate --replicates 0 on a missing data dir: %v; want the flag's error first", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("stat %s: %v", missing, err)
	}
	runIn(t, dir, "admin", "evaluate", "--tenant", "acme", "--replicates", "2")
}

// TestShadowReportSaysWhatItSkipped: a decision record that does not
// decode is skipped by the shadow report and counted; the text report says
// so, as admin evaluate's "left out" does, instead of reporting on fewer
// decisions without a word.
func TestShadowReportSaysWhatItSkipped(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox")
	db, err := store.Open(filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set(store.DecisionKey("acme", "X0damaged000000001"), []byte{0xff, 1, 2})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out := string(runIn(t, dir, "admin", "shadow", "report", "--tenant", "acme"))
	if !strings.Contains(out, "1 decision record that did not decode, skipped") {
		t.Errorf("shadow report does not say it skipped a damaged record:\n%s", out)
	}
}

// TestAdminJSONStandardErrorUnknownIsNull: a standard error the policy
// cannot estimate yet (a fresh tenant's send gate) is null in admin tenant
// show --json and admin evaluate --json, never a number a script would
// read as one (it was -1).
func TestAdminJSONStandardErrorUnknownIsNull(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox")
	for _, args := range [][]string{
		{"admin", "tenant", "show", "acme", "--json"},
		{"admin", "evaluate", "--tenant", "acme", "--json"},
	} {
		var doc any
		if err := json.Unmarshal(runIn(t, dir, args...), &doc); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var got []any
		collectKey(doc, "standard_error_mxn", &got)
		want := []any{nil, nil, nil, nil, nil} // the gate's test and its four bands'
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%v: standard_error_mxn values (-want +got):\n%s", args, diff)
		}
	}
}

// collectKey appends to out the value of every member named key in doc,
// depth first, objects' members in key order.
func collectKey(doc any, key string, out *[]any) {
	switch v := doc.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if k == key {
				*out = append(*out, v[k])
			}
			collectKey(v[k], key, out)
		}
	case []any:
		for _, x := range v {
			collectKey(x, key, out)
		}
	}
}

// TestAmountsNeverNegativeZero: admin evaluate, shadow report, tenant show
// and the console's guard text print an amount that rounds to zero cents
// as 0.00 (+0.00 for a difference), not -0.00 as a tiny negative
// estimate did; one that rounds to a cent keeps its sign.
func TestAmountsNeverNegativeZero(t *testing.T) {
	tiny := -0.001
	for _, tc := range []struct {
		m    engine.MeasuredValue
		want string
	}{
		{engine.MeasuredValue{Mean: tiny, Lo: -0.003, Hi: 0.002}, "0.00 [0.00, 0.00]"},
		{engine.MeasuredValue{Mean: math.Copysign(0, -1), Lo: math.NaN()}, "0.00"},
		{engine.MeasuredValue{Mean: -0.006, Lo: -0.01, Hi: 0}, "-0.01 [-0.01, 0.00]"},
	} {
		if got := measured(tc.m); got != tc.want {
			t.Errorf("measured(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
	g := policy.GuardStatus{Policy: tiny, Rewards: 10, Baselines: []policy.BaselineStatus{{Accion: 0, Value: tiny, Diff: tiny, SE: new(0.5)}},
		Gate: &policy.GateStatus{State: "probando", Diff: tiny, SE: new(0.5), N: 10,
			Bands: []policy.GateBandStatus{{Tickets: "0-1", State: "probando", Diff: tiny, SE: new(0.5), N: 10, Sending: 0.5}}}}
	var b strings.Builder
	printGuard(&b, g)
	want := `policy guard: inactive  switches 0  learned policy 0.00 MXN  effective rewards 10
  baseline 0: 0.00 MXN  policy − baseline +0.00 (SE 0.50)
send gate: probando  choice − never-send +0.00 MXN (SE 0.50) over 10 effective decisions
  band 0 (0-1 tickets a year): probando  sends 50 % of the coupon choices  choice − never-send +0.00 MXN (SE 0.50) over 10
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printGuard (-want +got):\n%s", diff)
	}
	wantDetail := "the learned policy is estimated at 0.00 MXN per decision over 10 effective rewards; 0 switch(es); never-send 0.00 MXN (policy +0.00 ± 0.50); send gate probando: choice − never-send +0.00 MXN (SE 0.50); 0-1 tickets a year probando, 50 % of choices sent"
	if diff := cmp.Diff(wantDetail, guardState(g).Detail); diff != "" {
		t.Errorf("guardState detail (-want +got):\n%s", diff)
	}
}

// TestShadowReportJSONShareOfNothingIsNull: a share whose denominator is 0
// (no shadow decisions, no coupons received, none compared) is null in
// admin shadow report --json, as the text's n/a, not 0: a script read 0
// as "none confirmed" or "never agrees".
func TestShadowReportJSONShareOfNothingIsNull(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox")
	var got map[string]any
	if err := json.Unmarshal(runIn(t, dir, "admin", "shadow", "report", "--tenant", "acme", "--json"), &got); err != nil {
		t.Fatal(err)
	}
	shares := map[string]any{}
	for _, k := range []string{"confirmed_share", "labelled_share", "agreement"} {
		v, ok := got[k]
		if !ok {
			v = "missing"
		}
		shares[k] = v
	}
	want := map[string]any{"confirmed_share": nil, "labelled_share": nil, "agreement": nil}
	if diff := cmp.Diff(want, shares); diff != "" {
		t.Errorf("shares of nothing (-want +got):\n%s", diff)
	}
}

// TestPrintEvaluationHeader: admin evaluate's text names the campaign it
// evaluated, "(all)" without --campana (the header did not say which, so
// two outputs could not be told apart), and lists the records left out as
// "reason n" in name order, not as a Go map ("map[reward_not_final:300]").
func TestPrintEvaluationHeader(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		campana string
		want    []string
	}{
		{"", []string{
			"tenant acme  campana (all)  politica_version v3  records 40  (MXN of reward per decision over the reward window)",
			"left out: fallback 2, reward_not_final 300",
		}},
		{"navidad", []string{
			"tenant acme  campana navidad  politica_version v3  records 40  (MXN of reward per decision over the reward window)",
			"left out: fallback 2, reward_not_final 300",
		}},
	} {
		ev := &engine.Evaluation{Tenant: "acme", Campana: tc.campana, PoliticaVersion: "v3", Records: 40,
			Excluded: map[string]int{"reward_not_final": 300, "fallback": 2},
			Logged:   engine.MeasuredValue{Mean: nan}, Control: engine.MeasuredValue{Mean: nan}}
		var b strings.Builder
		if err := printEvaluation(&b, ev); err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(b.String(), "\n", 3)
		if diff := cmp.Diff(tc.want, lines[:2]); diff != "" {
			t.Errorf("campana %q: header (-want +got):\n%s", tc.campana, diff)
		}
	}
}

// TestEvaluateNamesCampana: admin evaluate --campana prints the campaign
// it was given in its header, as --json does.
func TestEvaluateNamesCampana(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox")
	for campana, want := range map[string]string{"": "  campana (all)  ", "camp1": "  campana camp1  "} {
		args := []string{"admin", "evaluate", "--tenant", "acme"}
		if campana != "" {
			args = append(args, "--campana", campana)
		}
		if out := string(runIn(t, dir, args...)); !strings.HasPrefix(out, "tenant acme"+want) {
			t.Errorf("%v: header does not say %q:\n%s", args, want, out)
		}
	}
}
