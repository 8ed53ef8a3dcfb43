package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/syncbuf"
)

// TestErrorAnswerLogsPageNotPath: the log line of a console error answer
// names the page (its route pattern, or not_found) and never the path it
// was asked for, which may carry a secret (a sign-in token pasted into the
// path) or anything else a client typed. The path was logged as sent. A
// form refused as sent from another site is logged under the page it was
// sent to too (it was not_found).
func TestErrorAnswerLogsPageNotPath(t *testing.T) {
	h := newHarness(t)
	var log syncbuf.Buffer
	h.console.d.Log = zerolog.New(&log)
	c := h.client()
	h.signIn(c, h.link())
	const secret = "Zk3sEcReTtOkEnInPaTh0123456789abcdefGHIJ"
	tests := []struct {
		name   string
		client *http.Client
		path   string
		want   map[string]any
	}{
		{"token in path, signed out", h.client(), "/login/" + secret, map[string]any{"route": "not_found", "status": 401.0}},
		{"unknown page", c, "/nope/" + secret, map[string]any{"route": "not_found", "status": 404.0}},
		{"unknown tenant", c, "/t/" + secret, map[string]any{"route": "/t/{tenant}", "status": 404.0}},
		{"tenants page, signed out", h.client(), "/", map[string]any{"route": "/", "status": 401.0}},
		{"action from another site", c, "POST /t/acme/action", map[string]any{"route": "/t/{tenant}/action", "status": 403.0}},
		{"sign-in from another site", h.client(), "POST /login", map[string]any{"route": "/login", "status": 403.0}},
		{"unknown page from another site", c, "POST /nope/" + secret, map[string]any{"route": "not_found", "status": 403.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, post := strings.Cut(tt.path, " ")
			if !post {
				method, path = "GET", tt.path
			}
			rq, _ := http.NewRequest(method, h.con.URL+path, strings.NewReader("action=pause"))
			if post { // a form another site's page sends (refused: TestCrossSitePostsRefused)
				rq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				rq.Header.Set("Sec-Fetch-Site", "cross-site")
			}
			resp, err := tt.client.Do(rq)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			lines := answerLines(&log, resp.Header.Get("X-Trace-Id"))
			if len(lines) != 1 {
				t.Fatalf("%d log lines for the answer, want 1\n%s", len(lines), log.String())
			}
			got := map[string]any{"route": lines[0]["route"], "status": lines[0]["status"]}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("logged (-want +got):\n%s", diff)
			}
			if strings.Contains(log.String(), secret) {
				t.Errorf("the log holds the path's secret:\n%s", log.String())
			}
		})
	}
}
