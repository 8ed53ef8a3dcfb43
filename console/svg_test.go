package console

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	for _, want := range []string{"\u2068one record\u2069: 3.00 MXN [n/a, n/a]", "\u2068full\u2069: 1.00 MXN [0.50, 1.50]"} {
		if !strings.Contains(got, want) {
			t.Errorf("the plot lacks %q:\n%s", want, got)
		}
	}
}

// isolatedBidi reports whether every bidi control in page sits inside a
// <bdi> element or between FSI and PDI, so that it cannot reorder the
// console's own text around it.
func isolatedBidi(page string) bool {
	for i, r := range page {
		if !strings.ContainsRune("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u200e\u200f\u061c", r) {
			continue
		}
		before := page[:i]
		inBDI := strings.LastIndex(before, "<bdi>") > strings.LastIndex(before, "</bdi>")
		inFSI := strings.LastIndex(before, "\u2068") > strings.LastIndex(before, "\u2069")
		if !inBDI && !inFSI {
			return false
		}
	}
	return true
}

// TestIntervalPlotIsolatesNames: an action name from the tenant's catalog
// with a right-to-left override cannot reverse the figures that follow it
// in the hover text.
func TestIntervalPlotIsolatesNames(t *testing.T) {
	got := string(intervalPlot("t", []estimate{{Name: "best single: 1_\u202ediez", Value: 3, Lo: 1, Hi: 5}}))
	if !isolatedBidi(got) {
		t.Errorf("a bidi control in a name is not isolated:\n%+q", got)
	}
}

// TestIntervalPlotClipsLongNames: a name longer than the plot's label
// space (an action's nombre may have 256 characters) is clipped with an
// ellipsis where it is drawn, so it does not run off the plot's left edge,
// and given whole in its hover text.
func TestIntervalPlotClipsLongNames(t *testing.T) {
	long := "best single: 7_" + strings.Repeat("ñ", 241)
	got := string(intervalPlot("t", []estimate{{Name: long, Value: 3, Lo: 1, Hi: 5}, {Name: "never send", Value: 0, Lo: 0, Hi: 0}}))
	drawn := regexp.MustCompile(`<text class="name"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(got, -1)
	var names []string
	for _, m := range drawn {
		names = append(names, m[1])
	}
	want := []string{"\u2068best single: 7_" + strings.Repeat("ñ", 14) + "…\u2069", "\u2068never send\u2069"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("drawn names (-want +got):\n%s", diff)
	}
	if !strings.Contains(got, "<title>\u2068"+long+"\u2069: 3.00 MXN") {
		t.Errorf("the hover text lacks the whole name:\n%s", got)
	}
}

// TestLinePlotNumbersKeepZeroShares: a share plot's numbers list every
// hour that has a share, 0 % included (5 decisions, none confirmed, is the
// console's red alarm), and only hours without one are left out; a plot
// of counts over many hours still lists only its non-zero hours.
func TestLinePlotNumbersKeepZeroShares(t *testing.T) {
	pts := make([]point, 48)
	for i := range pts {
		pts[i] = point{Label: "h" + strings.Repeat("i", i)}
	}
	pts[46] = point{Label: "zero", Value: 0, OK: true}
	pts[47] = point{Label: "half", Value: 0.5, OK: true}
	got := linePlot("t", pts, "%.2f", 1, 0.95).Rows
	want := []point{pts[46], pts[47]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("share plot numbers (-want +got):\n%s", diff)
	}
	counts := make([]point, 48)
	for i := range counts {
		counts[i] = point{Label: "c", OK: true}
	}
	counts[47] = point{Label: "five", Value: 5, OK: true}
	if diff := cmp.Diff([]point{counts[47]}, barPlot("t", counts, "%.0f", 0).Rows); diff != "" {
		t.Errorf("count plot numbers (-want +got):\n%s", diff)
	}
}
