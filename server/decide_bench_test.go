package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
)

// BenchmarkDecisionRequest measures POST /v1/decisiones through the whole
// pipeline in process (no socket): auth, body, schema, Decide over an
// in-memory store, quota, JSON answer, metrics and a JSON access log line.
// It is the server's share of the CPU that bench decisions reports.
func BenchmarkDecisionRequest(b *testing.B) {
	h := newHarness(&testing.T{})
	defer h.http.Close()
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	tok := h.token("acme", "decisiones:pedir", "catalogo:escribir")
	h.catalog(tok, 4)
	h.srv.log = zerolog.New(io.Discard).With().Timestamp().Logger()
	w := &discardWriter{h: http.Header{}}
	bodies := make([]string, 4096)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"cliente_ref":"bench-cliente-%07d","contexto":{"canal":"push"}}`, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", "/v1/decisiones", strings.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		clear(w.h)
		h.srv.ServeHTTP(w, req)
	}
	// Wall time per op means little on a machine shared with other work;
	// the process's CPU per op (Pebble's goroutines included) much more.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
