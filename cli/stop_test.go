package cli

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

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
	run := &running{http: srv, admin: &http.Server{}, stopConsole: func(context.Context) {}, stopLoops: func() {}}
	run.stop(100*time.Millisecond, false, zerolog.Nop())
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the answer still going at stop's bound goes on writing after stop returned")
	}
}
