package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
)

// slowClient opens a connection to addr and trickles a request body to path
// one byte every gap, never finishing it. When the server closes the
// connection (after answering or not) it sends how long that took on
// closedAfter.
func slowClient(addr, path string, gap time.Duration, stop <-chan struct{}, closedAfter chan<- time.Duration) error {
	start := time.Now() // before the server can start its clock
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", path); err != nil {
		conn.Close()
		return err
	}
	go func() {
		defer conn.Close()
		gone := make(chan struct{})
		go func() { io.Copy(io.Discard, conn); close(gone) }() // returns when the server closes
		t := time.NewTicker(gap)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-gone:
				closedAfter <- time.Since(start)
				return
			case <-t.C:
				conn.Write([]byte(" "))
			}
		}
	}()
	return nil
}

// TestSlowClients: 500 clients trickling bodies without credentials hold
// no connection past the read timeout and do not stop a normal client from
// getting decisions within 10 ms at p99 (over 200 decisions).
func TestSlowClients(t *testing.T) {
	const readTimeout = 3 * time.Second
	h := newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{ReadTimeout: readTimeout}, nil)
	h.tenant("acme", true, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	tok := h.token("acme", allScopes...)
	h.catalog(tok, 3)
	addr := h.http.Listener.Addr().String()

	measure := decisionTimer(t, h, tok)
	// Baseline in the same run: the best of up to 3 runs.
	b50, b99, bmax := measure(0)
	for i := 1; i < 3 && b99 > p99Limit(); i++ {
		if c50, c99, cmax := measure(10_000 * i); c99 < b99 {
			b50, b99, bmax = c50, c99, cmax
		}
	}

	nSlow := 500
	stop := make(chan struct{})
	defer close(stop)
	closed := make(chan time.Duration, nSlow)
	for i := range nSlow {
		path := "/v1/token" // public: its body is read before any credential is known
		if i%2 == 1 {
			path = "/v1/decisiones" // no token: 401 at once, then net/http drains the body
		}
		if err := slowClient(addr, path, 500*time.Millisecond, stop, closed); err != nil {
			t.Fatalf("slow client %d: %v", i, err)
		}
	}
	// On a machine so loaded that the baseline itself is slow, the bound
	// follows it, and a run is retried twice: a stall caused by slow
	// clients is seconds in every run, a busy machine's hiccup is not.
	limit := max(p99Limit(), 3*b99)
	for attempt := 1; ; attempt++ {
		p50, p99, worst := measure(1000 * attempt)
		t.Logf("normal client's decisions: baseline p50 %v p99 %v max %v; with %d slow clients p50 %v p99 %v max %v",
			b50, b99, bmax, nSlow, p50, p99, worst)
		if p99 <= limit {
			break
		}
		if attempt == 3 {
			t.Errorf("p99 %v with %d slow clients (baseline %v) in 3 runs, want at most %v", p99, nSlow, b99, limit)
			break
		}
	}

	// Every slow client is cut off once the read timeout has passed.
	deadline := time.After(readTimeout + 5*time.Second)
	for i := range nSlow {
		select {
		case d := <-closed:
			if d < readTimeout {
				t.Fatalf("slow client closed after %v, before the read timeout %v", d, readTimeout)
			}
		case <-deadline:
			t.Fatalf("%d of %d slow clients still connected %v after the read timeout", nSlow-i, nSlow, 5*time.Second)
		}
	}
}

// decisionTimer returns a function that asks for 200 decisions, one after
// the other on one keep-alive connection, for customers from, from+1, …,
// and returns their p50, p99 and max; 20 warm-up decisions go first.
func decisionTimer(t *testing.T, h *harness, tok string) func(from int) (p50, p99, worst time.Duration) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	decide := func(i int) time.Duration {
		body := fmt.Sprintf(`{"cliente_ref":"normal-%05d","contexto":{"canal":"push"}}`, i)
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/decisiones", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("decision %d: %d", i, resp.StatusCode)
		}
		return d
	}
	for i := range 20 { // warm up: connection, caches
		decide(100_000 + i)
	}
	return func(from int) (p50, p99, worst time.Duration) {
		var lat []time.Duration
		for i := range 200 {
			lat = append(lat, decide(from+i))
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100-1], lat[len(lat)-1]
	}
}

// TestHeaderTimeout: a client that never finishes its headers is cut off
// after the header timeout.
func TestHeaderTimeout(t *testing.T) {
	h := newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 10 * time.Second}, nil)
	conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, conn)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("connection held %v with unfinished headers, want about 300ms", d)
	}
}

