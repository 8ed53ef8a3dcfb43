package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// docFilter is an http.Handler in front of the server that checks every
// request and its answer against the served OpenAPI document with
// kin-openapi's openapi3filter, as a gateway or an integrator's validating
// client would:
//
//   - the request: path, query and header parameters, security (a bearer
//     token or HTTP Basic where the operation asks for one) and body. A
//     request the document refuses is not a failure by itself (tests send
//     bad requests on purpose); it is recorded for the caller to compare
//     with what the server answered.
//   - the answer: its status must be documented for the operation (an
//     undocumented status is a failure), every header the document requires
//     must be there and match its schema, the headers whose meaning a client
//     acts on (see actedHeaders) must not appear where the document does not
//     list them, X-Trace-Id is on every answer and equals the body's
//     trace_id, the Content-Type must be one the document lists, and a JSON
//     body must match its schema. Other bodies (ndjson results, metrics) are
//     checked for Content-Type only.
//
// A request to a path and method the document has no operation for must be
// answered 404 with an ErrorV1 body (contract §7).
//
// Answer failures are reported on tb as they happen; every exchange is also
// recorded, and take returns them once the handler is done with them.
type docFilter struct {
	doc    *openapi3.T
	next   http.Handler
	report func(string) // an answer that breaks the document

	pending sync.WaitGroup
	mu      sync.Mutex
	log     []exchange
}

// exchange is one request through the filter and what the check found.
type exchange struct {
	method, path string
	op           string // operationId; "" when the document has no operation
	status       int
	reqErr       error    // the document refuses the request
	problems     []string // the answer breaks the document
}

// actedHeaders are answer headers a client acts on: present on an answer
// whose document entry does not list them, they are undocumented behaviour.
var actedHeaders = []string{"Retry-After", "Location", "WWW-Authenticate", "Content-Encoding", "Cache-Control"}

// newDocFilter loads the served document and returns a filter in front of
// next that reports on tb.
func newDocFilter(tb testing.TB, next http.Handler) *docFilter {
	tb.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDoc)
	if err != nil {
		tb.Fatalf("kin-openapi cannot load the served document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		tb.Fatalf("kin-openapi refuses the served document: %v", err)
	}
	return &docFilter{doc: doc, next: next, report: func(p string) { tb.Errorf("%s", p) }}
}

// take waits for the exchanges in flight and returns those recorded since
// the last call.
func (f *docFilter) take() []exchange {
	f.pending.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.log
	f.log = nil
	return out
}

// ServeHTTP passes r to the server and checks both sides.
func (f *docFilter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.pending.Add(1)
	defer f.pending.Done()
	body, readErr := io.ReadAll(r.Body)
	r.Body.Close()
	// The server reads what the client sent, and the read error after it
	// (a body cut short stays cut short).
	rest := io.Reader(eofReader{})
	if readErr != nil {
		rest = errReader{readErr}
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), rest))

	x := exchange{method: r.Method, path: r.URL.Path}
	route, params := f.route(r.Method, r.URL.Path)
	var in *openapi3filter.RequestValidationInput
	if route != nil {
		x.op = route.Operation.OperationID
		in, x.reqErr = f.checkRequest(r, body, route, params)
	}
	tw := &teeWriter{ResponseWriter: w}
	f.next.ServeHTTP(tw, r)
	x.status = tw.code()
	x.problems = f.checkAnswer(in, tw)
	for _, p := range x.problems {
		f.report(fmt.Sprintf("%s %s → %d: %s", r.Method, r.URL.RequestURI(), x.status, p))
	}
	f.mu.Lock()
	f.log = append(f.log, x)
	f.mu.Unlock()
}

// route finds the document's operation of method and path, preferring
// literal segments over parameters, and returns the path parameters. HEAD
// is the GET operation's (the server answers HEAD on every GET route with
// the GET's status and headers).
func (f *docFilter) route(method, path string) (*routers.Route, map[string]string) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	var best *routers.Route
	var bestParams map[string]string
	for tmpl, item := range f.doc.Paths.Map() {
		op := item.GetOperation(method)
		if op == nil {
			continue
		}
		params, ok := matchTemplate(tmpl, path)
		if !ok || (best != nil && len(params) >= len(bestParams)) {
			continue
		}
		best = &routers.Route{Spec: f.doc, Path: tmpl, PathItem: item, Method: method, Operation: op}
		bestParams = params
	}
	return best, bestParams
}

