package cli

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestStopCutsAnswersStillGoing: an answer still being written when
// running.stop's bound passes (a customer's export streamed to a client
// that stopped reading, holding a snapshot of the store) ends then, its
// connection closed, so that it no longer reads the store serve closes
// next.
func TestStopCutsAnswersStillGoing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writing, ended := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(ended)
		chunk := make([]byte, 64<<10)
		close(writing)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil { // the status line; then it reads no more
		t.Fatal(err)
	}
	<-writing
	run := &running{http: srv, admin: &http.Server{}, stopConsole: func(context.Context) error { return nil }, stopLoops: func() {}}
	run.stop(100*time.Millisecond, false, zerolog.Nop())
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the answer still going at stop's bound goes on writing after stop returned")
	}
}

// TestStopReportsAdminLeft: running.stop reports requests of the operator's
// side still running at its bound, an admin command on the socket or a
// console request (a console action runs an admin command), so that serve
// leaves the store open to them; none are reported when they ended.
func TestStopReportsAdminLeft(t *testing.T) {
	tests := []struct {
		name                   string
		adminBusy, consoleBusy bool
		wantAdminLeft          bool
	}{
		{"none", false, false, false},
		{"admin command", true, false, true},
		{"console request", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			started, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			admin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				close(started)
				<-release
			})}
			go admin.Serve(ln)
			if tt.adminBusy {
				go http.Get("http://" + ln.Addr().String())
				<-started
			}
			console := func(ctx context.Context) error {
				if tt.consoleBusy {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}
			run := &running{http: &http.Server{}, admin: admin, stopConsole: console, stopLoops: func() {}}
			got := run.stop(100*time.Millisecond, false, zerolog.Nop())
			if diff := cmp.Diff(tt.wantAdminLeft, got); diff != "" {
				t.Errorf("adminLeft (-want +got):\n%s", diff)
			}
		})
	}
}
