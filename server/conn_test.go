package server

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomRequest is one request of a random keep-alive stream: a body framed
// by Content-Length, by chunks (with extensions and trailers) or absent,
// holding bytes that look like heads. smuggle adds Content-Length to a
// chunked request.
func randomRequest(rng *rand.Rand, smuggle bool) string {
	lure := "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n"
	body := lure[:rng.IntN(len(lure))] + strings.Repeat("x", rng.IntN(300))
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteString("\r\n") // net/http skips blank lines before a request
	}
	b.WriteString("POST /v1/eventos HTTP/1.1\r\nHost: x\r\nX-Note: content-length: 3\r\n")
	kind := rng.IntN(3)
	if smuggle {
		kind = 1
		fmt.Fprintf(&b, "cOnTeNt-LeNgTh: %d\r\n", len(body))
	}
	switch kind {
	case 0:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	case 1:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := body; len(rest) > 0; {
			n := 1 + rng.IntN(len(rest))
			ext := ""
			if rng.IntN(2) == 0 {
				ext = ";name=val"
			}
			fmt.Fprintf(&b, "%x%s\r\n%s\r\n", n, ext, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n")
		if rng.IntN(2) == 0 {
			b.WriteString("X-Trailer: Transfer-Encoding: chunked\r\n")
		}
		b.WriteString("\r\n")
	default:
		b.WriteString("\r\n")
	}
	return b.String()
}

// TestFramingWatcher feeds random keep-alive streams to the watcher in
// random pieces: it flags exactly the first request that carries both
// Content-Length and Transfer-Encoding, whatever the bodies hold and
// however the reads split them.
func TestFramingWatcher(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 3000 {
		n := 1 + rng.IntN(8)
		want := int64(-1)
		if rng.IntN(2) == 0 {
			want = int64(rng.IntN(n))
		}
		var stream strings.Builder
		for i := range n {
			stream.WriteString(randomRequest(rng, int64(i) == want))
		}
		c := &framingConn{}
		c.info.bad.Store(-1)
		s := []byte(stream.String())
		for len(s) > 0 {
			k := 1 + rng.IntN(min(len(s), 64))
			c.scan(s[:k])
			s = s[k:]
		}
		if got := c.info.bad.Load(); got != want {
			t.Fatalf("round %d: flagged request %d, want %d; stream:\n%q", round, got, want, stream.String())
		}
		if want < 0 && (c.st != stIdle || c.heads != int64(n)) {
			t.Fatalf("round %d: after %d requests the watcher is in state %d having seen %d heads", round, n, c.st, c.heads)
		}
	}
}
