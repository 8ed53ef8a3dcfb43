package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/console"
)

// TestConsoleListenerLimits: the console's listener has the API's limits
// (contract section 8): a header block over 32 KiB (a huge query string)
// gets 431 without reaching the console, a body that does not arrive
// within serve's --read-timeout has its connection closed, and at most
// console.MaxConns connections are open at once.
func TestConsoleListenerLimits(t *testing.T) {
	ctx := context.Background()
	e, err := openEnv(ctx, t.TempDir(), zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	const readTimeout = 300 * time.Millisecond
	stop, err := startConsole("127.0.0.1:0", false, readTimeout, e)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	addr := strings.TrimPrefix(e.svc.consoleURL, "http://")
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound for a failure, not a timing assertion
		return c
	}
	status := func(c net.Conn) (int, error) {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	huge := dial()
	defer huge.Close()
	io.WriteString(huge, "GET /login?t="+strings.Repeat("a", 64<<10)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if st, err := status(huge); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB query string: status %d (%v), want 431", st, err)
	}

	slow := dial()
	defer slow.Close()
	io.WriteString(slow, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nt=abc")
	start := time.Now()
	if _, err := io.ReadAll(slow); err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("a body still missing after --read-timeout %v: connection closed after %v (%v), want about that long", readTimeout, time.Since(start), err)
	}

	held := make([]net.Conn, console.MaxConns)
	for i := range held { // requests whose heads never end (an idle keep-alive one would make room)
		held[i] = dial()
		defer held[i].Close()
		io.WriteString(held[i], "GET /login HTTP/1.1\r\nHost: x\r\n")
	}
	extra := dial()
	defer extra.Close()
	io.WriteString(extra, "GET /login HTTP/1.1\r\nHost: x\r\n\r\n")
	extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if st, err := status(extra); err == nil {
		t.Fatalf("connection %d answered %d while %d were open, want it to wait", console.MaxConns+1, st, console.MaxConns)
	}
	held[0].Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if st, err := status(extra); st != http.StatusOK {
		t.Errorf("after one connection closed: status %d (%v), want 200", st, err)
	}
}
