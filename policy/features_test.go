package policy

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFrequencyBins: ψ's frequency bins (ψ 11 and 12, which the pooled
// coupon effect shares) are frecuencia_90d below 0.25 and at least 0.75.
func TestFrequencyBins(t *testing.T) {
	scale := func(n, c float64) float64 { return math.Log1p(n) / math.Log1p(c) }
	cases := []struct {
		name      string
		t90, t365 float64 // tickets in 90 and 365 days
		want      [2]float64
	}{
		{"none", 0, 0, [2]float64{1, 0}},
		{"two", 2, 2, [2]float64{1, 0}},
		{"twelve", 12, 40, [2]float64{0, 0}},
		{"many", 60, 200, [2]float64{0, 1}},
	}
	for _, tc := range cases {
		x := make([]float64, VectorLen)
		x[0], x[xFreq90], x[xFreq365] = 1, scale(tc.t90, 90), scale(tc.t365, 365)
		c := Customer{X: x}
		var phi [dimBase]float64
		var psi [dimEffect]float64
		baseFeatures(&c, &phi)
		effectFeatures(&c, &Arm{ID: 1}, &phi, &psi)
		if d := cmp.Diff(tc.want, [2]float64{psi[11], psi[12]}); d != "" {
			t.Errorf("%s: bins (-want +got):\n%s", tc.name, d)
		}
	}
}
