package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/golden"
	"github.com/coupond/coupond/store"
)

// TestOpenAPIGolden fails when the committed openapi.json differs from what
// the generator makes of routes(), the handlers' schemas and types. Run
// "go generate ./server/" (or this test with -update) after changing them.
func TestOpenAPIGolden(t *testing.T) {
	got, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	if golden.Updating() {
		if err := os.WriteFile("openapi.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return ls[i]
			}
			return "(end of file)"
		}
		t.Fatalf("server/openapi.json is stale: regenerate it with \"go generate ./server/\".\nfirst difference at line %d:\n  committed: %s\n  generated: %s", i+1, line(wl), line(gl))
	}
	if !bytes.Equal(openAPIDoc, want) {
		t.Fatal("the embedded document differs from openapi.json on disk")
	}
}

// ---- the document as served ----

var (
	servedDocOnce sync.Once
	servedDoc     obj
	servedDocErr  error
)

// loadOpenAPI parses the served (embedded) document, numbers as json.Number.
func loadOpenAPI(tb testing.TB) obj {
	tb.Helper()
	servedDocOnce.Do(func() {
		dec := json.NewDecoder(bytes.NewReader(openAPIDoc))
		dec.UseNumber()
		servedDocErr = dec.Decode(&servedDoc)
	})
	if servedDocErr != nil {
		tb.Fatalf("openapi.json is not JSON: %v", servedDocErr)
	}
	return servedDoc
}

func asObj(v any) obj {
	m, _ := v.(obj)
	return m
}

// operationOf returns the operation of method and httprouter path.
func operationOf(doc obj, method, path string) obj {
	return asObj(asObj(asObj(doc["paths"])[openAPIPath(path)])[strings.ToLower(method)])
}

func strs(v any) []string {
	var out []string
	for _, x := range asSlice(v) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// routeMismatches lists where doc and routes disagree: a route missing from
// the document, an operation no route has, and differences in operation id,
// path parameters, scope, public flag and the pipeline's responses.
func routeMismatches(doc obj, routes []route) []string {
	var out []string
	errf := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	ops := 0
	for _, item := range asObj(doc["paths"]) {
		for m := range asObj(item) {
			if m != "parameters" && m != "summary" && m != "description" {
				ops++
			}
		}
	}
	if ops != len(routes) {
		errf("the document has %d operations, routes() %d", ops, len(routes))
	}
	for _, rt := range routes {
		op := operationOf(doc, rt.method, rt.path)
		if op == nil {
			errf("%s %s (%s): not in the document", rt.method, rt.path, rt.name)
			continue
		}
		if op["operationId"] != rt.name {
			errf("%s %s: operationId %v, route name %s", rt.method, rt.path, op["operationId"], rt.name)
		}
		var declared []string
		for _, p := range asSlice(op["parameters"]) {
			if asObj(p)["in"] == "path" {
				declared = append(declared, asObj(p)["name"].(string))
			}
		}
		if want := pathParams(rt.path); !slices.Equal(declared, want) {
			errf("%s: path parameters %v, route has %v", rt.name, declared, want)
		}
		scopes := strs(op["x-scopes"])
		sec := asSlice(op["security"])
		if rt.public {
			if len(scopes) != 0 {
				errf("%s is public but documents scopes %v", rt.name, scopes)
			}
			if len(sec) > 0 && !slices.ContainsFunc(sec, func(r any) bool { return len(asObj(r)) == 0 }) {
				errf("%s is public but its security %v requires something", rt.name, sec)
			}
			for _, r := range sec {
				if _, ok := asObj(r)["oauth2"]; ok {
					errf("%s is public but its security names oauth2", rt.name)
				}
			}
			continue
		}
		want := []string{}
		if rt.scope != 0 {
			want = []string{rt.scope.String()}
		}
		if !slices.Equal(scopes, want) {
			errf("%s: x-scopes %v, route needs %v", rt.name, scopes, want)
		}
		if len(sec) == 0 {
			errf("%s needs a token but documents no security", rt.name)
		}
		for _, r := range sec {
			if len(asObj(r)) == 0 {
				errf("%s needs a token but its security allows none", rt.name)
			}
			for scheme, sc := range asObj(r) {
				if got := strs(sc); !slices.Equal(got, want) {
					errf("%s: security %s scopes %v, route needs %v", rt.name, scheme, got, want)
				}
			}
		}
		for _, code := range []string{"401", "429", "500", "503"} {
			if asObj(op["responses"])[code] == nil {
				errf("%s: response %s undocumented", rt.name, code)
			}
		}
		if rt.maxBody > 0 {
			if op["requestBody"] == nil {
				errf("%s reads a body but documents none", rt.name)
			}
			for _, code := range []string{"413", "415", "422"} {
				if asObj(op["responses"])[code] == nil {
					errf("%s: response %s undocumented", rt.name, code)
				}
			}
		}
	}
	return out
}

// TestOpenAPIMatchesRoutes checks the served document against routes():
// every route is there with its method, path, parameters, scope and public
// flag, and the document has no other operation. It then checks the flags
// against the server's behaviour: a non-public route refuses a request
// without a token (401) and one whose token lacks the documented scope
// (403); a public route answers without a token.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	routes := (&Server{}).routes()
	for _, e := range routeMismatches(doc, routes) {
		t.Error(e)
	}

	// The check notices drift: a route added, removed or changed.
	at := func(rs []route, name string) *route {
		for i := range rs {
			if rs[i].name == name {
				return &rs[i]
			}
		}
		t.Fatalf("no route %s", name)
		return nil
	}
	drift := map[string]func([]route) []route{
		"added": func(rs []route) []route {
			return append(rs, route{method: "GET", path: "/v1/nuevo", name: "nuevo", scope: scopeEventos, class: classOther})
		},
		"removed":        func(rs []route) []route { return rs[:len(rs)-1] },
		"method changed": func(rs []route) []route { at(rs, "catalogo_put").method = "POST"; return rs },
		"path changed":   func(rs []route) []route { at(rs, "catalogo_put").path += "/x"; return rs },
		"scope changed":  func(rs []route) []route { at(rs, "catalogo_put").scope = scopeWebhooks; return rs },
		"made public":    func(rs []route) []route { r := at(rs, "catalogo_put"); r.public, r.scope = true, 0; return rs },
		"made private": func(rs []route) []route {
			r := at(rs, "healthz")
			r.public, r.scope, r.class = false, scopeEventos, classOther
			return rs
		},
		"renamed":      func(rs []route) []route { at(rs, "campana_get").name = "campana_leer"; return rs },
		"reads a body": func(rs []route) []route { at(rs, "catalogo_get").maxBody = smallBody; return rs },
	}
	for name, mutate := range drift {
		if len(routeMismatches(doc, mutate(slices.Clone(routes)))) == 0 {
			t.Errorf("route %s: not noticed", name)
		}
	}

	// Behaviour.
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	for _, rt := range routes {
		path := examplePath(rt.path)
		if rt.public {
			resp := h.raw(rt.method, path, "", nil)
			resp.Body.Close()
			if resp.StatusCode == 401 || resp.StatusCode == 403 {
				t.Errorf("%s is documented public but answers %d without a token", rt.name, resp.StatusCode)
			}
			continue
		}
		resp := h.raw(rt.method, path, "", nil)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s without a token: %d (WWW-Authenticate %q), want 401", rt.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if rt.scope == 0 {
			continue
		}
		var others []string
		for _, s := range scopeNames {
			if s.bit != rt.scope {
				others = append(others, s.name)
			}
		}
		resp = h.raw(rt.method, path, h.token("acme", others...), nil)
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("%s with every scope but %s: %d, want 403", rt.name, rt.scope, resp.StatusCode)
		}
	}

	// The route serves the committed document.
	resp := h.raw("GET", "/v1/openapi.json", "", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, openAPIDoc) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("GET /v1/openapi.json: %d %q, %d bytes; want the embedded document", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
}

