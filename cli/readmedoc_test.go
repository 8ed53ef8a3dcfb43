package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/golden"
)

const policyDocPath = "../policy/POLICY.md"

// freshSet is one row of POLICY.md §9: a `coupond lab --worlds 30` run on
// seeds nobody tuned on, each figure for coupond [0] and the reference
// regression [1].
type freshSet struct {
	seeds, customers string
	pass, above      [2]int
	median, obs      [2]float64 // median capture; median capture of the observable oracle
	worst            [2]float64 // worst world over the last third, % of never-send's margin
}

// parseFreshSets reads the rows between POLICY.md's fresh-sets markers,
// leaving out the report seeds (every change was checked on them).
func parseFreshSets(t *testing.T, doc string) []freshSet {
	t.Helper()
	_, table, _ := between(t, doc, "<!-- fresh-sets:begin -->", "<!-- fresh-sets:end -->")
	var sets []freshSet
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 7 || cells[0] == "seeds" || strings.HasPrefix(cells[0], "---") || strings.Contains(cells[0], "report seeds") {
			continue
		}
		var s freshSet
		s.seeds, s.customers = cells[0], cells[1]
		s.pass = pairInts(t, cells[2])
		s.above = pairInts(t, cells[3])
		s.median = pairFloats(t, cells[4])
		obs, _, _ := strings.Cut(cells[5], " (")
		s.obs = pairFloats(t, obs)
		s.worst = pairFloats(t, strings.ReplaceAll(cells[6], " %", ""))
		sets = append(sets, s)
	}
	return sets
}

func pairInts(t *testing.T, cell string) [2]int {
	f := pairFloats(t, cell)
	return [2]int{int(f[0]), int(f[1])}
}

// pairFloats reads "a / b", with the typographic minus.
func pairFloats(t *testing.T, cell string) [2]float64 {
	t.Helper()
	a, b, ok := strings.Cut(cell, " / ")
	if !ok {
		t.Fatalf("POLICY.md §9: cell %q is not \"coupond / reference\"", cell)
	}
	var out [2]float64
	for i, s := range []string{a, b} {
		v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), "−", "-"), 64)
		if err != nil {
			t.Fatalf("POLICY.md §9: cell %q: %v", cell, err)
		}
		out[i] = v
	}
	return out
}

// medianOf is the median (the mean of the middle two for an even count).
func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// num formats v with prec decimals and the typographic minus, never "−0".
func num(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-")
	}
	return strings.ReplaceAll(s, "-", "−")
}

// spread is "median (lowest, highest)" of one figure over the sets.
func spread(sets []freshSet, who, prec int, get func(freshSet) [2]float64) string {
	v := make([]float64, len(sets))
	for i, s := range sets {
		v[i] = get(s)[who]
	}
	return fmt.Sprintf("%s (%s, %s)", num(medianOf(v), prec), num(slices.Min(v), prec), num(slices.Max(v), prec))
}

// readmeSizes are the retailer sizes of the README's learning totals.
var readmeSizes = []string{"2,000–3,000", "5,000"}

// learningTotals renders the README's table of totals over the fresh sets,
// one column a size of retailer (each with at least one set), each cell
// coupond / the regression.
func learningTotals(sets []freshSet, sizes []string) string {
	bySize := map[string][]freshSet{}
	for _, s := range sets {
		bySize[s.customers] = append(bySize[s.customers], s)
	}
	head := "| coupond / the regression, over the last third of 12 weeks |"
	rule := "|---|"
	rows := []string{
		"| worlds that pass (capture ≥ −0.05; a flat world within 2 % of never-send) |",
		"| worlds above never-send |",
		"| a set's median capture: the median set (lowest, highest) |",
		"| a set's median capture of the observable oracle: the median set (lowest, highest) |",
		"| a set's worst world, of never-send's margin: the median set (the worst) |",
	}
	for _, size := range sizes {
		ss := bySize[size]
		worlds := 30 * len(ss)
		head += fmt.Sprintf(" %s customers: %d sets, %d worlds |", size, len(ss), worlds)
		rule += "---:|"
		var pass, above [2]int
		for _, s := range ss {
			for who := range 2 {
				pass[who] += s.pass[who]
				above[who] += s.above[who]
			}
		}
		pct := func(n int) string { return num(100*float64(n)/float64(worlds), 0) + " %" }
		rows[0] += fmt.Sprintf(" %d (%s) / %d (%s) |", pass[0], pct(pass[0]), pass[1], pct(pass[1]))
		rows[1] += fmt.Sprintf(" %d (%s) / %d (%s) |", above[0], pct(above[0]), above[1], pct(above[1]))
		med := func(s freshSet) [2]float64 { return s.median }
		obs := func(s freshSet) [2]float64 { return s.obs }
		rows[2] += fmt.Sprintf(" %s / %s |", spread(ss, 0, 3, med), spread(ss, 1, 3, med))
		rows[3] += fmt.Sprintf(" %s / %s |", spread(ss, 0, 2, obs), spread(ss, 1, 2, obs))
		var worst [2][]float64
		for _, s := range ss {
			for who := range 2 {
				worst[who] = append(worst[who], s.worst[who])
			}
		}
		w := func(who int) string {
			return fmt.Sprintf("%s %% (%s %%)", num(medianOf(worst[who]), 1), num(slices.Min(worst[who]), 1))
		}
		rows[4] += fmt.Sprintf(" %s / %s |", w(0), w(1))
	}
	return strings.Join(append([]string{head, rule}, rows...), "\n") + "\n"
}

