package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/store"
)

var refSeq atomic.Int64

// newRef returns a customer reference no other test uses.
func newRef() string { return fmt.Sprintf("cli-%06d-%d", refSeq.Add(1), time.Now().UnixNano()%1e6) }

func decisionRequest(ref string) client.PeticionDecision {
	return client.PeticionDecision{ClienteRef: ref, Contexto: client.Contexto{Canal: "push"}}
}

// TestDecideOneDecisionWhateverRetries: whatever goes wrong between the
// attempts of one Decide, the server holds exactly one decision for it, the
// one returned.
func TestDecideOneDecisionWhateverRetries(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBudget(5*time.Second),
		client.WithAttemptTimeout(250*time.Millisecond), client.WithBreaker(0, time.Second))
	installCatalog(t, c, 3)
	if err := c.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := func(f fault) func(*http.Request, int) fault {
		return func(r *http.Request, n int) fault {
			if r.URL.Path == "/v1/decisiones" && n == 1 {
				return f
			}
			return fault{}
		}
	}
	tests := []struct {
		name  string
		fault func(*http.Request, int) fault
	}{
		{"503 before the server", first(fault{status: 503, codigo: "no_disponible"})},
		{"answer lost as 503 after the server decided", first(fault{status: 503, codigo: "no_disponible", forward: true})},
		{"connection reset before the server", first(fault{reset: true})},
		{"connection reset after the server decided", first(fault{reset: true, forward: true})},
		{"500 after the server decided", first(fault{status: 500, codigo: "error_interno", forward: true})},
		{"slow answer past the attempt timeout", first(fault{forward: true, reset: true, delay: 500 * time.Millisecond})},
		{"409 while the first attempt runs", first(fault{status: 409, codigo: "idempotencia_conflicto", forward: true})},
		{"three failures", func(r *http.Request, n int) fault {
			if n%4 != 0 && r.URL.Path == "/v1/decisiones" {
				return fault{status: 502, codigo: "bad_gateway", forward: n%2 == 0}
			}
			return fault{}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy.mu.Lock()
			proxy.count["/v1/decisiones"] = 0
			proxy.mu.Unlock()
			proxy.set(tt.fault)
			defer proxy.set(nil)
			ref := newRef()
			d, err := c.Decide(context.Background(), decisionRequest(ref))
			if err != nil {
				t.Fatal(err)
			}
			if d.EnRespaldo {
				t.Fatalf("got the fallback (%v), want the engine's decision", d.Causa)
			}
			// Attempts after a reset on a reused connection may be resent
			// by net/http itself (the request carries an Idempotency-Key).
			if n := proxy.requests("/v1/decisiones"); n < 2 {
				t.Errorf("%d attempts reached the server, want at least 2", n)
			}
			decs, fbs := decisionsOf(t, c, ref)
			if len(decs) != 1 || len(fbs) != 0 {
				t.Fatalf("server holds %d decisions and %d fallback records for one Decide, want 1 and 0", len(decs), len(fbs))
			}
			if decs[0].DecisionID != d.DecisionID {
				t.Errorf("server holds %s, Decide returned %s", decs[0].DecisionID, d.DecisionID)
			}
		})
	}
}

