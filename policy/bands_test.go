package policy

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRareBandsFeatures: with Config.RareBands ψ's lower frequency bin is
// "at most one ticket in 365 days"; without, frecuencia_90d below 0.25.
func TestRareBandsFeatures(t *testing.T) {
	scale := func(n, c float64) float64 { return math.Log1p(n) / math.Log1p(c) }
	cases := []struct {
		name      string
		t90, t365 float64 // tickets in 90 and 365 days
		rare      bool
		want      [2]float64
	}{
		{"none, main bins", 0, 0, false, [2]float64{1, 0}},
		{"many, main bins", 60, 200, false, [2]float64{0, 1}},
		{"two, main bins", 2, 2, false, [2]float64{1, 0}},
		{"none", 0, 0, true, [2]float64{1, 0}},
		{"one", 0, 1, true, [2]float64{1, 0}},
		{"two in 90 days", 2, 2, true, [2]float64{0, 0}},
		{"many", 60, 200, true, [2]float64{0, 1}},
	}
	for _, tc := range cases {
		x := make([]float64, VectorLen)
		x[0], x[xFreq90], x[xFreq365] = 1, scale(tc.t90, 90), scale(tc.t365, 365)
		c := Customer{X: x}
		var phi [dimBase]float64
		var psi [dimEffect]float64
		baseFeatures(&c, &phi)
		effectFeatures(&c, &Arm{ID: 1}, &phi, &psi, tc.rare)
		if d := cmp.Diff(tc.want, [2]float64{psi[11], psi[12]}); d != "" {
			t.Errorf("%s: bins (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestPooledSendRule: with Config.PooledSend a coupon whose pooled effect
// clears PoolZ standard errors is sent although its own deviation is too
// uncertain for the per-customer bound, a significant negative deviation
// stops it, and an insignificant one does not.
func TestPooledSendRule(t *testing.T) {
	cfg := ZRuleConfig()
	cfg.PooledSend = true
	m := New(cfg)
	cases := []struct {
		name                string
		pool, poolSD        float64
		dev, devSD          float64
		pooled, perCustomer bool // safe with PooledSend, and with main's rule
	}{
		{"pooled clear, deviation noise", 500, 200, -300, 1000, true, false},
		{"pooled clear, deviation significantly negative", 500, 200, -2500, 1000, false, false},
		{"pooled unclear, deviation significantly positive", 100, 200, 1300, 1000, true, false},
		{"pooled below zero", -100, 50, 0, 10, false, false},
	}
	for _, tc := range cases {
		s := Score{ID: 1, pool: tc.pool, poolVar: tc.poolSD * tc.poolSD, dev: tc.dev, own: tc.devSD * tc.devSD,
			Effect: tc.pool + tc.dev, Sigma: math.Hypot(tc.poolSD, tc.devSD)}
		m.cfg.PooledSend = true
		got := m.safe(&s, m.cfg.Z)
		m.cfg.PooledSend = false
		gotMain := m.safe(&s, m.cfg.Z)
		if got != tc.pooled || gotMain != tc.perCustomer {
			t.Errorf("%s: safe %v (main rule %v), want %v (%v)", tc.name, got, gotMain, tc.pooled, tc.perCustomer)
		}
	}
}
