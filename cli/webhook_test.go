package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/batch"
)

// TestWebhookReceiver checks the development receiver ("coupond webhook
// listen") against the server's signing: a good delivery gets 204 and is
// printed; an altered body, another key, a stale timestamp, a missing id
// and a GET are refused and not printed.
func TestWebhookReceiver(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	secret := batch.NewWebhookSecret()
	key, err := batch.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := batch.ParseWebhookSecret(batch.NewWebhookSecret())
	body := `{"tipo":"lote.completado"}`
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := batch.SignWebhook(key, "msg_1", now, []byte(body))
	var got []string
	var errOut bytes.Buffer
	h := webhookReceiver(secret, 5*time.Minute, func() time.Time { return now }, &errOut, func(id string, b []byte) {
		got = append(got, id+" "+string(b))
	})
	tests := []struct {
		name, method, id, ts, sig, body string
		want                            int
	}{
		{"good", "POST", "msg_1", ts, sig, body, http.StatusNoContent},
		{"altered body", "POST", "msg_1", ts, sig, strings.Replace(body, "lote", "l0te", 1), http.StatusUnauthorized},
		{"other key", "POST", "msg_1", ts, batch.SignWebhook(otherKey, "msg_1", now, []byte(body)), body, http.StatusUnauthorized},
		{"stale", "POST", "msg_1", strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10), batch.SignWebhook(key, "msg_1", now.Add(-6*time.Minute), []byte(body)), body, http.StatusUnauthorized},
		{"no id", "POST", "", ts, sig, body, http.StatusUnauthorized},
		{"GET", "GET", "msg_1", ts, sig, body, http.StatusMethodNotAllowed},
		{"retry", "POST", "msg_1", ts, sig, body, http.StatusNoContent},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/", strings.NewReader(tt.body))
		r.Header.Set("webhook-id", tt.id)
		r.Header.Set("webhook-timestamp", tt.ts)
		r.Header.Set("webhook-signature", tt.sig)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, w.Code, tt.want)
		}
	}
	if diff := cmp.Diff([]string{"msg_1 " + body}, got); diff != "" {
		t.Errorf("verified deliveries, a retry counted once (-want +got):\n%s", diff)
	}
	if !strings.Contains(errOut.String(), `repeat of "msg_1"`) {
		t.Errorf("the retry is not told on stderr: %q", errOut.String())
	}
	if n := strings.Count(errOut.String(), "rejected"); n != 4 {
		t.Errorf("%d rejections logged, want 4:\n%s", n, errOut.String())
	}
}

// TestWebhookListenRefusesBadFlags: a negative --count, a --tolerance
// that rejects every delivery, an --addr that is not host:port or whose
// port is taken is an error naming the flag (--addr's said only "listen
// tcp: address bogus: missing port in address").
func TestWebhookListenRefusesBadFlags(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, args := range [][]string{{"--count", "-1"}, {"--tolerance", "-5m"}, {"--tolerance", "0s"},
		{"--addr", "bogus"}, {"--addr", "127.0.0.1:99999"}, {"--addr", taken.Addr().String()}} {
		_, _, err := runCLI(t, append([]string{"webhook", "listen", "--secret", secret, "--addr", "127.0.0.1:0"}, args...)...)
		if err == nil || !strings.HasPrefix(err.Error(), args[0]) {
			t.Errorf("webhook listen %v: %v; want an error naming %s", args, err, args[0])
		}
	}
}

// TestWebhookListenJSONPrintsEveryDelivery: with --json every verified
// delivery is one JSON line on stdout, a body that is not JSON too (as
// body_text); such a delivery was counted and printed nothing.
func TestWebhookListenJSONPrintsEveryDelivery(t *testing.T) {
	secret := batch.NewWebhookSecret()
	key, err := batch.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := runCLI(t, "webhook", "listen", "--secret", secret, "--addr", addr, "--count", "2", "--json")
		done <- result{out, err}
	}()
	for i, body := range []string{`{"tipo":"lote.completado"}`, "not json\n"} {
		now := time.Now()
		id := fmt.Sprintf("msg_%d", i)
		var resp *http.Response
		for range 100 { // until the listener is up
			req, _ := http.NewRequest("POST", "http://"+addr+"/", strings.NewReader(body))
			req.Header.Set("webhook-id", id)
			req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
			req.Header.Set("webhook-signature", batch.SignWebhook(key, id, now, []byte(body)))
			if resp, err = http.DefaultClient.Do(req); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delivery %d: status %d", i, resp.StatusCode)
		}
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("webhook listen did not exit after --count deliveries")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(res.out, "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		got = append(got, v)
	}
	want := []map[string]any{
		{"webhook_id": "msg_0", "verified": true, "body": map[string]any{"tipo": "lote.completado"}},
		{"webhook_id": "msg_1", "verified": true, "body_text": "not json\n"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}
