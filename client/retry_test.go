package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// tokenJSON is a token endpoint's answer.
const tokenJSON = `{"access_token":"tok","expires_in":900,"scope":"x","token_type":"Bearer"}`

// inMemoryClient returns a Client of h served in memory, closed when the
// test ends.
func inMemoryClient(t *testing.T, h http.Handler, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}})}, opts...)
	c, err := client.New("http://coupond.invalid", "ci_x", "sec", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// TestRetryAfterCapped: a Retry-After is read in seconds or as an HTTP
// date (as of the Client's clock) and capped at MaxRetryAfter, with no
// overflow; one that fits before the call's deadline is waited for on the
// Client's clock, one beyond it ends the call at once with the 429 or 503,
// and one that is negative, past or unreadable leaves the backoff (none
// here) alone. A huge value wrapped around time.Duration (centuries, or
// negative), and one beyond int64 was read as no Retry-After at all and
// retried at once. The clock is fake: no test waits for real.
func TestRetryAfterCapped(t *testing.T) {
	tests := []struct {
		name     string
		header   func(now time.Time) string
		want     time.Duration
		requests int64           // of each call
		sleeps   []time.Duration // of each call, on the Client's clock
	}{
		{"seconds within the deadline", fixed("1"), time.Second, 2, []time.Duration{time.Second}},
		{"date within the deadline", func(now time.Time) string { return now.Add(time.Second).Format(http.TimeFormat) },
			time.Second, 2, []time.Duration{time.Second}},
		{"seconds beyond the deadline", fixed("3"), 3 * time.Second, 1, nil},
		{"centuries of seconds", fixed("99999999999"), client.MaxRetryAfter, 1, nil},
		{"seconds beyond int64", fixed("99999999999999999999999"), client.MaxRetryAfter, 1, nil},
		{"date far ahead", fixed("Fri, 31 Dec 9999 23:59:59 GMT"), client.MaxRetryAfter, 1, nil},
		{"date past", fixed("Sun, 06 Nov 1994 08:49:37 GMT"), 0, 4, nil},
		{"negative", fixed("-5"), 0, 4, nil},
		{"unreadable", fixed("soon"), 0, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeTime()
			var requests atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/v1/token":
					fmt.Fprint(w, tokenJSON)
					return
				case "/v1/decisiones/respaldo": // Decide's fallback record, sent in the background
					fmt.Fprint(w, `{}`)
					return
				}
				requests.Add(1)
				status, codigo := 429, "limite_excedido"
				if r.URL.Path == "/v1/decisiones" {
					status, codigo = 503, "no_disponible"
				}
				w.Header().Set("Retry-After", tt.header(clk.Now()))
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"codigo":%q,"mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`, codigo)
			})
			c := inMemoryClient(t, h, client.WithRetries(4, 0, 0), client.WithFallback(0), clk.option(),
				client.WithBudget(2*time.Second), client.WithBreaker(0, time.Second), client.WithTimeout(2*time.Second))
			calls := []struct {
				name   string
				status int
				call   func() error
			}{
				{"Catalog", 429, func() error { _, err := c.Catalog(context.Background()); return err }},
				{"Decide", 503, func() error {
					d, err := c.Decide(context.Background(), decisionRequest("cli-00000001"))
					if err != nil {
						return err
					}
					return d.Causa
				}},
			}
			for _, call := range calls {
				before := requests.Load()
				err := call.call()
				var apiErr *client.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("%s: %v, want the %d", call.name, err, call.status)
				}
				type result struct {
					Status     int
					RetryAfter time.Duration
					Requests   int64
					Sleeps     []time.Duration
				}
				got := result{apiErr.Status, apiErr.RetryAfter, requests.Load() - before, clk.Sleeps()}
				if diff := cmp.Diff(result{call.status, tt.want, tt.requests, tt.sleeps}, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", call.name, diff)
				}
			}
		})
	}
}

// fixed is a Retry-After header that does not depend on the time.
func fixed(v string) func(time.Time) string { return func(time.Time) string { return v } }

