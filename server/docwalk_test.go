package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/store"
)

// walkCase is one request of TestOpenAPIWalk. Paths, tokens and bodies may
// name values an earlier case saved ({d1}, {job}, …).
type walkCase struct {
	name   string
	op     string // the operationId the request must reach ("" none)
	method string
	path   string
	token  string // a key of walk.tokens: all, none, narrow, wide, paused, fresh (a new rate-limited credential)
	body   any
	hdr    []string
	want   int
	// refused: the document refuses the request too (its schema, content
	// type or security), as a validating gateway in front would.
	refused bool
	// untilLimited repeats the request until it is answered 429.
	untilLimited bool
	// smuggled sends the request over a raw connection with both
	// Content-Length and Transfer-Encoding (400 on every route).
	smuggled bool
	// save stores members of the JSON answer as variables (member→name).
	save map[string]string
}

// walk is the running state of TestOpenAPIWalk.
type walk struct {
	t      *testing.T
	h      *harness
	f      *docFilter
	vars   map[string]string
	tokens map[string]string
	fresh  int
	// freshID is the client id of the last fresh credential.
	freshID string
}

// token resolves a walkCase token key.
func (w *walk) token(key string) string {
	if key == "fresh" {
		// The limited tenant's rate limits are per credential and shared by
		// the routes of a class: each 429 case drains a credential of its own.
		w.fresh++
		id := fmt.Sprintf("ci_limitado_%d", w.fresh)
		if err := w.h.db.CreateCredential(&store.Credential{ClientID: id, Tenant: "limitado", Name: "walk",
			Scopes: allScopes, SecretHash: store.HashSecret("s3cret")}); err != nil {
			w.t.Fatal(err)
		}
		st, b := w.h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": "s3cret", "grant_type": "client_credentials"})
		if st != 200 {
			w.t.Fatalf("token of %s: %d %v", id, st, b)
		}
		w.f.take()
		w.freshID = id
		return b["access_token"].(string)
	}
	tok, ok := w.tokens[key]
	if !ok {
		w.t.Fatalf("no token %q", key)
	}
	return tok
}

