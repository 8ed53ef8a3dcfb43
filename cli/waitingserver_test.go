package cli

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/server"
)

// TestWaitingServerMetrics: while serve waits at start for the disk to
// come back above the reserve, /metrics answers the disk series (writes
// refused), so the disk alerts fire instead of only "coupond down";
// /healthz answers 200 and the API 503 as before.
func TestWaitingServerMetrics(t *testing.T) {
	avail := uint64(700 << 20)
	srv := httptest.NewServer(waitingHandler(func() uint64 { return avail }, 1<<30, func() bool { return false }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if path != "/metrics" && resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no X-Content-Type-Options: nosniff, which every API answer carries", path)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	avail = 600 << 20 // read at each scrape
	st, text := get("/metrics")
	var got []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "coupond_") {
			got = append(got, l)
		}
	}
	want := []string{"coupond_disk_available_bytes 6.291456e+08", "coupond_disk_reserve_bytes 1.073741824e+09", "coupond_writes_refused 1"}
	if diff := cmp.Diff([]any{200, want}, []any{st, got}); diff != "" {
		t.Errorf("/metrics while waiting for space (-want +got):\n%s\n%s", diff, text)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/v1/decisiones": 503} {
		if st, _ := get(path); st != want {
			t.Errorf("%s: %d, want %d", path, st, want)
		}
	}
}

// TestWaitingServerLimits: the server that answers while serve waits for
// space holds the API's connection limits (contract §8): past
// --max-conns, a new client waits in the kernel's backlog until a place is
// free (a connection closes, or an idle keep-alive one is closed to make
// room), and an idle keep-alive connection is closed after IdleTimeout. It
// had neither, so clients' idle connections piled up with no bound while
// the disk was full.
func TestWaitingServerLimits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	cfg := server.HTTPConfig{MaxConns: 2, IdleTimeout: 500 * time.Millisecond}
	srv, err := waitingServer(addr, ln, t.TempDir(), 1<<30, func() bool { return false }, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// healthz sends GET /healthz on c and reports whether 200 came back
	// within wait.
	healthz := func(c net.Conn, wait time.Duration) bool {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range 2 { // two requests whose heads never end: the cap
		c := dial()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		held = append(held, c)
	}
	var got []bool
	got = append(got, healthz(dial(), 200*time.Millisecond)) // past the cap: waits
	held[0].Close()                                          // the waiting one takes its place, is served, goes idle
	last := dial()
	got = append(got, healthz(last, 3*time.Second)) // the idle one makes room
	last.SetDeadline(time.Now().Add(3 * time.Second))
	_, err = last.Read(make([]byte, 1))
	got = append(got, err == io.EOF) // closed after IdleTimeout
	if diff := cmp.Diff([]bool{false, true, true}, got); diff != "" {
		t.Errorf("a client past the cap waits, one finds room once an idle connection can make it, an idle one is closed (-want +got):\n%s", diff)
	}
}
