package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

// fuzzServer is a server over an in-memory store with one sandbox tenant
// whose rate limits and quotas are off, called in-process (no network) so
// that each fuzz input costs little.
type fuzzServer struct {
	srv    *Server
	tok    string
	doc    obj
	db     *store.DB
	eng    *engine.Engine
	runner *batch.Runner
	// all is a token with every scope (the body fuzz targets).
	all string
}

func newFuzzServer(tb testing.TB) *fuzzServer {
	tb.Helper()
	db := storetest.Open(tb)
	secrets := store.TestSecrets()
	clk := clock.NewFake(testStart)
	log := zerolog.Nop()
	eng := engine.New(engine.Config{DB: db, Secrets: secrets, Log: log, Now: clk.Now, Seed: 42})
	signer, err := batch.NewURLSigner(secrets.URL, "http://coupond.test")
	if err != nil {
		tb.Fatal(err)
	}
	hooks := batch.NewWebhooks(db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: true}), log, clk.Now, 7)
	runner := batch.NewRunner(batch.RunnerConfig{DB: db, Engine: eng, Log: log, Dir: tb.TempDir(), Now: clk.Now, Signer: signer, Webhooks: hooks})
	srv := New(Deps{Log: log, DB: db, Secrets: secrets, Now: clk.Now, Ready: func() bool { return true },
		Engine: eng, Batch: runner, Webhooks: hooks, WebhookAllowPrivate: true})

	settings := store.DefaultSettings()
	settings.RateLimits = false
	settings.QuotaDecisionsDay, settings.QuotaEventsDay = 0, 0
	storetest.Sandbox(tb, db, "fuzz", testStart, settings)
	const client = "ci_fuzz"
	if err := db.CreateCredential(&store.Credential{ClientID: client, Tenant: "fuzz", Name: "fuzz",
		Scopes: append([]string{"explicar:leer"}, allScopes...), SecretHash: store.HashSecret("x")}); err != nil {
		tb.Fatal(err)
	}
	f := &fuzzServer{srv: srv, tok: srv.tokens.issue(client, scopeEventos|scopeDecisiones|scopeCatalogo|scopeExplicar, 0, testStart.Add(tokenTTL)), doc: loadOpenAPI(tb),
		db: db, eng: eng, runner: runner,
		all: srv.tokens.issue(client, scopeEventos|scopeDecisiones|scopeConfirmar|scopeCampanas|scopeCatalogo|scopeBorrar|scopeExportar|scopeWebhooks|scopeExplicar, 0, testStart.Add(tokenTTL))}
	rec := f.post("/v1/catalogo-acciones", []byte(`{"acciones":[{"id":1,"nombre":"a","tipo_cupon":"TA","costo_envio_mxn":0.5,"descuento_max_mxn":10},`+
		`{"id":2,"nombre":"b","tipo_cupon":"TB","costo_envio_mxn":0.5,"descuento_max_mxn":20,"canales":["push"]}]}`), "PUT")
	if rec.Code != 200 {
		tb.Fatalf("catalog: %d %s", rec.Code, rec.Body)
	}
	return f
}

func (f *fuzzServer) post(path string, body []byte, method ...string) *httptest.ResponseRecorder {
	m := "POST"
	if len(method) > 0 {
		m = method[0]
	}
	req := httptest.NewRequest(m, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+f.tok)
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	return rec
}