// matchTemplate matches path against an OpenAPI path template.
func matchTemplate(tmpl, path string) (map[string]string, bool) {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return nil, false
	}
	params := map[string]string{}
	for i, s := range ts {
		switch {
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			if ps[i] == "" {
				return nil, false
			}
			params[s[1:len(s)-1]] = ps[i]
		case s != ps[i]:
			return nil, false
		}
	}
	return params, true
}

// checkRequest validates a copy of r (body given) against route.
func (f *docFilter) checkRequest(r *http.Request, body []byte, route *routers.Route, params map[string]string) (*openapi3filter.RequestValidationInput, error) {
	rc := r.Clone(r.Context())
	rc.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{
		Request: rc, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, SkipSettingDefaults: true, AuthenticationFunc: checkCredentials},
	}
	return in, openapi3filter.ValidateRequest(r.Context(), in)
}

// checkCredentials is the document's security as a client can check it:
// the oauth2 scheme needs a bearer token, clientBasic HTTP Basic
// credentials. Whether the token is good (and its scopes) is the server's
// to say.
func checkCredentials(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	auth := in.RequestValidationInput.Request.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(auth, " ")
	want := "Bearer"
	if in.SecurityScheme.Type == "http" {
		want = in.SecurityScheme.Scheme
	}
	if !strings.EqualFold(scheme, want) || strings.TrimSpace(cred) == "" {
		return fmt.Errorf("security %s: no %s credentials", in.SecuritySchemeName, want)
	}
	return nil
}

// checkAnswer lists where the answer in tw breaks the document (in nil:
// the request has no operation).
func (f *docFilter) checkAnswer(in *openapi3filter.RequestValidationInput, tw *teeWriter) []string {
	var out []string
	hdr := tw.Header()
	trace := hdr.Get("X-Trace-Id")
	if trace == "" {
		out = append(out, "no X-Trace-Id header")
	}
	if v, ok := answerJSON(hdr, tw.body.Bytes()); ok {
		if m, ok := v.(map[string]any); ok {
			if tr, has := m["trace_id"]; has && tr != trace {
				out = append(out, fmt.Sprintf("trace_id %v differs from X-Trace-Id %q", tr, trace))
			}
		}
	}
	if in == nil {
		return append(out, f.checkNoOperation(tw)...)
	}
	resp := in.Route.Operation.Responses.Status(tw.code())
	if resp == nil || resp.Value == nil {
		return append(out, fmt.Sprintf("status %d is not documented for %s (body %.300s)", tw.code(), in.Route.Operation.OperationID, tw.body.Bytes()))
	}
	for _, name := range actedHeaders {
		if hdr.Get(name) != "" && resp.Value.Headers[name] == nil {
			out = append(out, fmt.Sprintf("header %s: %q is not documented for this answer", name, hdr.Get(name)))
		}
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	ct, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	if ct != "application/json" {
		// Not JSON: the Content-Type must be documented, the body is not read.
		opts.ExcludeResponseBody = true
		if len(resp.Value.Content) > 0 && resp.Value.Content.Get(hdr.Get("Content-Type")) == nil {
			out = append(out, fmt.Sprintf("Content-Type %q is not documented (%v)", hdr.Get("Content-Type"), slices.Sorted(maps.Keys(resp.Value.Content))))
		}
	}
	rv := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: tw.code(), Header: hdr,
		Body: io.NopCloser(bytes.NewReader(tw.body.Bytes())), Options: opts}
	if err := openapi3filter.ValidateResponse(context.Background(), rv); err != nil {
		out = append(out, firstLines(err.Error(), 12))
	}
	return out
}

// checkNoOperation: an answer to a path and method the document does not
// have is 404 with an ErrorV1 body.
func (f *docFilter) checkNoOperation(tw *teeWriter) []string {
	if tw.code() != http.StatusNotFound {
		return []string{fmt.Sprintf("no operation in the document, yet answered %d", tw.code())}
	}
	v, ok := answerJSON(tw.Header(), tw.body.Bytes())
	if !ok {
		return []string{"404 without a JSON body"}
	}
	err := f.doc.Components.Schemas["ErrorV1"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors())
	if err != nil {
		return []string{"404 body is not an ErrorV1: " + firstLines(err.Error(), 8)}
	}
	return nil
}

