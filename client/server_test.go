package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// testServer is the real coupond server in process, over a real Pebble
// store in a directory, wired as cli/services.go wires it, with one tenant
// and one credential holding every scope.
type testServer struct {
	db       *store.DB
	api      *server.Server
	http     *httptest.Server
	url      string
	tenant   string
	clientID string
	secret   string
	stop     func()
}

// allScopes is every scope a test credential needs.
var allScopes = []string{"eventos:publicar", "decisiones:pedir", "decisiones:confirmar", "campanas:escribir",
	"catalogo:escribir", "clientes:borrar", "clientes:exportar", "webhooks:escribir"}

// startServer starts a server whose store lives in dir. The tenant is a
// sandbox with rate limits off (so tests may decide often for one
// customer), its clock at the real time of start.
func startServer(dir string) (*testServer, error) {
	db, err := store.Open(filepath.Join(dir, "db"), nil)
	if err != nil {
		return nil, err
	}
	secrets := store.TestSecrets()
	log := zerolog.Nop()
	eng := engine.New(engine.Config{DB: db, Secrets: secrets, Log: log, Now: time.Now, Seed: 42})
	hs := httptest.NewUnstartedServer(nil)
	ts := &testServer{db: db, http: hs, url: "http://" + hs.Listener.Addr().String(), tenant: "acme",
		clientID: "ci_acme_client", secret: "s3cret-for-tests-only"}
	signer, err := batch.NewURLSigner(secrets.URL, ts.url)
	if err != nil {
		return nil, err
	}
	hooks := batch.NewWebhooks(db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: true}), log, time.Now, 7)
	runner := batch.NewRunner(batch.RunnerConfig{DB: db, Engine: eng, Log: log, Dir: filepath.Join(dir, "results"),
		Now: time.Now, Signer: signer, Webhooks: hooks})
	ts.api = server.New(server.Deps{Log: log, DB: db, Secrets: secrets, Now: time.Now, Ready: func() bool { return true },
		Engine: eng, Batch: runner, Webhooks: hooks, WebhookAllowPrivate: true})
	hs.Config.Handler = ts.api
	hs.Start()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); runner.Run(ctx) }()
	go func() { defer wg.Done(); hooks.Run(ctx) }()
	ts.stop = func() {
		cancel()
		wg.Wait()
		hs.Close()
		db.Close()
	}
	settings := store.DefaultSettings()
	settings.RateLimits = false
	now := time.Now().UTC()
	if err := db.CreateTenant(&store.Tenant{ID: ts.tenant, CreatedAt: now, Sandbox: true, ClockNow: now, Settings: settings}); err != nil {
		return nil, err
	}
	if err := db.CreateCredential(&store.Credential{ClientID: ts.clientID, Tenant: ts.tenant, Name: "test",
		Scopes: allScopes, SecretHash: store.HashSecret(ts.secret)}); err != nil {
		return nil, err
	}
	return ts, nil
}

// newTestServer starts a server for one test and stops it when the test
// ends.
func newTestServer(tb testing.TB) *testServer {
	tb.Helper()
	ts, err := startServer(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ts.stop)
	return ts
}