// checkAnswer checks what every answer must be: a documented status for the
// route, the trace id header, and a JSON body that validates against the
// document; it returns the decoded body.
func (f *fuzzServer) checkAnswer(t *testing.T, rt string, rec *httptest.ResponseRecorder, allowed ...int) obj {
	t.Helper()
	ok := false
	for _, st := range allowed {
		ok = ok || rec.Code == st
	}
	if !ok {
		t.Fatalf("%s: status %d, want one of %v\n%s", rt, rec.Code, allowed, rec.Body)
	}
	trace := rec.Header().Get("X-Trace-Id")
	if trace == "" {
		t.Fatalf("%s %d: no X-Trace-Id", rt, rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %d: Content-Type %q", rt, rec.Code, ct)
	}
	var body any
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("%s %d: body is not JSON: %v\n%s", rt, rec.Code, err, rec.Body)
	}
	var op obj
	for _, r := range f.srv.routes() {
		if r.name == rt {
			op = operationOf(f.doc, r.method, r.path)
		}
	}
	resp := asObj(resolveObj(f.doc, asObj(op["responses"])[fmt.Sprint(rec.Code)]))
	schema := asObj(asObj(resp["content"])["application/json"])["schema"]
	if schema == nil {
		t.Fatalf("%s %d: undocumented", rt, rec.Code)
	}
	if errs := validateJSON(f.doc, schema, body, "body", true); len(errs) > 0 {
		t.Fatalf("%s %d: body does not match the document: %v\n%s", rt, rec.Code, errs, rec.Body)
	}
	m := body.(obj)
	switch {
	case rec.Code == 422:
		if len(asSlice(m["detail"])) == 0 {
			t.Fatalf("%s 422 without detail items: %s", rt, rec.Body)
		}
		for _, it := range asSlice(m["detail"]) {
			loc := asSlice(asObj(it)["loc"])
			if len(loc) == 0 || (loc[0] != "body" && loc[0] != "header" && loc[0] != "path") || asObj(it)["type"] == "" || asObj(it)["msg"] == "" {
				t.Fatalf("%s 422: malformed item %v", rt, it)
			}
		}
	case rec.Code >= 400:
		if m["trace_id"] != trace {
			t.Fatalf("%s %d: trace_id %v, header %q", rt, rec.Code, m["trace_id"], trace)
		}
		if (rec.Code == 429 || rec.Code == 503) && rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%s %d without Retry-After", rt, rec.Code)
		}
	}
	return m
}

// fuzzTS is a timestamp the sandbox tenant's clock accepts.
var fuzzTS = testStart.Add(-time.Hour).Format(time.RFC3339)

