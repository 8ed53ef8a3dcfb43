package cli

import (
	"strconv"
	"testing"
	"time"

	"github.com/coupond/coupond/batch"
)

// TestVerifyWebhook checks the development receiver's verification against
// the server's signing: a good delivery passes; an altered body, another
// key, a stale or future timestamp and a missing id do not; a header with
// several signatures passes when one matches.
func TestVerifyWebhook(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	secret := batch.NewWebhookSecret()
	key, err := webhookKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := webhookKey(batch.NewWebhookSecret())
	body := []byte(`{"tipo":"lote.completado"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := batch.SignWebhook(key, "msg_1", now, body)
	tests := []struct {
		name, id, ts, sig string
		key               []byte
		body              []byte
		at                time.Time
		ok                bool
	}{
		{"good", "msg_1", ts, sig, key, body, now, true},
		{"several signatures", "msg_1", ts, "v1,AAAA " + sig, key, body, now, true},
		{"altered body", "msg_1", ts, sig, key, []byte(`{"tipo":"lote.completad0"}`), now, false},
		{"other key", "msg_1", ts, sig, other, body, now, false},
		{"other id", "msg_2", ts, sig, key, body, now, false},
		{"stale", "msg_1", ts, sig, key, body, now.Add(6 * time.Minute), false},
		{"future", "msg_1", ts, sig, key, body, now.Add(-6 * time.Minute), false},
		{"no id", "", ts, sig, key, body, now, false},
		{"bad timestamp", "msg_1", "ayer", sig, key, body, now, false},
		{"v2 only", "msg_1", ts, "v2," + sig[3:], key, body, now, false},
	}
	for _, tt := range tests {
		err := verifyWebhook(tt.key, tt.id, tt.ts, tt.sig, tt.body, tt.at, 5*time.Minute)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!", "sk_abc"} {
		if _, err := webhookKey(bad); err == nil {
			t.Errorf("webhookKey(%q) accepted", bad)
		}
	}
}
