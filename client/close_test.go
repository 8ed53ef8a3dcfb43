package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// closeRecorder is a caller's transport that records CloseIdleConnections.
type closeRecorder struct {
	*http.Transport
	calls *atomic.Int64
}

func (r closeRecorder) CloseIdleConnections() {
	r.calls.Add(1)
	r.Transport.CloseIdleConnections()
}

// closeResult is what Close did to the connections.
type closeResult struct {
	CloseIdleCalls int64 // on the caller's transport
	IdleClosed     bool  // the idle connection to the server was closed
}

// TestCloseLeavesCallersTransport: Close closes the idle connections of
// the Client's own transport, but not those of a transport passed with
// WithHTTPClient, which the caller may share with other clients. Before,
// Close called CloseIdleConnections on the caller's transport too.
func TestCloseLeavesCallersTransport(t *testing.T) {
	tests := []struct {
		name   string
		caller bool // WithHTTPClient with a closeRecorder
		want   closeResult
	}{
		{"own transport", false, closeResult{IdleClosed: true}},
		{"caller's transport", true, closeResult{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opened, closed atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, tokenJSON)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					opened.Add(1)
				case http.StateClosed:
					closed.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			var calls atomic.Int64
			rec := closeRecorder{Transport: &http.Transport{}, calls: &calls}
			defer rec.Transport.CloseIdleConnections()
			var opts []client.Option
			if tt.caller {
				opts = append(opts, client.WithHTTPClient(&http.Client{Transport: rec}))
			}
			c, err := client.New(srv.URL, "ci_x", "sec", opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Warm(context.Background()); err != nil { // leaves one idle connection
				t.Fatal(err)
			}
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := closeResult{CloseIdleCalls: calls.Load()}
			if tt.caller {
				// The idle connection was closed if the next request
				// needs a new one.
				resp, err := (&http.Client{Transport: rec.Transport}).Get(srv.URL + "/v1/token")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got.IdleClosed = opened.Load() > 1
			} else {
				for end := time.Now().Add(2 * time.Second); closed.Load() == 0 && time.Now().Before(end); {
					time.Sleep(5 * time.Millisecond)
				}
				got.IdleClosed = closed.Load() > 0
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Close (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCloseWithoutDeadlineEnds: Close with a context without a deadline,
// as in "defer c.Close(context.Background())", while coupond is down and a
// fallback record is queued, ends after WithTimeout as every other call
// does, the record counted as dropped. Before, it retried the record until
// coupond came back: a process could not shut down.
func TestCloseWithoutDeadlineEnds(t *testing.T) {
	const down = "http://127.0.0.1:0" // nothing listens on port 0: every dial is refused
	c, err := client.New(down, "ci_x", "cs_x", client.WithFallback(0), client.WithTimeout(300*time.Millisecond),
		client.WithFallbackRetry(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "c-close-0001", Contexto: client.Contexto{Canal: "push"}}); err != nil || !d.EnRespaldo {
		t.Fatalf("Decide: %+v, %v; want the fallback", d, err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Close(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close(context.Background()) still waiting after 10 s with coupond down")
	}
	st := c.Stats()
	if diff := cmp.Diff([2]int64{1, 0}, [2]int64{st.FallbackDropped, st.FallbackPending}); diff != "" {
		t.Errorf("fallback records [dropped, pending] (-want +got):\n%s", diff)
	}
}

// TestCloseSendsAWaitingRecordAtOnce: a fallback record that waits out a
// paused tenant's Retry-After (60 s, capped at WithFallbackRetry's max) is
// tried again as soon as Close begins, so a Close after the tenant was
// resumed sends it at once. Before, Close waited the whole backoff (30 s
// by default) and, with a shorter deadline, dropped the record.
func TestCloseSendsAWaitingRecordAtOnce(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api) // forwards, and counts the requests
	c := ts.newClient(t, proxy.http.URL, client.WithFallback(0), client.WithFallbackRetry(time.Second, 30*time.Second))
	if err := c.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.setPaused(t, true)
	if d, err := c.Decide(context.Background(), decisionRequest(newRef())); err != nil || !d.EnRespaldo {
		t.Fatalf("Decide on a paused tenant: %+v, %v; want the fallback", d, err)
	}
	// The record's first delivery meets the pause (503, Retry-After 60 s):
	// it waits 30 s.
	waitFor(t, 5*time.Second, func() bool { return proxy.requests("/v1/decisiones/respaldo") >= 1 })
	time.Sleep(50 * time.Millisecond)
	ts.setPaused(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Close(ctx)
	took := time.Since(start)
	st := c.Stats()
	if err != nil || st.FallbackSent != 1 || st.FallbackDropped != 0 || took > 3*time.Second {
		t.Errorf("Close after the resume: %v in %v, sent %d, dropped %d; want the record sent at once", err, took.Round(time.Millisecond), st.FallbackSent, st.FallbackDropped)
	}
}
