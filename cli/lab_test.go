package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/engine/lab"
	"github.com/coupond/coupond/policy"
)

func TestSummarizeRuns(t *testing.T) {
	rep := func(seed uint64, e, top, g, eps float64) *lab.Report {
		return &lab.Report{Config: lab.Config{Seed: seed}, UpliftCapture: e, TopCapture: top, GreedyCapture: g, EpsCapture: eps}
	}
	got := summarizeRuns([]*lab.Report{rep(1, 0.6, 0.7, 0.5, 0.4), rep(2, 0.8, 0.9, 0.9, 0.6)})
	sd := math.Sqrt(0.02) / math.Sqrt(2) // two values 0.2 apart
	want := runsSummary{
		Runs:      []runCaptures{{1, 0.6, 0.7, 0.5, 0.4}, {2, 0.8, 0.9, 0.9, 0.6}},
		Mean:      runCaptures{Engine: 0.7, Top: 0.8, Greedy: 0.7, Eps: 0.5},
		StdErr:    runCaptures{Engine: sd, Top: sd, Greedy: math.Sqrt(0.08) / math.Sqrt(2), Eps: sd},
		BeatsBoth: 1,
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
}

// TestLabRunsCommand runs two tiny labs through the command and checks the
// summary names both seeds and averages their captures.
func TestLabRunsCommand(t *testing.T) {
	cmd := newLabCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--customers", "150", "--weeks", "3", "--seed", "7", "--runs", "2", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var s runsSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(s.Runs) != 2 || s.Runs[0].Seed != 7 || s.Runs[1].Seed != 8 {
		t.Fatalf("runs %+v, want seeds 7 and 8", s.Runs)
	}
	if want := (s.Runs[0].Engine + s.Runs[1].Engine) / 2; math.Abs(s.Mean.Engine-want) > 1e-12 {
		t.Errorf("mean engine capture %v, want %v", s.Mean.Engine, want)
	}
	cmd = newLabCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--runs", "2", "--plot", "x.svg"})
	if err := cmd.Execute(); err == nil {
		t.Error("--runs with --plot accepted")
	}
}

