package cli

import (
	"math"
	"testing"

	"github.com/coupond/coupond/engine/ope"
)

// TestInterval: an estimate prints with its interval, without one when its
// spread is unknown, and as n/a when it has no value.
func TestInterval(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		e    ope.Estimate
		want string
	}{
		{ope.Estimate{Value: 1.5, Lo: 1, Hi: 2}, "     1.50 [    1.00,     2.00]"},
		{ope.Estimate{Value: -0.5, Lo: nan, Hi: nan}, "    -0.50 (no interval)       "},
		{ope.Estimate{Value: nan, Lo: nan, Hi: nan}, "n/a"},
	} {
		if got := interval(tc.e); got != tc.want {
			t.Errorf("interval(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
