package lab

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestCompare pairs hand-made worlds: the capture difference over the
// worlds not flat, the whole run's (which counts the first week), the
// counts and the worlds that moved.
func TestCompare(t *testing.T) {
	// world builds a three-week world earning first in week 1, then
	// engine in weeks 2–3, never-send 5 every week, capture capture.
	world := func(seed uint64, first, engine, capture float64, flat, pass bool) *WorldReport {
		wk := func(e float64) WorldWeek { return WorldWeek{Engine: e, Never: 5, Oracle: 10} }
		return &WorldReport{Family: Family{Seed: seed}, Weeks: []WorldWeek{wk(first), wk(engine), wk(engine)},
			Capture: Captures{Engine: capture}, Flat: flat, Pass: pass}
	}
	a := []*WorldReport{world(1, 5, 6, 0.2, false, true), world(2, 5, 5, 0, false, true), world(3, 5, 5, -3, false, false), world(4, 5, 5.05, 0, true, true)}
	b := []*WorldReport{world(1, 2, 6, 0.2, false, true), world(2, 5, 5.5, 0.1, false, true), world(3, 5, 5, -0.04, false, true), world(4, 5, 4.9, 0, true, false)}
	// One coupon row in world 1's last week: the model 2 MXN low in A,
	// 0.5 in B (the other worlds have none).
	a[0].Weeks[2].Coupons = []CouponWeek{{TrueEffect: 3, ModelEffect: 1, Candidates: 10}}
	b[0].Weeks[2].Coupons = []CouponWeek{{TrueEffect: 3, ModelEffect: 2.5, Candidates: 10}}
	// World 2 separable: stuck at never-send in A, without a check whose
	// truth would open; above it in B.
	a[1].Separable, b[1].Separable = true, true
	got, err := Compare(a, b)
	if err != nil {
		t.Fatal(err)
	}
	// Whole run (15 MXN of never-send per world): A gains 2, 0, 0, 0.1;
	// B −1 (its costly first week), 1, 0, −0.2. Captures clipped at −1:
	// differences 0, +0.1, +0.96 over the three worlds not flat.
	mc, sc := MeanSE([]float64{0, 0.1, 0.96})
	mw, sw := MeanSE([]float64{-3.0 / 15, 1.0 / 15, 0, -0.3 / 15})
	want := Comparison{Worlds: 4, CaptureWorlds: 3, CaptureDiff: mc, CaptureSE: sc, Better: 2, Worse: 0,
		WholeDiff: mw, WholeSE: sw, WholeMedianA: 0.05 / 15, WholeMedianB: -0.1 / 15,
		PassA: 3, PassB: 3, AboveNeverA: 2, AboveNeverB: 2,
		// The summary's: medians of the captures not flat (A 0.2, 0, −3;
		// B 0.2, 0.1, −0.04); greedy earns 0, below every engine.
		MedianA: 0, MedianB: 0.1, AboveGreedyA: 4, AboveGreedyB: 4,
		EffectBiasA: -2, EffectBiasB: -0.5,
		StuckA: 1, UnopenableA: 1,
		Changed: []WorldChange{
			{Seed: 2, CaptureA: 0, CaptureB: 0.1, WholeA: 0, WholeB: 1.0 / 15, PassA: true, PassB: true},
			{Seed: 3, CaptureA: -3, CaptureB: -0.04, WholeA: 0, WholeB: 0, PassA: false, PassB: true},
			{Seed: 4, Flat: true, WholeA: 0.1 / 15, WholeB: -0.2 / 15, PassA: true, PassB: false},
		}}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("comparison (-want +got):\n%s", d)
	}
	if _, err := Compare(a, b[:3]); err == nil {
		t.Error("different numbers of worlds compared")
	}
	b[2].Family.Seed = 9
	if _, err := Compare(a, b); err == nil {
		t.Error("different seeds compared")
	}
}

// TestCapturesJSON: a capture written as null (NaN) reads back as NaN,
// the others as written.
func TestCapturesJSON(t *testing.T) {
	var c Captures
	if err := json.Unmarshal([]byte(`{"engine":0.25,"reference":null,"greedy":-1}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Engine != 0.25 || !math.IsNaN(c.Reference) || c.Greedy != -1 || !math.IsNaN(c.ObsOracle) {
		t.Errorf("read %+v", c)
	}
	if err := json.Unmarshal([]byte(`{"engine":"x"}`), &c); err == nil {
		t.Error("a string read as a capture")
	}
}