// TestDecideFallbackWithinBudget: when the engine cannot answer in time,
// Decide returns the fallback within the budget plus 5 ms, and the fallback
// record reaches the server once it answers again.
func TestDecideFallbackWithinBudget(t *testing.T) {
	const budget = 100 * time.Millisecond
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(2), client.WithBreaker(0, time.Second),
		client.WithFallbackRetry(10*time.Millisecond, 50*time.Millisecond))
	installCatalog(t, c, 3)
	if err := c.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	onDecide := func(f fault) func(*http.Request, int) fault {
		return func(r *http.Request, n int) fault {
			if r.URL.Path == "/v1/decisiones" || r.URL.Path == "/v1/decisiones/respaldo" {
				return f
			}
			return fault{}
		}
	}
	tests := []struct {
		name     string
		fault    func(*http.Request, int) fault
		paused   bool
		attempts int           // requests that reach the proxy; 0: any
		within   time.Duration // the fallback comes within this
		cause    func(error) bool
		why      string // the Motivo's reason, after "respaldo: "
		decided  int    // engine decisions the server holds afterwards
	}{
		{name: "slow answers", fault: onDecide(fault{forward: true, delay: time.Second}), attempts: 1, within: budget + 5*time.Millisecond,
			cause: func(err error) bool {
				return errors.Is(err, client.ErrBudgetExhausted) && errors.Is(err, context.DeadlineExceeded)
			}, why: "el motor no respondió a tiempo", decided: 1},
		{name: "429 storm with Retry-After", fault: onDecide(fault{status: 429, codigo: "limite_excedido", retryAfter: 1}), attempts: 1,
			within: budget / 2, cause: func(err error) bool {
				var e *client.Error
				return errors.As(err, &e) && e.Status == 429 && e.RetryAfter == time.Second
			}, why: "el motor limitó las peticiones (429)"},
		{name: "tenant paused", paused: true, attempts: 1, within: budget / 2, cause: func(err error) bool {
			var e *client.Error
			return errors.As(err, &e) && e.Status == 503 && e.Codigo == "inquilino_pausado" && e.RetryAfter > 0
		}, why: "el inquilino está pausado"},
		{name: "connection resets", fault: onDecide(fault{reset: true}), within: budget + 5*time.Millisecond,
			cause: func(err error) bool { return errors.Is(err, client.ErrBudgetExhausted) }, why: "el motor no respondió a tiempo"},
		{name: "503 without Retry-After", fault: onDecide(fault{status: 503, codigo: "no_disponible"}),
			within: budget + 5*time.Millisecond, cause: func(err error) bool { return errors.Is(err, client.ErrBudgetExhausted) },
			why: "el motor no respondió a tiempo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := c.Stats().FallbackSent
			proxy.set(tt.fault)
			ts.setPaused(t, tt.paused)
			// Timing on a shared machine is noisy: the median of a few
			// runs, less the lateness of a plain timer beside each, must be
			// within the bound.
			const runs = 7
			var took []time.Duration
			var refs []string
			before := proxy.requests("/v1/decisiones")
			for i := 0; i < runs; i++ {
				refs = append(refs, newRef())
				var d *client.Decision
				var err error
				took = append(took, beyondTimer(budget, func() { d, err = c.Decide(context.Background(), decisionRequest(refs[i])) }))
				if err != nil {
					t.Fatal(err)
				}
				if !d.EnRespaldo || d.Accion != 2 || d.Propension != 1 || d.DecisionID != "" {
					t.Fatalf("got %+v, want the fallback action 2", d)
				}
				if !tt.cause(d.Causa) {
					t.Errorf("cause %v is not what this fault gives", d.Causa)
				}
				if want := "respaldo: " + tt.why + "; se aplicó la acción de respaldo del cliente"; d.Motivo != want {
					t.Errorf("motivo %q, want %q", d.Motivo, want)
				}
			}
			if tt.attempts > 0 {
				// An attempt may reach the proxy late on a busy machine:
				// count them all once they are in.
				want := runs * tt.attempts
				waitFor(t, 5*time.Second, func() bool { return proxy.requests("/v1/decisiones")-before >= want })
				time.Sleep(20 * time.Millisecond)
				if n := proxy.requests("/v1/decisiones") - before; n != want {
					t.Errorf("%d attempts reached the server for %d calls, want %d", n, runs, want)
				}
			}
			slices.Sort(took)
			t.Logf("fallback after %v (less the lateness of a plain timer)", took)
			if took[runs/2] > tt.within && !raceEnabled {
				t.Errorf("median fallback after %v, want within %v", took[runs/2], tt.within)
			}
			ref := refs[runs-1]
			sent += runs - 1
			// The engine is back for the records: the record arrives. The
			// fault stays on /v1/decisiones, so that an attempt that reaches
			// the proxy late on a busy machine (sent before the call fell
			// back) meets the fault it was sent into and is not decided.
			proxy.set(func(r *http.Request, n int) fault {
				if tt.fault != nil && r.URL.Path == "/v1/decisiones" {
					return tt.fault(r, n)
				}
				return fault{}
			})
			ts.setPaused(t, false)
			waitFor(t, 5*time.Second, func() bool { return c.Stats().FallbackSent > sent })
			decs, fbs := decisionsOf(t, c, ref)
			if len(fbs) != 1 || fbs[0].Accion != 2 || fbs[0].Canal != "push" || fbs[0].Propension != 1 {
				t.Fatalf("fallback records %+v, want one with accion 2", fbs)
			}
			if len(decs) != tt.decided {
				t.Errorf("server holds %d engine decisions, want %d", len(decs), tt.decided)
			}
		})
	}
}

// TestDecideServerDown: nothing listens; Decide answers the fallback within
// the budget, and the record is sent once a server listens again. The
// server is down and up on a Unix socket of the test's own
// (refusingSocket), which no other process can take meanwhile, as it could
// a loopback port.
func TestDecideServerDown(t *testing.T) {
	ts := newTestServer(t)
	down := refusingSocket(t)
	var dialer net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, "unix", down)
	}}
	defer tr.CloseIdleConnections()
	c := ts.newClient(t, "http://coupond.test", client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithFallback(0), client.WithBreaker(0, time.Second), client.WithFallbackRetry(10*time.Millisecond, 40*time.Millisecond))
	var err error
	const runs = 5
	var took []time.Duration
	var ref string
	for i := 0; i < runs; i++ {
		ref = newRef()
		var d *client.Decision
		took = append(took, beyondTimer(client.DefaultBudget, func() { d, err = c.Decide(context.Background(), decisionRequest(ref)) }))
		if err != nil || !d.EnRespaldo || d.Accion != 0 {
			t.Fatalf("got %+v, %v; want the fallback", d, err)
		}
		if !errors.Is(d.Causa, client.ErrBudgetExhausted) {
			t.Errorf("cause %v, want ErrBudgetExhausted", d.Causa)
		}
	}
	slices.Sort(took)
	t.Logf("fallback after %v (less the lateness of a plain timer)", took)
	if took[runs/2] > client.DefaultBudget+5*time.Millisecond && !raceEnabled {
		t.Errorf("median fallback after %v, want within the budget + 5 ms", took[runs/2])
	}
	time.Sleep(50 * time.Millisecond) // the records are retried meanwhile
	if st := c.Stats(); st.FallbackSent != 0 || st.FallbackPending != runs {
		t.Fatalf("while down: %+v, want the records pending", st)
	}
	// Back up on the same socket.
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", down)
	if err != nil {
		t.Fatal(err)
	}
	back := httptest.NewUnstartedServer(ts.api)
	back.Listener.Close()
	back.Listener = l
	back.Start()
	defer back.Close()
	waitFor(t, 5*time.Second, func() bool { return c.Stats().FallbackSent == runs })
	if _, fbs := decisionsOf(t, c, ref); len(fbs) != 1 {
		t.Fatalf("%d fallback records, want 1", len(fbs))
	}
}

