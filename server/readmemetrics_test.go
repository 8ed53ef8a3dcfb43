package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readmeMetrics returns the README's "Metrics and alerts" text: from its
// heading to the next section.
func readmeMetrics(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, s, ok := strings.Cut(string(data), "\n### Metrics and alerts\n")
	if !ok {
		t.Fatal(`README.md has no "### Metrics and alerts" section`)
	}
	s, _, _ = strings.Cut(s, "\n### Operator console\n")
	return s
}

var (
	readmeSeriesRE = regexp.MustCompile("`(coupond_[a-z_]+)(?:\\{([a-z_,]*)\\})?`")
	servedSampleRE = regexp.MustCompile(`^(coupond_[a-z_]+?)(_bucket|_sum|_count)?(?:\{(.*)\})? `)
	labelNameRE    = regexp.MustCompile(`([a-z_]+)="`)
)

// servedSeries returns each coupond_ family of a /metrics text with its
// label names (sorted; a histogram's le left out).
func servedSeries(text string) map[string][]string {
	types := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[1] == "TYPE" && strings.HasPrefix(f[2], "coupond_") {
			types[f[2]] = f[3]
		}
	}
	out := map[string][]string{}
	for name := range types {
		out[name] = []string{}
	}
	for _, l := range strings.Split(text, "\n") {
		m := servedSampleRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[1]
		if _, ok := types[name]; !ok || (m[2] != "" && types[name] != "histogram") {
			name += m[2]
		}
		for _, lm := range labelNameRE.FindAllStringSubmatch(m[3], -1) {
			if lm[1] != "le" && !slices.Contains(out[name], lm[1]) {
				out[name] = append(out[name], lm[1])
			}
		}
		sort.Strings(out[name])
	}
	return out
}

// TestREADMEMetrics: every coupond_ series /metrics serves is in the
// README's "Metrics and alerts" section with the labels it carries, every
// series the section names is served, and the section's example rules
// load in promtool.
func TestREADMEMetrics(t *testing.T) {
	h := newHarness(t)
	_, text := businessRun(t, h)
	served := servedSeries(text)
	section := readmeMetrics(t)

	documented := map[string][]string{}
	for _, m := range readmeSeriesRE.FindAllStringSubmatch(section, -1) {
		labels := []string{}
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		sort.Strings(labels)
		if prev, ok := documented[m[1]]; ok && len(prev) >= len(labels) {
			continue // named again without its labels
		}
		documented[m[1]] = labels
	}
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("README's metrics (+) against /metrics (-):\n%s", diff)
	}

	_, example, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("the README's metrics section has no yaml example")
	}
	example, _, _ = strings.Cut(example, "```")
	file := filepath.Join(t.TempDir(), "rules.yml")
	group := "groups:\n  - name: readme\n    rules:\n" + indent(example, "      ")
	if err := os.WriteFile(file, []byte(group), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the README's example: %v\n%s", err, out)
	}
	for _, name := range regexp.MustCompile(`coupond_[a-z_]+`).FindAllString(example, -1) {
		if _, ok := served[name]; !ok {
			t.Errorf("the README's example rules name %s, which /metrics does not serve", name)
		}
	}
}

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}
