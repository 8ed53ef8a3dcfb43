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
// defines it (VerifyWebhookSignature with WebhookTolerance) and returns its
// payload. secret is the registration's Secreto ("whsec_" + base64 of the
// key; the prefix may be left out), header the request's headers and body
// the raw request body, unparsed; now is the time the webhook-timestamp
// is checked against (time.Now() in a receiver).
//
// Refusing a repeated webhook-id is the receiver's part: the server retries
// a notification until it gets a 2xx, with the same webhook-id, so answer
// 2xx to duplicates too.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (*LoteCompletado, error) {
	if err := VerifyWebhookSignature(secret, header, body, now, WebhookTolerance); err != nil {
		return nil, err
	}
	var p LoteCompletado
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("coupond: webhook body: %w", err)
	}
	return &p, nil
}

// VerifyWebhookSignature checks a notification's Standard Webhooks
// signature, whatever its payload: it accepts when one of the v1
// signatures in webhook-signature (space separated) is the base64
// HMAC-SHA256 of "id.timestamp.body" under secret's key, compared in
// constant time (decoded strictly: a signature spelled with other padding
// bits in its last character is another signature, refused), and webhook-timestamp is within tolerance of now. The
// errors wrap ErrWebhookSecret, ErrWebhookHeaders, ErrWebhookTimestamp or
// ErrWebhookSignature.
func VerifyWebhookSignature(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return ErrWebhookSecret
	}
	id, tsText, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if id == "" || sigs == "" || err != nil {
		return ErrWebhookHeaders
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %v from now", ErrWebhookTimestamp, d.Round(time.Second))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + tsText + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, sig, found := strings.Cut(s, ",")
		if !found || v != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.Strict().DecodeString(sig); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrWebhookSignature
}
