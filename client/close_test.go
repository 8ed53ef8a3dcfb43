package client_test

import (
	"context"
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
