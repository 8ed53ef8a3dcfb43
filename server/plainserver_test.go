package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestHTTPServerForHasTheAPILimits: the server HTTPServerFor builds for
// another listener (the console) has the API's timeouts, header cap,
// connection cap and write stall bound, by default and as configured.
func TestHTTPServerForHasTheAPILimits(t *testing.T) {
	type limits struct {
		ReadHeader, Read, Idle, WriteStall time.Duration
		MaxHeaderBytes, MaxConns           int
	}
	of := func(srv *http.Server, ln net.Listener) limits {
		l := ln.(*limitListener)
		return limits{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout, l.writeStall, srv.MaxHeaderBytes, cap(l.sem)}
	}
	for _, cfg := range []HTTPConfig{{}, {ReadTimeout: time.Second, MaxConns: 7, WriteStallTimeout: time.Minute}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		api, apiLn := (&Server{}).HTTPServer(ln, cfg)
		other, otherLn := HTTPServerFor(http.NotFoundHandler(), ln, cfg, zerolog.Nop())
		if diff := cmp.Diff(of(api, apiLn), of(other, otherLn)); diff != "" {
			t.Errorf("config %+v: limits (-API +HTTPServerFor):\n%s", cfg, diff)
		}
		ln.Close()
	}
}

// TestHTTPServerForAnswers: on a listener of HTTPServerFor a header block
// over MaxHeaderBytes (a huge query string) is refused with net/http's
// plain 431 (not the API's JSON), and a client that stops reading a long
// answer is cut off after the write stall timeout rather than holding the
// handler for ever.
func TestHTTPServerForAnswers(t *testing.T) {
	// 64 MiB: far more than the socket buffers hold.
	ln, writeErr := serveLongAnswer(t, 64<<10, 1<<10, 200*time.Millisecond)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /?q="+strings.Repeat("a", 2*MaxHeaderBytes)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || strings.Contains(string(body), "codigo") {
		t.Errorf("huge query string: %d %.100q, want net/http's own 431", resp.StatusCode, body)
	}

	stalled, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	io.WriteString(stalled, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-writeErr:
		if err == nil {
			t.Error("the whole answer was written to a client that reads nothing")
		}
	case <-time.After(10 * time.Second): // a bound for the failure, not a timing assertion
		t.Error("a client that stopped reading held the handler for 10 s; want it cut after 200 ms")
	}
}

// serveLongAnswer serves, on a listener of HTTPServerFor with the write
// stall bound stall, an answer of n chunks of size bytes to every request,
// until the test ends; each handler's end (nil when it wrote everything)
// goes to writeErr.
func serveLongAnswer(t *testing.T, size, n int, stall time.Duration) (ln net.Listener, writeErr <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ends := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", size))
		for range n {
			if _, err := w.Write(chunk); err != nil {
				ends <- err
				return
			}
		}
		ends <- nil
	})
	srv, wrapped := HTTPServerFor(h, ln, HTTPConfig{WriteStallTimeout: stall}, zerolog.Nop())
	go srv.Serve(wrapped)
	t.Cleanup(func() { srv.Close() })
	return ln, ends
}
