package engine

import (
	"testing"
	"time"
)

func TestDecisionIDs(t *testing.T) {
	ids := decisionIDs{key: []byte("0123456789abcdef0123456789abcdef")}
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
