// Package webhooktest is a webhook receiver's verification written from
// the Standard Webhooks specification, independent of batch's signing
// code, so that the tests of batch and server check the signatures
// coupond sends against the specification rather than against itself.
// Tests only: nothing in the product imports it.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far a delivery's timestamp may be from now.
const Tolerance = 5 * time.Minute

// Verify checks one delivery: the secret must be "whsec_" + base64(key)
// (the form coupond hands out); the webhook-timestamp header must be
// within Tolerance of now; and one of the space-separated "v1,<sig>" of
// webhook-signature must be base64(HMAC-SHA256(key, id "." timestamp "."
// body)), compared in constant time.
func Verify(secret string, hdr http.Header, body []byte, now time.Time) error {
	id, ts, sigs := hdr.Get("webhook-id"), hdr.Get("webhook-timestamp"), hdr.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("bad timestamp %q", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("timestamp %s outside tolerance", ts)
	}
	enc, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return errors.New("secret without whsec_ prefix")
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("bad secret: %v", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, sig, _ := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(sig)
		if v == "v1" && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}
