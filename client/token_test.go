package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// TestTokenCachedAndRenewedEarly: one token serves many calls, and a token
// near its expiry (on the Client's clock, a fake one here) is renewed in
// the background while calls keep using it: the renewal's token request is
// held until the call has returned, so a call that waited for it would
// never return.
func TestTokenCachedAndRenewedEarly(t *testing.T) {
	clk := newFakeTime()
	var tokens, calls atomic.Int64
	var lastUA, lastAuth atomic.Value
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastUA.Store(r.Header.Get("User-Agent"))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			id, secret, ok := r.BasicAuth()
			if !ok || id != "ci_x" || secret != "sec" || r.FormValue("grant_type") != "client_credentials" {
				w.WriteHeader(401)
				fmt.Fprint(w, `{"codigo":"no_autenticado","mensaje":"no","campo":null,"detalle":null,"trace_id":"t1"}`)
				return
			}
			n := tokens.Add(1)
			if n >= 2 {
				<-release // the renewal answers only once the test lets it
			}
			fmt.Fprintf(w, `{"access_token":"tok%d","expires_in":900,"scope":"catalogo:escribir","token_type":"Bearer"}`, n)
			return
		}
		calls.Add(1)
		lastAuth.Store(r.Header.Get("Authorization"))
		if got, want := r.Header.Get("Authorization"), fmt.Sprintf("Bearer tok%d", tokens.Load()); got != want && tokens.Load() == 1 {
			t.Errorf("Authorization %q, want %q", got, want)
		}
		fmt.Fprint(w, `{"acciones":[],"version":0}`)
	}))
	defer srv.Close()
	defer free() // before srv.Close, which waits for the held request
	c, err := client.New(srv.URL, "ci_x", "sec", clk.option())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := c.Catalog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := tokens.Load(); n != 1 {
		t.Fatalf("%d tokens for 20 calls, want 1", n)
	}
	if ua, _ := lastUA.Load().(string); !strings.HasPrefix(ua, "coupond-go/") {
		t.Errorf("User-Agent %q", ua)
	}
	// The 900 s token is valid for 895 s and renewed from 775 s on.
	clk.Advance(770 * time.Second)
	if _, err := c.Catalog(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // a renewal started too soon would reach the server
	if n := tokens.Load(); n != 1 {
		t.Fatalf("%d token requests 770 s into a 900 s token, want 1", n)
	}
	clk.Advance(10 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := c.Catalog(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call during renewal waited for the held token request")
	}
	free()
	waitFor(t, 2*time.Second, func() bool {
		_, err := c.Catalog(ctx)
		return err == nil && lastAuth.Load() == "Bearer tok2"
	})
	// Past the renewed token's expiry, a call waits for a new one.
	clk.Advance(900 * time.Second)
	if _, err := c.Catalog(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tokens.Load(); n != 3 {
		t.Errorf("%d token requests once the token expired, want 3", n)
	}

	// Wrong secret: coupond's error body, which stock oauth2 does not parse,
	// comes back as *Error.
	bad, err := client.New(srv.URL, "ci_x", "wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(ctx)
	err = bad.Warm(ctx)
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Codigo != "no_autenticado" || apiErr.TraceID != "t1" {
		t.Fatalf("got %v, want *Error 401 no_autenticado", err)
	}
}

// TestNewRejectsBadConfig: configuration errors come from New, naming
// what is wrong (the URL, the credential, or the option), never showing
// a password in the URL.
func TestNewRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		url, id, secret string
		opts            []client.Option
		want            string
	}{
		{"ftp://x", "a", "b", nil, "base URL"},
		{"coupond.example.com", "a", "b", nil, "base URL"},
		{"https://u:hunter2@x", "a", "b", nil, "without a user or password"},
		{"htps://u:hunter2@x", "a", "b", nil, "base URL"},
		{"http://u:hunter2@[::1", "a", "b", nil, "base URL"},
		{"https://x/?tenant=acme", "a", "b", nil, "without a query or fragment"},
		{"https://x/#v1", "a", "b", nil, "without a query or fragment"},
		{"http://x", "", "b", nil, "clientID and clientSecret"},
		{"http://x", "a", "b", []client.Option{client.WithBudget(0)}, "WithBudget"},
		{"http://x", "a", "b", []client.Option{client.WithAttemptTimeout(-time.Second)}, "WithAttemptTimeout"},
		{"http://x", "a", "b", []client.Option{client.WithRetries(0, time.Millisecond, time.Second)}, "WithRetries"},
		{"http://x", "a", "b", []client.Option{client.WithRetries(3, time.Second, time.Millisecond)}, "WithRetries"},
		{"http://x", "a", "b", []client.Option{client.WithFallbackQueue(0)}, "WithFallbackQueue"},
		{"http://x", "a", "b", []client.Option{client.WithFallbackRetry(0, time.Second)}, "WithFallbackRetry"},
		{"http://x", "a", "b", []client.Option{client.WithBreaker(-1, time.Second)}, "WithBreaker"},
		{"http://x", "a", "b", []client.Option{client.WithTimeout(0)}, "WithTimeout"},
		{"http://x", "a", "b", []client.Option{client.WithPollInterval(0)}, "WithPollInterval"},
		{"http://x", "a", "b", []client.Option{client.WithFallback(-1)}, "WithFallback"},
	} {
		c, err := client.New(tt.url, tt.id, tt.secret, tt.opts...)
		if err == nil {
			c.Close(context.Background())
			t.Errorf("New(%q, %q, %q) with %s accepted", tt.url, tt.id, tt.secret, tt.want)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New error %q does not name %s", err, tt.want)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("New error %q shows the URL's password", err)
		}
	}
}

// TestDecideDoesNotWaitForAnotherCallsTokenFetch: while another call
// fetches a token from a token endpoint that hangs, Decide gives up at its
// budget and answers the fallback instead of waiting for that fetch, which
// the other call bounds by its own, much longer, timeout.
func TestDecideDoesNotWaitForAnotherCallsTokenFetch(t *testing.T) {
	asked := make(chan struct{}, 10)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			asked <- struct{}{}
			<-release
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"catalogo:escribir","token_type":"Bearer"}`)
			return
		}
		fmt.Fprint(w, `{"acciones":[],"version":0}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithFallback(0), client.WithBudget(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	defer free() // before Close, which sends the fallback record, and srv.Close

	go c.Catalog(context.Background()) // fetches the token, for up to 30 s
	<-asked
	done := make(chan *client.Decision, 1)
	go func() {
		d, err := c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "cli-00000001", Contexto: client.Contexto{Canal: "push"}})
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	select {
	case d := <-done:
		if d == nil || !d.EnRespaldo || !errors.Is(d.Causa, client.ErrBudgetExhausted) {
			t.Fatalf("got %+v, want the fallback for an exhausted budget", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Decide waited past its budget for another call's token fetch")
	}
}

// TestFailedRenewalNotRetriedAtOnce: when the background renewal fails
// (the token endpoint answers 503), calls that go on with the still valid
// token do not start a new renewal each, back to back: that hammers a
// token endpoint in trouble and spends the credential's rate limit
// (10/s), shared with every other process using it. The next renewal
// starts a second later on the Client's clock (a fake one here).
func TestFailedRenewalNotRetriedAtOnce(t *testing.T) {
	clk := newFakeTime()
	var tokens atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			if tokens.Add(1) > 1 {
				w.WriteHeader(503)
				fmt.Fprint(w, `{"codigo":"error_interno","mensaje":"no","campo":null,"detalle":null,"trace_id":"t1"}`)
				return
			}
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"catalogo:escribir","token_type":"Bearer"}`)
			return
		}
		fmt.Fprint(w, `{"acciones":[],"version":0}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec", clk.option())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	if err := c.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	// The 900 s token is valid for 895 s and renewed from 775 s on.
	clk.Advance(780 * time.Second)
	if _, err := c.Catalog(ctx); err != nil { // starts the renewal, which fails
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() bool { return tokens.Load() == 2 })
	for i := 0; i < 40; i++ {
		if _, err := c.Catalog(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // let a renewal started by the call run
	}
	if n := tokens.Load(); n != 2 {
		t.Errorf("%d token requests for 40 calls within a second of a failed renewal, want 2", n)
	}
	clk.Advance(time.Second)
	if _, err := c.Catalog(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() bool { return tokens.Load() == 3 })
}

// TestSlowTokenFetchOutlivesAnAttempt: a token fetch that takes longer
// than one attempt of Decide (WithAttemptTimeout, or the whole budget) is
// not thrown away when that attempt gives up: the next attempt, or the
// next call, waits for the same fetch instead of starting another that
// would be cut short too, so Decide gets a token and the engine's answer
// rather than the fallback for ever.
func TestSlowTokenFetchOutlivesAnAttempt(t *testing.T) {
	var tokens atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			tokens.Add(1)
			time.Sleep(100 * time.Millisecond) // a cold connection far away
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"decisiones:pedir","token_type":"Bearer"}`)
			return
		}
		fmt.Fprint(w, `{"decision_id":"d-1","accion":1,"accion_nombre":"cupon1","propension":0.5,"politica_version":"v1",`+
			`"explorado":false,"en_control":false,"en_respaldo":false,"caduca_en":"2030-01-01T00:00:00Z","motivo":"m"}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithFallback(0), client.WithBudget(3*time.Second),
		client.WithAttemptTimeout(30*time.Millisecond), client.WithRetries(10, 5*time.Millisecond, 40*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d, err := c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "cli-00000001", Contexto: client.Contexto{Canal: "push"}})
	if err != nil || d.EnRespaldo || d.DecisionID != "d-1" {
		t.Fatalf("got %+v, %v; want the engine's decision once the token arrives", d, err)
	}
	if n := tokens.Load(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

// TestCloseDoesNotWaitPastItsContextForAToken: a token fetch that hangs
// (it runs in the background, up to 10 s) holds Close no longer than
// Close's context.
func TestCloseDoesNotWaitPastItsContextForAToken(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/token" {
			<-release
		}
		w.WriteHeader(503)
	}))
	defer srv.Close()
	defer close(release)
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithBudget(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "cli-00000001", Contexto: client.Contexto{Canal: "push"}}); !errors.Is(err, client.ErrNoFallback) {
		t.Fatalf("Decide: %v, want ErrNoFallback while the token hangs", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	c.Close(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v with a 100 ms context", took)
	}
}

// TestNoTokenFetchAfterClose: Close that gave up at its context while a
// token fetch hung leaves its wait on the fetch running; a call after
// Close that needs a token must not start another background fetch, whose
// WaitGroup Add would race with that wait (the race detector reports it,
// or sync panics "WaitGroup is reused before previous Wait has
// returned"). The call gets ErrClosed instead, and asks the token endpoint
// nothing.
func TestNoTokenFetchAfterClose(t *testing.T) {
	asked := make(chan struct{}, 10)
	release := make(chan struct{})
	var tokens atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/token" {
			tokens.Add(1)
			asked <- struct{}{}
			<-release
		}
		w.WriteHeader(503)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	warmed := make(chan error, 1)
	go func() { warmed <- c.Warm(ctx) }()
	<-asked
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	c.Close(short) // gives up while the fetch hangs; its wait goes on
	close(release)
	if err := <-warmed; err == nil {
		t.Fatal("Warm got a token from an endpoint answering 503")
	}
	err = c.Warm(ctx)
	if !errors.Is(err, client.ErrClosed) {
		t.Errorf("Warm after Close: %v, want ErrClosed", err)
	}
	// Other calls give up at once: no retries, no fallback, no breaker
	// failure.
	if _, err := c.Catalog(ctx); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Catalog after Close: %v, want ErrClosed", err)
	}
	d, err := c.Decide(ctx, client.PeticionDecision{ClienteRef: "cli-00000001", Contexto: client.Contexto{Canal: "push"}},
		client.FallbackAction(0))
	if d != nil || !errors.Is(err, client.ErrClosed) {
		t.Errorf("Decide after Close: %+v, %v; want ErrClosed", d, err)
	}
	if st := c.Stats(); st.Retries != 0 || st.Fallbacks != 0 {
		t.Errorf("stats %+v, want no retries and no fallback", st)
	}
	if n := tokens.Load(); n != 1 {
		t.Errorf("%d token requests, want the one before Close", n)
	}
}

