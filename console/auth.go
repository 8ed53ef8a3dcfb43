package console

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

// Sign-in: "coupond admin console login" stores the SHA-256 of a random
// link token (valid LinkTTL, single use); opening the link and pressing
// "Sign in" trades it for a session token (cookie, valid SessionTTL) whose
// SHA-256 is stored. Raw tokens are never stored. Both records live in the
// store's global console space, so the admin command (through admin.sock
// or with the store opened directly) and the server see the same records.
const (
	LinkTTL    = 10 * time.Minute
	SessionTTL = 12 * time.Hour
)

// ErrBadLink is returned for a sign-in link that is unknown, used or expired.
var ErrBadLink = errors.New("console: sign-in link unknown, used or expired")

type linkRecord struct {
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Session is a signed-in operator session. ID is a short public name of
// it (the first 12 hex digits of its token's hash) for the audit log.
type Session struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	token     string
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// NewLink stores a new one-time sign-in token and returns it; the caller
// prints it as BASE/login?t=TOKEN. In the same batch it removes the
// sessions and links that have expired (or do not decode), so their
// records do not pile up.
func NewLink(db *store.DB, now time.Time) (string, error) {
	tok := newToken()
	b := db.NewBatch()
	defer b.Close()
	for _, span := range []func() (lo, hi []byte){store.ConsoleSessionSpan, store.ConsoleLinkSpan} {
		lo, hi := span()
		err := db.Scan(lo, hi, func(k, v []byte) error {
			var r linkRecord // a session's record has the same expires_at
			if json.Unmarshal(v, &r) != nil || !now.Before(r.ExpiresAt) {
				b.Delete(bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	if err := b.SetJSON(store.ConsoleLinkKey(hashToken(tok)), linkRecord{CreatedAt: now.UTC(), ExpiresAt: now.UTC().Add(LinkTTL)}); err != nil {
		return "", err
	}
	return tok, b.Commit()
}

// redeem consumes a sign-in token and opens a session. A token is good
// once: it is deleted in the same synced batch that creates the session.
// The caller serialises redeems (Console.mu).
func redeem(db *store.DB, linkToken string, now time.Time) (*Session, error) {
	if linkToken == "" || len(linkToken) > 128 {
		return nil, ErrBadLink
	}
	key := store.ConsoleLinkKey(hashToken(linkToken))
	v, err := db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrBadLink
	}
	if err != nil {
		return nil, err
	}
	var l linkRecord // one that does not decode stays zero: expired, removed below
	json.Unmarshal(v, &l)
	b := db.NewBatch()
	defer b.Close()
	b.Delete(key)
	if clock.Expired(l.ExpiresAt, LinkTTL, now) {
		if err := b.Commit(); err != nil {
			return nil, err
		}
		return nil, ErrBadLink
	}
	tok := newToken()
	h := hashToken(tok)
	s := &Session{ID: h[:12], CreatedAt: now.UTC(), ExpiresAt: now.UTC().Add(SessionTTL), token: tok}
	if err := b.SetJSON(store.ConsoleSessionKey(h), s); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	return s, nil
}

// lookupSession returns the live session of a cookie token, or ok false.
func lookupSession(db *store.DB, tok string, now time.Time) (*Session, bool, error) {
	if tok == "" || len(tok) > 128 {
		return nil, false, nil
	}
	var s Session
	v, err := db.Get(store.ConsoleSessionKey(hashToken(tok)))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if json.Unmarshal(v, &s) != nil { // a damaged session signs out: sign in again
		return nil, false, endSession(db, tok)
	}
	if clock.Expired(s.ExpiresAt, SessionTTL, now) {
		return nil, false, nil
	}
	s.token = tok
	return &s, true, nil
}

// endSession removes one session (sign out).
func endSession(db *store.DB, tok string) error {
	b := db.NewBatch()
	defer b.Close()
	b.Delete(store.ConsoleSessionKey(hashToken(tok)))
	return b.Commit()
}

// RevokeAll ends every session and unused sign-in link; it returns how many
// sessions were open.
func RevokeAll(db *store.DB) (int, error) {
	n, err := db.Count(store.ConsoleSessionSpan())
	if err != nil {
		return 0, err
	}
	b := db.NewBatch()
	defer b.Close()
	for _, span := range []func() (lo, hi []byte){store.ConsoleSessionSpan, store.ConsoleLinkSpan} {
		b.DeleteRange(span())
	}
	return n, b.Commit()
}

// csrfToken is the session's CSRF token: derived from the session token
// (which only the cookie holds), so nothing more is stored.
func (s *Session) csrfToken() string {
	h := sha256.Sum256([]byte("coupond console csrf\x00" + s.token))
	return base64.RawURLEncoding.EncodeToString(h[:24])
}

// checkCSRF compares a form's token with the session's in constant time.
func (s *Session) checkCSRF(got string) bool {
	want := s.csrfToken()
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// AuditEntry is one operator action done through the console.
type AuditEntry struct {
	At      time.Time `json:"at"`
	Session string    `json:"session"`
	Tenant  string    `json:"tenant"`
	Action  string    `json:"action"`
	Command []string  `json:"command"`
	Outcome string    `json:"outcome"` // "ok" or the error
}

// appendAudit writes an entry of the console's operator audit log
// (store.ConsoleAuditKey: tenant, time, sequence) with Sync.
func appendAudit(db *store.DB, e AuditEntry, seq uint64) error {
	b := db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.ConsoleAuditKey(e.Tenant, e.At, seq), e); err != nil {
		return err
	}
	return b.Commit()
}

// Audit returns the console audit entries of tenant (every tenant for ""),
// oldest first (by time across tenants, entries of one instant in key
// order), at most the latest last of them (none when last is 0 or less).
func Audit(db *store.DB, tenant string, last int) ([]AuditEntry, error) {
	lo, hi := store.ConsoleAuditSpan(tenant)
	var out []AuditEntry
	err := db.Scan(lo, hi, func(_, v []byte) error {
		var e AuditEntry
		if json.Unmarshal(v, &e) == nil {
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console audit: %w", err)
	}
	slices.SortStableFunc(out, func(a, b AuditEntry) int { return a.At.Compare(b.At) })
	if len(out) > last {
		out = out[len(out)-max(last, 0):]
	}
	return out, nil
}
