// Package golden compares what tests produce with the golden files under
// the repository's top-level testdata/ directory, and rewrites them when the
// tests run with -update (go test ./... -update). Tests only: nothing in the
// product imports it.
//
// JSON goldens are compared as values (cmp.Diff), after the volatile
// members (ids, times, trace ids) are replaced by placeholders, so a golden
// states what a user sees without the noise of one run.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests produce")

// Updating reports whether the tests run with -update.
func Updating() bool { return *update }

// Path is the path of the golden file name under the top-level testdata/.
func Path(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", filepath.FromSlash(name))
}

// Text compares got with the golden file name byte for byte, or rewrites
// the file with -update.
func Text(t testing.TB, name string, got []byte) {
	t.Helper()
	if write(t, name, got) {
		return
	}
	want := read(t, name)
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("testdata/%s differs (-golden +got); rerun with -update if the change is meant:\n%s", name, diff)
	}
}

// JSON compares the JSON document got with the golden file name as values,
// after replacing the value of every member named in volatile (at any
// depth) by "<name>". With -update it rewrites the file, indented.
func JSON(t testing.TB, name string, got []byte, volatile ...string) {
	t.Helper()
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("%s: the output is not JSON: %v\n%s", name, err, got)
	}
	skip := map[string]bool{}
	for _, k := range volatile {
		skip[k] = true
	}
	v = normalise(v, skip)
	var norm bytes.Buffer
	enc := json.NewEncoder(&norm)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if write(t, name, norm.Bytes()) {
		return
	}
	var want any
	if err := json.Unmarshal(read(t, name), &want); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Errorf("testdata/%s differs (-golden +got); rerun with -update if the change is meant:\n%s", name, diff)
	}
}

func normalise(v any, skip map[string]bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if skip[k] && e != nil {
				x[k] = "<" + k + ">"
				continue
			}
			x[k] = normalise(e, skip)
		}
	case []any:
		for i := range x {
			x[i] = normalise(x[i], skip)
		}
	}
	return v
}

func write(t testing.TB, name string, got []byte) bool {
	t.Helper()
	if !*update {
		return false
	}
	p := Path(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, got) {
		return true
	}
	if err := os.WriteFile(p, got, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(name))
	if err != nil {
		t.Fatalf("golden file: %v (create it with -update)", err)
	}
	return b
}
