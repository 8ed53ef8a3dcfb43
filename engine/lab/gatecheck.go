package lab

import (
	"math"

	"github.com/coupond/coupond/engine"
	pol "github.com/coupond/coupond/policy"
)

// GateCheck sets one of the engine's send-gate tests beside the world's
// truth at a week's end: Test ± SE over N effective decisions is what the
// engine measured (policy.GateStatus, MXN per decision whose choice was a
// coupon: sending the choice against never-send); Truth is the true
// effect of those same choices, weighted as the test weighs them (by the
// choice's probability, or under GateControlWeight by the smaller of it
// and never-send's, fading with GateHalfLife windows). Band is
// "todas" for the test over all customers, else the band's tickets.
// Judged: N reaches the run's GuardMinN, the least the gate acts on.
// TruthOpens: judged, and the truth is the run's GateZ standard errors of
// the test above 0, so a test that read the truth exactly would open the
// band (without it, no test of these choices at this noise could).
type GateCheck struct {
	Band       string  `json:"banda"`
	Truth      float64 `json:"verdad_mxn"`
	Test       float64 `json:"prueba_mxn"`
	SE         float64 `json:"error_estandar_mxn"` // −1: not yet estimable
	N          float64 `json:"decisiones_efectivas"`
	Judged     bool    `json:"juzgable"`
	TruthOpens bool    `json:"la_verdad_abriria"`
}

// gateTruth accumulates the true effect of the gate's choices, over all
// customers (index 0) and per frequency band (1 + policy.GateBand), as the
// gate's tests accumulate their estimates.
type gateTruth struct {
	halfLife       float64 // windows
	minN           float64 // GuardMinN: the least evidence the gate acts on
	z              float64 // GateZ: the bar a band's test opens at
	controlWeight  bool    // GateControlWeight: the tests weigh min(choice, never-send)
	sum, w         []float64
	weekSum, weekW []float64
}

func newGateTruth(cfg pol.Config) *gateTruth {
	n := 1 + pol.GateBands
	return &gateTruth{halfLife: cfg.GateHalfLife, minN: cfg.GuardMinN, z: cfg.GateZ, controlWeight: cfg.GateControlWeight,
		sum: make([]float64, n), w: make([]float64, n), weekSum: make([]float64, n), weekW: make([]float64, n)}
}

// observe adds a decision executed as drawn: where its logged choice
// (Eleccion) was a coupon, the probability-weighted true effect of the
// choice group (the coupons drawn with the choice's probability: top-two
// ties) against never-send, weighted as the gate's benefit tests weigh the
// decision (policy.Model.observeGate): by the group's probability, or
// under GateControlWeight by the smaller of it and never-send's (an open
// band's decisions, sent at 0.9, weigh never-send's 0.1). effect(id) is
// action id's true effect for the decision's customer.
func (g *gateTruth) observe(rec *engine.DecisionRecord, effect func(id int) float64) {
	if rec.Eleccion == nil || *rec.Eleccion == 0 || rec.EnControl || len(rec.Probs) != len(rec.Candidates) {
		return
	}
	p, p0 := -1.0, 0.0
	for j, id := range rec.Candidates {
		switch id {
		case *rec.Eleccion:
			p = rec.Probs[j]
		case 0:
			p0 = rec.Probs[j]
		}
	}
	if !(p > 0) {
		return
	}
	var mass, te float64
	for j, id := range rec.Candidates {
		if id != 0 && math.Abs(rec.Probs[j]-p) <= 1e-9*p {
			mass += rec.Probs[j]
			te += rec.Probs[j] * effect(id)
		}
	}
	w := mass
	if g.controlWeight {
		w = min(mass, p0)
	}
	if w <= 0 {
		return // the test adds no evidence either
	}
	for _, i := range []int{0, 1 + pol.GateBand(rec.X)} {
		g.weekSum[i] += w * te / mass
		g.weekW[i] += w
	}
}

// closeWeek fades the evidence by one window, adds the week's and returns
// the checks against st's tests (nil without a gate); a test or band
// without truth yet is left out.
func (g *gateTruth) closeWeek(st *pol.GateStatus) []GateCheck {
	f := 1.0 // the gate's tests do not fade without a half-life
	if g.halfLife > 0 {
		f = math.Exp2(-1 / g.halfLife)
	}
	for i := range g.sum {
		g.sum[i] = g.sum[i]*f + g.weekSum[i]
		g.w[i] = g.w[i]*f + g.weekW[i]
		g.weekSum[i], g.weekW[i] = 0, 0
	}
	if st == nil {
		return nil
	}
	var out []GateCheck
	add := func(i int, band string, test float64, sp *float64, n float64) {
		se := -1.0 // GateCheck.SE: −1 while the test cannot estimate it
		if sp != nil {
			se = *sp
		}
		if i < len(g.w) && g.w[i] > 0 {
			c := GateCheck{Band: band, Truth: g.sum[i] / g.w[i], Test: test, SE: se, N: n, Judged: n >= g.minN}
			c.TruthOpens = c.Judged && se > 0 && c.Truth-g.z*se > 0
			out = append(out, c)
		}
	}
	add(0, "todas", st.Diff, st.SE, st.N)
	for b, bs := range st.Bands {
		add(1+b, bs.Tickets, bs.Diff, bs.SE, bs.N)
	}
	return out
}
