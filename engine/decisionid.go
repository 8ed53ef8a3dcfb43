package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
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
type decisionIDs struct{ key []byte }

const (
	nonceLen    = 20
	oldNonceLen = 12
)

func (d decisionIDs) mac(tenant, nonce string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(tenant))
	m.Write([]byte{'.'})
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
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
	return "d" + tenant + "." + nonce + "." + d.mac(tenant, nonce)
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
	if !hmac.Equal([]byte(d.mac(tenant, nonce)), []byte(rest[n+1:])) {
		return "", false
	}
	return nonce, true
}
