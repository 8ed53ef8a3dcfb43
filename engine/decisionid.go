package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strings"
	"sync"
	"time"
)

// Decision ids: "d" + tenant + "." + nonce + "." + mac, where nonce is 20
// base64url characters (the decision time in microseconds, 6 bytes, and 9
// random bytes) and mac is the first 16 bytes of HMAC-SHA256(key, tenant "." nonce)
// in base64url. Tenant ids are [a-z0-9_-], so the whole id matches the API's
// ID pattern and is at most 1+32+1+20+1+22 = 77 characters. An altered or
// foreign id is found out without a store read.
//
// Nonces must never repeat (a repeat would overwrite another decision's
// record), and a sandbox clock can hold still while a batch job decides
// 500,000 customers in the same microsecond: 72 random bits make a repeat
// among them less likely than 10⁻¹⁰, so no store read checks for one.
// Ids issued before the nonce grew had 12 characters (3 random bytes) and
// are still accepted.
type decisionIDs struct {
	// macs holds *idMAC values with the decision key, so that issuing an
	// id, on every decision, neither rebuilds the HMAC nor allocates beyond
	// the id itself.
	macs *sync.Pool
}

// idMAC is an HMAC-SHA256 with the decision key and scratch for an id.
type idMAC struct {
	h   hash.Hash
	sum [sha256.Size]byte
	buf [128]byte
}

// newDecisionIDs returns the ids signed with key.
func newDecisionIDs(key []byte) decisionIDs {
	return decisionIDs{macs: &sync.Pool{New: func() any { return &idMAC{h: hmac.New(sha256.New, key)} }}}
}

const (
	nonceLen    = 20
	oldNonceLen = 12
	// nonceTimeLen is the length of a nonce's leading characters that
	// encode its microsecond (6 bytes, 8 base64 characters): the nonces of
	// one microsecond share them.
	nonceTimeLen = 8
)

// appendID appends the id of (tenant, nonce) to b, with m's MAC.
func appendID(b []byte, m *idMAC, tenant, nonce string) []byte {
	b = append(b, 'd')
	b = append(b, tenant...)
	b = append(b, '.')
	b = append(b, nonce...)
	m.h.Reset()
	m.h.Write(b[1:]) // tenant "." nonce
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, m.h.Sum(m.sum[:0])[:16])
}

// newNonce builds a nonce that sorts by decision time from 9 random bytes.
func newNonce(at time.Time, rnd [9]byte) string {
	var b [15]byte
	us := uint64(at.UnixMicro())
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(us>>40), byte(us>>32), byte(us>>24), byte(us>>16), byte(us>>8), byte(us)
	copy(b[6:], rnd[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// issue returns the decision id of (tenant, nonce).
func (d decisionIDs) issue(tenant, nonce string) string {
	m := d.macs.Get().(*idMAC)
	id := string(appendID(m.buf[:0], m, tenant, nonce))
	d.macs.Put(m)
	return id
}

// parse checks id's signature and that it belongs to tenant, and returns
// its nonce. ok is false for anything altered, invented or foreign.
func (d decisionIDs) parse(tenant, id string) (nonce string, ok bool) {
	if len(id) < 2 || id[0] != 'd' {
		return "", false
	}
	rest := id[1:]
	if !strings.HasPrefix(rest, tenant) || len(rest) <= len(tenant) || rest[len(tenant)] != '.' {
		return "", false
	}
	rest = rest[len(tenant)+1:]
	n := len(rest) - 1 - 22
	if (n != nonceLen && n != oldNonceLen) || rest[n] != '.' {
		return "", false
	}
	nonce = rest[:n]
	m := d.macs.Get().(*idMAC)
	want := appendID(m.buf[:0], m, tenant, nonce)
	ok = hmac.Equal(want[len(want)-22:], []byte(rest[n+1:]))
	d.macs.Put(m)
	if !ok {
		return "", false
	}
	return nonce, true
}