// TestBreaker: after repeated failures Decide stops calling the engine and
// answers the fallback at once; a probe after the wait (on the Client's
// clock, a fake one here) closes the breaker when the engine answers, and
// a failed probe keeps it open.
func TestBreaker(t *testing.T) {
	const wait = time.Minute
	clk := newFakeTime()
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(1), client.WithBreaker(3, wait), client.WithBudget(time.Second),
		clk.option())
	installCatalog(t, c, 3)
	if err := c.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	down := func(r *http.Request, n int) fault {
		if r.URL.Path == "/v1/decisiones" {
			return fault{reset: true}
		}
		return fault{}
	}
	decide := func() (*client.Decision, time.Duration, int) {
		t.Helper()
		before := proxy.requests("/v1/decisiones")
		start := time.Now()
		d, err := c.Decide(context.Background(), decisionRequest(newRef()))
		if err != nil {
			t.Fatal(err)
		}
		return d, time.Since(start), proxy.requests("/v1/decisiones") - before
	}
	proxy.set(down)
	for i := 0; i < 3; i++ {
		if d, _, n := decide(); !d.EnRespaldo || n == 0 {
			t.Fatalf("failure %d: fallback %v after %d attempts, want a fallback after trying", i, d.EnRespaldo, n)
		}
	}
	if !c.Stats().BreakerOpen {
		t.Fatal("breaker closed after 3 failures")
	}
	// "At once": well inside the one-second budget an attempt would wait
	// out, with room for a loaded machine under -race (20 ms was the
	// tightest real-clock bound left in the suite).
	d, took, n := decide()
	if !errors.Is(d.Causa, client.ErrBreakerOpen) || n != 0 || took > 250*time.Millisecond {
		t.Fatalf("open breaker: cause %v, %d attempts, %v; want ErrBreakerOpen at once, no attempt", d.Causa, n, took)
	}
	clk.Advance(wait - time.Second)
	if d, _, n := decide(); !errors.Is(d.Causa, client.ErrBreakerOpen) || n != 0 {
		t.Fatalf("before the wait: cause %v after %d attempts, want ErrBreakerOpen", d.Causa, n)
	}
	// After the wait, one probe goes through; it fails: still open.
	clk.Advance(time.Second)
	if d, _, n := decide(); !d.EnRespaldo || n == 0 {
		t.Fatalf("probe: fallback %v after %d attempts, want a failed probe", d.EnRespaldo, n)
	}
	if d, _, n := decide(); !errors.Is(d.Causa, client.ErrBreakerOpen) || n != 0 {
		t.Fatalf("after a failed probe: cause %v after %d attempts, want ErrBreakerOpen", d.Causa, n)
	}
	// The engine is back: the next probe closes the breaker.
	proxy.set(nil)
	clk.Advance(wait)
	if d, _, n := decide(); d.EnRespaldo || n != 1 {
		t.Fatalf("probe with the engine back: fallback %v (%v) after %d attempts, want a decision", d.EnRespaldo, d.Causa, n)
	}
	st := c.Stats()
	if st.BreakerOpen || st.BreakerOpenings != 1 {
		t.Fatalf("after the probe: %+v, want closed after one opening", st)
	}
	if d, _, _ := decide(); d.EnRespaldo {
		t.Fatalf("closed breaker: fallback (%v)", d.Causa)
	}
}

