package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
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
	const size = 6 << 20
	ln, writeErr := serveLongAnswer(t, 4<<10, size/(4<<10), 500*time.Millisecond)

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