func fuzzEventSeeds() []string {
	compra := func(id string) string {
		return `{"event_id":"` + id + `","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"COMPRA_CAT","clave":"abarrotes","valor":100.5,` +
			`"extra":{"ticket_id":"t-` + id + `","margen":30.25,"cantidad":2,"tienda":null,"ticket_total":120}}`
	}
	recibido := `{"event_id":"r1","cliente_ref":"cliente-0002","ts":"` + fuzzTS + `","tipo":"CUPON_RECIBIDO","clave":"TA","valor":10,` +
		`"extra":{"cupon_emitido_id":"cup-1","campana_id":null,"caducidad":"2026-12-01T00:00:00-06:00","canal":"push","descuento_pct":10}}`
	redimido := `{"event_id":"x1","cliente_ref":"cliente-0002","ts":"` + fuzzTS + `","tipo":"CUPON_REDIMIDO","clave":"TA","valor":10,"extra":{"cupon_emitido_id":"cup-1","ticket_id":"t9"}}`
	caducado := `{"event_id":"k1","cliente_ref":"cliente-0003","ts":"` + fuzzTS + `","tipo":"CUPON_CADUCADO","clave":"TA","valor":0,"extra":{"cupon_emitido_id":"cup-2"}}`
	baja := `{"event_id":"b1","cliente_ref":"cliente-0004","ts":"` + fuzzTS + `","tipo":"BAJA","clave":"comunicaciones","extra":{"canal":"sms"}}`
	alta := `{"event_id":"a1","cliente_ref":"cliente-0005","ts":"` + fuzzTS + `","tipo":"ALTA","clave":"web"}`
	many := make([]string, 1000)
	for i := range many {
		many[i] = compra(fmt.Sprintf("m%04d", i))
	}
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	return []string{
		// Valid batches.
		`{"eventos":[` + compra("e1") + `]}`,
		`{"eventos":[` + strings.Join([]string{compra("e2"), recibido, redimido, caducado, baja, alta}, ",") + `]}`,
		`{"eventos":[` + strings.Join(many, ",") + `]}`,
		// Mixed: good, bad, duplicate within the request, conflicting
		// duplicate, unknown field, ts out of range, not an object.
		`{"eventos":[` + strings.Join([]string{
			compra("e3"), compra("e3"), strings.Replace(compra("e3"), "100.5", "99", 1),
			`{"event_id":"u1","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"ALTA","clave":"web","Extra":{}}`,
			`{"event_id":"t1","cliente_ref":"cliente-0001","ts":"2030-01-01T00:00:00Z","tipo":"ALTA","clave":"web"}`,
			`{"event_id":"t2","cliente_ref":"cliente-0001","ts":"2001-01-01T00:00:00Z","tipo":"ALTA","clave":"web"}`,
			`{"event_id":"p1","cliente_ref":"5512345678","ts":"` + fuzzTS + `","tipo":"ALTA","clave":"web"}`,
			`{"event_id":"d1","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"ALTA","clave":"web","decision_id":"dfuzz.abc.def"}`,
			`{"event_id":7,"tipo":"NADA"}`, `"texto"`, `null`, `[]`, `{}`,
			`{"event_id":"v1","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"CUPON_CADUCADO","clave":"TA","valor":0.001,"extra":{"cupon_emitido_id":"c"}}`,
		}, ",") + `]}`,
		// Huge and odd numbers.
		`{"eventos":[{"event_id":"h1","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"COMPRA_CAT","clave":"a","valor":1e400,"extra":{"ticket_id":"t","margen":-1e400}}]}`,
		`{"eventos":[{"event_id":"h2","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"COMPRA_CAT","clave":"a","valor":123456789012345678901234567890.12,"extra":{"ticket_id":"t","margen":-0,"cantidad":1e-400}}]}`,
		`{"eventos":[{"event_id":"h3","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"COMPRA_CAT","clave":"a","valor":1E+2,"extra":{"ticket_id":"t","margen":100.50,"ticket_total":0.1e1}}]}`,
		// Envelope errors.
		``, `null`, `[]`, `{}`, `{"eventos":[]}`, `{"eventos":{}}`, `{"eventos":[1],"otro":2}`, `{"Eventos":[1]}`,
		`{"eventos":[1],"eventos":[2]}`, `{"eventos":[1]} x`, `{"eventos":[` + deep + `]}`, `{"eventos":[` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100) + `]}`,
		`{"eventos":[` + strings.Repeat(`1,`, 1000) + `1]}`,
		"{\"eventos\":[\"\xff\"]}", `{"eventos":["\ud800"]}`, "\x00", `{`, `{"eventos":[1,]}`,
		`{"eventos":[{"event_id":"` + strings.Repeat("z", 300) + `","tipo":"ALTA"}]}`,
	}
}