// TestDecideErrors: answers a retry cannot fix come back as *Error at
// once, without fallback.
func TestDecideErrors(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBudget(5*time.Second))
	ctx := context.Background()
	d, err := c.Decide(ctx, client.PeticionDecision{ClienteRef: "x", Contexto: client.Contexto{Canal: "push"}})
	var apiErr *client.Error
	if d != nil || !errors.As(err, &apiErr) {
		t.Fatalf("got %+v, %v; want an *Error", d, err)
	}
	if apiErr.Status != 422 || apiErr.Codigo != client.CodigoValidacion || apiErr.Campo != "cliente_ref" || len(apiErr.Detail) == 0 ||
		apiErr.Detail[0].Type != "string_too_short" || apiErr.TraceID == "" {
		t.Errorf("422: got %+v", apiErr)
	}
	if n := proxy.requests("/v1/decisiones"); n != 1 {
		t.Errorf("%d attempts for a 422, want 1", n)
	}
	_, err = c.Confirm(ctx, "no-such-decision", client.PeticionEjecucion{Ejecutada: true})
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Codigo != "no_encontrado" || apiErr.TraceID == "" {
		t.Errorf("unknown decision: got %v", err)
	}
	bad, err := client.New(proxy.http.URL, ts.clientID, "wrong-secret", client.WithBudget(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(ctx)
	_, err = bad.Decide(ctx, decisionRequest(newRef()))
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Codigo != "no_autenticado" {
		t.Errorf("wrong secret: got %v, want 401 no_autenticado", err)
	}
	// No fallback configured: the failure comes back wrapped.
	proxy.set(func(r *http.Request, n int) fault {
		return fault{status: 429, codigo: "limite_excedido", retryAfter: 3}
	})
	nofb := ts.newClient(t, proxy.http.URL, client.WithBudget(time.Second))
	_, err = nofb.Decide(ctx, decisionRequest(newRef()))
	if !errors.Is(err, client.ErrNoFallback) || !errors.As(err, &apiErr) || apiErr.RetryAfter != 3*time.Second {
		t.Errorf("no fallback: got %v, want ErrNoFallback wrapping the 429", err)
	}
}

// beyondTimer runs f and returns how long it took less how late a plain
// timer of length d, started beside it, fired: the delay a busy machine
// adds to every deadline at that moment, which no client can avoid.
func beyondTimer(d time.Duration, f func()) time.Duration {
	late := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		time.Sleep(d)
		late <- time.Since(t0) - d
	}()
	start := time.Now()
	f()
	took := time.Since(start)
	return took - <-late
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", d)
		}
	}
}

// TestFallbackQueueBounded: with the server refusing, fallback records
// beyond the queue's size are dropped and counted; Close sends what is
// queued once the server answers, and gives up at its deadline otherwise.
func TestFallbackQueueBounded(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	proxy.set(func(r *http.Request, n int) fault { return fault{status: 503, codigo: "no_disponible"} })
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithFallbackQueue(2), client.WithBreaker(0, time.Second),
		client.WithFallbackRetry(5*time.Millisecond, 20*time.Millisecond))
	ctx := context.Background()
	refs := make([]string, 6)
	for i := range refs {
		refs[i] = newRef()
		if d, err := c.Decide(ctx, decisionRequest(refs[i])); err != nil || !d.EnRespaldo {
			t.Fatalf("decide %d: %+v, %v", i, d, err)
		}
	}
	st := c.Stats()
	// The sender holds one record; the queue holds 2 more.
	if st.Fallbacks != 6 || st.FallbackQueued+st.FallbackDropped != 6 || st.FallbackDropped < 3 || st.FallbackQueued > 3 {
		t.Fatalf("stats %+v, want 6 fallbacks, at most 3 queued and the rest dropped", st)
	}
	proxy.set(nil)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		t.Fatal(err)
	}
	st = c.Stats()
	if st.FallbackSent != st.FallbackQueued || st.FallbackPending != 0 {
		t.Fatalf("after Close: %+v, want every queued record sent", st)
	}
	held := 0
	for _, ref := range refs {
		_, fbs := decisionsOf(t, ts.newClient(t, ts.url), ref)
		held += len(fbs)
	}
	if int64(held) != st.FallbackSent {
		t.Errorf("server holds %d fallback records, client sent %d", held, st.FallbackSent)
	}

	// Close with the server still refusing: gives up at the deadline.
	c2 := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBreaker(0, time.Second))
	proxy.set(func(r *http.Request, n int) fault { return fault{status: 503, codigo: "no_disponible"} })
	c2.Decide(ctx, decisionRequest(newRef()))
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if err := c2.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the deadline", err)
	}
	if st := c2.Stats(); st.FallbackDropped != 1 || st.FallbackPending != 0 {
		t.Fatalf("after Close: %+v, want the record dropped", st)
	}
}