// answerJSON decodes body when the Content-Type says JSON.
func answerJSON(hdr http.Header, body []byte) (any, bool) {
	ct, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	if ct != "application/json" {
		return nil, false
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, false
	}
	return v, true
}

func firstLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = append(ls[:n], "…")
	}
	return strings.Join(ls, "\n")
}

// teeWriter passes an answer through and keeps a copy of its status and
// body.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *teeWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// newCheckedHarness is newHarnessWith (fn may be nil) with every request
// going through a docFilter, returned with it.
func newCheckedHarness(t *testing.T, fn func(*Deps)) (*harness, *docFilter) {
	t.Helper()
	var f *docFilter
	h := newHarnessWrapped(t, fn, func(next http.Handler) http.Handler {
		f = newDocFilter(t, next)
		return f
	})
	t.Cleanup(func() { f.pending.Wait() })
	return h, f
}

// TestDocFilterCatches: the filter reports answers that break the
// document, so that a clean walk means something.
func TestDocFilterCatches(t *testing.T) {
	errBody := `{"codigo":"no_autenticado","mensaje":"m","campo":null,"detalle":null,"trace_id":"t1"}`
	tests := []struct {
		name, method, path string
		status             int
		hdr                []string // name, value pairs
		body               string
		want               string // substring of the report; "" none
	}{
		{"documented 401", "GET", "/v1/catalogo-acciones", 401, []string{"WWW-Authenticate", "Bearer"}, errBody, ""},
		{"undocumented status", "GET", "/v1/catalogo-acciones", 418, nil, errBody, "status 418 is not documented"},
		{"required header missing", "GET", "/v1/catalogo-acciones", 401, nil, errBody, `"WWW-Authenticate" missing`},
		{"undocumented header", "GET", "/v1/catalogo-acciones", 401, []string{"WWW-Authenticate", "Bearer", "Location", "/x"}, errBody, "header Location"},
		{"Retry-After not an integer", "GET", "/v1/catalogo-acciones", 429, []string{"Retry-After", "soon"},
			strings.Replace(errBody, "no_autenticado", "limite_excedido", 1), "Retry-After"},
		{"unknown codigo", "GET", "/v1/catalogo-acciones", 401, []string{"WWW-Authenticate", "Bearer"}, strings.Replace(errBody, "no_autenticado", "otro", 1), "doesn't match schema"},
		{"unknown member", "GET", "/v1/catalogo-acciones", 401, []string{"WWW-Authenticate", "Bearer"}, strings.Replace(errBody, "}", `,"nuevo":1}`, 1), "doesn't match schema"},
		{"member missing", "GET", "/v1/catalogo-acciones", 200, nil, `{"acciones":[]}`, "doesn't match schema"},
		{"trace_id differs", "GET", "/v1/catalogo-acciones", 401, []string{"WWW-Authenticate", "Bearer", "X-Trace-Id", "t2"}, errBody, "trace_id"},
		{"undocumented Content-Type", "GET", "/metrics", 200, []string{"Content-Type", "text/html"}, "<p>", "Content-Type"},
		{"ndjson not read", "GET", "/v1/lotes-decision/j1/resultado", 200, []string{"Content-Type", "application/x-ndjson", "Cache-Control", "no-store"}, "not json", ""},
		{"no operation, not 404", "GET", "/v1/nada", 200, nil, "{}", "no operation"},
		{"no operation, 404", "GET", "/v1/nada", 404, nil, strings.Replace(errBody, "no_autenticado", "no_encontrado", 1), ""},
	}
	f := newDocFilter(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Trace-Id", "t1")
				for i := 0; i+1 < len(tt.hdr); i += 2 {
					w.Header().Set(tt.hdr[i], tt.hdr[i+1])
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			var got []string
			f.report = func(p string) { got = append(got, p) }
			req, err := http.NewRequest(tt.method, "http://x"+tt.path, http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			f.ServeHTTP(httptest.NewRecorder(), req)
			matched := tt.want == "" && len(got) == 0
			for _, p := range got {
				matched = matched || (tt.want != "" && strings.Contains(p, tt.want))
			}
			if !matched {
				t.Errorf("reports %q, want one containing %q", got, tt.want)
			}
		})
	}
}
