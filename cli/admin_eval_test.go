package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

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
	want := `policy guard: inactive  switches 0
  learned policy: 12.50 MXN over 900 effective rewards
send gate: abierta  choice − never-send +3.20 MXN (SE 1.10) over 4000 effective decisions
  BAND  TICKETS A YEAR  STATE     SENDS  CHOICE − NEVER-SEND (MXN)  SE    EFFECTIVE DECISIONS
  0     0-1             probando  25 %   -0.40                      2.00  900
  1     2-7             abierta   90 %   +5.50                      1.50  3100
  2     8-25            probando  25 %   none tested yet
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printGuard (-want +got):\n%s", diff)
	}
}

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

func TestIntervalOf(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		e    ope.Estimate
		want string
	}{
		{ope.Estimate{Value: 1.5, Lo: 1, Hi: 2}, "[1.00, 2.00]"},
		{ope.Estimate{Value: -0.5, Lo: nan, Hi: nan}, "(no interval)"},
		{ope.Estimate{Value: nan, Lo: nan, Hi: nan}, "n/a"},
		{ope.Estimate{Value: -0.001, Lo: -0.004, Hi: 0.002}, "[0.00, 0.00]"},
	} {
		if got := intervalOf(tc.e); got != tc.want {
			t.Errorf("intervalOf(%+v) = %q, want %q", tc.e, got, tc.want)
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

// TestEvaluateCampanaIsAnID: --campana takes a campana_id (the API's ID
// pattern), else an error naming the flag before any store is opened; it
// accepted any text, read "records 0" for a value no decision can carry,
// and printed a newline in it raw into the report's header.
func TestEvaluateCampanaIsAnID(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	tests := []struct {
		campana string
		ok      bool
	}{
		{"navidad-2026", true},
		{"a.b:c_d-1", true},
		{strings.Repeat("c", 128), true},
		{"", false},
		{"../x", false},
		{"-x", false},
		{"a\nb", false},
		{"a\nrecords 99", false},
		{"ñandú", false},
		{strings.Repeat("c", 129), false},
	}
	for _, tc := range tests {
		out, _, err := runCLI(t, "admin", "evaluate", "--tenant", "acme", "--campana="+tc.campana, "--data-dir", dir)
		switch {
		case tc.ok && err != nil:
			t.Errorf("evaluate --campana %q: %v", tc.campana, err)
		case tc.ok && !strings.Contains(out, "campana "+tc.campana+" "):
			t.Errorf("evaluate --campana %q: header does not name it:\n%s", tc.campana, out)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "--campana")):
			t.Errorf("evaluate --campana %q: %v, want an error naming --campana", tc.campana, err)
		}
	}
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
	want := `policy guard: inactive  switches 0
  learned policy: 0.00 MXN over 10 effective rewards
  baseline 0: 0.00 MXN  policy − baseline +0.00 (SE 0.50)