// TestDecideAnswerWithoutDecisionID: a 2xx answer to a decision that is
// not JSON or carries no decision_id (a stub, a proxy's page) is a failed
// attempt: retried while attempts remain, then the fallback or an error
// that says so; never a zero Decision returned as the engine's, which
// could be neither confirmed nor linked to its events.
func TestDecideAnswerWithoutDecisionID(t *testing.T) {
	const good = `{"decision_id":"d-2","accion":1,"accion_nombre":"cupon1","propension":0.5,"politica_version":"v1",` +
		`"explorado":false,"en_control":false,"en_respaldo":false,"caduca_en":"2030-01-01T00:00:00Z","motivo":"m"}`
	tests := []struct {
		name     string
		bodies   []string // answer n of the attempts; the last one repeats
		fallback bool
		wantID   string // "": no decision from the engine
		requests int64
	}{
		{"empty object", []string{`{}`}, false, "", 4},
		{"null", []string{`null`}, false, "", 4},
		{"empty decision_id, with a fallback", []string{`{"decision_id":"","accion":2}`}, true, "", 4},
		{"no decision_id", []string{`{"accion":1,"propension":0.5,"motivo":"m"}`}, false, "", 4},
		{"not JSON", []string{`<html>portal</html>`}, false, "", 4},
		{"then a decision", []string{`{}`, good}, false, "d-2", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/v1/token":
					fmt.Fprint(w, tokenJSON)
				case "/v1/decisiones":
					n := int(requests.Add(1))
					fmt.Fprint(w, tt.bodies[min(n, len(tt.bodies))-1])
				default:
					fmt.Fprint(w, `{}`)
				}
			})
			opts := []client.Option{client.WithRetries(4, time.Millisecond, time.Millisecond), client.WithBudget(2 * time.Second),
				client.WithBreaker(0, time.Second)}
			if tt.fallback {
				opts = append(opts, client.WithFallback(0))
			}
			c := inMemoryClient(t, h, opts...)
			d, err := c.Decide(context.Background(), decisionRequest("cli-00000001"))
			cause := err
			if tt.fallback && err == nil && d.EnRespaldo {
				cause = d.Causa
			}
			type result struct {
				DecisionID string
				Requests   int64
				Failed     bool // an error, or the fallback's cause, names the failure
			}
			got := result{Requests: requests.Load()}
			if d != nil && !d.EnRespaldo {
				got.DecisionID = d.DecisionID
			}
			got.Failed = cause != nil && (strings.Contains(cause.Error(), "decision_id") || strings.Contains(cause.Error(), "JSON"))
			want := result{DecisionID: tt.wantID, Requests: tt.requests, Failed: tt.wantID == ""}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Decide: %+v, %v (-want +got):\n%s", d, err, diff)
			}
			if tt.wantID == "" && !tt.fallback && !errors.Is(err, client.ErrNoFallback) {
				t.Errorf("error %v does not wrap ErrNoFallback", err)
			}
		})
	}
}

// flakyTokens serves requests with a handler in memory, but the first
// fails token requests fail: with status, or a lost connection if status
// is 0. It counts the token requests.
type flakyTokens struct {
	h      http.Handler
	fails  int64
	status int
	tokens *atomic.Int64
}

func (f flakyTokens) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/v1/token" || f.tokens.Add(1) > f.fails {
		return handlerTransport{f.h}.RoundTrip(r)
	}
	if f.status == 0 {
		return nil, errors.New("read: connection reset by peer")
	}
	return handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprint(w, `{"codigo":"fallo","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`)
	})}.RoundTrip(r)
}