// TestFullFlow: decide, send, publish CUPON_RECIBIDO with the decision_id,
// confirm; the server links them.
func TestFullFlow(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url, client.WithFallback(0), client.WithBudget(5*time.Second))
	installCatalog(t, c, 3)
	ctx := context.Background()
	var d *client.Decision
	var ref string
	for i := 0; i < 50 && (d == nil || d.Accion == 0); i++ {
		ref = newRef()
		var err error
		if d, err = c.Decide(ctx, decisionRequest(ref)); err != nil || d.EnRespaldo {
			t.Fatalf("decide: %+v, %v", d, err)
		}
		if d.Accion == 0 {
			if _, err := c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d.Accion == 0 {
		t.Fatal("no coupon decided for 50 customers")
	}
	now := time.Now().UTC().Truncate(time.Second)
	res, err := c.PublishEvents(ctx, []client.Evento{{EventID: "rx-" + ref, ClienteRef: ref, Ts: now, DecisionID: &d.DecisionID,
		Tipo: client.CuponRecibido, Clave: fmt.Sprintf("T%d", d.Accion),
		Extra: &client.ExtraCuponRecibido{CuponEmitidoID: "cup-" + ref, Caducidad: now.Add(720 * time.Hour), Canal: client.Ptr("push")}}})
	if err != nil || res.Aceptados != 1 {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	conf, err := c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true})
	if err != nil || conf.EstadoEjecucion != "ejecutada" {
		t.Fatalf("confirm: %+v, %v", conf, err)
	}
	_, err = c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Codigo != "ejecucion_ya_confirmada" {
		t.Errorf("second confirmation: %v, want 409 ejecucion_ya_confirmada", err)
	}
	x, err := c.ExportCustomer(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Decisiones) != 1 || x.Decisiones[0].EstadoEjecucion != "ejecutada" || len(x.Eventos) != 1 ||
		*x.Eventos[0].DecisionID != d.DecisionID || len(x.VinculosCupon) != 1 || *x.VinculosCupon[0].DecisionID != d.DecisionID {
		t.Fatalf("export %+v", x)
	}
	del, err := c.DeleteCustomer(ctx, ref)
	if err != nil || del.Estado != "programado" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	camp, err := c.PutCampaign(ctx, "navidad", client.Campana{Canal: "sms", Descripcion: "Navidad", MaxDescuentoMXN: client.Ptr(1500.5)})
	if err != nil || camp.MaxDescuentoMXN == nil || *camp.MaxDescuentoMXN != 1500.5 || camp.MaxEnvios != nil {
		t.Fatalf("campaign: %+v, %v", camp, err)
	}
	if got, err := c.Campaign(ctx, "navidad"); err != nil || got.Descripcion != "Navidad" {
		t.Fatalf("campaign get: %+v, %v", got, err)
	}
	if cat, err := c.Catalog(ctx); err != nil || len(cat.Acciones) != 3 || cat.Version < 1 {
		t.Fatalf("catalog: %+v, %v", cat, err)
	}
}

// TestDecideCanceledBetweenAttempts: a caller that cancels while Decide
// waits before a retry gets its context's error, as when it cancels during
// an attempt: no fallback decision, no fallback record, no breaker failure.
func TestDecideCanceledBetweenAttempts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"decisiones:pedir","token_type":"Bearer"}`)
			return
		}
		// Cancel once Decide waits the Retry-After (or, on a slow
		// machine, right after this attempt: the same answer is due).
		time.AfterFunc(100*time.Millisecond, cancel)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(503)
		fmt.Fprint(w, `{"codigo":"error_interno","mensaje":"no","campo":null,"detalle":null,"trace_id":"t1"}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithFallback(0), client.WithBudget(10*time.Second), client.WithBreaker(1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second) // a record queued by mistake is never accepted
		defer ccancel()
		c.Close(cctx)
	}()
	d, err := c.Decide(ctx, decisionRequest(newRef()))
	if d != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %+v, %v; want context.Canceled", d, err)
	}
	if st := c.Stats(); st.Fallbacks != 0 || st.FallbackQueued != 0 || st.BreakerOpen {
		t.Errorf("stats %+v, want no fallback and the breaker closed", st)
	}
}

// TestDecideRejectsBadOptions: a per-call option out of range is the
// caller's mistake, answered with an error naming it, as New does for the
// Client's options: no attempt, no fallback decision, no fallback record
// claiming the engine did not answer, and no failure counted by the
// breaker, which would otherwise open for every other call.
func TestDecideRejectsBadOptions(t *testing.T) {
	var decides, records atomic.Int64
	c := stubDecisionClient(t, &decides, &records)
	ctx := context.Background()
	tests := []struct {
		name string
		opt  client.DecideOption
		want string
	}{
		{"zero budget", client.Budget(0), "Budget"},
		{"negative budget", client.Budget(-time.Second), "Budget"},
		{"negative fallback action", client.FallbackAction(-1), "FallbackAction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := 0; i < 3; i++ {
				d, err := c.Decide(ctx, decisionRequest(newRef()), tt.opt)
				if d != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %+v, %v; want an error naming %s", d, err, tt.want)
				}
			}
		})
	}
	if st := c.Stats(); st.Fallbacks != 0 || st.FallbackQueued != 0 || st.BreakerOpen || decides.Load() != 0 {
		t.Errorf("after refused options: %+v and %d attempts; want no fallback, no attempt, the breaker closed", st, decides.Load())
	}
	d, err := c.Decide(ctx, decisionRequest(newRef()))
	if err != nil || d.EnRespaldo || d.DecisionID != "d-1" {
		t.Fatalf("a good call afterwards: %+v, %v; want the engine's decision", d, err)
	}
	if n := records.Load(); n != 0 {
		t.Errorf("%d fallback records sent, want none", n)
	}
}

