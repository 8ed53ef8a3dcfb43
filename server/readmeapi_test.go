package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readmeTable returns the rows of the README's table between the lines
// <!-- name:begin --> and <!-- name:end -->, each as its cells (header and
// separator rows left out).
func readmeTable(t *testing.T, name string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, s, ok := strings.Cut(string(data), "<!-- "+name+":begin -->\n")
	s, _, ok2 := strings.Cut(s, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatalf("README.md lacks <!-- %s:begin --> … <!-- %s:end -->", name, name)
	}
	var rows [][]string
	for i, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if i < 2 { // the header and its separator
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	return rows
}

var backticked = regexp.MustCompile("`([^`]*)`")

// readmeRoutes reads the README's routes table as "METHOD /path" → the
// scope its second cell names ("" for none). A cell such as
// "`GET`, `PUT /v1/x`" names both methods of /v1/x, and a bare "`/path`"
// after a route takes that route's methods.
func readmeRoutes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, row := range readmeTable(t, "routes") {
		if len(row) != 3 {
			t.Fatalf("README routes row %q: want 3 cells", row)
		}
		scope := ""
		if m := backticked.FindStringSubmatch(row[1]); m != nil && strings.Contains(m[1], ":") {
			scope = m[1]
		}
		var pending, last []string
		for _, m := range backticked.FindAllStringSubmatch(row[0], -1) {
			method, path, _ := strings.Cut(m[1], " ")
			if strings.HasPrefix(method, "/") {
				method, path = "", method
			}
			if method != "" {
				pending = append(pending, method)
			}
			if path == "" {
				continue
			}
			if len(pending) > 0 {
				last, pending = pending, nil
			}
			for _, meth := range last {
				out[meth+" "+path] = scope
			}
		}
	}
	return out
}

// servedRoutes reads the OpenAPI document's routes as "METHOD /path" →
// the scope its x-scopes names ("" for none).
func servedRoutes(t *testing.T, doc map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for path, ops := range doc["paths"].(map[string]any) {
		for method, op := range ops.(map[string]any) {
			o, ok := op.(map[string]any)
			if !ok || o["operationId"] == nil {
				continue
			}
			scope := ""
			if s, _ := o["x-scopes"].([]any); len(s) == 1 {
				scope = s[0].(string)
			} else if len(s) > 1 {
				t.Fatalf("%s %s needs %d scopes: the README's table names one", method, path, len(s))
			}
			out[strings.ToUpper(method)+" "+path] = scope
		}
	}
	return out
}

// TestREADMEAPIReference: the README's routes table names every route of
// the OpenAPI document with the scope it needs, and no other; its error
// table names every codigo of x-error-codes with its statuses; and its
// Events bullet names every event tipo the document defines.
func TestREADMEAPIReference(t *testing.T) {
	raw, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(servedRoutes(t, doc), readmeRoutes(t)); diff != "" {
		t.Errorf("README routes table against the OpenAPI document (-served +README):\n%s", diff)
	}

	served := map[string][]int{}
	for _, c := range doc["x-error-codes"].([]any) {
		c := c.(map[string]any)
		statuses := []int{}
		for _, s := range c["status"].([]any) {
			statuses = append(statuses, int(s.(float64)))
		}
		slices.Sort(statuses)
		served[c["codigo"].(string)] = statuses
	}
	readme := map[string][]int{}
	for _, row := range readmeTable(t, "codes") {
		statuses := []int{}
		for _, f := range strings.Split(row[1], ", ") {
			if n, err := strconv.Atoi(f); err == nil {
				statuses = append(statuses, n)
			}
		}
		slices.Sort(statuses)
		readme[strings.Trim(row[0], "`")] = statuses
	}
	if diff := cmp.Diff(served, readme); diff != "" {
		t.Errorf("README error codes table against x-error-codes (-served +README):\n%s", diff)
	}

	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, events, _ := strings.Cut(string(data), "- **Events.**")
	events, _, _ = strings.Cut(events, "\n- **")
	for name := range doc["components"].(map[string]any)["schemas"].(map[string]any) {
		if tipo, ok := strings.CutPrefix(name, "Evento_"); ok && !strings.Contains(events, "`"+tipo+"`") {
			t.Errorf("README's Events bullet does not name the event tipo %s", tipo)
		}
	}
}