// TestREADMELearningTotals: the README's table of how well coupond learns
// is the totals of POLICY.md §9's rows, computed, not typed. -update
// rewrites it after a row is added there.
func TestREADMELearningTotals(t *testing.T) {
	doc, err := os.ReadFile(policyDocPath)
	if err != nil {
		t.Fatal(err)
	}
	sets := parseFreshSets(t, string(doc))
	if len(sets) < 40 {
		t.Fatalf("POLICY.md §9 has %d fresh sets; the markers or the table's shape moved", len(sets))
	}
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	want := learningTotals(sets, readmeSizes)
	before, inside, after := between(t, string(data), "<!-- learning-totals:begin -->", "<!-- learning-totals:end -->")
	if inside == want {
		return
	}
	if golden.Updating() {
		if err := os.WriteFile(readmePath, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's learning totals differ from POLICY.md §9 (-README +computed); run go test ./cli -run TestREADMELearningTotals -update:\n%s",
		cmp.Diff(inside, want))
}

// TestLearningTotalsArithmetic: the totals of two made-up sets, by hand.
func TestLearningTotalsArithmetic(t *testing.T) {
	sets := []freshSet{
		{customers: "5,000", pass: [2]int{30, 10}, above: [2]int{5, 6}, median: [2]float64{-0.0004, 0.2}, obs: [2]float64{0.1, 0.3}, worst: [2]float64{-0.2, -9}},
		{customers: "5,000", pass: [2]int{29, 20}, above: [2]int{7, 8}, median: [2]float64{0.01, -0.1}, obs: [2]float64{0.3, 0.5}, worst: [2]float64{-1.1, -20}},
	}
	got := strings.Split(learningTotals(sets, []string{"5,000"}), "\n")
	want := []string{
		"| worlds that pass (capture ≥ −0.05; a flat world within 2 % of never-send) | 59 (98 %) / 30 (50 %) |",
		"| worlds above never-send | 12 (20 %) / 14 (23 %) |",
		"| a set's median capture: the median set (lowest, highest) | 0.005 (0.000, 0.010) / 0.050 (−0.100, 0.200) |",
		"| a set's median capture of the observable oracle: the median set (lowest, highest) | 0.20 (0.10, 0.30) / 0.40 (0.30, 0.50) |",
		"| a set's worst world, of never-send's margin: the median set (the worst) | −0.7 % (−1.1 %) / −14.5 % (−20.0 %) |",
	}
	if diff := cmp.Diff(want, got[2:7]); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces as
// hyphens, every character but letters, digits, '-' and '_' dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestREADMELinksResolve: every link to a heading of the README
// ("](#…)") names one of its headings, and every link to a file of the
// repository names a file that exists.
func TestREADMELinksResolve(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if h := strings.TrimLeft(line, "#"); !fenced && h != line && strings.HasPrefix(h, " ") {
			anchors[githubAnchor(strings.TrimSpace(h))] = true
		}
	}
	var bad []string
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(data), -1) {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				bad = append(bad, target)
			}
		case !strings.Contains(target, "://"):
			path, _, _ := strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(path))); err != nil {
				bad = append(bad, target)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("README.md links to headings or files that do not exist: %q", bad)
	}
}
