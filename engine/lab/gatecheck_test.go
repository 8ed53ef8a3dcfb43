package lab

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/engine"
	pol "github.com/coupond/coupond/policy"
)

// TestGateTruth checks what the truth of the gate's tests counts: only
// decisions whose logged choice was a coupon, outside the control group;
// the choice's tied coupons with their probabilities, weighted by the
// choice's probability; per band and over all customers; evidence fading
// with the gate's half-life; judged only with the run's GuardMinN; the
// truth opening a band only when judged and the run's GateZ standard
// errors above 0.
func TestGateTruth(t *testing.T) {
	cfg := pol.DefaultConfig()
	cfg.GateHalfLife = 1
	cfg.GuardMinN = 130 // the run's own bar decides which checks count
	cfg.GateZ = 3.5     // and its own opening bar
	g := newGateTruth(cfg)
	effect := map[int]float64{1: 10, 2: -2, 3: 4}
	choice := func(id int) *int { return &id }
	rare := []float64{0, 0, 0, 0, 0, 0.05}  // frecuencia_365d: band 0-1
	often := []float64{0, 0, 0, 0, 0, 0.60} // band 26+
	recs := []engine.DecisionRecord{
		// Choice 1 at 0.5, never-send 0.5: counts 10 with weight 0.5.
		{Eleccion: choice(1), Candidates: []int{0, 1, 2}, Probs: []float64{0.5, 0.5, 0}, X: rare},
		// Choices 1 and 3 tied at 0.2 each: (0.2·10 + 0.2·4) with weight 0.4;
		// 2 is exploration and does not count.
		{Eleccion: choice(3), Candidates: []int{0, 1, 2, 3}, Probs: []float64{0.55, 0.2, 0.05, 0.2}, X: often},
		// Never-send chosen, control, and a record without probabilities: none counts.
		{Eleccion: choice(0), Candidates: []int{0, 1}, Probs: []float64{0.9, 0.1}, X: rare},
		{Eleccion: choice(1), Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, X: rare, EnControl: true},
		{Eleccion: choice(1), Candidates: []int{0, 1}, X: rare},
		{Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, X: rare},
	}
	for i := range recs {
		g.observe(&recs[i], func(id int) float64 { return effect[id] })
	}
	st := &pol.GateStatus{Diff: 6, SE: new(2.0), N: 300, Bands: []pol.GateBandStatus{
		{Tickets: "0-1", Diff: 9, SE: new(3.0), N: 150}, {Tickets: "2-7"}, {Tickets: "8-25"}, {Tickets: "26+", Diff: 1, SE: new(2.0), N: 120}}}
	got := g.closeWeek(st)
	all := (0.5*10 + 0.2*10 + 0.2*4) / 0.9
	want := []GateCheck{
		// 8.67 − 3.5·2 > 0: the truth would open; 10 − 3.5·3 < 0: it would not;
		// 26+ is not judged, however large its truth.
		{Band: "todas", Truth: all, Test: 6, SE: 2, N: 300, Judged: true, TruthOpens: true},
		{Band: "0-1", Truth: 10, Test: 9, SE: 3, N: 150, Judged: true},
		{Band: "26+", Truth: 7, Test: 1, SE: 2, N: 120},
	}
	approx := cmpopts.EquateApprox(0, 1e-12)
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Fatalf("first week (-want +got):\n%s", diff)
	}
	// A second week with one decision of effect −2 in band 0-1: last week's
	// weight 0.5 has faded to 0.25 (half-life one window).
	g.observe(&engine.DecisionRecord{Eleccion: choice(2), Candidates: []int{0, 2}, Probs: []float64{0.75, 0.25}, X: rare},
		func(id int) float64 { return effect[id] })
	got = g.closeWeek(st)
	if w := (0.25*10 + 0.25*-2) / 0.5; math.Abs(got[1].Truth-w) > 1e-12 {
		t.Errorf("band 0-1 in the second week: truth %v, want %v", got[1].Truth, w)
	}
	if got := g.closeWeek(nil); got != nil {
		t.Errorf("without a gate: %v, want none", got)
	}
}