// TestCreateBatchRetriesFailedTokenFetch: a token fetch that failed for a
// transient cause (a lost connection, a 5xx of the token endpoint) sent no
// job request at all: it is retried like the request. Before, one blip of
// the token endpoint failed the job creation. A refused credential is not
// retried. A 500 of the job request is retried with the same
// Idempotency-Key (the server answers a repeat with the first job), where
// before it was returned.
func TestCreateBatchRetriesFailedTokenFetch(t *testing.T) {
	tests := []struct {
		name        string
		tokenFails  int64 // token requests that fail before the others succeed
		tokenStatus int   // of a failing token request; 0: a lost connection
		batchFails  int64 // job requests answered 500 before the others 202
		want        batchResult
	}{
		{"token 502 once", 1, 502, 0, batchResult{JobID: "job-1", Tokens: 2, Batches: 1, Keys: 1}},
		{"token 500 twice", 2, 500, 0, batchResult{JobID: "job-1", Tokens: 3, Batches: 1, Keys: 1}},
		{"token connection lost", 1, 0, 0, batchResult{JobID: "job-1", Tokens: 2, Batches: 1, Keys: 1}},
		{"token 503 on every attempt", 100, 503, 0, batchResult{Status: 503, Tokens: 4}},
		{"credential refused", 100, 401, 0, batchResult{Status: 401, Tokens: 1}},
		{"job request 500 once", 0, 0, 1, batchResult{JobID: "job-1", Tokens: 1, Batches: 2, Keys: 1}},
		{"job request 500 on every attempt", 0, 0, 100, batchResult{Status: 500, Tokens: 1, Batches: 4, Keys: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tokens, batches atomic.Int64
			var keys keySet
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Path == "/v1/token" {
					fmt.Fprint(w, tokenJSON)
					return
				}
				keys.add(r.Header.Values("Idempotency-Key"))
				if batches.Add(1) > tt.batchFails {
					w.WriteHeader(http.StatusAccepted)
					fmt.Fprint(w, `{"job_id":"job-1","estado":"en_cola","creado_en":"2030-01-01T00:00:00Z"}`)
					return
				}
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"codigo":"error_interno","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`)
			})
			hc := &http.Client{Transport: flakyTokens{h: h, fails: tt.tokenFails, status: tt.tokenStatus, tokens: &tokens}}
			c := inMemoryClient(t, h, client.WithHTTPClient(hc), client.WithRetries(4, time.Millisecond, time.Millisecond))
			job, err := c.CreateBatch(context.Background(), client.PeticionLoteDecision{CampanaID: "verano"})
			got := batchResult{Tokens: tokens.Load(), Batches: batches.Load(), Keys: keys.count()}
			if job != nil {
				got.JobID = job.JobID
			}
			var apiErr *client.Error
			if errors.As(err, &apiErr) {
				got.Status = apiErr.Status
			} else if err != nil {
				t.Fatalf("got %v, want an *Error", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CreateBatch: %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

// batchResult is what one CreateBatch got and sent.
type batchResult struct {
	JobID           string
	Status          int // of the *Error returned
	Tokens, Batches int64
	// Keys is how many Idempotency-Key values the job requests carried
	// (one each: -1 for a request with none or several).
	Keys int
}

// keySet is the Idempotency-Key values job requests carried.
type keySet struct {
	mu   sync.Mutex
	keys map[string]bool
	bad  bool // a request with no key or several
}

func (k *keySet) add(vals []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(vals) != 1 || vals[0] == "" {
		k.bad = true
		return
	}
	if k.keys == nil {
		k.keys = map[string]bool{}
	}
	k.keys[vals[0]] = true
}

func (k *keySet) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bad {
		return -1
	}
	return len(k.keys)
}

// TestCreateBatchRetriesRefusedConnection: a connection that could not be
// made (refused by the kernel, or any other dial error) sent nothing, so
// CreateBatch retries it and the job is created once. Before,
// a server restarting for a moment failed the job creation. A connection
// lost after the request was written is retried too, with the same
// Idempotency-Key (the server answers the repeat with the job the first
// attempt may have created); before, it was returned.
func TestCreateBatchRetriesRefusedConnection(t *testing.T) {
	tests := []struct {
		name    string
		refuse  int64 // dials of the job request that fail before the others succeed
		dialErr error // of a failing dial; nil: a real refused connection (refusingSocket)
		hangUp  int64 // job requests the server closes without answering
		want    batchResult
		dials   int64 // of the job request
	}{
		{"refused twice", 2, nil, 0, batchResult{JobID: "job-1", Tokens: 1, Batches: 1, Keys: 1}, 3},
		{"dial timeout once", 1, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}, 0,
			batchResult{JobID: "job-1", Tokens: 1, Batches: 1, Keys: 1}, 2},
		{"refused on every attempt", 100, nil, 0, batchResult{Tokens: 1}, 4},
		{"connection lost after sending once", 0, nil, 1, batchResult{JobID: "job-1", Tokens: 1, Batches: 2, Keys: 1}, 2},
		{"connection lost after sending every time", 0, nil, 100, batchResult{Tokens: 1, Batches: 4, Keys: 1}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tokens, batches atomic.Int64
			var keys keySet
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Path == "/v1/token" {
					tokens.Add(1)
					fmt.Fprint(w, tokenJSON)
					return
				}
				keys.add(r.Header.Values("Idempotency-Key"))
				if batches.Add(1) <= tt.hangUp {
					hijackClose(w)
					return
				}
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprint(w, `{"job_id":"job-1","estado":"en_cola","creado_en":"2030-01-01T00:00:00Z"}`)
			}))
			defer srv.Close()
			down := refusingSocket(t)
			var refusing, dials atomic.Int64 // dials still to fail, dials made
			var d net.Dialer
			tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				if refusing.Add(-1) < 0 {
					return d.DialContext(ctx, network, addr)
				}
				if tt.dialErr != nil {
					return nil, tt.dialErr
				}
				return d.DialContext(ctx, "unix", down)
			}}
			defer tr.CloseIdleConnections()
			c, err := client.New(srv.URL, "ci_x", "sec", client.WithHTTPClient(&http.Client{Transport: tr}),
				client.WithRetries(4, time.Millisecond, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if err := c.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
			refusing.Store(tt.refuse)
			dials.Store(0)
			job, err := c.CreateBatch(context.Background(), client.PeticionLoteDecision{CampanaID: "verano"})
			got := batchResult{Tokens: tokens.Load(), Batches: batches.Load(), Keys: keys.count()}
			if job != nil {
				got.JobID = job.JobID
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CreateBatch: %v (-want +got):\n%s", err, diff)
			}
			if (err != nil) != (job == nil) {
				t.Errorf("CreateBatch returned %v and %v", job, err)
			}
			if n := dials.Load(); n != tt.dials {
				t.Errorf("CreateBatch dialled %d times, want %d", n, tt.dials)
			}
		})
	}
}

