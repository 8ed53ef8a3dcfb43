package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/store"
)

// TestExportStreamsManyEvents: a customer whose events span several of the
// export's chunks gets one JSON document (no Content-Length: it is
// streamed) with every event exactly once, as the API's JSON, not cached.
func TestExportStreamsManyEvents(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	const hot, n = "MOSTRADOR0001", 2500
	evs := make([]engine.IngestEvent, n)
	for i := range evs {
		ev := engine.Event{ID: fmt.Sprintf("h-%d", i), ClienteRef: hot, TS: testStart.Add(-time.Duration(n-i) * time.Hour),
			Tipo: engine.CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t%d", i), MargenCents: 2500}
		evs[i] = engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)}
	}
	if res, err := h.engine.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != n {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	resp := h.raw("GET", "/v1/clientes/"+hot+"/exportacion", tok, nil)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("export: %d %v %.300s", resp.StatusCode, err, body)
	}
	hdr := map[string]string{"Content-Type": resp.Header.Get("Content-Type"), "Cache-Control": resp.Header.Get("Cache-Control")}
	if diff := cmp.Diff(map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"}, hdr); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if resp.ContentLength != -1 {
		t.Errorf("Content-Length %d: the export was not streamed", resp.ContentLength)
	}
	var x client.ExportacionCliente
	if err := json.Unmarshal(body, &x); err != nil || !strings.HasSuffix(string(body), "}\n") {
		t.Fatalf("export body: %v", err)
	}
	seen, want := map[string]int{}, map[string]int{}
	for i, ev := range x.Eventos {
		seen[ev.EventID]++
		want[fmt.Sprintf("h-%d", i)] = 1
	}
	if diff := cmp.Diff(n, len(want)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("events exported (-want +got):\n%s", diff)
	}
}

// TestStreamedAnswerCutOnError: a streamed answer whose source fails after
// the status line is cut short: the client cannot read it to its end, and
// gets neither a complete-looking document nor an error object appended.
func TestStreamedAnswerCutOnError(t *testing.T) {
	h := newHarness(t)
	handler := h.srv.wrap(route{name: "stream", public: true, h: func(c *call) error {
		return h.srv.streamJSON(c, func(w io.Writer) error {
			io.WriteString(w, `{"cliente_ref":"x","eventos":[{"event_id":"e-1"}`)
			for range 1000 { // past net/http's buffer: the status line goes out
				io.WriteString(w, `,{"event_id":"e-2"}`)
			}
			return errors.New("store: secret internal detail")
		})
	}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, nil) }))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil || strings.Contains(string(body), "error_interno") || strings.Contains(string(body), "secret") {
		t.Errorf("failure mid-stream: body of %d bytes ending %q read to its end (err %v), want the response cut short", len(body), body[max(0, len(body)-200):], err)
	}
}

// TestCutAnswerLoggedAndCounted: an answer cut short after its status line
// (a streamed export whose source fails, a handler that panics mid-stream)
// has its access log line, as a 500 with the status and bytes the client
// got and the outcome "cortado", and is counted in /metrics; before, the
// handler's own cut went by with neither.
func TestCutAnswerLoggedAndCounted(t *testing.T) {
	const body = 20000 // past net/http's buffer: the status line goes out
	for _, tc := range []struct {
		name string
		h    func(s *Server) func(c *call) error
	}{
		{"source fails mid-stream", func(s *Server) func(c *call) error {
			return func(c *call) error {
				return s.streamJSON(c, func(w io.Writer) error {
					io.WriteString(w, strings.Repeat(" ", body))
					return errors.New("store: damaged chunk")
				})
			}
		}},
		{"panic mid-stream", func(*Server) func(c *call) error {
			return func(c *call) error {
				c.w.WriteHeader(http.StatusOK)
				c.w.Write([]byte(strings.Repeat(" ", body)))
				panic("bug")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer // safe for the server's goroutines
			h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{}, nil)
			handler := h.srv.wrap(route{name: "stream", public: true, h: tc.h(h.srv)})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, nil) }))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			line := waitRequestLine(t, &logs, resp.Header.Get("X-Trace-Id"))
			got := map[string]any{"message": line["message"], "level": line["level"], "route": line["route"],
				"status": line["status"], "sent_status": line["sent_status"], "bytes": line["bytes"], "outcome": line["outcome"]}
			want := map[string]any{"message": "request", "level": "warn", "route": "stream",
				"status": float64(500), "sent_status": float64(200), "bytes": float64(body), "outcome": "cortado"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("access log line of the cut answer (-want +got):\n%s", diff)
			}
			if v := sample(scrape(t, h), `coupond_http_requests_total{route="stream",status="500"}`); v != "1" {
				t.Errorf("/metrics counts %q cut answers, want 1", v)
			}
		})
	}
}

// waitRequestLine is the access log line ("request") of logs with trace_id
// trace, waited for up to 5 s (the server logs after it answers).
func waitRequestLine(t *testing.T, logs *syncbuf.Buffer, trace string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["trace_id"] == trace && trace != "" && m["message"] == "request" {
				return m
			}
		}
	}
	t.Fatalf("no access log line with trace_id %q; log:\n%s", trace, logs.String())
	return nil
}
