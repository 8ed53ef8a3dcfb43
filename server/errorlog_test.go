package server

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// tempAcceptError is what accept(2) gives when the process is out of file
// descriptors: net/http logs it and retries.
type tempAcceptError struct{}

func (tempAcceptError) Error() string   { return "accept4: too many open files" }
func (tempAcceptError) Timeout() bool   { return false }
func (tempAcceptError) Temporary() bool { return true }

// flakyListener fails its first Accept with tempAcceptError, then is
// closed.
type flakyListener struct {
	net.Listener
	accepts int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.accepts++
	if l.accepts == 1 {
		return nil, tempAcceptError{}
	}
	return nil, net.ErrClosed
}

// TestHTTPServerErrorsInTheLog: what net/http itself reports (here an
// accept error, as when the descriptors run out) goes to the server's log
// as a JSON line with a level, not as a plain line on stderr.
func TestHTTPServerErrorsInTheLog(t *testing.T) {
	var buf bytes.Buffer
	h := newHarnessHTTP(t, zerolog.New(&buf), HTTPConfig{}, nil)
	srv, ln := h.srv.HTTPServer(&flakyListener{Listener: h.http.Listener}, HTTPConfig{})
	if err := srv.Serve(ln); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Serve: %v", err)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		if msg, _ := entry["message"].(string); strings.Contains(msg, "too many open files") {
			found = true
			if entry["level"] != "warn" {
				t.Errorf("net/http's line at level %v, want warn: %s", entry["level"], line)
			}
		}
	}
	if !found {
		t.Errorf("no log line for the accept error; log:\n%s", buf.String())
	}
}