// examplePath fills an httprouter path's parameters with plausible values.
func examplePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "ejemplo-12345678"
		}
	}
	return strings.Join(parts, "/")
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestOpenAPIWellFormed checks the document's structure: version, that every
// $ref resolves, operation ids are unique, path templates and parameters
// agree, security requirements name defined schemes and scopes, every
// response has a description, and every example validates against its
// schema.
func TestOpenAPIWellFormed(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v, want 3.1.0", doc["openapi"])
	}
	if v := asObj(doc["info"])["version"]; v != "1.0.0" {
		t.Errorf("info.version %v, want 1.0.0", v)
	}
	if asObj(doc["info"])["title"] == nil {
		t.Error("info.title missing")
	}

	// Every $ref resolves.
	var walk func(v any, at string)
	refs := 0
	walk = func(v any, at string) {
		switch v := v.(type) {
		case obj:
			if r, ok := v["$ref"].(string); ok {
				refs++
				if _, err := resolvePointer(doc, r); err != nil {
					t.Errorf("%s: $ref %s: %v", at, r, err)
				}
			}
			for k, x := range v {
				walk(x, at+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	if refs < 50 {
		t.Errorf("only %d $refs: the document looks too small", refs)
	}

	comps := asObj(doc["components"])
	schemes := asObj(comps["securitySchemes"])
	oauthScopes := asObj(asObj(asObj(asObj(schemes["oauth2"])["flows"])["clientCredentials"])["scopes"])
	for _, s := range scopeNames {
		if oauthScopes[s.name] == nil {
			t.Errorf("scope %s not in the oauth2 flow", s.name)
		}
	}
	tagNames := map[string]bool{}
	for _, tg := range asSlice(doc["tags"]) {
		tagNames[asObj(tg)["name"].(string)] = true
	}
	ids := map[string]bool{}
	tmpl := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range asObj(doc["paths"]) {
		var want []string
		for _, m := range tmpl.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
		}
		for method, o := range asObj(item) {
			op := asObj(o)
			where := strings.ToUpper(method) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s: operationId %q missing or repeated", where, id)
			}
			ids[id] = true
			if op["summary"] == nil {
				t.Errorf("%s: no summary", where)
			}
			for _, tg := range asSlice(op["tags"]) {
				if !tagNames[tg.(string)] {
					t.Errorf("%s: tag %v undefined", where, tg)
				}
			}
			var got []string
			for _, p := range asSlice(op["parameters"]) {
				p := asObj(p)
				if p["in"] == "path" {
					got = append(got, p["name"].(string))
					if p["required"] != true {
						t.Errorf("%s: path parameter %v not required", where, p["name"])
					}
				}
				if p["schema"] == nil {
					t.Errorf("%s: parameter %v without schema", where, p["name"])
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: path parameters %v, template has %v", where, got, want)
			}
			for _, r := range asSlice(op["security"]) {
				for name, sc := range asObj(r) {
					if schemes[name] == nil {
						t.Errorf("%s: security scheme %s undefined", where, name)
					}
					for _, s := range strs(sc) {
						if oauthScopes[s] == nil {
							t.Errorf("%s: scope %s undefined", where, s)
						}
					}
				}
			}
			resps := asObj(op["responses"])
			if len(resps) == 0 {
				t.Errorf("%s: no responses", where)
			}
			for code, r := range resps {
				rr := asObj(resolveObj(doc, r))
				if rr["description"] == nil {
					t.Errorf("%s: response %s without description", where, code)
				}
				hdrs := asObj(rr["headers"])
				switch code {
				case "429", "503":
					if code == "503" && path == "/readyz" {
						break
					}
					if hdrs["Retry-After"] == nil {
						t.Errorf("%s: response %s without Retry-After", where, code)
					}
				case "401":
					if hdrs["WWW-Authenticate"] == nil {
						t.Errorf("%s: response 401 without WWW-Authenticate", where)
					}
				}
				if hdrs["X-Trace-Id"] == nil {
					t.Errorf("%s: response %s without X-Trace-Id", where, code)
				}
			}
			// Request examples validate against their schemas.
			for ct, mt := range asObj(asObj(op["requestBody"])["content"]) {
				if ct != "application/json" {
					continue
				}
				for name, ex := range mediaExamples(asObj(mt)) {
					for _, e := range validateJSON(doc, asObj(mt)["schema"], ex, "", true) {
						t.Errorf("%s: request example %s: %s", where, name, e)
					}
				}
			}
		}
	}
	// Response examples (error bodies) validate too.
	for name, r := range asObj(comps["responses"]) {
		mt := asObj(asObj(asObj(r)["content"])["application/json"])
		for ex, v := range mediaExamples(mt) {
			for _, e := range validateJSON(doc, mt["schema"], v, "", true) {
				t.Errorf("response %s example %s: %s", name, ex, e)
			}
		}
	}
	for name, s := range asObj(comps["schemas"]) {
		for i, ex := range asSlice(asObj(s)["examples"]) {
			for _, e := range validateJSON(doc, s, ex, "", true) {
				t.Errorf("schema %s example %d: %s", name, i, e)
			}
		}
	}

	// The documented choices are there.
	feats := map[string]bool{}
	for _, f := range asSlice(doc["x-customer-features"]) {
		feats[asObj(f)["name"].(string)] = true
	}
	for _, f := range engine.FeatureDocs() {
		if !feats[f.Name] {
			t.Errorf("feature %s not in x-customer-features", f.Name)
		}
	}
	if s := asObj(doc["x-result-retention"])["seconds"]; fmt.Sprint(s) != strconv.Itoa(int(batch.ResultRetention.Seconds())) {
		t.Errorf("x-result-retention %v, want %v", s, batch.ResultRetention)
	}
	codes := map[string]bool{}
	for _, c := range asSlice(doc["x-error-codes"]) {
		codes[asObj(c)["codigo"].(string)] = true
	}
	for _, want := range []string{"no_autenticado", "sin_permiso", "no_encontrado", "ejecucion_ya_confirmada", "decision_caducada", "limite_excedido",
		"esquema_invalido", "campo_desconocido", "ts_fuera_de_rango", "duplicado", "idempotencia_conflicto", "inquilino_pausado", "error_interno", "almacenamiento_lleno"} {
		if !codes[want] {
			t.Errorf("codigo %s not in x-error-codes", want)
		}
	}
	if len(codes) != 14 { // the spec's 13 and contract §8's almacenamiento_lleno
		t.Errorf("x-error-codes has %d codes, the closed set 14", len(codes))
	}
	for _, k := range allKinds() {
		if kindDocs[k] == "" {
			t.Errorf("error kind %s has no entry in kindDocs", errorTable[k].codigo)
		}
	}
	if asObj(doc["webhooks"])[batch.EventLoteCompletado] == nil {
		t.Error("webhooks: lote.completado missing")
	}
}

// mediaExamples returns a media type's example and examples[*].value.
func mediaExamples(mt obj) map[string]any {
	out := map[string]any{}
	if ex, ok := mt["example"]; ok {
		out["example"] = ex
	}
	for name, e := range asObj(mt["examples"]) {
		out[name] = asObj(e)["value"]
	}
	return out
}

func resolvePointer(doc obj, ref string) (any, error) {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("not a local reference")
	}
	var cur any = doc
	for _, part := range strings.Split(p, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(obj)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", part)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("%s not found", part)
		}
	}
	return cur, nil
}