send gate: probando  choice − never-send +0.00 MXN (SE 0.50) over 10 effective decisions
  BAND  TICKETS A YEAR  STATE     SENDS  CHOICE − NEVER-SEND (MXN)  SE    EFFECTIVE DECISIONS
  0     0-1             probando  50 %   +0.00                      0.50  10
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
			"tenant acme  campana (all)  records 40",
			"politica_version v3",
			"left out: fallback 2, reward_not_final 300",
		}},
		{"navidad", []string{
			"tenant acme  campana navidad  records 40",
			"politica_version v3",
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
		lines := strings.SplitN(b.String(), "\n", 4)
		if diff := cmp.Diff(tc.want, lines[:3]); diff != "" {
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

// fullGuard is a guard status with every line admin evaluate and admin
// tenant show print: baselines and four gate bands with large figures.
func fullGuard() policy.GuardStatus {
	se := new(1234.56)
	band := func(tickets string) policy.GateBandStatus {
		return policy.GateBandStatus{Tickets: tickets, State: "probando", Diff: -12345.67, SE: se, N: 123456, Sending: 0.5}
	}
	return policy.GuardStatus{Active: true, Baseline: 2, Switches: 12, Policy: 12345.67, Rewards: 123456,
		Baselines: []policy.BaselineStatus{{Accion: 0, Value: 12345.67, Diff: -12345.67, SE: se}, {Accion: 2, Value: 12345.67, Diff: -12345.67}},
		Gate: &policy.GateStatus{State: "probando", Diff: -12345.67, SE: se, N: 123456,
			Bands: []policy.GateBandStatus{band("0-1"), band("2-7"), band("8-25"), band("26+")}}}
}

// TestAdminTextFitsHundredColumns: admin evaluate's and admin tenant
// show's text stays within 100 columns with four-digit amounts, a
// coupon's name in a policy and every setting at a wide value. The
// evaluation table ran to 120 columns, the gate's band lines to 122 and
// the settings line to 106.
func TestAdminTextFitsHundredColumns(t *testing.T) {
	est := ope.Estimate{Value: 1234.56, Lo: -1234.56, Hi: 12345.67, StdErr: 1}
	pv := func(name string) engine.PolicyValue {
		return engine.PolicyValue{Policy: name, IPS: est, SNIPS: est, DR: est, ESS: 123456, MaxWeight: 1234.5}
	}
	ev := &engine.Evaluation{Tenant: "tenant-with-a-long-id-0123456789", Campana: "navidad-2026", PoliticaVersion: "v123456-20270106T165833",
		Records: 123456, Excluded: map[string]int{"reward_not_final": 123456, "fallback": 12, "unconfirmed": 1234},
		Policies: []engine.PolicyValue{pv("current_policy"), pv("never_send"), pv("always_1_10% en abarrotes"), pv("always_2_$30 en tu próxima compra")},
		Logged:   engine.MeasuredValue{N: 123456, Mean: 1234.56, Lo: 1200.12, Hi: 1300.12}, Control: engine.MeasuredValue{N: 1234, Mean: 1234.56, Lo: 1200.12, Hi: 1300.12},
		Guard: fullGuard()}
	var b strings.Builder
	if err := printEvaluation(&b, ev); err != nil {
		t.Fatal(err)
	}
	g := fullGuard()
	tv := tenantView{Tenant: ev.Tenant, Settings: settingsView{Shadow: true, Paused: true, RewardWindow: "365d", RewardGrace: "30d", ControlShare: 0.125,
		ControlKind: "regla_actual", QuotaDecisionsDay: 1_000_000_000, QuotaEventsDay: 1_000_000_000, OptoutPenaltyMXN: 123456.78, RateLimits: true},
		Usage: map[string]any{"policy_version": ev.PoliticaVersion}, Guard: &g, Warnings: []string{}}
	if err := printTenant(&b, tv); err != nil {
		t.Fatal(err)
	}
	var long []string
	for line := range strings.Lines(b.String()) {
		if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > 100 {
			long = append(long, fmt.Sprintf("%d: %s", n, line))
		}
	}
	if len(long) > 0 {
		t.Errorf("lines over 100 columns:\n%s\nin:\n%s", strings.Join(long, ""), b.String())
	}
}

// TestEvaluationEmptyStatesInWords: with nothing to evaluate, no reward
// learned and no decision tested by the gate, admin evaluate says so in
// words; it printed a table of n/a, "learned policy 0.00 MXN" and
// "choice − never-send +0.00 MXN (SE n/a) over 0", which read as
// estimates of 0.
func TestEvaluationEmptyStatesInWords(t *testing.T) {
	nan := math.NaN()
	none := ope.Estimate{Value: nan, Lo: nan, Hi: nan, StdErr: nan}
	ev := &engine.Evaluation{Tenant: "acme", PoliticaVersion: "v0-prior", Excluded: map[string]int{},
		Policies: []engine.PolicyValue{{Policy: "current_policy", IPS: none, SNIPS: none, DR: none, ESS: nan, MaxWeight: nan}},
		Logged:   engine.MeasuredValue{Mean: nan, Lo: nan, Hi: nan}, Control: engine.MeasuredValue{Mean: nan, Lo: nan, Hi: nan},
		Guard: policy.GuardStatus{Baselines: []policy.BaselineStatus{}, Gate: &policy.GateStatus{State: "probando",
			Bands: []policy.GateBandStatus{{Tickets: "0-1", State: "probando", Sending: 0.5}}}}}
	var b strings.Builder
	if err := printEvaluation(&b, ev); err != nil {
		t.Fatal(err)
	}
	want := `tenant acme  campana (all)  records 0
politica_version v0-prior
no decision to evaluate yet: none is confirmed ejecutada with its reward final outside the control group
logged behaviour (measured): n/a  n=0
control group (measured):    n/a  n=0
policy guard: inactive  switches 0
  learned policy: no estimate yet (no reward of a live decision folded; shadow decisions teach the model, not the guard)
send gate: probando  no decision tested against never-send yet
  BAND  TICKETS A YEAR  STATE     SENDS  CHOICE − NEVER-SEND (MXN)  SE  EFFECTIVE DECISIONS
  0     0-1             probando  50 %   none tested yet
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printEvaluation (-want +got):\n%s", diff)
	}
}

// TestEvaluationOfAShadowTenantPointsToTheShadowReport: a tenant with
// only shadow decisions has nothing to evaluate; admin evaluate says
// where they are compared instead of leaving "none is confirmed
// ejecutada" (they all may be) unexplained.
func TestEvaluationOfAShadowTenantPointsToTheShadowReport(t *testing.T) {
	nan := math.NaN()
	none := ope.Estimate{Value: nan, Lo: nan, Hi: nan, StdErr: nan}
	ev := &engine.Evaluation{Tenant: "acme", PoliticaVersion: "v0-prior", Excluded: map[string]int{"shadow": 400},
		Policies: []engine.PolicyValue{{Policy: "current_policy", IPS: none, SNIPS: none, DR: none, ESS: nan, MaxWeight: nan}},
		Logged:   engine.MeasuredValue{Mean: nan, Lo: nan, Hi: nan}, Control: engine.MeasuredValue{Mean: nan, Lo: nan, Hi: nan}}
	var b strings.Builder
	if err := printEvaluation(&b, ev); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(b.String(), "\n")[2:5]
	want := []string{
		"left out: shadow 400",
		"no decision to evaluate yet: none is confirmed ejecutada with its reward final outside the control group",
		"(shadow decisions are left out: admin shadow report compares them with your rule)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("printEvaluation (-want +got):\n%s", diff)
	}
}

// TestShadowTextFitsHundredColumns: admin shadow report's text stays within
// 100 columns with five-digit amounts and a reason that is long: the value
// line ran to about 105 columns and the reasons to 130.
func TestShadowTextFitsHundredColumns(t *testing.T) {
	mv := engine.MeasuredValue{N: 123456, Mean: -12345.67, Lo: -23456.78, Hi: 12345.67}
	rep := &engine.ShadowReport{Tenant: "tenant-with-a-long-id-0123456789", Decisions: 123456, Confirmed: 123456, ConfirmedShare: 1,
		CouponsReceived: 123456, CouponsLabelled: 123456, LabelledShare: 1, Agreement: 0.5, Compared: 123456, RewardsFinal: 123456,
		CallerRule: mv, Engine: mv, Lift: mv, Verdict: "not ready to leave shadow mode",
		Reasons: []string{"the engine's estimated value -12345.67 MXN does not beat the caller's rule -12345.67 MXN (difference -12345.67 MXN, 95% interval [-23456.78, 12345.67])"}}
	var b strings.Builder
	printShadow(&b, rep)
	var long []string
	for line := range strings.Lines(b.String()) {
		if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > 100 {
			long = append(long, fmt.Sprintf("%d: %s", n, line))
		}
	}
	if len(long) > 0 {
		t.Errorf("lines over 100 columns:\n%s\nin:\n%s", strings.Join(long, ""), b.String())
	}
	if !strings.Contains(b.String(), "12345.67])\n") {
		t.Errorf("the reason lost its end when wrapped:\n%s", b.String())
	}
}

// TestShadowTextCounts: the shadow report's counts read as English for
// one as for many ("1 shadow decision", not "1 shadow decisions").
func TestShadowTextCounts(t *testing.T) {
	for _, tc := range []struct {
		decisions, damaged, rewards int
		want                        []string
	}{
		{1, 1, 1, []string{
			"tenant acme: 1 shadow decision",
			"1 decision record that did not decode, skipped (admin check lists them)",
			"value per decision, MXN with 95% interval, over 1 final reward:",
		}},
		{2, 3, 0, []string{
			"tenant acme: 2 shadow decisions",
			"3 decision records that did not decode, skipped (admin check lists them)",
			"value per decision, MXN with 95% interval, over 0 final rewards:",
		}},
	} {
		rep := &engine.ShadowReport{Tenant: "acme", Decisions: tc.decisions, Damaged: tc.damaged, RewardsFinal: tc.rewards}
		var b strings.Builder
		printShadow(&b, rep)
		var got []string
		for line := range strings.Lines(b.String()) {
			if strings.HasPrefix(line, "tenant ") || strings.Contains(line, "did not decode") || strings.HasPrefix(line, "value per decision") {
				got = append(got, strings.TrimSuffix(line, "\n"))
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%d decisions, %d damaged, %d rewards (-want +got):\n%s", tc.decisions, tc.damaged, tc.rewards, diff)
		}
	}
}

// TestWrapText: words are kept whole, continuation lines indented, and a
// word longer than the width stands alone.
func TestWrapText(t *testing.T) {
	for _, tc := range []struct {
		prefix, s string
		width     int
		want      string
	}{
		{"  - ", "a b c", 100, "  - a b c\n"},
		{"v: ", "aaa bbb ccc", 8, "v: aaa\n  bbb\n  ccc\n"},
		{"v: ", "aaaaaaaaaaaa b", 8, "v: aaaaaaaaaaaa\n  b\n"},
		{"v: ", "", 8, "v: \n"},
	} {
		if got := wrapText(tc.prefix, tc.s, tc.width, "  "); got != tc.want {
			t.Errorf("wrapText(%q, %q, %d) = %q, want %q", tc.prefix, tc.s, tc.width, got, tc.want)
		}
	}
}

// TestPrintEstimatesTenantText: a catalog nombre is the tenant's free text
// (a newline and a tab are accepted by the API, a right-to-left override too)
// and reaches admin evaluate's table inside a policy's name; it is printed
// quoted with escapes, one row per estimator as for any other name, so that
// it can neither break the table nor pass for lines of the report.
func TestPrintEstimatesTenantText(t *testing.T) {
	est := ope.Estimate{Value: 1.5, Lo: 1, Hi: 2}
	var policies []engine.PolicyValue
	for _, name := range []string{"always_1_10% en abarrotes é", "always_2_dos\nnever_send\t27", "always_3_\u202eabc"} {
		policies = append(policies, engine.PolicyValue{Policy: name, ESS: 27, MaxWeight: 1, IPS: est, SNIPS: est, DR: est})
	}
	var b strings.Builder
	printEstimates(&b, policies)
	want := `estimates in MXN of reward per decision over the reward window:
POLICY                          ESS  MAX WEIGHT  ESTIMATOR  VALUE  95% INTERVAL
always_1_10% en abarrotes é     27   1.0         IPS        1.50   [1.00, 2.00]
                                                 SNIPS      1.50   [1.00, 2.00]
                                                 DR         1.50   [1.00, 2.00]
"always_2_dos\nnever_send\t27"  27   1.0         IPS        1.50   [1.00, 2.00]
                                                 SNIPS      1.50   [1.00, 2.00]
                                                 DR         1.50   [1.00, 2.00]
"always_3_\u202eabc"            27   1.0         IPS        1.50   [1.00, 2.00]
                                                 SNIPS      1.50   [1.00, 2.00]
                                                 DR         1.50   [1.00, 2.00]
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printEstimates (-want +got):\n%s", diff)
	}
}

// TestEvaluateSaysUnknownCampana: --campana naming no campaign of the
// tenant, and no decision, says so and to check the id: a typo read only
// "no decision to evaluate yet", as a defined campaign still waiting for
// its rewards does. A defined campaign, with decisions (camp1, the batch
// job of completedJob) or none yet (quiet), and every campaign get no such
// line.
func TestEvaluateSaysUnknownCampana(t *testing.T) {
	dir := t.TempDir()
	completedJob(t, dir)
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.engine.Campaigns.PutCampaign("acme", engine.Campaign{ID: "quiet", Canal: "push", Descripcion: "d"}, time.Now())
	e.close()
	if err != nil {
		t.Fatal(err)
	}
	const note = "is defined for tenant acme and no decision names it"
	for campana, want := range map[string]bool{"camp1": false, "quiet": false, "": false, "camp2": true} {
		args := []string{"admin", "evaluate", "--tenant", "acme"}
		if campana != "" {
			args = append(args, "--campana", campana)
		}
		if out := string(runIn(t, dir, args...)); strings.Contains(out, note) != want {
			t.Errorf("--campana %q: says %q: %v, want %v:\n%s", campana, note, !want, want, out)
		}
	}
}