// stubDecisionClient returns a Client (fallback 0, breaker after 2
// failures for a minute, budget 5 s) of a stub server that answers
// decision d-1 and accepts fallback records, counting both.
func stubDecisionClient(t *testing.T, decides, records *atomic.Int64) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/token":
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"x","token_type":"Bearer"}`)
		case "/v1/decisiones/respaldo":
			records.Add(1)
			fmt.Fprint(w, `{}`)
		default:
			decides.Add(1)
			fmt.Fprint(w, `{"decision_id":"d-1","accion":1,"accion_nombre":"cupon1","propension":0.5,"politica_version":"v1",`+
				`"explorado":false,"en_control":false,"en_respaldo":false,"caduca_en":"2030-01-01T00:00:00Z","motivo":"m"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithFallback(0), client.WithBreaker(2, time.Minute), client.WithBudget(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestDecideDeadlinePassedBeforeCall: a caller whose context's deadline
// passed before it called Decide gets the fallback (its deadline is the
// budget), but the engine was never asked, so the breaker counts no
// failure: callers that come late must not make the fallback everybody's
// answer. The fallback is recorded, since the caller applies it.
func TestDecideDeadlinePassedBeforeCall(t *testing.T) {
	var decides, records atomic.Int64
	c := stubDecisionClient(t, &decides, &records)
	late, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	for i := 0; i < 5; i++ {
		d, err := c.Decide(late, decisionRequest(newRef()))
		if err != nil || !d.EnRespaldo || !errors.Is(d.Causa, client.ErrBudgetExhausted) || !errors.Is(d.Causa, context.DeadlineExceeded) {
			t.Fatalf("got %+v, %v; want the fallback for a spent deadline", d, err)
		}
	}
	if st := c.Stats(); st.BreakerOpen || st.Fallbacks != 5 {
		t.Fatalf("after 5 late calls: %+v; want 5 fallbacks and the breaker closed", st)
	}
	d, err := c.Decide(context.Background(), decisionRequest(newRef()))
	if err != nil || d.EnRespaldo || d.DecisionID != "d-1" {
		t.Fatalf("a call in time afterwards: %+v, %v; want the engine's decision", d, err)
	}
	waitFor(t, 5*time.Second, func() bool { return records.Load() == 5 })
}

// TestRecordFallback: a caller that applied its own rule without a
// Decision from the library (Decide answered ErrNoFallback, or a batch job
// failed) records it with RecordFallback, as the spec asks; the server
// holds it as a fallback record with propensity 1, and a record the
// server refuses comes back as its *Error naming the field.
func TestRecordFallback(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url)
	installCatalog(t, c, 3)
	ctx := context.Background()
	ref := newRef()
	if err := c.RecordFallback(ctx, client.PeticionRespaldo{Accion: 2, Canal: "sms", ClienteRef: ref, CampanaID: "verano"}); err != nil {
		t.Fatal(err)
	}
	decs, fbs := decisionsOf(t, c, ref)
	if len(decs) != 0 || len(fbs) != 1 || fbs[0].Accion != 2 || fbs[0].Canal != "sms" || fbs[0].CampanaID != "verano" || fbs[0].Propension != 1 {
		t.Fatalf("server holds %+v and %+v, want one fallback record of action 2", decs, fbs)
	}
	err := c.RecordFallback(ctx, client.PeticionRespaldo{Accion: 9, Canal: "sms", ClienteRef: ref})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Campo != "accion" {
		t.Fatalf("action not in the catalog: %v, want 422 at accion", err)
	}
}

// TestFallbackRecordedOnceWhateverRetries: a fallback record whose answer
// is lost after the server stored it (reset, 502) is sent again with the
// same Idempotency-Key and stored once, by RecordFallback and by Decide's
// own queue. Without a key each retry stored another record with
// propensity 1.
func TestFallbackRecordedOnceWhateverRetries(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(2), client.WithBreaker(0, time.Second),
		client.WithFallbackRetry(10*time.Millisecond, 50*time.Millisecond))
	installCatalog(t, c, 3)
	first := func(f fault) func(*http.Request, int) fault {
		return func(r *http.Request, n int) fault {
			if r.URL.Path == "/v1/decisiones/respaldo" && n == 1 {
				return f
			}
			return fault{}
		}
	}
	for _, f := range []fault{{reset: true, forward: true}, {status: 502, codigo: "bad_gateway", forward: true}} {
		proxy.mu.Lock()
		proxy.count["/v1/decisiones/respaldo"] = 0
		proxy.mu.Unlock()
		proxy.set(first(f))
		ref := newRef()
		if err := c.RecordFallback(context.Background(), client.PeticionRespaldo{Accion: 1, Canal: "sms", ClienteRef: ref}); err != nil {
			t.Fatalf("%+v: RecordFallback: %v", f, err)
		}
		if _, fbs := decisionsOf(t, c, ref); len(fbs) != 1 {
			t.Errorf("%+v: RecordFallback: server holds %d fallback records, want 1", f, len(fbs))
		}
	}
	// Decide's queue: the engine does not answer (503), then the record's
	// first delivery is stored but its answer lost.
	proxy.mu.Lock()
	proxy.count["/v1/decisiones/respaldo"] = 0
	proxy.mu.Unlock()
	proxy.set(func(r *http.Request, n int) fault {
		switch {
		case r.URL.Path == "/v1/decisiones":
			return fault{status: 503, codigo: "no_disponible"}
		case r.URL.Path == "/v1/decisiones/respaldo" && n == 1:
			return fault{reset: true, forward: true}
		}
		return fault{}
	})
	defer proxy.set(nil)
	ref := newRef()
	if d, err := c.Decide(context.Background(), decisionRequest(ref)); err != nil || !d.EnRespaldo {
		t.Fatalf("Decide: %+v, %v; want the fallback", d, err)
	}
	waitFor(t, 5*time.Second, func() bool { return proxy.requests("/v1/decisiones/respaldo") >= 2 && c.Stats().FallbackPending == 0 })
	if _, fbs := decisionsOf(t, c, ref); len(fbs) != 1 {
		t.Errorf("Decide's fallback: server holds %d fallback records, want 1", len(fbs))
	}
}

