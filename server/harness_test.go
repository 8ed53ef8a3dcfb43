package server

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

type harness struct {
	t       *testing.T
	db      *store.DB
	clock   *clock.Fake
	engine  *engine.Engine
	batch   *batch.Runner
	hooks   *batch.Webhooks
	srv     *Server
	http    *httptest.Server
	secrets *store.Secrets
	closed  bool // the store was closed before the test's end (a restart)
}

var testStart = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{}, nil)
}

// newCatalogHarness is newHarness with the sandbox tenant "acme" (its
// settings changed by fn, nil: none), a token with every scope and a
// catalog of n coupons.
func newCatalogHarness(t *testing.T, n int, fn func(*store.Settings)) (*harness, string) {
	t.Helper()
	h := newHarness(t)
	h.tenant("acme", true, fn)
	tok := h.token("acme", allScopes...)
	h.catalog(tok, n)
	return h, tok
}

// newHarnessWith is newHarness with the server's Deps changed by fn.
func newHarnessWith(t *testing.T, fn func(*Deps)) *harness {
	t.Helper()
	return newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{}, fn)
}

// newHarnessOn is newHarness with the store on fs.
func newHarnessOn(t *testing.T, fs storefs.FS) *harness {
	t.Helper()
	return newHarnessAt(t, fs, zerolog.Nop(), HTTPConfig{}, nil)
}

// newHarnessHTTP is newHarness with a logger, HTTP limits and the server's
// Deps changed by fn (nil: none): the server runs as serve runs it, behind
// HTTPServer's listener.
func newHarnessHTTP(t *testing.T, log zerolog.Logger, cfg HTTPConfig, fn func(*Deps)) *harness {
	t.Helper()
	return newHarnessAt(t, storefs.Mem(), log, cfg, fn)
}

// newHarnessAt is newHarnessHTTP with the store on fs.
func newHarnessAt(t *testing.T, fs storefs.FS, log zerolog.Logger, cfg HTTPConfig, fn func(*Deps)) *harness {
	t.Helper()
	return newHarnessFull(t, fs, log, cfg, fn, nil)
}

// newHarnessWrapped is newHarnessWith with the server's handler wrapped
// by wrap (the OpenAPI check of docfilter_test.go).
func newHarnessWrapped(t *testing.T, fn func(*Deps), wrap func(http.Handler) http.Handler) *harness {
	t.Helper()
	return newHarnessFull(t, storefs.Mem(), zerolog.Nop(), HTTPConfig{}, fn, wrap)
}

// newHarnessFull is newHarnessAt with the server's handler wrapped by wrap
// (nil: none).
func newHarnessFull(t *testing.T, fs storefs.FS, log zerolog.Logger, cfg HTTPConfig, fn func(*Deps), wrap func(http.Handler) http.Handler) *harness {
	t.Helper()
	return newHarnessSeeded(t, fs, 42, log, cfg, fn, wrap)
}

// newHarnessSeeded is newHarnessFull with the engine's seed (a restarted
// process draws a new one; the other constructors fix it at 42).
func newHarnessSeeded(t *testing.T, fs storefs.FS, seed uint64, log zerolog.Logger, cfg HTTPConfig, fn func(*Deps), wrap func(http.Handler) http.Handler) *harness {
	t.Helper()
	db, err := store.Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, db: db, clock: clock.NewFake(testStart), secrets: store.TestSecrets()}
	h.engine = engine.New(engine.Config{DB: db, Secrets: h.secrets, Log: log, Now: h.clock.Now, Seed: seed})
	h.http = httptest.NewUnstartedServer(nil)
	signer, err := batch.NewURLSigner(h.secrets.URL, "http://"+h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h.hooks = batch.NewWebhooks(db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: true}), log, h.clock.Now, 7)
	h.batch = batch.NewRunner(batch.RunnerConfig{DB: db, Engine: h.engine, Log: log, Dir: filepath.Join(t.TempDir(), "results"),
		Now: h.clock.Now, Signer: signer, Webhooks: h.hooks})
	deps := Deps{Log: log, DB: db, Secrets: h.secrets, Now: h.clock.Now, Ready: func() bool { return true },
		Engine: h.engine, Batch: h.batch, Webhooks: h.hooks, WebhookAllowPrivate: true}
	if fn != nil {
		fn(&deps)
	}
	h.srv = New(deps)
	h.http.Config, h.http.Listener = h.srv.HTTPServer(h.http.Listener, cfg)
	if wrap != nil {
		h.http.Config.Handler = wrap(h.http.Config.Handler)
	}
	h.http.Start()
	t.Cleanup(func() {
		h.http.Close()
		if !h.closed {
			db.Close()
		}
	})
	return h
}