// TestWarmRetriesFailedTokenFetch: Warm retries a token fetch that failed
// for a transient cause (a lost connection, 429 or 5xx of the token
// endpoint) as every other call does, and returns a refused credential at
// once. Before, one blip of the token endpoint at start-up failed Warm,
// while the package documentation says every call retries it.
func TestWarmRetriesFailedTokenFetch(t *testing.T) {
	tests := []struct {
		name       string
		fails      int64 // token requests that fail before the others succeed
		status     int   // of a failing token request; 0: a lost connection
		wantStatus int   // of the *Error returned; 0: none
		wantTokens int64
	}{
		{"ok", 0, 0, 0, 1},
		{"503 once", 1, 503, 0, 2},
		{"429 twice", 2, 429, 0, 3},
		{"connection lost once", 1, 0, 0, 2},
		{"500 on every attempt", 100, 500, 500, 4},
		{"credential refused", 100, 401, 401, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tokens atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, tokenJSON)
			})
			hc := &http.Client{Transport: flakyTokens{h: h, fails: tt.fails, status: tt.status, tokens: &tokens}}
			c := inMemoryClient(t, h, client.WithHTTPClient(hc), client.WithRetries(4, time.Millisecond, time.Millisecond))
			err := c.Warm(context.Background())
			var apiErr *client.Error
			gotStatus := 0
			if errors.As(err, &apiErr) {
				gotStatus = apiErr.Status
			} else if err != nil {
				t.Fatalf("Warm: %v, want nil or an *Error", err)
			}
			if diff := cmp.Diff([2]int64{int64(tt.wantStatus), tt.wantTokens}, [2]int64{int64(gotStatus), tokens.Load()}); diff != "" {
				t.Errorf("Warm: %v; [status, token requests] (-want +got):\n%s", err, diff)
			}
		})
	}
}