// TestMaxConns: past the cap a new connection is not served until one of
// the open ones, each in the middle of a request (its head half sent),
// closes.
func TestMaxConns(t *testing.T) {
	h := newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{MaxConns: 4}, nil)
	addr := h.http.Listener.Addr().String()
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // the head never ends
	}
	served := fifthServed(addr, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	select {
	case <-served:
		t.Fatal("a fifth connection was served with a cap of 4")
	default:
	}
	held[0].Close()
	if !<-served {
		t.Fatal("the fifth connection was not served after one closed")
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

// fifthServed asks for /healthz on a new connection to addr and sends on
// the channel returned whether it got its 200 within wait.
func fifthServed(addr string, wait time.Duration) <-chan bool {
	served := make(chan bool, 1)
	go func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			served <- false
			return
		}
		defer c.Close()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		served <- err == nil && resp.StatusCode == 200
	}()
	return served
}

// TestMaxConnsIdleMakesRoom: at the cap, idle keep-alive connections do not
// hold a new client off for IdleTimeout: the one idle longest is closed for
// it, and the others keep being served.
func TestMaxConnsIdleMakesRoom(t *testing.T) {
	h := newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{MaxConns: 4}, nil)
	addr := h.http.Listener.Addr().String()
	var held []net.Conn
	var readers []*bufio.Reader
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held, readers = append(held, c), append(readers, bufio.NewReader(c))
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") // served, then idle keep-alive
		resp, err := http.ReadResponse(readers[len(readers)-1], nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		time.Sleep(20 * time.Millisecond) // a distinct idle time each
	}
	start := time.Now()
	if !<-fifthServed(addr, 5*time.Second) {
		t.Fatalf("a fifth client was not served within 5s: idle connections held the cap of 4")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the fifth client waited %v, want well under a second", d)
	}
	held[0].SetReadDeadline(time.Now().Add(time.Second))
	if _, err := readers[0].ReadByte(); err != io.EOF {
		t.Errorf("the connection idle longest: read %v, want EOF (closed to make room)", err)
	}
	io.WriteString(held[3], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	held[3].SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(readers[3], nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("the connection idle least, asked again: %v %v, want 200", resp, err)
	}
}

// TestHTTPServerDefaults: the limits of contract section 8 by default.
func TestHTTPServerDefaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wrapped := (&Server{}).HTTPServer(ln, HTTPConfig{})
	defer wrapped.Close()
	got := []time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout}
	want := []time.Duration{5 * time.Second, 30 * time.Second, 120 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("header, read, idle timeouts %v, want %v", got, want)
	}
	if n := cap(wrapped.(*limitListener).sem); n != DefaultMaxConns {
		t.Errorf("connection cap %d, want %d", n, DefaultMaxConns)
	}
	if d := wrapped.(*limitListener).writeStall; d != 30*time.Second {
		t.Errorf("write stall timeout %v, want 30s", d)
	}
	if srv.MaxHeaderBytes != 32<<10 {
		t.Errorf("header cap %d bytes, want 32 KiB", srv.MaxHeaderBytes)
	}
}

// TestOversizedHeadersRefused: a header block past MaxHeaderBytes is
// refused (431) without reaching a handler, and the server goes on serving.
func TestOversizedHeadersRefused(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wrapped := h.srv.HTTPServer(ln, HTTPConfig{})
	go srv.Serve(wrapped)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: %d, want 431", resp.StatusCode)
	}
	resp, err = http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a normal request after it: %d, want 200", resp.StatusCode)
	}
}

// TestLongAnswerOutlivesReadTimeout: a request whose answer takes longer
// than the read timeout (an export, a download) keeps its context, so it is
// neither cut off nor logged as a client gone. (net/http lifts the read
// deadline once the request is read; this keeps that true.)
func TestLongAnswerOutlivesReadTimeout(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wrapped := h.srv.HTTPServer(ln, HTTPConfig{ReadTimeout: 200 * time.Millisecond})
	var ctxErr atomic.Value
	slow := h.srv.wrap(route{name: "slow", public: true, h: func(c *call) error {
		time.Sleep(600 * time.Millisecond)
		ctxErr.Store(fmt.Sprint(c.r.Context().Err()))
		c.w.WriteHeader(http.StatusNoContent)
		return nil
	}})
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { slow(w, r, nil) })
	go srv.Serve(wrapped)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || ctxErr.Load() != "<nil>" {
		t.Errorf("got %d, context error %v; want 204 and a live context", resp.StatusCode, ctxErr.Load())
	}
}

// TestStalledReaderReleasesConnection: a client that asks for answers and
// never reads them (its receive window stays shut) does not hold its
// connection, and with it a slot under MaxConns, for ever: a write that
// makes no progress for WriteStallTimeout closes it.
func TestStalledReaderReleasesConnection(t *testing.T) {
	h := newHarnessHTTP(t, zerolog.Nop(), HTTPConfig{MaxConns: 1, WriteStallTimeout: 200 * time.Millisecond}, nil)
	addr := h.http.Listener.Addr().String()
	hog, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	// Pipelined requests for the OpenAPI document (about 180 KB each): far
	// more than the socket buffers hold, so the server's writes block.
	if _, err := io.WriteString(hog, strings.Repeat("GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n", 200)); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound for the failure, not a timing assertion
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a client was not served while another stalled reading its answers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
}
