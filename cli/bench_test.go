package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

func TestParseRates(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"500,1000, 2000", []int{500, 1000, 2000}, false},
		{"8000", []int{8000}, false},
		{"500,,1000", nil, true},
		{"0", nil, true},
		{"-5", nil, true},
		{"fast", nil, true},
	}
	for _, tc := range tests {
		got, err := parseRates(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseRates(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseRates(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestRawConn checks the generator's HTTP client against net/http's
// server: Content-Length and chunked answers, keep-alive reuse, and a
// server that closes the connection.
func TestRawConn(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(401)
			return
		}
		var in map[string]any
		json.NewDecoder(r.Body).Decode(&in)
		switch r.URL.Path {
		case "/chunked":
			w.WriteHeader(201)
			w.(http.Flusher).Flush() // forces chunked encoding
			w.Write([]byte(`{"a":`))
			w.Write([]byte(`1}`))
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte(`bye`))
		default:
			json.NewEncoder(w).Encode(in)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newRawConn(srv.URL)
	defer c.close()
	for i := 0; i < 3; i++ {
		st, body, err := c.post("/echo", "tok", []byte(`{"n":1}`))
		if err != nil || st != 200 || strings.TrimSpace(string(body)) != `{"n":1}` {
			t.Fatalf("echo %d: %d %q %v", i, st, body, err)
		}
	}
	if st, body, err := c.post("/chunked", "tok", []byte(`{}`)); err != nil || st != 201 || string(body) != `{"a":1}` {
		t.Fatalf("chunked: %d %q %v", st, body, err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four keep-alive requests, want 1", n)
	}
	if st, body, err := c.post("/close", "tok", []byte(`{}`)); err != nil || st != 200 || string(body) != "bye" {
		t.Fatalf("close: %d %q %v", st, body, err)
	}
	if st, _, err := c.post("/echo", "wrong", []byte(`{}`)); err != nil || st != 401 {
		t.Fatalf("after close: %d %v", st, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (a new one after Connection: close)", n)
	}
}

// TestOpenLoopMeasuresFromSchedule: a server that answers slowly makes
// the arrivals queued behind it late, and the generator charges that wait.
func TestOpenLoopMeasuresFromSchedule(t *testing.T) {
	var n atomic.Int32
	g := openLoop{rate: 200, duration: 500 * time.Millisecond, workers: 1, sender: func() (func(int) (int, error), func()) {
		return func(int) (int, error) {
			if n.Add(1) == 1 {
				time.Sleep(100 * time.Millisecond) // 20 arrivals queue behind this one
			}
			return 200, nil
		}, func() {}
	}}
	r := g.run(context.Background(), os.Getpid())
	if r.ok != 100 || r.failed != 0 || r.dropped != 0 {
		t.Fatalf("ok %d failed %d dropped %d, want 100 0 0", r.ok, r.failed, r.dropped)
	}
	if len(r.lat) != 100 {
		t.Fatalf("%d latencies, want 100", len(r.lat))
	}
	if p90 := r.q(0.90); p90 < 50*time.Millisecond {
		t.Errorf("p90 %v: the wait behind the slow answer was not charged", p90)
	}
	if !r.server.known || !r.gen.known {
		t.Errorf("CPU of this process not read from /proc")
	}
}

func TestBareHandler(t *testing.T) {
	srv := httptest.NewServer(bareHandler([]byte("k"), nil))
	defer srv.Close()
	f := &benchFlags{url: srv.URL, clientID: "x", secret: "-"}
	c := newBenchClient(f, 1)
	tok, err := c.bearer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn := newRawConn(srv.URL)
	defer conn.close()
	st, body, err := conn.post("/v1/decisiones", tok, decisionBody(1, 7, 100))
	if err != nil || st != 200 || !bytes.Contains(body, []byte(`"decision_id"`)) {
		t.Fatalf("decision: %d %s %v", st, body, err)
	}
	if st, _, _ := conn.post("/v1/decisiones", tok+"x", decisionBody(1, 7, 100)); st != 401 {
		t.Errorf("altered token: %d, want 401", st)
	}
	if st, _, _ := conn.post("/v1/decisiones", tok, []byte(`{"contexto":{"canal":"push"}}`)); st != 422 {
		t.Errorf("no cliente_ref: %d, want 422", st)
	}
}

// TestBareHandlerSync: the floor commits every decision under a fresh key
// before it answers, and answers no decision it could not commit.
func TestBareHandlerSync(t *testing.T) {
	keys := map[string]int{}
	fail := false
	srv := httptest.NewServer(bareHandler([]byte("k"), func(k, v []byte) error {
		if fail {
			return errors.New("disk")
		}
		keys[string(k)] = len(v)
		return nil
	}))
	defer srv.Close()
	c := newBenchClient(&benchFlags{url: srv.URL, clientID: "x", secret: "-"}, 1)
	tok, err := c.bearer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn := newRawConn(srv.URL)
	defer conn.close()
	for n := range 2 {
		st, body, err := conn.post("/v1/decisiones", tok, decisionBody(1, n, 100))
		if err != nil || st != 200 || !bytes.Contains(body, []byte(`"decision_id"`)) {
			t.Fatalf("decision %d: %d %s %v", n, st, body, err)
		}
	}
	if len(keys) != 2 {
		t.Fatalf("%d distinct records committed for 2 decisions, want 2", len(keys))
	}
	for k, n := range keys {
		if n < 300 || n > 600 {
			t.Errorf("record %q is %d bytes, want a decision-sized 300-600", k, n)
		}
	}
	fail = true
	if st, _, _ := conn.post("/v1/decisiones", tok, decisionBody(1, 3, 100)); st != 503 {
		t.Errorf("commit failed: status %d, want 503", st)
	}
}

func TestPprofNeedsARunningServer(t *testing.T) {
	dir := t.TempDir()
	out := dir + "/cpu.pprof"
	err := Run(context.Background(), []string{"admin", "--data-dir", dir, "debug", "pprof", "--kind", "heap", "--out", out}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "running server") {
		t.Fatalf("err = %v, want one that says a running server is needed", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s written without a server", out)
	}
	err = Run(context.Background(), []string{"admin", "--data-dir", dir, "debug", "pprof", "--kind", "threads", "--out", out}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--kind") {
		t.Errorf("unknown kind: err = %v", err)
	}
}

func TestWriteProfile(t *testing.T) {
	for _, kind := range []string{"heap", "goroutine", "mutex", "block", "cpu"} {
		var buf bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetContext(context.Background())
		if err := writeProfile(cmd, kind, 10*time.Millisecond, &buf); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if b := buf.Bytes(); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: not a gzipped pprof profile (%d bytes)", kind, len(b))
		}
	}
}

// TestDecisionTableRatios: with the bare baseline and the floor, each row
// holds coupond's p99 and CPU ratios to both, computed from the steps.
func TestDecisionTableRatios(t *testing.T) {
	step := func(p99 time.Duration, cpu time.Duration) stepResult {
		lat := make([]time.Duration, 100)
		for i := range lat {
			lat[i] = p99 / 2
		}
		lat[99] = p99
		return stepResult{rate: 2000, ok: 100, elapsed: time.Second / 20, lat: lat, server: cpuSample{cpu: 100 * cpu, known: true}}
	}
	targets := []decisionTarget{{name: "coupond"}, {name: "baseline"}, {name: "floor"}}
	results := [][]stepResult{
		{step(6*time.Millisecond, 300*time.Microsecond)},
		{step(2*time.Millisecond, 120*time.Microsecond)},
		{step(4*time.Millisecond, 250*time.Microsecond)},
	}
	var buf bytes.Buffer
	printDecisionTable(&buf, targets, results)
	lines := strings.Split(buf.String(), "\n")
	got := []string{lines[1], lines[3]}
	want := []string{
		"| rate/s | coupond p50 / p95 / p99 ms | achieved/s | server CPU µs/req | baseline p50 / p95 / p99 ms | achieved/s | server CPU µs/req | p99 ratio | CPU ratio | floor p50 / p95 / p99 ms | achieved/s | server CPU µs/req | p99 ratio | CPU ratio |",
		"| 2000 | 3.00 / 3.00 / 6.00 | 2000 | 300 | 1.00 / 1.00 / 2.00 | 2000 | 120 | 3.00× | 2.50× | 2.00 / 2.00 / 4.00 | 2000 | 250 | 1.50× | 1.20× |",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestDecisionSenderConfirmsOnce: with --confirm, a customer asked again
// while its reward window is open gets its open decision back, and the
// bench confirms that decision once, as an integrator would; a stub that
// answers a second confirmation with 409 (as coupond does) sees none.
func TestDecisionSenderConfirmsOnce(t *testing.T) {
	var mu sync.Mutex
	confirms := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/token":
			fmt.Fprint(w, `{"access_token":"t"}`)
		case r.URL.Path == "/v1/decisiones":
			var req struct {
				ClienteRef string `json:"cliente_ref"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			fmt.Fprintf(w, `{"decision_id":"d-%s"}`, req.ClienteRef) // one open decision a customer
		case strings.HasSuffix(r.URL.Path, "/ejecucion"):
			mu.Lock()
			defer mu.Unlock()
			confirms[r.URL.Path]++
			if confirms[r.URL.Path] > 1 {
				w.WriteHeader(409)
			}
			fmt.Fprint(w, `{}`)
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c := newBenchClient(&benchFlags{url: srv.URL, clientID: "x", secret: "-"}, 1)
	var confirmed sync.Map
	send, done := decisionSender(c, 1, 3, &confirmed)()
	defer done()
	for n := range 30 {
		if st, err := send(n); st != 200 || err != nil {
			t.Fatalf("request %d: status %d, %v", n, st, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(confirms) == 0 || len(confirms) > 3 {
		t.Fatalf("confirmed %d decisions, want 1 to 3 (3 customers): %v", len(confirms), confirms)
	}
	for path, n := range confirms {
		if n != 1 {
			t.Errorf("%s confirmed %d times, want once", path, n)
		}
	}
}

// TestBenchRefusesBadFlags: a bench flag out of range is an error naming
// it, before anything starts (--customers 0 divided by zero; --batch 0 and
// --duration -1s ran and reported nonsense).
func TestBenchRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"decisions", "--customers", "0"}, {"decisions", "--workers", "0"}, {"decisions", "--duration", "0s"},
		{"decisions", "--warmup", "-1s"}, {"decisions", "--batch-size", "0"},
		{"events", "--concurrency", "0"}, {"events", "--batch", "0"}, {"events", "--batch", "1001"}, {"events", "--duration", "-1s"},
		{"batch", "--size", "-1"}, {"batch", "--customers", "-3"},
	} {
		_, _, err := runCLI(t, append([]string{"bench"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[1]+":") {
			t.Errorf("bench %v: %v; want an error naming %s", args, err, args[1])
		}
	}
}

// TestBenchRefusesHugeFlags: a rate or a number of requests in flight
// beyond what a generator can send is an error naming the flag, before
// anything starts: --rate 2000000000 divided by a zero interval (a panic;
// bench events' ticker too) and a rate of millions queued two seconds of arrivals in one channel;
// --workers and --concurrency started that many goroutines and
// connections. (--client-id with nothing listening: the bench would fail
// at its first token, not start a server.)
func TestBenchRefusesHugeFlags(t *testing.T) {
	remote := []string{"--client-id", "ci_x", "--client-secret", "x", "--url", "http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"decisions", "--rate", "2000000000"}, {"decisions", "--rate", "1000001"}, {"decisions", "--rates", "1000,2000000000"},
		{"decisions", "--workers", "10001"}, {"events", "--concurrency", "10001"}, {"events", "--rate", "2000000000"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, append(append([]string{"bench"}, args...), remote...)...)
			if err == nil || !strings.Contains(err.Error(), args[1]+": want at most") {
				t.Errorf("bench %v: %v; want an error naming %s", args, err, args[1])
			}
		})
	}
}

// TestBenchInterruptedIsAnError: a bench cut short (Ctrl-C cancels the
// command's context) ends with an error, so a non-zero exit code: it
// printed the figures of the partial step and exited 0 as if the run had
// been measured.
func TestBenchInterruptedIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/token":
			w.Write([]byte(`{"access_token":"tok"}`))
		case "/v1/decisiones":
			w.Write([]byte(`{"decision_id":"d1"}`))
		case "/v1/eventos":
			w.Write([]byte(`{"aceptados":1}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"decisions", "--rate", "50", "--workers", "2", "--warmup", "0s", "--customers", "10"},
		{"events", "--concurrency", "1", "--batch", "1", "--customers", "10"},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			args = append([]string{"bench"}, append(args, "--client-id", "ci_x", "--client-secret", "x", "--url", srv.URL, "--duration", "60s")...)
			start := time.Now()
			err := Run(ctx, args, nil, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || ExitCode(err) == 0 || time.Since(start) > 20*time.Second {
				t.Errorf("bench %v interrupted: %v after %v, want an error at once", args[1], err, time.Since(start))
			}
		})
	}
}

// TestBenchEventsRunsSendNewIDs: a second bench events run against the
// same tenant (or one beside another: two publishers) sends event_ids of
// its own, so every event it sends is accepted. The runs sent the same
// ids with other content (ts), which the server refuses as duplicado:
// the second run reported almost no accepted events.
func TestBenchEventsRunsSendNewIDs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900}`)
			return
		}
		var req struct {
			Eventos []struct {
				EventID string `json:"event_id"`
			} `json:"eventos"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		n := 0
		for _, ev := range req.Eventos {
			if !seen[ev.EventID] {
				seen[ev.EventID] = true
				n++
			}
		}
		mu.Unlock()
		fmt.Fprintf(w, `{"aceptados":%d,"duplicados":0,"rechazados":[]}`, n)
	}))
	defer srv.Close()
	f := &benchFlags{url: srv.URL, clientID: "c", secret: "s", duration: 100 * time.Millisecond, customers: 10, seed: 1}
	for run := range 2 {
		target := &benchTarget{client: newBenchClient(f, 1)}
		sum, _ := postEventLoad(context.Background(), target, f, eventLoad{conc: 1, batch: 10}, io.Discard)
		if sum["requests"].(int64) == 0 || sum["accepted"] != 10*sum["requests"].(int64) {
			t.Errorf("run %d: %d requests of 10 events, %d accepted; want all accepted", run+1, sum["requests"], sum["accepted"])
		}
	}
}
