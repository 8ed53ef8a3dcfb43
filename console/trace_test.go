package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/store"
)

// traceLines returns the JSON lines of log that carry trace_id id.
func traceLines(log *syncbuf.Buffer, id string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["trace_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// answerLines returns traceLines(log, id) once the answer's own line
// ("console answer", which finish writes as the handler returns, as the
// answer may already be on its way) is among them, waiting up to 5 s for it.
func answerLines(log *syncbuf.Buffer, id string) []map[string]any {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		lines := traceLines(log, id)
		for _, l := range lines {
			if l["message"] == "console answer" {
				return lines
			}
		}
		if time.Now().After(deadline) {
			return lines
		}
	}
}

var traceRE = regexp.MustCompile(`<p class="muted" id="trace">Trace id <code>([0-9a-f]{16})</code>`)

// TestErrorAnswersCarryTraceID: every console answer carries X-Trace-Id;
// every error answer (401, 403, 400, 404, 413, 500, a handler's panic)
// shows the same id on its page and the server log has a line with it as
// trace_id, and the 500 page says nothing of the error itself.
func TestErrorAnswersCarryTraceID(t *testing.T) {
	h := newHarness(t)
	var log syncbuf.Buffer
	h.console.d.Log = zerolog.New(&log)
	c := h.client()
	if st, _ := get(t, h.client(), h.con.URL+"/login?t="+h.link()); st != http.StatusOK {
		t.Fatalf("sign-in page: %d", st)
	}
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	csrf := csrfRE.FindStringSubmatch(page)[1]
	for _, p := range []string{"/", "/t/acme"} {
		resp, err := c.Get(h.con.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(resp.Header.Get("X-Trace-Id")) || traceRE.Match(b) {
			t.Errorf("%s: X-Trace-Id %q; want one, and no trace line on a page that is not an error", p, resp.Header.Get("X-Trace-Id"))
		}
	}
	for _, id := range []string{"panics"} {
		if err := h.db.CreateTenant(&store.Tenant{ID: id, CreatedAt: h.clock.Now(), Settings: store.DefaultSettings()}); err != nil {
			t.Fatal(err)
		}
	}
	h.console.d.Warnings = func(t *store.Tenant) ([]string, error) {
		if t.ID == "panics" {
			panic("index out of range [3] with length 3")
		}
		return nil, nil
	}
	tests := []struct {
		name   string
		client *http.Client
		method string
		path   string
		form   url.Values
		status int
	}{
		{"signed out", h.client(), "GET", "/t/acme", nil, http.StatusUnauthorized},
		{"bad link", h.client(), "POST", "/login", url.Values{"t": {"made-up"}}, http.StatusUnauthorized},
		{"no csrf", c, "POST", "/t/acme/action", url.Values{"action": {"pause"}}, http.StatusForbidden},
		{"unknown action", c, "POST", "/t/acme/action", url.Values{"action": {"x"}, "csrf": {csrf}}, http.StatusBadRequest},
		{"unknown tenant", c, "GET", "/t/nope", nil, http.StatusNotFound},
		{"unknown page", c, "GET", "/nope", nil, http.StatusNotFound},
		{"form too large", c, "POST", "/t/acme/action", url.Values{"csrf": {csrf}, "x": {strings.Repeat("a", 17<<10)}}, http.StatusRequestEntityTooLarge},
		{"panic", c, "GET", "/t/panics", nil, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.form != nil {
				body = strings.NewReader(tt.form.Encode())
			}
			rq, _ := http.NewRequest(tt.method, h.con.URL+tt.path, body)
			rq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := tt.client.Do(rq)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id := resp.Header.Get("X-Trace-Id")
			m := traceRE.FindStringSubmatch(string(b))
			if resp.StatusCode != tt.status || m == nil || m[1] != id {
				t.Fatalf("status %d, X-Trace-Id %q, page's trace id %v; want %d and the same id on the page\n%s", resp.StatusCode, id, m, tt.status, b)
			}
			logged := answerLines(&log, id)
			if len(logged) == 0 {
				t.Errorf("no log line with trace_id %s", id)
			}
			if strings.Contains(string(b), "pebble") || strings.Contains(string(b), "index out of range") {
				t.Errorf("the page shows the error itself:\n%s", b)
			}
			if tt.status == http.StatusInternalServerError {
				var errs []any
				for _, l := range logged {
					if l["error"] != nil {
						errs = append(errs, l["level"])
					}
				}
				if diff := cmp.Diff([]any{"error"}, errs); diff != "" {
					t.Errorf("log lines with the error and this trace id (-want +got):\n%s", diff)
				}
			}
		})
	}
}