// TestConfirmAfterLostAnswer: a confirmation whose first attempt the server
// stored but whose answer was lost (reset, 502) is retried with the same
// Idempotency-Key, and Confirm returns the stored outcome; the server holds
// one confirmation, and a second Confirm call is still 409
// ejecucion_ya_confirmada. Without a key the retry got that 409 for the
// caller's own confirmation.
func TestConfirmAfterLostAnswer(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBudget(5*time.Second))
	installCatalog(t, c, 3)
	ctx := context.Background()
	for _, f := range []fault{{reset: true, forward: true}, {status: 502, codigo: "bad_gateway", forward: true}} {
		proxy.set(func(r *http.Request, n int) fault {
			if strings.HasSuffix(r.URL.Path, "/ejecucion") && n == 1 {
				return f
			}
			return fault{}
		})
		ref := newRef()
		d, err := c.Decide(ctx, decisionRequest(ref))
		if err != nil || d.EnRespaldo {
			t.Fatalf("%+v: Decide: %+v, %v", f, d, err)
		}
		conf, err := c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true})
		want := &client.RespuestaEjecucion{DecisionID: d.DecisionID, EstadoEjecucion: "ejecutada"}
		if diff := cmp.Diff(want, conf); err != nil || diff != "" {
			t.Errorf("%+v: Confirm: %v (-want +got):\n%s", f, err, diff)
		}
		if n := proxy.requests("/v1/decisiones/" + d.DecisionID + "/ejecucion"); n != 2 {
			t.Errorf("%+v: %d confirmation attempts reached the proxy, want 2", f, n)
		}
		if decs, _ := decisionsOf(t, c, ref); len(decs) != 1 || decs[0].EstadoEjecucion != "ejecutada" {
			t.Errorf("%+v: server holds %+v, want one decision, ejecutada", f, decs)
		}
		_, err = c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true})
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Codigo != "ejecucion_ya_confirmada" {
			t.Errorf("%+v: a second Confirm call: %v, want 409 ejecucion_ya_confirmada", f, err)
		}
	}
	proxy.set(nil)
}

// TestFallbackReplacesLostDecision: when coupond decided but no answer
// reached the client (every attempt's answer replaced by a 502 after the
// server stored the decision), the fallback record Decide queues names
// the attempts' Idempotency-Key, and the server voids the lost decision:
// the export shows it rechazada (with the confirmation's motivo_rechazo)
// beside the fallback record, and the customer's next Decide is a new
// decision, not the lost one given back for its reward window.
func TestFallbackReplacesLostDecision(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBudget(300*time.Millisecond),
		client.WithBreaker(0, time.Second), client.WithFallbackRetry(10*time.Millisecond, 50*time.Millisecond))
	installCatalog(t, c, 3)
	proxy.set(func(r *http.Request, _ int) fault {
		if r.URL.Path == "/v1/decisiones" {
			return fault{status: 502, codigo: "bad_gateway", forward: true}
		}
		return fault{}
	})
	ref := newRef()
	if d, err := c.Decide(context.Background(), decisionRequest(ref)); err != nil || !d.EnRespaldo {
		t.Fatalf("Decide: %+v, %v; want the fallback", d, err)
	}
	proxy.set(nil)
	waitFor(t, 5*time.Second, func() bool { return c.Stats().FallbackPending == 0 })
	lost, fbs := decisionsOf(t, c, ref)
	if len(lost) != 1 || len(fbs) != 1 {
		t.Fatalf("server holds %d decisions and %d fallback records, want 1 and 1", len(lost), len(fbs))
	}
	if lost[0].EstadoEjecucion != "rechazada" {
		t.Errorf("lost decision %s, want rechazada", lost[0].EstadoEjecucion)
	}
	next, err := c.Decide(context.Background(), decisionRequest(ref))
	if err != nil || next.EnRespaldo || next.DecisionID == lost[0].DecisionID {
		t.Errorf("next Decide: %+v, %v; want a new decision, not %s", next, err, lost[0].DecisionID)
	}
}

// TestRecordFallbackReplacingLostDecision: without a fallback action, the
// caller records its own rule with RecordFallback and Replacing(err) of
// Decide's error, and the lost decision is voided as with Decide's own
// queue; without Replacing it keeps the customer's reward window.
func TestRecordFallbackReplacingLostDecision(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL, client.WithBudget(300*time.Millisecond), client.WithBreaker(0, time.Second))
	installCatalog(t, c, 3)
	ctx := context.Background()
	for _, replacing := range []bool{true, false} {
		proxy.set(func(r *http.Request, _ int) fault {
			if r.URL.Path == "/v1/decisiones" {
				return fault{status: 502, codigo: "bad_gateway", forward: true}
			}
			return fault{}
		})
		ref := newRef()
		_, err := c.Decide(ctx, decisionRequest(ref))
		if !errors.Is(err, client.ErrNoFallback) || !errors.Is(err, client.ErrBudgetExhausted) {
			t.Fatalf("Decide: %v; want ErrNoFallback wrapping ErrBudgetExhausted", err)
		}
		proxy.set(nil)
		var opts []client.RecordOption
		if replacing {
			opts = append(opts, client.Replacing(err))
		}
		if err := c.RecordFallback(ctx, client.PeticionRespaldo{Canal: "push", ClienteRef: ref}, opts...); err != nil {
			t.Fatal(err)
		}
		lost, _ := decisionsOf(t, c, ref)
		if len(lost) != 1 {
			t.Fatalf("replacing %v: %d engine decisions, want 1", replacing, len(lost))
		}
		if voided := lost[0].EstadoEjecucion == "rechazada"; voided != replacing {
			t.Errorf("replacing %v: lost decision %s", replacing, lost[0].EstadoEjecucion)
		}
	}
}

