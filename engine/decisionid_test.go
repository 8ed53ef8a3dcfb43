package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecisionIDs(t *testing.T) {
	ids := newDecisionIDs([]byte("0123456789abcdef0123456789abcdef"))
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	nonce := newNonce(at, [9]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	old := newNonce(at, [9]byte{})[:oldNonceLen] // an id issued before nonces grew
	id, oldID := ids.issue("acme", nonce), ids.issue("acme", old)
	if len(nonce) != nonceLen || len(id) > 128 {
		t.Fatalf("nonce %q (%d), id %q (%d)", nonce, len(nonce), id, len(id))
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 1
		return string(b)
	}
	tests := []struct {
		name, tenant, id, want string
		ok                     bool
	}{
		{"valid", "acme", id, nonce, true},
		{"old length", "acme", oldID, old, true},
		{"foreign tenant", "acm", id, "", false},
		{"other tenant", "acme2", id, "", false},
		{"altered nonce", "acme", flip(id, 6), "", false},
		{"altered mac", "acme", flip(id, len(id)-1), "", false},
		{"truncated", "acme", id[:len(id)-1], "", false},
		{"empty", "acme", "", "", false},
	}
	for _, tc := range tests {
		got, ok := ids.parse(tc.tenant, tc.id)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: parse = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestDecisionIDIssueMatchesFormat checks issued ids against the format
// computed from scratch ("d" tenant "." nonce "." base64url of the first 16
// bytes of HMAC-SHA256(key, tenant "." nonce)), issuing each twice so that
// a reused MAC is covered.
func TestDecisionIDIssueMatchesFormat(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	ids := newDecisionIDs(key)
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	tests := []struct{ tenant, nonce string }{
		{"acme", newNonce(at, [9]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})},
		{"b", newNonce(at, [9]byte{})[:oldNonceLen]},
		{"tenant-with-32-characters-abcdef", newNonce(at.Add(time.Hour), [9]byte{9, 9, 9})},
	}
	for _, tc := range tests {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(tc.tenant + "." + tc.nonce))
		want := "d" + tc.tenant + "." + tc.nonce + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
		for i := 0; i < 2; i++ {
			if diff := cmp.Diff(want, ids.issue(tc.tenant, tc.nonce)); diff != "" {
				t.Errorf("issue(%q, %q) #%d (-want +got):\n%s", tc.tenant, tc.nonce, i, diff)
			}
		}
	}
}