// FuzzEventsEndpoint feeds arbitrary bodies to POST /v1/eventos through the
// whole pipeline. Every answer is a 200 whose counts add up to the events
// sent, with rechazados ordered by indice and each event_id echoed, or a
// well-formed 413 or 422; never a panic or a 500.
func FuzzEventsEndpoint(f *testing.F) {
	for _, s := range fuzzEventSeeds() {
		f.Add([]byte(s))
	}
	f.Add(append(append([]byte(`{"eventos":["`), bytes.Repeat([]byte("x"), eventsBody)...), `"]}`...))
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := fs.post("/v1/eventos", body)
		m := fs.checkAnswer(t, "eventos", rec, 200, 413, 422)
		if rec.Code == 413 && len(body) <= eventsBody {
			t.Fatalf("413 for %d bytes", len(body))
		}
		if rec.Code != 200 {
			return
		}
		var env struct{ Eventos []json.RawMessage }
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("200 for a body encoding/json refuses: %v", err)
		}
		n := len(env.Eventos)
		if n < 1 || n > 1000 {
			t.Fatalf("200 for %d events", n)
		}
		var resp struct {
			Aceptados, Duplicados int
			Rechazados            []engine.Rejection
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if got := resp.Aceptados + resp.Duplicados + len(resp.Rechazados); got != n || resp.Aceptados < 0 || resp.Duplicados < 0 {
			t.Fatalf("aceptados %d + duplicados %d + rechazados %d = %d, sent %d\n%s", resp.Aceptados, resp.Duplicados, len(resp.Rechazados), got, n, rec.Body)
		}
		if asSlice(m["rechazados"]) == nil {
			t.Fatal("rechazados is not an array")
		}
		last := -1
		for _, r := range resp.Rechazados {
			if r.Indice <= last || r.Indice >= n {
				t.Fatalf("rechazados out of order or range: indice %d after %d, %d events", r.Indice, last, n)
			}
			last = r.Indice
			var fields map[string]json.RawMessage
			var want *string
			if json.Unmarshal(env.Eventos[r.Indice], &fields) == nil {
				var s string
				if raw, ok := fields["event_id"]; ok && json.Unmarshal(raw, &s) == nil {
					s = truncateRunes(s, maxEcho) // echoed cut, as every echo
					want = &s
				}
			}
			switch {
			case (want == nil) != (r.EventID == nil):
				t.Fatalf("rechazo %d: event_id %v, sent %s", r.Indice, r.EventID, env.Eventos[r.Indice])
			case want != nil && *want != *r.EventID:
				t.Fatalf("rechazo %d: event_id %q, sent %q", r.Indice, *r.EventID, *want)
			}
			if r.Campo != nil && *r.Campo == "" {
				t.Fatalf("rechazo %d: empty campo", r.Indice)
			}
		}
	})
}

// FuzzDecisionBody feeds arbitrary bodies to POST /v1/decisiones: 200 with a
// Decision, 422 or 429, never a panic or a 500.
func FuzzDecisionBody(f *testing.F) {
	for _, s := range []string{
		`{"cliente_ref":"cliente-0001","contexto":{"canal":"push"}}`,
		`{"cliente_ref":"cliente-0002","contexto":{"canal":"push","campana_id":"navidad","acciones_permitidas":[0,1,2,99]}}`,
		`{"cliente_ref":"cliente-0003","contexto":{"canal":"sms","acciones_permitidas":[]}}`,
		`{"cliente_ref":"cliente-0004","contexto":{"canal":"push","acciones_permitidas":[1.0,2e0]}}`,
		`{"cliente_ref":"cliente-0005","contexto":{"canal":"push","acciones_permitidas":[1.5,-1,1e400,99999999999999999999]}}`,
		`{"cliente_ref":"5512345678","contexto":{"canal":"push"}}`,
		`{"cliente_ref":"ana@example.com","contexto":{"canal":""}}`,
		`{"cliente_ref":"cliente-0001","contexto":{"canal":"push"},"Contexto":{}}`,
		`{"cliente_ref":"cliente-0001","contexto":null}`,
		`{"cliente_ref":"cliente-0001","contexto":{"canal":"push","acciones_permitidas":[` + strings.Repeat("1,", 1000) + `1]}}`,
		`{"cliente_ref":"cliente-0001","cliente_ref":"cliente-0002","contexto":{"canal":"push"}}`,
		`{"cliente_ref":"` + strings.Repeat("a", 129) + `","contexto":{"canal":"` + strings.Repeat("ñ", 257) + `"}}`,
		``, `null`, `[]`, `{}`, `{`, `"x"`, "\xff", strings.Repeat("[", 100),
	} {
		f.Add([]byte(s))
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := fs.post("/v1/decisiones", body)
		m := fs.checkAnswer(t, "decisiones", rec, 200, 422, 429)
		if rec.Code == 200 {
			if id, _ := m["decision_id"].(string); id == "" {
				t.Fatalf("200 without decision_id: %s", rec.Body)
			}
			if m["detalle"] == nil {
				t.Fatalf("explicar:leer but no detalle: %s", rec.Body)
			}
		}
	})
}
