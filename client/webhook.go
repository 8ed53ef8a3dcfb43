package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookTolerance is how far a notification's webhook-timestamp may be
// from now for VerifyWebhook.
const WebhookTolerance = 5 * time.Minute

// Webhook verification errors; VerifyWebhook wraps them.
var (
	ErrWebhookSecret    = errors.New("coupond: webhook secret malformed (want whsec_ and base64)")
	ErrWebhookHeaders   = errors.New("coupond: webhook-id, webhook-timestamp or webhook-signature missing or malformed")
	ErrWebhookTimestamp = errors.New("coupond: webhook timestamp outside the tolerance")
	ErrWebhookSignature = errors.New("coupond: no webhook signature matches")
)

// VerifyWebhook checks a lote.completado notification as Standard Webhooks
// defines it and returns its payload. secret is the registration's Secreto
// ("whsec_" + base64 of the key; the prefix may be left out), header the
// request's headers and body the raw request body, unparsed. It accepts the
// notification when one of the v1 signatures in webhook-signature (space
// separated) is the base64 HMAC-SHA256 of "id.timestamp.body", compared in
// constant time, and webhook-timestamp is within WebhookTolerance of now.
//
// Refusing a repeated webhook-id is the receiver's part: the server retries
// a notification until it gets a 2xx, with the same webhook-id, so answer
// 2xx to duplicates too.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (*LoteCompletado, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, ErrWebhookSecret
	}
	id, tsText, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if id == "" || sigs == "" || err != nil {
		return nil, ErrWebhookHeaders
	}
	if d := now.Sub(time.Unix(ts, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return nil, fmt.Errorf("%w: %v from now", ErrWebhookTimestamp, d.Round(time.Second))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + tsText + "."))
	m.Write(body)
	want := m.Sum(nil)
	ok := false
	for _, s := range strings.Fields(sigs) {
		v, sig, found := strings.Cut(s, ",")
		if !found || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return nil, ErrWebhookSignature
	}
	var p LoteCompletado
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("coupond: webhook body: %w", err)
	}
	return &p, nil
}