// expand replaces {name} by the variables saved so far.
func (w *walk) expand(s string) string {
	for k, v := range w.vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// run sends c (repeatedly when untilLimited) and returns the exchange the
// filter recorded for its last request.
func (w *walk) run(c walkCase) exchange {
	w.t.Helper()
	tok := w.token(c.token)
	path := w.expand(c.path)
	body := c.body
	if s, ok := body.(string); ok {
		body = w.expand(s)
	}
	for i := 0; ; i++ {
		if c.untilLimited && c.token == "fresh" {
			w.drain(c.op)
		}
		var resp *http.Response
		if c.smuggled {
			resp = w.smuggle(c.method, path)
		} else {
			resp = w.h.raw(c.method, path, tok, body, c.hdr...)
		}
		st := resp.StatusCode
		var m map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			m = apitest.Object(w.t, resp)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		xs := w.f.take()
		if len(xs) != 1 {
			w.t.Fatalf("%s: %d exchanges recorded, want 1", c.name, len(xs))
		}
		if c.untilLimited && st != http.StatusTooManyRequests && i < 300 {
			continue
		}
		for member, name := range c.save {
			v, _ := m[member].(string)
			if u, err := url.Parse(v); err == nil && u.IsAbs() {
				v = u.RequestURI()
			}
			w.vars[name] = v
		}
		return xs[0]
	}
}

// TestOpenAPIWalk walks every operation of the served document through a
// docFilter: its success and each error status it documents (401, 403,
// 404, 409, 413, 415, 422, 429, 503), each with a request that provokes it.
// Every answer must match the document (the filter fails the test
// otherwise); the request must reach the operation and be answered the
// status the case wants; and the document must refuse exactly the requests
// the case says it refuses. The test then checks that no documented status
// of the list went unvisited.
func TestOpenAPIWalk(t *testing.T) {
	h, f := newCheckedHarness(t, nil)
	doc := loadOpenAPI(t)
	ex := func(name string) any { return requestExample(t, doc, name) }
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
	h.tenant("limitado", true, func(s *store.Settings) { s.ControlShare = 0 })
	h.tenant("pausado", true, func(s *store.Settings) { s.Paused = true })
	w := &walk{t: t, h: h, f: f, vars: map[string]string{}, tokens: map[string]string{
		"all":    h.token("acme", append(slices.Clone(allScopes), "explicar:leer")...),
		"none":   "",
		"narrow": h.token("acme", "eventos:publicar"),
		"wide":   h.token("acme", "decisiones:pedir"),
		"paused": h.token("pausado", allScopes...),
	}}
	id, secret := h.credential("acme", "eventos:publicar", "decisiones:pedir")
	// A signed URL of the paused tenant: 503 once its own checks pass.
	pausedID, _ := h.credential("pausado", allScopes...)
	signed, err := url.Parse(h.batch.Signer.Sign(batch.Grant{Tenant: "pausado", JobID: "lote_pausadopausado12", ClientID: pausedID}, h.clock.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	w.vars["pausedSigned"] = signed.RequestURI()
	f.take()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.batch.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	for _, c := range walkCases(ex, id, secret) {
		x := w.run(c)
		got := fmt.Sprintf("%s %d refused=%v", x.op, x.status, x.reqErr != nil)
		want := fmt.Sprintf("%s %d refused=%v", c.op, c.want, c.refused)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: %s %s (-want +got):\n%s\nrequest against the document: %v", c.name, c.method, c.path, diff, x.reqErr)
		}
		if c.name == "lotes_crear 202" {
			w.waitJob()
		}
	}
	// readyz answers 503 until the server is ready.
	starting := walkCase{name: "readyz 503", op: "readyz", method: "GET", path: "/readyz", token: "none", want: 503}
	hs, fs := newCheckedHarness(t, func(d *Deps) { d.Ready = func() bool { return false } })
	ws := &walk{t: t, h: hs, f: fs, tokens: map[string]string{"none": ""}}
	if x := ws.run(starting); x.op != starting.op || x.status != starting.want || x.reqErr != nil {
		t.Errorf("%s: %s %d, request against the document: %v", starting.name, x.op, x.status, x.reqErr)
	}
	if t.Failed() {
		return
	}
	for _, miss := range unvisited(doc, append(walkCases(ex, id, secret), starting)) {
		t.Errorf("documented but not walked: %s", miss)
	}
}

// smuggle sends method path with an empty chunked body that also claims a
// Content-Length, over a connection of its own.
func (w *walk) smuggle(method, path string) *http.Response {
	w.t.Helper()
	conn, err := net.Dial("tcp", w.h.http.Listener.Addr().String())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", method, path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return resp
}

// drain empties the rate bucket of the last fresh credential for the
// class of operation op, so that its next request is answered 429 without
// forty requests before it.
func (w *walk) drain(op string) {
	for _, rt := range (&Server{}).routes() {
		if rt.name != op {
			continue
		}
		for range 1000 {
			if ok, _ := w.h.srv.limits.allow(w.freshID, rt.class, time.Now(), 1); !ok {
				return
			}
		}
	}
	w.t.Fatalf("%s: no rate bucket to drain", op)
}

// waitJob waits for the job {job} to finish.
func (w *walk) waitJob() {
	w.t.Helper()
	for range 500 {
		_, b := w.h.do("GET", "/v1/lotes-decision/"+w.vars["job"], w.tokens["all"], nil)
		w.f.take()
		if b["estado"] == api.EstadoCompletado {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatal("the batch job did not complete")
}

// walkExempt are documented (operation, status) pairs the walk does not
// provoke, and why.
var walkExempt = map[string]string{
	"lotes_crear 413":     "its limit is 96 MiB",
	"lotes_resultado 422": "the spec lists 422 for the batch result (Errors, rule 2); no request provokes it",
}

// unvisited lists the documented (operationId, status) pairs of the walked
// statuses that no case wants.
func unvisited(doc obj, cases []walkCase) []string {
	walked := map[string]bool{}
	for _, c := range cases {
		walked[c.op+" "+strconv.Itoa(c.want)] = true
	}
	var out []string
	for _, item := range asObj(doc["paths"]) {
		for _, op := range asObj(item) {
			id, _ := asObj(op)["operationId"].(string)
			for code := range asObj(asObj(op)["responses"]) {
				key := id + " " + code
				if code == "400" || code == "500" || walked[key] || walkExempt[key] != "" {
					continue
				}
				out = append(out, key)
			}
		}
	}
	slices.Sort(out)
	return out
}

// over returns a JSON body of n bytes that the document refuses.
func over(n int) string { return `{"x":"` + strings.Repeat("a", n) + `"}` }

// walkCases is the walk, in order: later cases use what earlier ones saved.
func walkCases(ex func(string) any, id, secret string) []walkCase {
	tokenBody := map[string]any{"client_id": id, "client_secret": secret, "grant_type": "client_credentials"}
	wrong := map[string]any{"client_id": id, "client_secret": "wrong", "grant_type": "client_credentials"}
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	text := []string{"Content-Type", "text/plain"}
	cases := []walkCase{
		{name: "healthz", op: "healthz", method: "GET", path: "/healthz", token: "none", want: 200},
		{name: "readyz", op: "readyz", method: "GET", path: "/readyz", token: "none", want: 200},
		{name: "metrics", op: "metrics", method: "GET", path: "/metrics", token: "none", want: 200},
		{name: "openapi", op: "openapi", method: "GET", path: "/v1/openapi.json", token: "none", want: 200},
		{name: "unknown path", method: "GET", path: "/v1/nada", token: "all", want: 404},

		{name: "token 200", op: "token", method: "POST", path: "/v1/token", token: "none", body: tokenBody, want: 200},
		{name: "token form 200", op: "token", method: "POST", path: "/v1/token", token: "none", body: form, want: 200,
			hdr: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", base64Basic(id, secret)}},
		{name: "token 401", op: "token", method: "POST", path: "/v1/token", token: "none", body: wrong, want: 401},
		{name: "token Basic 401", op: "token", method: "POST", path: "/v1/token", token: "none", body: form, want: 401,
			hdr: []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", base64Basic(id, "wrong")}},
		{name: "token 403", op: "token", method: "POST", path: "/v1/token", token: "none", want: 403,
			body: map[string]any{"client_id": id, "client_secret": secret, "grant_type": "client_credentials", "scope": "clientes:borrar"}},
		{name: "token 400", op: "token", method: "POST", path: "/v1/token", token: "none", smuggled: true, want: 400, refused: true},
		{name: "token 413", op: "token", method: "POST", path: "/v1/token", token: "none", body: over(smallBody), want: 413, refused: true},
		{name: "token 415", op: "token", method: "POST", path: "/v1/token", token: "none", body: "x", hdr: text, want: 415, refused: true},
		{name: "token 422", op: "token", method: "POST", path: "/v1/token", token: "none", body: map[string]any{"client_id": id}, want: 422, refused: true},
		{name: "token 429", op: "token", method: "POST", path: "/v1/token", token: "none", body: tokenBody, want: 429, untilLimited: true},
	}
	cases = append(cases, catalogCases(ex, text)...)
	cases = append(cases, eventCases(ex, text)...)
	cases = append(cases, decisionCases(ex, text)...)
	cases = append(cases, batchCases(ex, text)...)
	cases = append(cases, customerCases(ex)...)
	return append(cases, webhookCases(ex, text)...)
}

// guarded are the cases every authenticated operation answers the same
// way: 401 without a token, 403 without the scope, 503 for a paused tenant
// and 429 once its credential's rate is spent.
func guarded(op, method, path string, body any) []walkCase {
	narrow := "narrow"
	if op == "eventos" {
		narrow = "wide"
	}
	return []walkCase{
		{name: op + " 401", op: op, method: method, path: path, token: "none", body: body, want: 401, refused: true},
		{name: op + " 403", op: op, method: method, path: path, token: narrow, body: body, want: 403},
		{name: op + " 503", op: op, method: method, path: path, token: "paused", body: body, want: 503},
		{name: op + " 429", op: op, method: method, path: path, token: "fresh", body: body, want: 429, untilLimited: true},
	}
}

func catalogCases(ex func(string) any, text []string) []walkCase {
	cat, camp := ex("catalogo_put"), ex("campana_put")
	cases := []walkCase{
		{name: "catalogo_get 200 empty", op: "catalogo_get", method: "GET", path: "/v1/catalogo-acciones", token: "all", want: 200},
		{name: "catalogo_put 200", op: "catalogo_put", method: "PUT", path: "/v1/catalogo-acciones", token: "all", body: cat, want: 200},
		{name: "catalogo_get 200", op: "catalogo_get", method: "GET", path: "/v1/catalogo-acciones", token: "all", want: 200},
		{name: "catalogo_put 413", op: "catalogo_put", method: "PUT", path: "/v1/catalogo-acciones", token: "all", body: over(smallBody * 4), want: 413, refused: true},
		{name: "catalogo_put 415", op: "catalogo_put", method: "PUT", path: "/v1/catalogo-acciones", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "catalogo_put 422", op: "catalogo_put", method: "PUT", path: "/v1/catalogo-acciones", token: "all",
			body: map[string]any{"acciones": []any{map[string]any{"id": 0}}}, want: 422, refused: true},
		{name: "campana_put 200", op: "campana_put", method: "PUT", path: "/v1/campanas/navidad-2026", token: "all", body: camp, want: 200},
		{name: "campana_put 413", op: "campana_put", method: "PUT", path: "/v1/campanas/navidad-2026", token: "all", body: over(smallBody), want: 413, refused: true},
		{name: "campana_put 415", op: "campana_put", method: "PUT", path: "/v1/campanas/navidad-2026", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "campana_put 422", op: "campana_put", method: "PUT", path: "/v1/campanas/navidad-2026", token: "all",
			body: map[string]any{"canal": "push"}, want: 422, refused: true},
		{name: "campana_get 200", op: "campana_get", method: "GET", path: "/v1/campanas/navidad-2026", token: "all", want: 200},
		{name: "campana_get 404", op: "campana_get", method: "GET", path: "/v1/campanas/no-existe", token: "all", want: 404},
		{name: "campana_get 422", op: "campana_get", method: "GET", path: "/v1/campanas/-mal", token: "all", want: 422, refused: true},
	}
	cases = append(cases, guarded("catalogo_get", "GET", "/v1/catalogo-acciones", nil)...)
	cases = append(cases, guarded("catalogo_put", "PUT", "/v1/catalogo-acciones", cat)...)
	cases = append(cases, guarded("campana_put", "PUT", "/v1/campanas/navidad-2026", camp)...)
	return append(cases, guarded("campana_get", "GET", "/v1/campanas/navidad-2026", nil)...)
}

func eventCases(ex func(string) any, text []string) []walkCase {
	ev := ex("eventos")
	cases := []walkCase{
		{name: "eventos 200", op: "eventos", method: "POST", path: "/v1/eventos", token: "all", body: ev, want: 200},
		{name: "eventos 200 rejected", op: "eventos", method: "POST", path: "/v1/eventos", token: "all", want: 200,
			body: map[string]any{"eventos": []any{map[string]any{"event_id": "e-1", "tipo": "BAJA"}}}, refused: true},
		{name: "eventos 400", op: "eventos", method: "POST", path: "/v1/eventos", token: "none", smuggled: true, want: 400, refused: true},
		{name: "eventos 413", op: "eventos", method: "POST", path: "/v1/eventos", token: "all", body: over(eventsBody), want: 413, refused: true},
		{name: "eventos 415", op: "eventos", method: "POST", path: "/v1/eventos", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "eventos 422", op: "eventos", method: "POST", path: "/v1/eventos", token: "all", body: map[string]any{"eventos": []any{}}, want: 422, refused: true},
	}
	return append(cases, guarded("eventos", "POST", "/v1/eventos", ev)...)
}

func decisionCases(ex func(string) any, text []string) []walkCase {
	dec, conf, resp := ex("decisiones"), ex("ejecucion"), ex("respaldo")
	cases := []walkCase{
		{name: "decisiones 200", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: dec, hdr: []string{"Idempotency-Key", "k-1"},
			want: 200, save: map[string]string{"decision_id": "d1"}},
		{name: "decisiones 200 second", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: decideBody("cliente-0002", nil),
			want: 200, save: map[string]string{"decision_id": "d2"}},
		{name: "decisiones 409", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: decideBody("cliente-0003", nil),
			hdr: []string{"Idempotency-Key", "k-1"}, want: 409},
		{name: "decisiones 413", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: over(smallBody), want: 413, refused: true},
		{name: "decisiones 415", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "decisiones 422", op: "decisiones", method: "POST", path: "/v1/decisiones", token: "all", body: map[string]any{"cliente_ref": "x"}, want: 422, refused: true},

		{name: "ejecucion 200", op: "ejecucion", method: "POST", path: "/v1/decisiones/{d1}/ejecucion", token: "all", body: conf, want: 200},
		{name: "ejecucion 409", op: "ejecucion", method: "POST", path: "/v1/decisiones/{d1}/ejecucion", token: "all", body: conf, want: 409},
		{name: "ejecucion 404", op: "ejecucion", method: "POST", path: "/v1/decisiones/d-inventado/ejecucion", token: "all", body: conf, want: 404},
		{name: "ejecucion 413", op: "ejecucion", method: "POST", path: "/v1/decisiones/{d2}/ejecucion", token: "all", body: over(smallBody), want: 413, refused: true},
		{name: "ejecucion 415", op: "ejecucion", method: "POST", path: "/v1/decisiones/{d2}/ejecucion", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "ejecucion 422", op: "ejecucion", method: "POST", path: "/v1/decisiones/{d2}/ejecucion", token: "all",
			body: map[string]any{"ejecutada": "si"}, want: 422, refused: true},

		{name: "respaldo 200", op: "respaldo", method: "POST", path: "/v1/decisiones/respaldo", token: "all", body: resp, hdr: []string{"Idempotency-Key", "r-1"}, want: 200},
		{name: "respaldo 409", op: "respaldo", method: "POST", path: "/v1/decisiones/respaldo", token: "all", hdr: []string{"Idempotency-Key", "r-1"}, want: 409,
			body: map[string]any{"accion": 0, "canal": "sms", "cliente_ref": "cliente-0009", "campana_id": "otra"}},
		{name: "respaldo 413", op: "respaldo", method: "POST", path: "/v1/decisiones/respaldo", token: "all", body: over(smallBody), want: 413, refused: true},
		{name: "respaldo 415", op: "respaldo", method: "POST", path: "/v1/decisiones/respaldo", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "respaldo 422", op: "respaldo", method: "POST", path: "/v1/decisiones/respaldo", token: "all", body: map[string]any{"accion": -1}, want: 422, refused: true},
	}
	cases = append(cases, guarded("decisiones", "POST", "/v1/decisiones", decideBody("cliente-0005", nil))...)
	cases = append(cases, guarded("ejecucion", "POST", "/v1/decisiones/{d2}/ejecucion", conf)...)
	return append(cases, guarded("respaldo", "POST", "/v1/decisiones/respaldo", resp)...)
}

func batchCases(ex func(string) any, text []string) []walkCase {
	lote := ex("lotes_crear")
	cases := []walkCase{
		{name: "lotes_crear 415", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "lotes_crear 422", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all",
			body: map[string]any{"campana_id": "-mal", "clientes": []any{ejemploCliente}}, want: 422, refused: true},
		// "Exactly one of clientes or segmento" is in the schema's
		// description only: the document's schema accepts neither.
		{name: "lotes_crear 422 neither", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all",
			body: map[string]any{"campana_id": "navidad-2026"}, want: 422},
		// Before the first job (the hourly limit's 429 comes first): the
		// key of "decisiones 200" is the tenant's, a decision's, not a batch's.
		{name: "lotes_crear 409", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all", body: lote,
			hdr: []string{"Idempotency-Key", "k-1"}, want: 409},
		{name: "lotes_crear 202", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all", body: lote, want: 202,
			hdr: []string{"Idempotency-Key", "l-1"}, save: map[string]string{"job_id": "job"}},
		{name: "lotes_estado 200", op: "lotes_estado", method: "GET", path: "/v1/lotes-decision/{job}", token: "all", want: 200,
			save: map[string]string{"resultado_url": "signed"}},
		{name: "lotes_estado 404", op: "lotes_estado", method: "GET", path: "/v1/lotes-decision/lote_nada", token: "all", want: 404},
		{name: "lotes_resultado 200", op: "lotes_resultado", method: "GET", path: "/v1/lotes-decision/{job}/resultado", token: "all", want: 200},
		{name: "lotes_resultado 200 zstd", op: "lotes_resultado", method: "GET", path: "/v1/lotes-decision/{job}/resultado", token: "all",
			hdr: []string{"Accept-Encoding", "zstd"}, want: 200},
		{name: "lotes_resultado 404", op: "lotes_resultado", method: "GET", path: "/v1/lotes-decision/lote_nada/resultado", token: "all", want: 404},
		{name: "lotes_descarga 200", op: "lotes_descarga", method: "GET", path: "{signed}", token: "none", want: 200},
		{name: "lotes_descarga 404", op: "lotes_descarga", method: "GET", path: "{signed}x", token: "none", want: 404, refused: true},
		{name: "lotes_descarga 503", op: "lotes_descarga", method: "GET", path: "{pausedSigned}", token: "none", want: 503},
		{name: "lotes_crear 429", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all", body: lote, want: 429},
		{name: "lotes_crear 202 replay", op: "lotes_crear", method: "POST", path: "/v1/lotes-decision", token: "all", body: lote,
			hdr: []string{"Idempotency-Key", "l-1"}, want: 202},
	}
	cases = append(cases, guarded("lotes_crear", "POST", "/v1/lotes-decision", lote)...)
	cases = append(cases, guarded("lotes_estado", "GET", "/v1/lotes-decision/{job}", nil)...)
	return append(cases, guarded("lotes_resultado", "GET", "/v1/lotes-decision/{job}/resultado", nil)...)
}

func customerCases(ex func(string) any) []walkCase {
	export := "/v1/clientes/" + ejemploCliente + "/exportacion"
	cases := []walkCase{
		{name: "clientes_exportar 200", op: "clientes_exportar", method: "GET", path: export, token: "all", want: 200},
		{name: "clientes_exportar 422", op: "clientes_exportar", method: "GET", path: "/v1/clientes/x/exportacion", token: "all", want: 422, refused: true},
		{name: "clientes_borrar 202", op: "clientes_borrar", method: "DELETE", path: "/v1/clientes/" + ejemploCliente, token: "all", want: 202},
		{name: "clientes_borrar 422", op: "clientes_borrar", method: "DELETE", path: "/v1/clientes/x", token: "all", want: 422, refused: true},
	}
	cases = append(cases, guarded("clientes_exportar", "GET", export, nil)...)
	return append(cases, guarded("clientes_borrar", "DELETE", "/v1/clientes/"+ejemploCliente, nil)...)
}

func webhookCases(ex func(string) any, text []string) []walkCase {
	hook := ex("webhooks_put")
	cases := []walkCase{
		{name: "webhooks_put 200", op: "webhooks_put", method: "PUT", path: "/v1/webhooks", token: "all", body: hook, want: 200},
		{name: "webhooks_put 413", op: "webhooks_put", method: "PUT", path: "/v1/webhooks", token: "all", body: over(smallBody), want: 413, refused: true},
		{name: "webhooks_put 415", op: "webhooks_put", method: "PUT", path: "/v1/webhooks", token: "all", body: "x", hdr: text, want: 415, refused: true},
		{name: "webhooks_put 422", op: "webhooks_put", method: "PUT", path: "/v1/webhooks", token: "all",
			body: map[string]any{"url": "ftp://x", "eventos": []any{"otro"}}, want: 422, refused: true},
		{name: "webhooks_delete 200", op: "webhooks_delete", method: "DELETE", path: "/v1/webhooks", token: "all", want: 200},
	}
	cases = append(cases, guarded("webhooks_put", "PUT", "/v1/webhooks", hook)...)
	return append(cases, guarded("webhooks_delete", "DELETE", "/v1/webhooks", nil)...)
}