// TestGateTruthControlWeight checks that the truth weighs a decision as
// the gate's benefit tests do: under GateControlWeight by the smaller of
// the choice's probability and never-send's, so a decision sent at 0.9
// (an open band) weighs never-send's 0.1; without it, by the choice's.
func TestGateTruthControlWeight(t *testing.T) {
	choice := func(id int) *int { return &id }
	rare := []float64{0, 0, 0, 0, 0, 0.05} // band 0-1
	recs := []engine.DecisionRecord{
		{Eleccion: choice(1), Candidates: []int{0, 1}, Probs: []float64{0.1, 0.9}, X: rare}, // open: effect 10
		{Eleccion: choice(2), Candidates: []int{0, 2}, Probs: []float64{0.7, 0.3}, X: rare}, // testing: effect −2
		{Eleccion: choice(1), Candidates: []int{0, 1}, Probs: []float64{0, 1}, X: rare},     // no never-send: no evidence
	}
	effect := map[int]float64{1: 10, 2: -2}
	for _, tc := range []struct {
		name          string
		controlWeight bool
		want          float64
	}{
		{"control weight", true, (0.1*10 + 0.3*-2) / 0.4},
		{"choice weight", false, (0.9*10 + 0.3*-2 + 1*10) / 2.2},
	} {
		cfg := pol.DefaultConfig()
		cfg.GateControlWeight = tc.controlWeight
		g := newGateTruth(cfg)
		for i := range recs {
			g.observe(&recs[i], func(id int) float64 { return effect[id] })
		}
		got := g.closeWeek(&pol.GateStatus{Bands: []pol.GateBandStatus{{Tickets: "0-1"}}})
		if len(got) != 2 || math.Abs(got[0].Truth-tc.want) > 1e-12 || math.Abs(got[1].Truth-tc.want) > 1e-12 {
			t.Errorf("%s: checks %+v, want truth %v over all and in band 0-1", tc.name, got, tc.want)
		}
	}
}

// TestSeparableStuck checks the summary's count of separable worlds the
// engine does not lift above never-send, and of those where the truth of
// the gate's checks never cleared the opening bar.
func TestSeparableStuck(t *testing.T) {
	mk := func(engine float64, separable bool, checks ...GateCheck) *WorldReport {
		wk := WorldWeek{Engine: engine, Never: 5, Oracle: 10}
		first := wk // the checks in the first week: any week counts
		first.GateChecks = checks
		return &WorldReport{Weeks: []WorldWeek{first, wk, wk}, Separable: separable}
	}
	opens := GateCheck{Truth: 5, SE: 1, N: 200, Judged: true, TruthOpens: true}
	closed := GateCheck{Truth: 1, SE: 1, N: 200, Judged: true}
	s := Summarize([]*WorldReport{
		mk(6, true, closed),  // above never-send: not stuck
		mk(5, true, opens),   // stuck, though the truth would have opened
		mk(4, true, closed),  // stuck, and no test could have opened
		mk(4, true),          // stuck, without any check
		mk(4, false, closed), // not separable
	})
	if s.SeparableStuck != 3 || s.StuckUnopenable != 2 {
		t.Errorf("stuck %d, unopenable %d; want 3 and 2", s.SeparableStuck, s.StuckUnopenable)
	}
}

// TestGateCalibration checks the summary's share within two standard
// errors and mean z, leaving out checks the gate could not act on.
func TestGateCalibration(t *testing.T) {
	rep := &WorldReport{Weeks: []WorldWeek{
		{GateChecks: []GateCheck{{Truth: 1, Test: 2, SE: 1, N: 200, Judged: true}, {Truth: 0, Test: -3, SE: 1, N: 200, Judged: true}}},
		{GateChecks: []GateCheck{{Truth: 5, Test: 50, SE: 1, N: 99}, {Truth: 2, Test: 2, SE: 0.5, N: 100, Judged: true}}},
	}}
	n, within, z := gateCalibration([]*WorldReport{rep})
	if n != 3 || math.Abs(within-2.0/3) > 1e-12 || math.Abs(z-(1-3+0)/3.0) > 1e-12 {
		t.Errorf("got %d checks, %v within, mean z %v; want 3, 2/3, -2/3", n, within, z)
	}
	if n, within, _ := gateCalibration(nil); n != 0 || !math.IsNaN(within) {
		t.Errorf("no checks: %d, %v; want 0, NaN", n, within)
	}
}