// resolveObj follows $ref until it reaches an object without one.
func resolveObj(doc obj, v any) any {
	for i := 0; i < 16; i++ {
		r, ok := asObj(v)["$ref"].(string)
		if !ok {
			return v
		}
		next, err := resolvePointer(doc, r)
		if err != nil {
			return nil
		}
		v = next
	}
	return v
}

// ---- a JSON Schema validator for the subset the document uses ----

// validateJSON checks v (decoded with UseNumber) against schema s of doc and
// returns the problems found. strict also refuses members an object schema
// does not declare (the document leaves additionalProperties open for
// clients; the server must still send only what it documents).
func validateJSON(doc obj, s any, v any, at string, strict bool) []string {
	if b, ok := s.(bool); ok {
		if !b {
			return []string{at + ": schema false"}
		}
		return nil
	}
	m := asObj(s)
	if m == nil {
		return nil
	}
	if r, ok := m["$ref"].(string); ok {
		target, err := resolvePointer(doc, r)
		if err != nil {
			return []string{at + ": $ref " + r + ": " + err.Error()}
		}
		errs := validateJSON(doc, target, v, at, strict)
		rest := obj{}
		for k, x := range m {
			if k != "$ref" {
				rest[k] = x
			}
		}
		if len(rest) > 0 {
			errs = append(errs, validateJSON(doc, rest, v, at, false)...)
		}
		return errs
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }

	if t, ok := m["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			types = strs(t)
		}
		if !slices.ContainsFunc(types, func(t string) bool { return jsonTypeIs(v, t) }) {
			fail("type %v, got %s", types, describeJSON(v))
			return errs
		}
	}
	if c, ok := m["const"]; ok && !jsonEqual(c, v) {
		fail("want const %v, got %v", c, v)
	}
	if e, ok := m["enum"]; ok && !slices.ContainsFunc(asSlice(e), func(x any) bool { return jsonEqual(x, v) }) {
		fail("%v not in enum %v", v, e)
	}
	if all, ok := m["allOf"]; ok {
		for _, sub := range asSlice(all) {
			errs = append(errs, validateJSON(doc, sub, v, at, false)...)
		}
	}
	if any_, ok := m["anyOf"]; ok {
		matched := false
		var why []string
		for _, sub := range asSlice(any_) {
			e := validateJSON(doc, sub, v, at, strict)
			if len(e) == 0 {
				matched = true
				break
			}
			why = append(why, e...)
		}
		if !matched {
			fail("matches no anyOf branch: %v", why)
		}
	}
	if one, ok := m["oneOf"]; ok {
		n := 0
		var why []string
		for _, sub := range asSlice(one) {
			e := validateJSON(doc, sub, v, at, strict)
			if len(e) == 0 {
				n++
			}
			why = append(why, e...)
		}
		if n != 1 {
			fail("matches %d oneOf branches, want 1: %v", n, why)
		}
	}
	switch v := v.(type) {
	case string:
		n := utf8.RuneCountInString(v)
		if x, ok := m["minLength"]; ok && n < toInt(x) {
			fail("shorter than %v", x)
		}
		if x, ok := m["maxLength"]; ok && n > toInt(x) {
			fail("longer than %v", x)
		}
		if x, ok := m["pattern"].(string); ok && !regexp.MustCompile(x).MatchString(v) {
			fail("%q does not match %s", v, x)
		}
		if m["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				fail("not a date-time: %q", v)
			}
		}
	case json.Number:
		f, _ := new(big.Float).SetString(v.String())
		if x, ok := m["minimum"]; ok && f.Cmp(toBig(x)) < 0 {
			fail("%s below minimum %v", v, x)
		}
		if x, ok := m["maximum"]; ok && f.Cmp(toBig(x)) > 0 {
			fail("%s above maximum %v", v, x)
		}
	case []any:
		if x, ok := m["minItems"]; ok && len(v) < toInt(x) {
			fail("fewer than %v items", x)
		}
		if x, ok := m["maxItems"]; ok && len(v) > toInt(x) {
			fail("more than %v items", x)
		}
		if items, ok := m["items"]; ok {
			for i, it := range v {
				errs = append(errs, validateJSON(doc, items, it, at+"/"+strconv.Itoa(i), strict)...)
			}
		}
	case obj:
		if x, ok := m["minProperties"]; ok && len(v) < toInt(x) {
			fail("fewer than %v members", x)
		}
		if x, ok := m["maxProperties"]; ok && len(v) > toInt(x) {
			fail("more than %v members", x)
		}
		for _, r := range asSlice(m["required"]) {
			if _, ok := v[r.(string)]; !ok {
				fail("required member %s missing", r)
			}
		}
		props := asObj(m["properties"])
		known := knownProperties(doc, m)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x := v[k]
			if pn, ok := m["propertyNames"]; ok {
				errs = append(errs, validateJSON(doc, pn, k, at+"/"+k+"(name)", false)...)
			}
			if ps, ok := props[k]; ok {
				errs = append(errs, validateJSON(doc, ps, x, at+"/"+k, strict)...)
				continue
			}
			if ap, ok := m["additionalProperties"]; ok {
				if ap == false {
					fail("member %s not allowed", k)
				} else {
					errs = append(errs, validateJSON(doc, ap, x, at+"/"+k, strict)...)
				}
				continue
			}
			if strict && known != nil && !known[k] {
				fail("member %s undocumented", k)
			}
		}
	}
	return errs
}