// TestCanceledDecideReplaceable: a caller that cancels Decide after its
// request reached coupond gets context.Canceled (errors.Is), and the
// decision coupond made, whose answer never arrived, would hold the
// customer's reward window for weeks. Replacing(err) names the request's
// Idempotency-Key, so RecordFallback of what the caller did (nothing,
// accion 0) voids that decision and the customer's next Decide is a new
// one; without Replacing the lost decision stays pendiente.
func TestCanceledDecideReplaceable(t *testing.T) {
	ts := newTestServer(t)
	var mu sync.Mutex
	var cancelDecide context.CancelFunc
	// Cancel the caller once coupond has made the decision; the proxy then
	// holds its answer until the caller has gone.
	decided := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.api.ServeHTTP(w, r)
		if r.URL.Path == "/v1/decisiones" {
			mu.Lock()
			cancelDecide()
			mu.Unlock()
		}
	})
	proxy := newFaultProxy(t, decided)
	proxy.set(func(r *http.Request, _ int) fault {
		if r.URL.Path == "/v1/decisiones" {
			return fault{delay: 10 * time.Second}
		}
		return fault{}
	})
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithBudget(5*time.Second))
	installCatalog(t, c, 3)
	for _, tt := range []struct {
		replacing bool
		want      string // the lost decision's estado_ejecucion
	}{
		{replacing: true, want: "rechazada"},
		{replacing: false, want: "pendiente"},
	} {
		ref := newRef()
		ctx, cancel := context.WithCancel(context.Background())
		mu.Lock()
		cancelDecide = cancel
		mu.Unlock()
		d, err := c.Decide(ctx, decisionRequest(ref))
		cancel()
		if d != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Decide: %+v, %v; want context.Canceled", d, err)
		}
		var opts []client.RecordOption
		if tt.replacing {
			opts = append(opts, client.Replacing(err))
		}
		if err := c.RecordFallback(context.Background(), client.PeticionRespaldo{Canal: "push", ClienteRef: ref}, opts...); err != nil {
			t.Fatal(err)
		}
		lost, fbs := decisionsOf(t, c, ref)
		if len(lost) != 1 || len(fbs) != 1 {
			t.Fatalf("replacing %v: %d engine decisions and %d fallback records, want 1 and 1", tt.replacing, len(lost), len(fbs))
		}
		if diff := cmp.Diff(tt.want, lost[0].EstadoEjecucion); diff != "" {
			t.Errorf("replacing %v: the lost decision's estado (-want +got):\n%s", tt.replacing, diff)
		}
	}
	if st := c.Stats(); st.Fallbacks != 0 || st.FallbackQueued != 0 {
		t.Errorf("stats %+v, want no fallback of Decide's own", st)
	}
}

// TestDecideCustomerCapIsNoFallback: the fourth decision request for one
// customer in a day is the 429 of the customer's cap, which names
// cliente_ref; Decide returns it as an *Error, with no fallback decision and
// no fallback record, where a 429 of the credential's rate gives the
// fallback (TestDecideFallbackWithinBudget): the caller's own rule would
// send a coupon to a customer the engine has already decided for today.
func TestDecideCustomerCapIsNoFallback(t *testing.T) {
	ts := newTestServer(t)
	if _, err := ts.db.UpdateTenant(ts.tenant, func(tn *store.Tenant) error {
		tn.Settings.RateLimits = true // the cap, as on a tenant that is not a sandbox's
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c := ts.newClient(t, ts.url, client.WithFallback(2))
	installCatalog(t, c, 3)
	ref := newRef()
	for i := 0; i < 3; i++ {
		if _, err := c.Decide(context.Background(), decisionRequest(ref), client.Budget(5*time.Second)); err != nil {
			t.Fatalf("decision %d: %v", i+1, err)
		}
	}
	d, err := c.Decide(context.Background(), decisionRequest(ref), client.Budget(5*time.Second))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.Campo != "cliente_ref" || e.RetryAfter <= 0 {
		t.Fatalf("fourth decision: %+v, %v; want the 429 of the customer's cap naming cliente_ref, with Retry-After", d, err)
	}
	if d != nil {
		t.Errorf("fourth decision returned %+v with its error, want none", d)
	}
	if st := c.Stats(); st.FallbackQueued != 0 || st.Fallbacks != 0 {
		t.Errorf("stats %+v: a fallback was given or queued for the customer's cap", st)
	}
}
