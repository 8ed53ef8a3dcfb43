package server

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestTokenKeySwapWhileServing: the token key is replaced (a key rotation)
// while requests issue and verify tokens; under -race, no data race. A
// token issued before the last swap is refused, one issued after it
// verifies.
func TestTokenKeySwapWhileServing(t *testing.T) {
	tk := newTokens(bytes.Repeat([]byte{1}, 32))
	now := time.Now()
	before := tk.issue("ci_a", scopeEventos, 0, now.Add(tokenTTL))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf [160]byte
			for range 500 {
				tk.verify(tk.issue("ci_a", scopeEventos, 0, now.Add(tokenTTL)), now, &buf)
			}
		}()
	}
	for i := range 50 {
		tk.setKey(bytes.Repeat([]byte{byte(2 + i)}, 32))
	}
	wg.Wait()
	var buf [160]byte
	if _, _, _, ok := tk.verify(before, now, &buf); ok {
		t.Error("a token signed with the replaced key verifies")
	}
	if _, _, _, ok := tk.verify(tk.issue("ci_a", scopeEventos, 0, now.Add(tokenTTL)), now, &buf); !ok {
		t.Error("a token signed with the new key does not verify")
	}
}