// knownProperties is the union of the properties an object schema declares
// itself and through allOf; nil when it declares none (a free-form object).
func knownProperties(doc obj, m obj) map[string]bool {
	var out map[string]bool
	var add func(s any)
	add = func(s any) {
		s = resolveObj(doc, s)
		sm := asObj(s)
		for k := range asObj(sm["properties"]) {
			if out == nil {
				out = map[string]bool{}
			}
			out[k] = true
		}
		for _, sub := range asSlice(sm["allOf"]) {
			add(sub)
		}
	}
	add(m)
	return out
}

func jsonTypeIs(v any, t string) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, ok := new(big.Float).SetString(n.String())
		return ok && f.IsInt()
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(obj)
		return ok
	}
	return false
}

func describeJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		b = append(b[:77], "..."...)
	}
	return fmt.Sprintf("%T %s", v, b)
}

func jsonEqual(a, b any) bool {
	na, aok := a.(json.Number)
	nb, bok := b.(json.Number)
	if aok && bok {
		return toBig(na).Cmp(toBig(nb)) == 0
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func toInt(x any) int {
	n, _ := strconv.Atoi(fmt.Sprint(x))
	return n
}

func toBig(x any) *big.Float {
	f, _ := new(big.Float).SetString(fmt.Sprint(x))
	if f == nil {
		return new(big.Float)
	}
	return f
}

// ---- responses against the document ----

// conformance sends requests through the harness and checks every answer
// against the document: its status is documented for the route, its body
// validates (strictly) against the documented schema, and the headers the
// document requires are there.
type conformance struct {
	t   *testing.T
	h   *harness
	doc obj
	// seen counts the (route, status) pairs exercised.
	seen map[string]bool
}

func (cf *conformance) routeOf(method, path string) route {
	for _, rt := range (&Server{}).routes() {
		if rt.method != method {
			continue
		}
		rp, pp := strings.Split(rt.path, "/"), strings.Split(path, "/")
		if len(rp) != len(pp) {
			continue
		}
		ok := true
		for i := range rp {
			if !strings.HasPrefix(rp[i], ":") && rp[i] != pp[i] {
				ok = false
				break
			}
		}
		if ok {
			return rt
		}
	}
	cf.t.Fatalf("no route for %s %s", method, path)
	return route{}
}

// check sends the request and validates the answer; it returns the status
// and the decoded body (json.Number numbers; nil for a non-JSON body).
func (cf *conformance) check(method, rawPath, token string, body any, hdr ...string) (int, obj, []byte) {
	cf.t.Helper()
	path, _, _ := strings.Cut(rawPath, "?")
	rt := cf.routeOf(method, path)
	resp := cf.h.raw(method, rawPath, token, body, hdr...)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	op := operationOf(cf.doc, rt.method, rt.path)
	code := strconv.Itoa(resp.StatusCode)
	cf.seen[rt.name+" "+code] = true
	r := asObj(resolveObj(cf.doc, asObj(op["responses"])[code]))
	if r == nil {
		cf.t.Errorf("%s %s: status %d is not documented for %s (%s)", method, rawPath, resp.StatusCode, rt.name, data)
		return resp.StatusCode, nil, data
	}
	for name, hd := range asObj(r["headers"]) {
		hd := asObj(resolveObj(cf.doc, hd))
		if resp.Header.Get(name) == "" && (hd["required"] == true || name == "X-Trace-Id") {
			cf.t.Errorf("%s %s %d: header %s missing", method, rawPath, resp.StatusCode, name)
		}
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	content := asObj(r["content"])
	if len(content) == 0 {
		return resp.StatusCode, nil, data
	}
	mt := asObj(content[ct])
	if mt == nil {
		cf.t.Errorf("%s %s %d: Content-Type %q not documented (%v)", method, rawPath, resp.StatusCode, ct, keysOf(content))
		return resp.StatusCode, nil, data
	}
	if ct == batch.ResultContentType && resp.Header.Get("Content-Encoding") == "" {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for i := 0; sc.Scan(); i++ {
			var line any
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.UseNumber()
			if err := dec.Decode(&line); err != nil {
				cf.t.Errorf("%s %s: line %d: %v", method, rawPath, i+1, err)
				continue
			}
			for _, e := range validateJSON(cf.doc, mt["x-jsonl-item"], line, fmt.Sprintf("line %d", i+1), true) {
				cf.t.Errorf("%s %s %d: %s", method, rawPath, resp.StatusCode, e)
			}
		}
		return resp.StatusCode, nil, data
	}
	if ct != "application/json" {
		if enc := resp.Header.Get("Content-Encoding"); enc != "" && asObj(r["headers"])["Content-Encoding"] == nil {
			cf.t.Errorf("%s %s %d: Content-Encoding %s undocumented", method, rawPath, resp.StatusCode, enc)
		}
		return resp.StatusCode, nil, data
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		cf.t.Errorf("%s %s %d: body is not JSON: %v", method, rawPath, resp.StatusCode, err)
		return resp.StatusCode, nil, data
	}
	for _, e := range validateJSON(cf.doc, mt["schema"], v, "body", true) {
		cf.t.Errorf("%s %s %d: %s\n%s", method, rawPath, resp.StatusCode, e, data)
	}
	if m, ok := v.(obj); ok {
		if tr, ok := m["trace_id"]; ok && tr != resp.Header.Get("X-Trace-Id") {
			cf.t.Errorf("%s %s %d: trace_id %v, X-Trace-Id %q", method, rawPath, resp.StatusCode, tr, resp.Header.Get("X-Trace-Id"))
		}
	}
	m, _ := v.(obj)
	return resp.StatusCode, m, data
}

func keysOf(m obj) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// requestExample returns the documented JSON example of a route's body (the
// first of examples when several).
func requestExample(t *testing.T, doc obj, name string) any {
	t.Helper()
	for _, rt := range (&Server{}).routes() {
		if rt.name != name {
			continue
		}
		mt := asObj(asObj(asObj(operationOf(doc, rt.method, rt.path)["requestBody"])["content"])["application/json"])
		exs := mediaExamples(mt)
		names := keysOf(obj(exs))
		if len(names) == 0 {
			t.Fatalf("%s: no request example", name)
		}
		return exs[names[0]]
	}
	t.Fatalf("no route %s", name)
	return nil
}

// TestOpenAPIResponsesMatchHandlers drives every route through the harness
// with the document's own request examples and with the usual failures, and
// checks each answer against the document (see conformance.check).
func TestOpenAPIResponsesMatchHandlers(t *testing.T) {
	doc := loadOpenAPI(t)
	h, _ := newCheckedHarness(t, nil)
	cf := &conformance{t: t, h: h, doc: doc, seen: map[string]bool{}}
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
	h.tenant("pausado", true, func(s *store.Settings) { s.Paused = true })
	scopes := append(slices.Clone(allScopes), "explicar:leer")
	tok := h.token("acme", scopes...)
	ex := func(name string) any { return requestExample(t, doc, name) }

	// Operations outside /v1/.
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/openapi.json"} {
		if st, _, _ := cf.check("GET", p, "", nil); st != 200 {
			t.Errorf("GET %s: %d", p, st)
		}
	}

	// Token, both forms, and its failures.
	id := fmt.Sprintf("ci_%s", "conformance")
	if err := h.db.CreateCredential(&store.Credential{ClientID: id, Tenant: "acme", Name: "conf", Scopes: []string{"eventos:publicar", "decisiones:pedir"}, SecretHash: store.HashSecret("s3cret")}); err != nil {
		t.Fatal(err)
	}
	if st, b, _ := cf.check("POST", "/v1/token", "", map[string]any{"client_id": id, "client_secret": "s3cret", "grant_type": "client_credentials"}); st != 200 || b["scope"] != "eventos:publicar decisiones:pedir" {
		t.Errorf("token JSON: %d %v", st, b)
	}
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"eventos:publicar"}}.Encode()
	basic := "Basic " + base64Std(id+":s3cret")
	if st, _, _ := cf.check("POST", "/v1/token", "", form, "Content-Type", "application/x-www-form-urlencoded", "Authorization", basic); st != 200 {
		t.Errorf("token form: %d", st)
	}
	cf.check("POST", "/v1/token", "", map[string]any{"client_id": id, "client_secret": "wrong", "grant_type": "client_credentials"})
	cf.check("POST", "/v1/token", "", "grant_type=password", "Content-Type", "application/x-www-form-urlencoded", "Authorization", base64Basic(id, "wrong"))
	cf.check("POST", "/v1/token", "", map[string]any{"client_id": id, "client_secret": "s3cret", "grant_type": "client_credentials", "scope": "clientes:borrar"})
	cf.check("POST", "/v1/token", "", map[string]any{"client_id": id})
	// The form's scope is bounded as the JSON one is.
	long := url.Values{"grant_type": {"client_credentials"}, "scope": {strings.Repeat("eventos:publicar ", 70)}}.Encode()
	if st, b, _ := cf.check("POST", "/v1/token", "", long, "Content-Type", "application/x-www-form-urlencoded", "Authorization", basic); st != 422 || !strings.Contains(fmt.Sprint(b["detail"]), "scope") {
		t.Errorf("token form with a 1190-character scope: %d %v, want 422 at scope", st, b)
	}
	cf.check("POST", "/v1/token", "", "x", "Content-Type", "text/plain")
	// The token endpoint's documented 422 example is its answer to a form
	// holding grant_type only (it once showed a decision request's fields).
	want := doc["paths"].(obj)["/v1/token"].(obj)["post"].(obj)["responses"].(obj)["422"].(obj)["content"].(obj)["application/json"].(obj)["example"]
	if _, b, _ := cf.check("POST", "/v1/token", "", "grant_type=client_credentials", "Content-Type", "application/x-www-form-urlencoded"); cmp.Diff(want, any(b)) != "" {
		t.Errorf("token form with grant_type only (-documented +got):\n%s", cmp.Diff(want, any(b)))
	}

	// Catalog and campaign.
	if st, b, _ := cf.check("GET", "/v1/catalogo-acciones", tok, nil); st != 200 || fmt.Sprint(b["version"]) != "0" {
		t.Errorf("empty catalog: %d %v", st, b)
	}
	if st, _, _ := cf.check("PUT", "/v1/catalogo-acciones", tok, ex("catalogo_put")); st != 200 {
		t.Errorf("catalog example: %d", st)
	}
	cf.check("GET", "/v1/catalogo-acciones", tok, nil)
	cf.check("PUT", "/v1/catalogo-acciones", tok, map[string]any{"acciones": []any{map[string]any{"id": 0}}})
	if st, _, _ := cf.check("PUT", "/v1/campanas/navidad-2026", tok, ex("campana_put")); st != 200 {
		t.Errorf("campaign example: %d", st)
	}
	cf.check("PUT", "/v1/campanas/sin-tope", tok, map[string]any{"canal": "push", "descripcion": "sin tope"})
	cf.check("GET", "/v1/campanas/navidad-2026", tok, nil)
	cf.check("GET", "/v1/campanas/sin-tope", tok, nil)
	cf.check("GET", "/v1/campanas/no-existe", tok, nil)
	cf.check("GET", "/v1/campanas/-mal", tok, nil)

	// Events.
	if st, b, _ := cf.check("POST", "/v1/eventos", tok, ex("eventos")); st != 200 || fmt.Sprint(b["aceptados"]) != "2" {
		t.Errorf("events example: %d %v", st, b)
	}
	cf.check("POST", "/v1/eventos", tok, ex("eventos"))
	cf.check("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{"x", map[string]any{"tipo": "BAJA", "Event_id": 1}}})
	cf.check("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{}})
	cf.check("POST", "/v1/eventos", tok, "{", "Content-Type", "text/plain")
	cf.check("POST", "/v1/eventos", tok, `{"eventos":["`+strings.Repeat("x", eventsBody)+`"]}`)

	// Decisions, confirmations, fallback.
	st, d, _ := cf.check("POST", "/v1/decisiones", tok, ex("decisiones"), "Idempotency-Key", "k-1")
	if st != 200 || d["detalle"] == nil {
		t.Fatalf("decision example: %d %v", st, d)
	}
	cf.check("POST", "/v1/decisiones", tok, decideBody("otro-cliente-1", nil), "Idempotency-Key", "k-1")
	cf.check("POST", "/v1/decisiones", tok, decideBody("otro-cliente-2", nil), "Idempotency-Key", strings.Repeat("k", 256))
	cf.check("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": "5512345678"})
	tokSin := h.token("acme", "decisiones:pedir")
	if st, d2, _ := cf.check("POST", "/v1/decisiones", tokSin, decideBody("sin-detalle-1", nil)); st != 200 || d2["detalle"] != nil {
		t.Errorf("decision without explicar:leer: %d %v", st, d2)
	}
	id1 := d["decision_id"].(string)
	if st, _, _ := cf.check("POST", "/v1/decisiones/"+id1+"/ejecucion", tok, ex("ejecucion")); st != 200 {
		t.Errorf("confirm example: %d", st)
	}
	cf.check("POST", "/v1/decisiones/"+id1+"/ejecucion", tok, ex("ejecucion"))
	cf.check("POST", "/v1/decisiones/d-inventado/ejecucion", tok, ex("ejecucion"))
	cf.check("POST", "/v1/decisiones/"+id1+"/ejecucion", tok, map[string]any{"ejecutada": false, "accion_real": 1})
	if st, _, _ := cf.check("POST", "/v1/decisiones/respaldo", tok, ex("respaldo")); st != 200 {
		t.Errorf("fallback example: %d", st)
	}
	cf.check("POST", "/v1/decisiones/respaldo", tok, map[string]any{"accion": 99, "canal": "push", "cliente_ref": "cliente-0001"})

	// Batch jobs.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.batch.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	st, lote, _ := cf.check("POST", "/v1/lotes-decision", tok, ex("lotes_crear"))
	if st != 202 {
		t.Fatalf("batch example: %d %v", st, lote)
	}
	cf.check("POST", "/v1/lotes-decision", tok, ex("lotes_crear"))
	job := lote["job_id"].(string)
	var estado obj
	for i := 0; i < 500; i++ {
		_, estado, _ = cf.check("GET", "/v1/lotes-decision/"+job, tok, nil)
		if estado["estado"] == api.EstadoCompletado || estado["estado"] == api.EstadoFallido {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if estado["estado"] != api.EstadoCompletado {
		t.Fatalf("batch did not complete: %v", estado)
	}
	cf.check("GET", "/v1/lotes-decision/"+job+"/resultado", tok, nil)
	cf.check("GET", "/v1/lotes-decision/"+job+"/resultado", tok, nil, "Accept-Encoding", "zstd")
	cf.check("GET", "/v1/lotes-decision/lote_nada/resultado", tok, nil)
	cf.check("GET", "/v1/lotes-decision/lote_nada", tok, nil)
	u, err := url.Parse(estado["resultado_url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _ := cf.check("GET", u.RequestURI(), "", nil); st != 200 {
		t.Errorf("signed URL: %d", st)
	}
	cf.check("GET", u.RequestURI()+"&x=1", "", nil)
	cf.check("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "navidad-2026", "segmento": map[string]any{"<=": map[string]any{"no_existe": 1}}})

	// Customers.
	if st, _, _ := cf.check("GET", "/v1/clientes/"+ejemploCliente+"/exportacion", tok, nil); st != 200 {
		t.Errorf("export: %d", st)
	}
	cf.check("GET", "/v1/clientes/nadie-conocido/exportacion", tok, nil)
	cf.check("GET", "/v1/clientes/x/exportacion", tok, nil)
	if st, _, _ := cf.check("DELETE", "/v1/clientes/"+ejemploCliente, tok, nil); st != 202 {
		t.Errorf("delete: %d", st)
	}
	cf.check("GET", "/v1/clientes/"+ejemploCliente+"/exportacion", tok, nil)
	cf.check("DELETE", "/v1/clientes/5512345678", tok, nil)

	// Webhooks.
	if st, _, _ := cf.check("PUT", "/v1/webhooks", tok, ex("webhooks_put")); st != 200 {
		t.Errorf("webhook example: %d", st)
	}
	cf.check("PUT", "/v1/webhooks", tok, map[string]any{"url": "ftp://x", "eventos": []any{"otro"}})
	cf.check("DELETE", "/v1/webhooks", tok, nil)

	// The pipeline's failures.
	cf.check("POST", "/v1/decisiones", "", nil)
	cf.check("POST", "/v1/decisiones", h.token("acme", "eventos:publicar"), nil)
	cf.check("GET", "/v1/catalogo-acciones", h.token("pausado", allScopes...), nil)

	for _, want := range []string{"token 200", "token 401", "token 403", "token 415", "token 422", "eventos 200", "eventos 413", "eventos 415", "eventos 422",
		"decisiones 200", "decisiones 409", "decisiones 422", "ejecucion 404", "ejecucion 409", "lotes_crear 429", "lotes_descarga 404",
		"catalogo_get 503", "decisiones 401", "decisiones 403"} {
		if !cf.seen[want] {
			t.Errorf("%s never exercised", want)
		}
	}
	for _, rt := range (&Server{}).routes() {
		ok := false
		for k := range cf.seen {
			if strings.HasPrefix(k, rt.name+" 2") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("route %s never answered 2xx here", rt.name)
		}
	}
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func base64Basic(id, secret string) string { return "Basic " + base64Std(id+":"+secret) }

// TestOpenAPIValidator checks the test's own validator on a few bodies, so
// that a conformance pass means something.
func TestOpenAPIValidator(t *testing.T) {
	doc := loadOpenAPI(t)
	dec := func(s string) any {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	decision := `{"decision_id":"dacme.x.y","accion":1,"accion_nombre":"a","propension":0.5,"politica_version":"v0","explorado":false,` +
		`"en_control":false,"en_respaldo":false,"caduca_en":"2026-11-09T12:00:00Z","motivo":"m"`
	tests := []struct {
		schema, body string
		ok           bool
	}{
		{"Decision", decision + `}`, true},
		{"Decision", decision + `,"en_sombra":true}`, true},
		{"Decision", decision + `,"en_sombra":false}`, false},
		{"Decision", decision + `,"nuevo":1}`, false},
		{"Decision", decision + `,"detalle":{"acciones":[{"accion":0,"mu_mxn":1.5,"sigma_mxn":2,"probabilidad":1}]}}`, true},
		{"Decision", decision + `,"detalle":{"acciones":[{"accion":0}]}}`, false},
		{"Decision", strings.Replace(decision, `"accion":1`, `"accion":1.5`, 1) + `}`, false},
		{"Decision", strings.Replace(decision, `"caduca_en":"2026-11-09T12:00:00Z"`, `"caduca_en":"ayer"`, 1) + `}`, false},
		{"LineaResultado", decision + `,"cliente_ref":"c1"}`, true},
		{"LineaResultado", decision + `}`, false},
		{"LineaResultado", decision + `,"cliente_ref":"c1","x":1}`, false},
		{"ErrorV1", `{"codigo":"no_encontrado","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`, true},
		{"ErrorV1", `{"codigo":"otro","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`, false},
		{"CampanaRespuesta", `{"campana_id":"c","canal":"p","descripcion":"d","max_descuento_mxn":null,"max_envios":3,"creado_en":"2026-11-02T12:00:00Z","actualizado_en":"2026-11-02T12:00:00Z"}`, true},
		{"Segmento", `{"todos":true}`, true},
		{"Segmento", `{"todos":false}`, false},
		{"Segmento", `{"y":[{"<=":{"recencia_dias":3}},{"no":{">":{"cuota_categoria:abarrotes":0.5}}}]}`, true},
		{"Segmento", `{"<=":{"no_existe":3}}`, false},
		{"Segmento", `{"<=":{"recencia_dias":3},">":{"recencia_dias":1}}`, false},
		{"PeticionEventos", `{"eventos":[{"event_id":"e1","cliente_ref":"cliente-01","ts":"2026-11-01T00:00:00Z","tipo":"BAJA","clave":"cuenta"}]}`, true},
		{"PeticionEventos", `{"eventos":[{"event_id":"e1","cliente_ref":"cliente-01","ts":"2026-11-01T00:00:00Z","tipo":"BAJA","clave":"otra"}]}`, false},
		{"PeticionEventos", `{"eventos":[{"event_id":"e1","cliente_ref":"cliente-01","ts":"2026-11-01T00:00:00Z","tipo":"ALTA","clave":"web","extra":{"ticket_id":"t"}}]}`, false},
	}
	for _, tt := range tests {
		errs := validateJSON(doc, schemaRef(tt.schema), dec(tt.body), "", true)
		if (len(errs) == 0) != tt.ok {
			t.Errorf("%s %s: errors %v, want ok=%v", tt.schema, tt.body, errs, tt.ok)
		}
	}
}

// TestOpenAPIConfirmationDeadline checks that no description of the served
// document puts the confirmation deadline after `caduca_en`: caduca_en is
// the deadline itself (contract §4, the spec's "within 7 days of caduca_en"
// being a slip), and Confirm answers 409 decision_caducada once it has
// passed, so a description that gives 7 more days tells an integrator that
// a confirmation the engine refuses is still accepted.
func TestOpenAPIConfirmationDeadline(t *testing.T) {
	after := regexp.MustCompile("(?i)days? after `?caduca_en")
	var bad []string
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case obj:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "description" && after.MatchString(s) {
					bad = append(bad, at+": "+s)
				}
				walk(x, at+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(loadOpenAPI(t), "#")
	if len(bad) > 0 {
		t.Errorf("descriptions that put the confirmation deadline after caduca_en:\n%s", strings.Join(bad, "\n"))
	}
}
