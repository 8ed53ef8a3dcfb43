package console

import (
	"math"
	"strings"
	"testing"
)

// TestIntervalPlotWithoutAnInterval: an estimate with no interval (one
// record, or the measured mean of one decision) or no finite value at all
// is drawn as such; its hover text says n/a, never NaN or Inf, and no
// coordinate is infinite.
func TestIntervalPlotWithoutAnInterval(t *testing.T) {
	nan := math.NaN()
	got := string(intervalPlot("t", []estimate{
		{Name: "one record", Value: 3, Lo: nan, Hi: nan},
		{Name: "none", Value: nan, Lo: nan, Hi: nan},
		{Name: "infinite", Value: math.Inf(1), Lo: math.Inf(-1), Hi: math.Inf(1)},
		{Name: "full", Value: 1, Lo: 0.5, Hi: 1.5},
	}))
	for _, bad := range []string{"NaN", "Inf"} {
		if strings.Contains(got, bad) {
			t.Errorf("the plot shows %s:\n%s", bad, got)
		}
	}
	for _, want := range []string{"one record: 3.00 MXN [n/a, n/a]", "full: 1.00 MXN [0.50, 1.50]"} {
		if !strings.Contains(got, want) {
			t.Errorf("the plot lacks %q:\n%s", want, got)
		}
	}
}
