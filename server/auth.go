package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coupond/coupond/clock"
)

// scope is one permission bit.
type scope uint32

const (
	scopeEventos scope = 1 << iota
	scopeDecisiones
	scopeConfirmar
	scopeCampanas
	scopeCatalogo
	scopeBorrar
	scopeExportar
	scopeWebhooks
	scopeExplicar
)

// scopeNames is the one table of scope names (contract section 3).
var scopeNames = []struct {
	name string
	bit  scope
}{
	{"eventos:publicar", scopeEventos},
	{"decisiones:pedir", scopeDecisiones},
	{"decisiones:confirmar", scopeConfirmar},
	{"campanas:escribir", scopeCampanas},
	{"catalogo:escribir", scopeCatalogo},
	{"clientes:borrar", scopeBorrar},
	{"clientes:exportar", scopeExportar},
	{"webhooks:escribir", scopeWebhooks},
	{"explicar:leer", scopeExplicar},
}

// ScopeNames lists every scope name, for the admin commands.
func ScopeNames() []string {
	out := make([]string, len(scopeNames))
	for i, s := range scopeNames {
		out[i] = s.name
	}
	return out
}

// knownScopes converts names to bits, leaving out (in unknown) the names
// this release does not know.
func knownScopes(names []string) (set scope, unknown []string) {
	for _, n := range names {
		found := false
		for _, s := range scopeNames {
			if s.name == n {
				set |= s.bit
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, n)
		}
	}
	return set, unknown
}

// String joins the scope names with spaces, in table order.
func (s scope) String() string {
	var parts []string
	for _, n := range scopeNames {
		if s&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, " ")
}

// tokenTTL is the lifetime of an access token (spec: 15 minutes).
const tokenTTL = 15 * time.Minute

// tokens issues and verifies access tokens: "ct2." + base64url(payload) +
// "." + base64url(HMAC-SHA256(payload)), payload = expiry (unix seconds, 8
// bytes) | scopes (4 bytes) | secret generation (4 bytes) | client_id. The
// generation is the credential's SecretGen for the secret the token was
// obtained with, so that a rotation can cut the old secret's tokens.
// Verification needs no store read; whether the credential is still active
// and still accepts the generation is checked against the in-memory
// credential cache by the caller. Tokens of the format before generations
// ("ct1.") are refused like any malformed token.
type tokens struct {
	// keyed is the signing key and its pool of HMACs: swapped whole by
	// setKey (a key rotation), read once per issue or verify.
	keyed atomic.Pointer[tokenKey]
	// strict decodes base64url refusing nonzero padding bits: the lenient
	// decoder took three other spellings of a token's last character
	// (and of its payload's) as the same token, so an altered token
	// still authenticated.
	strict *base64.Encoding
}

// tokenKey is a token signing key with its pool of HMACs keyed with it.
type tokenKey struct {
	key  []byte
	pool sync.Pool // of hash.Hash
}

func newTokens(key []byte) *tokens {
	t := &tokens{strict: base64.RawURLEncoding.Strict()}
	t.setKey(key)
	return t
}

// setKey makes key (copied) the one tokens are issued and verified with
// from now on: every token signed with the previous key fails verify.
func (t *tokens) setKey(key []byte) {
	k := &tokenKey{key: append([]byte(nil), key...)}
	k.pool.New = func() any { return hmac.New(sha256.New, k.key) }
	t.keyed.Store(k)
}

const tokenPrefix = "ct2."

// tokenHead is the length of the payload before the client id.
const tokenHead = 16

func (t *tokens) issue(clientID string, scopes scope, gen uint32, exp time.Time) string {
	payload := make([]byte, tokenHead, tokenHead+len(clientID))
	binary.BigEndian.PutUint64(payload, uint64(exp.Unix()))
	binary.BigEndian.PutUint32(payload[8:], uint32(scopes))
	binary.BigEndian.PutUint32(payload[12:], gen)
	payload = append(payload, clientID...)
	mac := t.sign(payload, nil)
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString(payload) + "." + enc.EncodeToString(mac)
}

func (t *tokens) sign(payload, dst []byte) []byte {
	k := t.keyed.Load()
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(payload)
	dst = h.Sum(dst)
	k.pool.Put(h)
	return dst
}

// verify checks the token's signature and expiry against now (real time) and
// returns its client id, scopes and secret generation. ok is false for
// anything malformed, altered or expired, and for a token whose expiry lies
// further ahead than tokenTTL (clock.Expired): it was issued before the
// clock went back, and would otherwise live tokenTTL plus however far the
// clock went (a day back: a day longer than the spec's 15 minutes).
// Its client asks for a new one, as for an expired token. clientID is only valid until the
// next call with buf; it points into buf so that the hot path allocates
// nothing.
func (t *tokens) verify(tok string, now time.Time, buf *[160]byte) (clientID []byte, scopes scope, gen uint32, ok bool) {
	if !strings.HasPrefix(tok, tokenPrefix) {
		return nil, 0, 0, false
	}
	rest := tok[len(tokenPrefix):]
	dot := strings.IndexByte(rest, '.')
	if dot < 0 || dot > 200 || len(rest)-dot-1 != 43 {
		return nil, 0, 0, false
	}
	var src [256]byte
	var mbuf [34]byte
	enc := t.strict
	n, err := enc.Decode(buf[:], append(src[:0], rest[:dot]...))
	if err != nil || n <= tokenHead {
		return nil, 0, 0, false
	}
	m, err := enc.Decode(mbuf[:], append(src[:0], rest[dot+1:]...))
	if err != nil || m != 32 {
		return nil, 0, 0, false
	}
	var sbuf [32]byte
	want := t.sign(buf[:n], sbuf[:0])
	if !hmac.Equal(want, mbuf[:m]) {
		return nil, 0, 0, false
	}
	exp := int64(binary.BigEndian.Uint64(buf[:8]))
	if clock.Expired(time.Unix(exp, 0), tokenTTL, now) {
		return nil, 0, 0, false
	}
	return buf[tokenHead:n], scope(binary.BigEndian.Uint32(buf[8:12])), binary.BigEndian.Uint32(buf[12:tokenHead]), true
}

// SetTokenKey makes key (copied) the access tokens' signing key from now
// on, for a key rotation (coupond admin keys rotate): every token signed
// with the previous key is answered 401 no_autenticado, and its client asks
// for a new one.
func (s *Server) SetTokenKey(key []byte) { s.tokens.setKey(key) }
