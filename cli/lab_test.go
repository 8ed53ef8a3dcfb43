package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/engine/lab"
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