// TestSetSecretTakesARotatedSecret: after the operator rotated the
// credential's secret and the old one stopped being accepted, calls fail
// with 401 until SetSecret gives the Client the new secret; then the next
// call fetches a token with it and goes through, without a new Client.
func TestSetSecretTakesARotatedSecret(t *testing.T) {
	var accepted atomic.Value
	accepted.Store("sec") // inMemoryClient's
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		want := accepted.Load().(string)
		if r.URL.Path == "/v1/token" {
			if _, secret, _ := r.BasicAuth(); secret != want {
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"codigo":"no_autenticado","mensaje":"m","campo":null,"detalle":null,"trace_id":"t","error":"invalid_client"}`)
				return
			}
			fmt.Fprintf(w, `{"access_token":"tok-%s","expires_in":900,"scope":"x","token_type":"Bearer"}`, want)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok-"+want {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"codigo":"no_autenticado","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`)
			return
		}
		fmt.Fprint(w, `{}`)
	})
	c := inMemoryClient(t, h, client.WithRetries(1, 0, 0))
	ctx := context.Background()
	if err := c.DeleteWebhook(ctx); err != nil {
		t.Fatalf("with the secret in force: %v", err)
	}
	accepted.Store("new") // rotated, grace over
	var apiErr *client.Error
	if err := c.DeleteWebhook(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("after the rotation: %v, want 401", err)
	}
	if err := c.SetSecret(""); err == nil {
		t.Error("SetSecret(\"\"): nil, want an error")
	}
	if err := c.SetSecret("new"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteWebhook(ctx); err != nil {
		t.Errorf("after SetSecret: %v", err)
	}
}