// TestLabWorldsCommand runs two tiny worlds through --worlds and checks
// the seeds, the JSON summary against the worlds' own figures, and that
// the table prints a row per world and the summary.
func TestLabWorldsCommand(t *testing.T) {
	var out bytes.Buffer
	cmd := newLabCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--worlds", "2", "--seeds", "tune", "--customers", "200", "--weeks", "3", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var got struct {
		SeedBase uint64 `json:"seed_base"`
		Worlds   []struct {
			Family struct{ Seed uint64 } `json:"family"`
			Pass   bool                  `json:"pass"`
		} `json:"worlds"`
		Summary struct {
			Worlds int `json:"worlds"`
			Pass   int `json:"engine_pass"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got.SeedBase != lab.TuneSeedBase || len(got.Worlds) != 2 || got.Worlds[1].Family.Seed != lab.TuneSeedBase+1 {
		t.Fatalf("seed base %d, worlds %+v: want tune seeds 1 and 2", got.SeedBase, got.Worlds)
	}
	pass := 0
	for _, w := range got.Worlds {
		if w.Pass {
			pass++
		}
	}
	if got.Summary.Worlds != 2 || got.Summary.Pass != pass {
		t.Errorf("summary %+v, want 2 worlds and %d passing", got.Summary, pass)
	}

	out.Reset()
	cmd = newLabCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--worlds", "1", "--seed", "1001", "--customers", "200", "--weeks", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"seeds 1001..1001", "\n1001 ", "median capture", "engine above never-send in", "engine's money: mean capture", "over the whole run, testing weeks included"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	cmd = newLabCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--worlds", "1", "--seeds", "other"})
	if err := cmd.Execute(); err == nil {
		t.Error("--seeds other accepted")
	}
	cmd = newLabCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--worlds", "1", "--scenario", "drift"})
	if err := cmd.Execute(); err == nil {
		t.Error("--worlds with --scenario accepted")
	}
}

// TestLabModelFlag: --model zrule runs the worlds with the send rule before
// the gate (the engine's figures differ from the default model's on the
// same seed), an unknown model and --model without --worlds are refused.
func TestLabModelFlag(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newLabCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	tiny := []string{"--worlds", "1", "--seeds", "tune", "--customers", "300", "--weeks", "4", "--json"}
	engineWeeks := func(doc string) string {
		var got struct {
			Worlds []struct {
				Weeks []struct {
					Engine float64 `json:"engine"`
				} `json:"weeks"`
			} `json:"worlds"`
		}
		if err := json.Unmarshal([]byte(doc), &got); err != nil || len(got.Worlds) != 1 {
			t.Fatalf("%v: %s", err, doc)
		}
		b, _ := json.Marshal(got.Worlds[0].Weeks)
		return string(b)
	}
	regression, err := run(tiny...)
	if err != nil {
		t.Fatal(err)
	}
	zrule, err := run(append(tiny, "--model", "zrule")...)
	if err != nil {
		t.Fatal(err)
	}
	if engineWeeks(regression) == engineWeeks(zrule) {
		t.Error("--model zrule: the engine's weeks are the default model's")
	}
	for _, args := range [][]string{append(tiny, "--model", "cells"), {"--model", "zrule"}} {
		if _, err := run(args...); err == nil || !strings.Contains(err.Error(), "--model") {
			t.Errorf("%v: error %v, want one naming --model", args, err)
		}
	}
}

// TestSetPolicyFields checks --set: fields by name, values by kind, and
// an error naming what is wrong.
func TestSetPolicyFields(t *testing.T) {
	for _, tc := range []struct {
		spec, err string
		want      func(*policy.Config)
	}{
		{spec: "", want: func(*policy.Config) {}},
		{spec: "NeverShare=0.2, GateZ=1.5", want: func(c *policy.Config) { c.NeverShare, c.GateZ = 0.2, 1.5 }},
		{spec: "TieTopTwo=false", want: func(c *policy.Config) { c.TieTopTwo = false }},
		{spec: "Nope=1", err: `--set: "Nope=1" is not Field=value with a field of policy.Config`},
		{spec: "GateZ", err: `--set: "GateZ" is not Field=value with a field of policy.Config`},
		{spec: "GateZ=x", err: `--set: GateZ="x": strconv.ParseFloat: parsing "x": invalid syntax`},
		{spec: "GateZ=NaN", err: `--set: GateZ="NaN": not finite`},
	} {
		got, want := policy.DefaultConfig(), policy.DefaultConfig()
		err := setPolicyFields(&got, tc.spec)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %s", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		tc.want(&want)
		if d := cmp.Diff(want, got, cmpopts.EquateNaNs()); d != "" {
			t.Errorf("%q (-want +got):\n%s", tc.spec, d)
		}
	}
}

// TestSetFlagRepeats checks that --set given more than once keeps every
// change, in order (a plain string flag would keep only the last).
func TestSetFlagRepeats(t *testing.T) {
	cmd := newLabCmd()
	if err := cmd.ParseFlags([]string{"--set", "GateZ=-10", "--set", "GuardZ=1,GateZ=3"}); err != nil {
		t.Fatal(err)
	}
	specs, err := cmd.Flags().GetStringArray("set")
	if err != nil {
		t.Fatal(err)
	}
	mw := manyWorldsFlags{set: specs}
	got, err := mw.policyConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got.GateZ != 3 || got.GuardZ != 1 {
		t.Errorf("--set twice: GateZ %v GuardZ %v, want 3 and 1", got.GateZ, got.GuardZ)
	}
}

// TestLabShowsGate runs a tiny single world and checks that every week
// shows the send gate (four frequency bands) and the guard, in the JSON
// and in the table.
func TestLabShowsGate(t *testing.T) {
	args := []string{"--customers", "150", "--weeks", "2", "--seed", "7"}
	var rep lab.Report
	out := runLab(t, append(args, "--json"))
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if n := strings.Count(r.Gate, "q="); n != policy.GateBands || r.Guard == "" {
			t.Errorf("week %d: gate %q (%d bands, want %d), guard %q", r.Week, r.Gate, n, policy.GateBands, r.Guard)
		}
	}
	text := string(runLab(t, args))
	if !strings.Contains(text, "send gate at each week's end") || !strings.Contains(text, "    2  "+rep.Rows[1].Gate) {
		t.Errorf("the table does not show the gate:\n%s", text)
	}
}

func runLab(t *testing.T, args []string) []byte {
	t.Helper()
	cmd := newLabCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{}) // the worlds' progress
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestLabCompareCommand compares two tiny many-worlds runs: a run against
// itself moves nothing; against a probe it prints the paired lines; files
// that are not worlds, or other seeds, are refused.
func TestLabCompareCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, args ...string) string {
		path := filepath.Join(dir, name)
		out := runLab(t, append([]string{"--worlds", "2", "--seeds", "tune", "--customers", "200", "--weeks", "3", "--json"}, args...))
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a, b := write("a.json"), write("b.json", "--set", "GateQ0=0.9")
	other := filepath.Join(dir, "other.json")
	os.WriteFile(other, runLab(t, []string{"--worlds", "2", "--seed", "5", "--customers", "200", "--weeks", "3", "--json"}), 0o600)

	var c lab.Comparison
	if err := json.Unmarshal(runLab(t, []string{"compare", a, a, "--json"}), &c); err != nil {
		t.Fatal(err)
	}
	if c.Worlds != 2 || c.CaptureDiff != 0 || c.WholeDiff != 0 || len(c.Changed) != 0 || c.PassA != c.PassB {
		t.Errorf("a run against itself: %+v", c)
	}
	text := string(runLab(t, []string{"compare", a, b}))
	for _, want := range []string{"2 worlds paired by seed", "last third, capture", "whole run, gain over never-send: B - A", "passes "} {
		if !strings.Contains(text, want) {
			t.Errorf("comparison lacks %q:\n%s", want, text)
		}
	}
	for _, args := range [][]string{{"compare", a, other}, {"compare", a, filepath.Join(dir, "none.json")}, {"compare", a}} {
		cmd := newLabCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestLabRefusesBadSizes: a size out of range is an error naming its flag
// (it used to run the default world without a word).
func TestLabRefusesBadSizes(t *testing.T) {
	for _, args := range [][]string{
		{"--customers", "0"}, {"--customers", "-5"}, {"--weeks", "0"}, {"--runs", "0"},
		{"--worlds", "-1"}, {"--worlds", "2", "--parallel", "0"},
	} {
		_, _, err := runCLI(t, append([]string{"lab"}, args...)...)
		flag := args[len(args)-2]
		if err == nil || !strings.Contains(err.Error(), flag+": want at least") {
			t.Errorf("lab %v: %v; want an error naming %s", args, err, flag)
		}
	}
}

// TestLabCompareRefusesMalformedFiles: a file that is not a many-worlds
// output (missing, a directory, empty, not JSON, no worlds, a world that
// is null) is an error naming the file, never a panic: a null world was
// dereferenced.
func TestLabCompareRefusesMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, path := range []string{
		filepath.Join(dir, "none.json"), dir, file("empty.json", ""), file("text.json", "worlds"), file("array.json", "[]"),
		file("null.json", "null"), file("noworlds.json", `{"worlds":[]}`), file("nullworld.json", `{"worlds":[null]}`),
		file("nullworld2.json", `{"seed_base":1,"worlds":[{"family":{"seed":1}},null]}`),
	} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			_, _, err := runCLI(t, "lab", "compare", path, path)
			if err == nil || ExitCode(err) == 0 || !strings.Contains(err.Error(), path) {
				t.Errorf("lab compare %s: %v, want an error naming the file", path, err)
			}
		})
	}
}

// TestLabRefusesHugeSizes: a size beyond what the lab can run is an error
// naming its flag, before anything runs: --customers and --worlds of 2⁶²
// panicked allocating, a huge --parallel started that many goroutines and
// --weeks or --runs in the millions ran for days.
func TestLabRefusesHugeSizes(t *testing.T) {
	const huge = "4611686018427387904"
	for _, args := range [][]string{
		{"--customers", huge}, {"--customers", "1000001"}, {"--weeks", "521"}, {"--runs", "10001"},
		{"--worlds", huge, "--customers", "10", "--weeks", "1"}, {"--worlds", "1", "--parallel", "10000", "--customers", "10", "--weeks", "1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Run(ctx, append([]string{"lab"}, args...), nil, io.Discard, io.Discard)
			flag := args[0]
			if strings.Contains(strings.Join(args, " "), "--parallel") {
				flag = "--parallel"
			}
			if err == nil || !strings.Contains(err.Error(), flag+": want at most") {
				t.Errorf("lab %v: %v; want an error naming %s", args, err, flag)
			}
		})
	}
}

// TestLabRedrawFailures: --redraw-failures N draws every failing world, and
// only those, again under the N outcome streams after the run's own, and
// each capture is the one --outcomes gives that world alone.
func TestLabRedrawFailures(t *testing.T) {
	tiny := []string{"--seeds", "tune", "--customers", "150", "--weeks", "3", "--json"}
	type doc struct {
		Worlds []struct {
			Family  struct{ Seed uint64 }
			Pass    bool
			Capture struct {
				Engine float64 `json:"engine"`
			} `json:"capture"`
		} `json:"worlds"`
		Redraws []redraw `json:"redraws"`
	}
	var got doc
	if err := json.Unmarshal(runLab(t, append([]string{"--worlds", "3", "--redraw-failures", "2"}, tiny...)), &got); err != nil {
		t.Fatal(err)
	}
	var failing, redrawn []uint64
	for _, w := range got.Worlds {
		if !w.Pass {
			failing = append(failing, w.Family.Seed)
		}
	}
	for _, rd := range got.Redraws {
		redrawn = append(redrawn, rd.Seed)
		if diff := cmp.Diff([]uint64{1, 2}, rd.Streams); diff != "" {
			t.Errorf("world %d: streams (-want +got):\n%s", rd.Seed, diff)
		}
	}
	if len(failing) == 0 {
		t.Fatal("no tiny world fails: the test has nothing to redraw")
	}
	if diff := cmp.Diff(failing, redrawn); diff != "" {
		t.Errorf("worlds redrawn (-failing +redrawn):\n%s", diff)
	}
	rd := got.Redraws[0]
	var alone doc
	seed := strconv.FormatUint(rd.Seed, 10)
	if err := json.Unmarshal(runLab(t, append([]string{"--worlds", "1", "--seed", seed, "--outcomes", "2"}, tiny...)), &alone); err != nil {
		t.Fatal(err)
	}
	if c := alone.Worlds[0].Capture.Engine; c != rd.Captures[1] {
		t.Errorf("world %d under stream 2: capture %v alone, %v redrawn", rd.Seed, c, rd.Captures[1])
	}
}
