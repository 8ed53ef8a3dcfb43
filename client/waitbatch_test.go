package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coupond/coupond/client"
)

// outageTransport answers the token and the job's status from a script:
// each poll of the job takes the next step, "refused" (no connection),
// a status code with the API's error, or the job's estado.
type outageTransport struct {
	steps []string
	polls int
}

func (o *outageTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/token" {
		fmt.Fprint(rec, tokenJSON)
		return rec.Result(), nil
	}
	step := o.steps[min(o.polls, len(o.steps)-1)]
	o.polls++
	switch step {
	case "refused":
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case "refused at the deadline": // a poll still failing when ctx ends
		<-r.Context().Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case "503", "429", "404":
		rec.WriteHeader(map[string]int{"503": 503, "429": 429, "404": 404}[step])
		fmt.Fprint(rec, `{"codigo":"x","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`)
		return rec.Result(), nil
	}
	fmt.Fprintf(rec, `{"job_id":"job-1","estado":%q,"creado_en":"2001-02-03T04:05:06Z","campana_id":"c",`+
		`"total":1,"procesados":0,"iniciado_en":null,"completado_en":null}`, step)
	return rec.Result(), nil
}

// TestWaitBatchRidesOutAnOutage: WaitBatch polls again after a poll that a
// server's return can fix (refused connection, 503, 429) until the job
// ends, returns a 404 at once, and when ctx ends during an outage returns
// an error wrapping both ctx's and the last poll's. It returned the first
// failed poll's error, so a server restart in the middle of a job's run
// ended the caller's wait.
func TestWaitBatchRidesOutAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		polls int    // polls made
		want  string // "" for completado, else a piece of the error
	}{
		{"a restart", []string{"en_curso", "refused", "refused", "503", "429", "completado"}, 6, ""},
		{"an unknown job", []string{"404", "completado"}, 1, "404"},
		{"an outage past the deadline", []string{"en_curso", "refused"}, 0, "context deadline exceeded"},
		{"a poll failing as the deadline passes", []string{"en_curso", "refused at the deadline"}, 2, "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &outageTransport{steps: tc.steps}
			c, err := client.New("http://coupond.invalid", "ci_x", "sec", client.WithHTTPClient(&http.Client{Transport: tr}),
				client.WithPollInterval(time.Millisecond), client.WithRetries(1, 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			st, err := c.WaitBatch(ctx, "job-1", nil)
			switch {
			case tc.want == "" && (err != nil || st.Estado != client.EstadoCompletado):
				t.Errorf("WaitBatch: %+v, %v; want completado", st, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("WaitBatch: %v; want an error saying %q", err, tc.want)
			case tc.polls > 0 && tr.polls != tc.polls:
				t.Errorf("%d polls, want %d", tr.polls, tc.polls)
			}
			if tc.want == "context deadline exceeded" && (!errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "refused")) {
				t.Errorf("WaitBatch past the deadline: %v; want ctx's error and the last poll's", err)
			}
		})
	}
}

// TestWaitBatchReturnsAFailureNoRestartEnds: a poll that failed because
// the Client does not trust the server's certificate returns at once, as
// a 404 does: no server's return ends it. WaitBatch polled such a failure
// again until ctx ended, which, for a wait without a deadline, is never.
func TestWaitBatchReturnsAFailureNoRestartEnds(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request got through: %s", r.URL.Path)
	}))
	defer srv.Close()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the client breaks off
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithPollInterval(time.Millisecond), client.WithRetries(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.WaitBatch(ctx, "job-1", nil)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("WaitBatch against an untrusted certificate: %v (ctx: %v); want the certificate's error at once", err, ctx.Err())
	}
}
