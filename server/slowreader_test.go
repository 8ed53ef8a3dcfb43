package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestSlowReaderKeepsItsAnswer: a client that keeps reading, slowly, is
// not cut off by the write stall bound (README, "Slow and broken clients").
// The kernel's send buffer grows to megabytes and, by default, wakes a
// writer blocked on it only once about a third of it has drained: here a
// client reading 1 MiB/s let no write through for 500 ms, and in serve one
// reading a customer's export at 100 KB/s was cut after 30 s. The listener
// bounds the unsent bytes the kernel queues (boundUnsent).
func TestSlowReaderKeepsItsAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 6 MiB at 1 MiB/s")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const size = 6 << 20
	writeErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 4<<10))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	srv, wrapped := HTTPServerFor(h, ln, HTTPConfig{WriteStallTimeout: 500 * time.Millisecond}, zerolog.Nop())
	go srv.Serve(wrapped)
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	n := 0
	for tick := time.Now(); ; tick = tick.Add(16 * time.Millisecond) { // 1 MiB/s
		time.Sleep(time.Until(tick))
		m, err := io.ReadFull(resp.Body, buf)
		n += m
		if err != nil {
			break
		}
	}
	if err := <-writeErr; err != nil || n != size {
		t.Errorf("a client reading 1 MiB/s got %d of %d bytes; the handler's write: %v", n, size, err)
	}
}