// refusingSocket returns the path of a Unix socket whose listener has
// closed, in a directory of the test's own: the kernel refuses a dial to it
// (ECONNREFUSED), as it does one to a closed TCP port, but no other process
// can start listening there in between, as one could on a loopback port
// just closed (the dial would then reach that process).
func refusingSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cpd-") // short: a socket path has at most 104 bytes on some systems
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "down.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // the socket file stays, with nothing behind it
	ln.Close()
	conn, err := net.Dial("unix", path)
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s succeeded, want it refused", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", path, err)
	}
	return path
}

// TestBackgroundWaitsOnTheClientsClock: WaitBatch's polls and the
// fallback sender's wait after a refused record (here the Retry-After,
// which its backoff draws less than) pass on the Client's clock, a fake one
// here, that sleeps an hour at once.
func TestBackgroundWaitsOnTheClientsClock(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, c *client.Client)
		want []time.Duration
	}{
		{"WaitBatch polls every interval", func(t *testing.T, c *client.Client) {
			st, err := c.WaitBatch(context.Background(), "job-1", nil)
			if err != nil || st.Estado != client.EstadoCompletado {
				t.Fatalf("WaitBatch: %+v, %v", st, err)
			}
		}, []time.Duration{time.Hour, time.Hour}},
		{"fallback record waits for the Retry-After", func(t *testing.T, c *client.Client) {
			d, err := c.Decide(context.Background(), decisionRequest("cli-00000001"))
			if err != nil || !d.EnRespaldo {
				t.Fatalf("Decide: %+v, %v; want the fallback", d, err)
			}
			waitFor(t, 2*time.Second, func() bool { return c.Stats().FallbackSent == 1 })
		}, []time.Duration{2 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeTime()
			var polls, records atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				apiError := func(status int, codigo string) {
					w.Header().Set("Retry-After", "120")
					w.WriteHeader(status)
					fmt.Fprintf(w, `{"codigo":%q,"mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`, codigo)
				}
				switch r.URL.Path {
				case "/v1/token":
					fmt.Fprint(w, tokenJSON)
				case "/v1/lotes-decision/job-1":
					estado := client.EstadoCompletado
					if polls.Add(1) < 3 {
						estado = "en_curso"
					}
					fmt.Fprintf(w, `{"job_id":"job-1","estado":%q,"creado_en":"2001-02-03T04:05:06Z","campana_id":"c",`+
						`"total":1,"procesados":0,"iniciado_en":null,"completado_en":null}`, estado)
				case "/v1/decisiones":
					apiError(503, "inquilino_pausado")
				case "/v1/decisiones/respaldo":
					if records.Add(1) == 1 {
						apiError(503, "no_disponible")
						return
					}
					fmt.Fprint(w, `{}`)
				}
			})
			c := inMemoryClient(t, h, clk.option(), client.WithPollInterval(time.Hour), client.WithRetries(4, 0, 0),
				client.WithFallback(0), client.WithFallbackRetry(time.Second, time.Hour))
			tt.run(t, c)
			if diff := cmp.Diff(tt.want, clk.Sleeps()); diff != "" {
				t.Errorf("sleeps (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCanceledWhileWaitingToRetry: a call whose context is canceled while
// it waits to retry (here the 60 s Retry-After of a paused tenant, which
// fits in the call's deadline) returns an error that is context.Canceled
// for errors.Is, as Decide's is, and still the last answer for errors.As.
// It returned the 503 alone, so a caller shutting down read a canceled
// call as the server's refusal.
func TestCanceledWhileWaitingToRetry(t *testing.T) {
	ts := newTestServer(t)
	ts.setPaused(t, true)
	// The Client's sleep cancels the call's context, as a caller shutting
	// down during the wait would, and returns as a canceled wait does.
	var cancelCall atomic.Pointer[context.CancelFunc]
	sleep := func(ctx context.Context, d time.Duration) error {
		if f := cancelCall.Load(); f != nil {
			(*f)()
		}
		<-ctx.Done()
		return ctx.Err()
	}
	c := ts.newClient(t, ts.url, client.WithClock(nil, sleep))
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Catalog", func(ctx context.Context) error { _, err := c.Catalog(ctx); return err }},
		{"PublishEvents", func(ctx context.Context) error {
			_, err := c.PublishEvents(ctx, []client.Evento{{EventID: "ev-cancel-1", ClienteRef: "cli-00000001",
				Ts: time.Now().UTC(), Tipo: client.Baja, Clave: "cuenta"}})
			return err
		}},
		{"CreateBatch", func(ctx context.Context) error {
			_, err := c.CreateBatch(ctx, client.PeticionLoteDecision{CampanaID: "c1", Clientes: []string{"cli-00000001"}})
			return err
		}},
		{"BatchResults", func(ctx context.Context) error {
			for _, err := range c.BatchResults(ctx, "lote_x") {
				return err
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cancelCall.Store(&cancel)
			err := tt.call(ctx)
			var apiErr *client.Error
			if !errors.Is(err, context.Canceled) || !errors.As(err, &apiErr) || apiErr.Codigo != "inquilino_pausado" {
				t.Fatalf("got %v, want context.Canceled wrapped with the 503 inquilino_pausado", err)
			}
		})
	}
}
