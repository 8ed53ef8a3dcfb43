package ope

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestTQuantile checks the Cornish–Fisher quantile of Student's t against
// exact values (R's qt) over the degrees of freedom moderate gives (≥ 20).
func TestTQuantile(t *testing.T) {
	tests := []struct{ p, df, want float64 }{
		{0.975, 20, 2.085963},
		{0.975, 25, 2.059539},
		{0.975, 50, 2.008559},
		{0.975, 1000, 1.962339},
		{0.95, 20, 1.724718},
		{0.995, 20, 2.845340},
		{0.025, 20, -2.085963},
	}
	var got, want []float64
	for _, tt := range tests {
		got, want = append(got, tQuantile(tt.p, tt.df)), append(want, tt.want)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-5)); diff != "" {
		t.Errorf("tQuantile (-exact +got):\n%s", diff)
	}
}
