package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
)

// The served document as integrators' tools see it: kin-openapi (the Go
// validator most gateways and oapi-codegen use) must accept it, every
// example must satisfy its schema under JSON Schema 2020-12, and
// oapi-codegen's default output must compile.

// kinLoad loads data with kin-openapi and validates it as a document.
func kinLoad(t *testing.T, data []byte) (*openapi3.T, error) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background(), openapi3.EnableExamplesValidation())
}

// TestOpenAPIKinOpenAPI: kin-openapi accepts the served document, and
// refuses it once an example breaks its schema (so the check can fail).
func TestOpenAPIKinOpenAPI(t *testing.T) {
	doc, err := kinLoad(t, openAPIDoc)
	if err != nil {
		t.Fatalf("kin-openapi refuses the served document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || len(doc.Webhooks) == 0 {
		t.Errorf("kin-openapi sees version %s and %d webhooks; want 3.1 with the lote.completado webhook", doc.OpenAPI, len(doc.Webhooks))
	}

	broken := bytes.Replace(openAPIDoc, []byte(`"campana_id": "navidad-2026",`), []byte(`"campana_id": 7,`), 1)
	if bytes.Equal(broken, openAPIDoc) {
		t.Fatal("the negative control found no example to break")
	}
	if _, err := kinLoad(t, broken); err == nil {
		t.Error("kin-openapi accepts an example whose campana_id is a number")
	}
}

// TestOpenAPIExamplesKin validates every example of every media type and
// parameter (paths, webhooks, components) against its schema with
// kin-openapi's JSON Schema 2020-12 validator, independently of the
// document-level check and of this package's own validator.
func TestOpenAPIExamplesKin(t *testing.T) {
	doc, err := kinLoad(t, openAPIDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	check := func(where string, s *openapi3.SchemaRef, v any) {
		if s == nil || s.Value == nil {
			t.Errorf("%s: example without a schema", where)
			return
		}
		n++
		if err := s.Value.VisitJSON(jsonRoundTrip(t, v), openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
			t.Errorf("%s: example breaks its schema: %v", where, err)
		}
	}
	media := func(where string, c openapi3.Content) {
		for mt, m := range c {
			if m.Example != nil {
				check(where+" "+mt, m.Schema, m.Example)
			}
			for name, ex := range m.Examples {
				if ex.Value != nil {
					check(where+" "+mt+" example "+name, m.Schema, ex.Value.Value)
				}
			}
		}
	}
	ops := func(prefix string, items map[string]*openapi3.PathItem) {
		for p, item := range items {
			for method, op := range item.Operations() {
				where := prefix + method + " " + p
				if op.RequestBody != nil && op.RequestBody.Value != nil {
					media(where+" request", op.RequestBody.Value.Content)
				}
				for code, r := range op.Responses.Map() {
					if r.Value != nil {
						media(where+" "+code, r.Value.Content)
					}
				}
				for _, prm := range op.Parameters {
					if prm.Value != nil && prm.Value.Example != nil {
						check(where+" parameter "+prm.Value.Name, prm.Value.Schema, prm.Value.Example)
					}
				}
			}
		}
	}
	ops("", doc.Paths.Map())
	ops("webhook ", doc.Webhooks)
	for name, r := range doc.Components.Responses {
		media("components.responses."+name, r.Value.Content)
	}
	for name, s := range doc.Components.Schemas {
		for i, ex := range s.Value.Examples {
			check("components.schemas."+name+" example "+string(rune('0'+i)), s, ex)
		}
		if s.Value.Example != nil {
			check("components.schemas."+name, s, s.Value.Example)
		}
	}
	if n < 20 {
		t.Errorf("only %d examples checked: the walk misses some", n)
	}
}

// jsonRoundTrip gives v the shapes a JSON decoder gives (float64 numbers,
// map[string]any), which the validator expects.
func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// oapiRuntimeVersion is the github.com/oapi-codegen/runtime the generated
// client imports; the temporary module below requires it.
const oapiRuntimeVersion = "v1.8.0"

// TestOpenAPICodegen runs oapi-codegen (pinned in go.mod's tool block) on
// the served document with its default generation (models and client) and
// builds the result in a temporary module that shares the module cache. It
// takes about 10 s with a warm cache (the tool's first build is longer).
func TestOpenAPICodegen(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on the PATH: %v", err)
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(spec, openAPIDoc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "package: coupondapi\ngenerate:\n  models: true\n  client: true\noutput: " + filepath.Join(dir, "api.gen.go") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "cfg.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(wd string, env []string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	start := time.Now()
	// In this module's directory, "go tool" runs the pinned version.
	run(".", nil, "tool", "oapi-codegen", "-config", filepath.Join(dir, "cfg.yaml"), spec)
	gen, err := os.ReadFile(filepath.Join(dir, "api.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type LoteCompletadoJSONRequestBody", "type ErrorToken struct", "type Decision struct", "func (c *Client) Decisiones("} {
		if !bytes.Contains(gen, []byte(want)) {
			t.Errorf("generated code lacks %q", want)
		}
	}
	// Amounts are float64 in the generated types: a bare "number" became
	// float32, which rounds 1234567.89 MXN to 1234567.875.
	if i := bytes.Index(gen, []byte("float32")); i >= 0 {
		t.Errorf("generated code has a float32 (money rounded to 7 digits): %q", gen[max(i-80, 0):i+7])
	}
	if !bytes.Contains(gen, []byte("CostoEnvioMxn float64")) {
		t.Error("generated catalog lacks CostoEnvioMxn float64")
	}
	gomod := "module coupondapi\n\ngo 1.24\n\nrequire github.com/oapi-codegen/runtime " + oapiRuntimeVersion + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(spec)
	run(dir, []string{"GOFLAGS=-mod=mod", "GOWORK=off"}, "build", "./...")
	t.Logf("oapi-codegen and go build: %s", time.Since(start).Round(time.Millisecond))
}

// schemaTypeFaults lists, by JSON pointer, the schemas of v (the document
// or a part of it, at) that stock generators cannot type: an integer
// without format int32 or int64 (Java and C# generators read it as a 32-bit
// int, which a count or cap over 2^31-1 the server sends overflows), a
// number without format double (float32 in oapi-codegen), and a const or
// enum without a type (an untyped Object field, or an error, in
// openapi-generator and openapi-generator-plus). Examples and x- extensions
// are data, not schemas, and are skipped.
func schemaTypeFaults(v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case obj:
		var types []string // none for a properties map with a member "type"
		switch ty := v["type"].(type) {
		case string:
			types = []string{ty}
		case []any:
			types = strs(ty)
		}
		f, _ := v["format"].(string)
		if slices.Contains(types, "integer") && f != "int32" && f != "int64" {
			out = append(out, at+": integer without format int32 or int64")
		}
		if slices.Contains(types, "number") && f != "double" {
			out = append(out, at+": number without format double")
		}
		_, hasConst := v["const"]
		_, hasEnum := v["enum"]
		if (hasConst || hasEnum) && v["type"] == nil {
			out = append(out, at+": const or enum without type")
		}
		for _, k := range keysOf(v) {
			if k == "example" || k == "examples" || strings.HasPrefix(k, "x-") {
				continue
			}
			out = append(out, schemaTypeFaults(v[k], at+"/"+strings.ReplaceAll(k, "/", "~1"))...)
		}
	case []any:
		for i, c := range v {
			out = append(out, schemaTypeFaults(c, at+"/"+strconv.Itoa(i))...)
		}
	}
	return out
}

// TestOpenAPITypedForGenerators: every schema of the served document
// carries what generators for Java, C#, Python and TypeScript need to pick
// a type that holds every value the server sends (schemaTypeFaults), and
// the check finds each fault it looks for.
func TestOpenAPITypedForGenerators(t *testing.T) {
	if faults := schemaTypeFaults(loadOpenAPI(t), "#"); len(faults) > 0 {
		t.Errorf("%d schemas stock generators mistype:\n%s", len(faults), strings.Join(faults, "\n"))
	}
	for _, c := range []struct {
		name string
		s    obj
		want []string
	}{
		{"integer", obj{"type": "integer"}, []string{"#: integer without format int32 or int64"}},
		{"nullable integer", obj{"type": []any{"integer", "null"}, "format": "int8"}, []string{"#: integer without format int32 or int64"}},
		{"number", obj{"properties": obj{"a": obj{"type": "number"}}}, []string{"#/properties/a: number without format double"}},
		{"const", obj{"properties": obj{"todos": obj{"const": true}}}, []string{"#/properties/todos: const or enum without type"}},
		{"property named type", obj{"properties": obj{"type": obj{"type": "string", "enum": []any{"a"}}}}, nil},
		{"example and extension", obj{"examples": []any{obj{"enum": 1}}, "x-n": obj{"type": "integer"}}, nil},
		{"typed", obj{"type": "integer", "format": "int64", "const": 900}, nil},
	} {
		if diff := cmp.Diff(c.want, schemaTypeFaults(c.s, "#")); diff != "" {
			t.Errorf("%s: faults (-want +got):\n%s", c.name, diff)
		}
	}
}