// tenant creates a tenant (sandbox: clock at testStart) with default
// settings changed by fn.
func (h *harness) tenant(id string, sandbox bool, fn func(*store.Settings)) {
	h.t.Helper()
	s := store.DefaultSettings()
	if fn != nil {
		fn(&s)
	}
	t := &store.Tenant{ID: id, CreatedAt: testStart, Sandbox: sandbox, ClockNow: testStart, Settings: s}
	if err := h.db.CreateTenant(t); err != nil {
		h.t.Fatal(err)
	}
}

// credential returns the client id and secret of the tenant's credential
// with scopes, created the first time it is asked for.
func (h *harness) credential(tenant string, scopes ...string) (id, secret string) {
	h.t.Helper()
	id = fmt.Sprintf("ci_%s_%x", tenant, sha256.Sum256([]byte(strings.Join(scopes, ","))))[:40]
	secret = "secret-" + id
	if _, ok := h.db.Credential(id); !ok {
		if err := h.db.CreateCredential(&store.Credential{ClientID: id, Tenant: tenant, Name: "test", Scopes: scopes, SecretHash: store.HashSecret(secret)}); err != nil {
			h.t.Fatal(err)
		}
	}
	return id, secret
}

// token creates a credential with scopes and returns a bearer token.
func (h *harness) token(tenant string, scopes ...string) string {
	h.t.Helper()
	id, secret := h.credential(tenant, scopes...)
	st, body := h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials"})
	if st != 200 {
		h.t.Fatalf("token: %d %v", st, body)
	}
	return body["access_token"].(string)
}

// allScopes is every scope.
var allScopes = []string{"eventos:publicar", "decisiones:pedir", "decisiones:confirmar", "campanas:escribir",
	"catalogo:escribir", "clientes:borrar", "clientes:exportar", "webhooks:escribir"}

// do sends a JSON request and decodes a JSON object answer.
func (h *harness) do(method, path, token string, body any, hdr ...string) (int, map[string]any) {
	h.t.Helper()
	resp := h.raw(method, path, token, body, hdr...)
	return resp.StatusCode, apitest.Object(h.t, resp)
}

func (h *harness) raw(method, path, token string, body any, hdr ...string) *http.Response {
	h.t.Helper()
	return apitest.Do(h.t, method, h.http.URL+path, token, body, hdr...)
}

// catalog installs a catalog of n coupons (ids 1..n).
func (h *harness) catalog(token string, n int) {
	h.t.Helper()
	var acciones []map[string]any
	for i := 1; i <= n; i++ {
		acciones = append(acciones, map[string]any{"id": i, "nombre": "cupon" + string(rune('a'+i-1)), "tipo_cupon": "T" + string(rune('A'+i-1)),
			"costo_envio_mxn": 0.5, "descuento_max_mxn": float64(10 * i), "descuento_pct": 10, "activa": true})
	}
	st, body := h.do("PUT", "/v1/catalogo-acciones", token, map[string]any{"acciones": acciones})
	if st != 200 {
		h.t.Fatalf("catalog: %d %v", st, body)
	}
}