// setPaused pauses or resumes the tenant, as "admin tenant set --paused".
func (ts *testServer) setPaused(tb testing.TB, paused bool) {
	tb.Helper()
	if _, err := ts.db.UpdateTenant(ts.tenant, func(t *store.Tenant) error {
		t.Settings.Paused = paused
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// newClient returns a client of url with the server's credential, closed
// when the test ends.
func (ts *testServer) newClient(tb testing.TB, url string, opts ...client.Option) *client.Client {
	tb.Helper()
	c, err := client.New(url, ts.clientID, ts.secret, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// catalog installs n coupons, ids 1..n.
func installCatalog(tb testing.TB, c *client.Client, n int) {
	tb.Helper()
	var acciones []client.AccionCatalogo
	for i := 1; i <= n; i++ {
		acciones = append(acciones, client.AccionCatalogo{ID: i, Nombre: fmt.Sprintf("cupon%d", i), TipoCupon: fmt.Sprintf("T%d", i),
			CostoEnvioMXN: 0.5, DescuentoMaxMXN: client.Ptr(float64(10 * i)), DescuentoPct: client.Ptr(10.0), Activa: client.Ptr(true)})
	}
	if _, err := c.PutCatalog(context.Background(), client.Catalogo{Acciones: acciones}); err != nil {
		tb.Fatal(err)
	}
}

// decisionsOf returns the engine decisions and the fallback records the
// server holds for a customer, from the customer export.
func decisionsOf(tb testing.TB, c *client.Client, ref string) (engineDecisions, fallbacks []client.DecisionExportada) {
	tb.Helper()
	x, err := c.ExportCustomer(context.Background(), ref)
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range x.Decisiones {
		if d.EnRespaldo {
			fallbacks = append(fallbacks, d)
		} else {
			engineDecisions = append(engineDecisions, d)
		}
	}
	return engineDecisions, fallbacks
}

// faultProxy stands in front of a handler and injects faults: fn decides,
// per request (n counts requests to the path, from 1), what happens.
type faultProxy struct {
	t     testing.TB
	next  http.Handler
	http  *httptest.Server
	mu    sync.Mutex
	count map[string]int
	fault func(r *http.Request, n int) fault
}

// fault is what the proxy does with one request.
type fault struct {
	status     int           // answer this status (with an ErrorV1 body) instead of forwarding
	codigo     string        // its codigo
	retryAfter int           // its Retry-After, seconds
	forward    bool          // with status: forward to the server first, then answer status
	delay      time.Duration // sleep before answering (after forwarding)
	reset      bool          // close the connection without an answer (after forwarding if forward)
	down       bool          // refuse as if nothing listened: close at once
}

func newFaultProxy(tb testing.TB, next http.Handler) *faultProxy {
	p := &faultProxy{t: tb, next: next, count: map[string]int{}}
	p.http = httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(p.http.Close)
	return p
}

func (p *faultProxy) set(fn func(r *http.Request, n int) fault) {
	p.mu.Lock()
	p.fault = fn
	p.mu.Unlock()
}

// requests returns how many requests reached path.
func (p *faultProxy) requests(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[path]
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.count[r.URL.Path]++
	n, fn := p.count[r.URL.Path], p.fault
	p.mu.Unlock()
	var f fault
	if fn != nil && r.URL.Path != "/v1/token" {
		f = fn(r, n)
	}
	switch {
	case f.down:
		hijackClose(w)
		return
	case f.status == 0 && !f.reset:
		rec := httptest.NewRecorder()
		p.next.ServeHTTP(rec, r)
		sleepCtx(r.Context(), f.delay)
		copyResponse(w, rec)
		return
	case f.forward:
		p.next.ServeHTTP(httptest.NewRecorder(), r)
	}
	sleepCtx(r.Context(), f.delay)
	if f.reset {
		hijackClose(w)
		return
	}
	if f.retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(f.retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	fmt.Fprintf(w, `{"codigo":%q,"mensaje":"inyectado","campo":null,"detalle":null,"trace_id":"t-fault"}`, f.codigo)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// hijackClose resets the connection: SO_LINGER 0 sends an RST.
func hijackClose(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// exampleServer starts a server for the examples, which have no
// testing.TB; stop removes it.
func exampleServer() (ts *testServer, stop func()) {
	dir, err := os.MkdirTemp("", "coupond-example-")
	if err != nil {
		panic(err)
	}
	ts, err = startServer(dir)
	if err != nil {
		panic(err)
	}
	c, err := client.New(ts.url, ts.clientID, ts.secret)
	if err != nil {
		panic(err)
	}
	installCatalog(panicTB{}, c, 3)
	c.Close(context.Background())
	return ts, func() {
		ts.stop()
		os.RemoveAll(dir)
	}
}

// panicTB is the testing.TB of examples: a failure panics.
type panicTB struct{ testing.TB }

func (panicTB) Helper()                   {}
func (panicTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (panicTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
