package cli

import (
	"bytes"
	"encoding/base64"
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
		t.Errorf("verified deliveries (-want +got):\n%s", diff)
	}
	if n := strings.Count(errOut.String(), "rejected"); n != 4 {
		t.Errorf("%d rejections logged, want 4:\n%s", n, errOut.String())
	}
}

// TestWebhookListenRefusesBadFlags: a negative --count or a --tolerance
// that rejects every delivery is an error naming the flag.
func TestWebhookListenRefusesBadFlags(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, args := range [][]string{{"--count", "-1"}, {"--tolerance", "-5m"}, {"--tolerance", "0s"}} {
		_, _, err := runCLI(t, append([]string{"webhook", "listen", "--secret", secret, "--addr", "127.0.0.1:0"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]+":") {
			t.Errorf("webhook listen %v: %v; want an error naming %s", args, err, args[0])
		}
	}
}
