package batch

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coupond/coupond/clock"
)

// Signed result URLs let a client download a completed job's result file
// without a token (spec: GET /v1/lotes-decision/{job_id}, resultado_url).
// A URL has the form
//
//	{baseURL}/v1/lotes-decision/{job_id}/descarga?t={tenant}&c={client_id}&g={generation}&exp={unix seconds}&sig={signature}
//
// where signature is the unpadded base64url HMAC-SHA256, under the
// installation's URL key, of the method GET, the path
// /v1/lotes-decision/{job_id}/descarga, the tenant, the client id and secret
// generation of the credential the URL was minted for, the job id and exp
// (contract section 7), each field length-prefixed so that no two different
// field lists share a signed message. The signature also says whether the
// download may carry detalle: a URL minted for a credential without
// explicar:leer is signed under another context and serves the lines
// without detalle, as /resultado does for that credential. The path signed and verified is the
// API path, without any path prefix that baseURL carries (a reverse proxy
// in front of coupond strips it). The URL is valid while the current time
// is before exp and, as the token it was minted with, while its credential
// is active and that secret still accepted: the server checks the Grant's
// credential at each download, so a revocation (or a rotation's grace
// ending) ends the URLs minted for it too.
//
// URLs of the earlier form, without c and g (signed under the v1 contexts
// and bound to no credential), still verify until their exp, which is at
// most ResultURLTTL after the upgrade that stopped minting them.

// ResultURLTTL is how long a signed result URL stays valid (spec: 60 minutes).
const ResultURLTTL = 60 * time.Minute

// Signed URL errors. Verify returns ErrURLExpired only for a URL that is
// authentic in every other respect; callers answer both the same way.
var (
	ErrURLExpired = errors.New("batch: signed URL expired")
	ErrURLInvalid = errors.New("batch: signed URL invalid")
)

const (
	downloadPrefix = "/v1/lotes-decision/"
	downloadSuffix = "/descarga"
	// The contexts a URL is signed under, one per grant: with detalle or
	// without, bound to a credential (v2) or of the earlier form (v1).
	urlSigContext      = "coupond/result-url/v2"
	urlSigNoDetalle    = "coupond/result-url/v2/sin-detalle"
	legacySigContext   = "coupond/result-url/v1"
	legacySigNoDetalle = "coupond/result-url/v1/sin-detalle"
	maxSignedQuery     = 1024 // longer raw queries are refused before parsing
)

// DownloadPath returns the path of the signed download of a job's result:
// /v1/lotes-decision/{job_id}/descarga. The route is
// "GET /v1/lotes-decision/{job_id}/descarga", served without a token.
func DownloadPath(jobID string) string { return downloadPrefix + jobID + downloadSuffix }

// URLSigner signs and verifies result URLs. It is safe for concurrent use;
// its key can be replaced while it serves (SetKey).
type URLSigner struct {
	key     atomic.Pointer[[]byte]
	baseURL string
}

// NewURLSigner returns a signer with key (at least 32 bytes, copied; the
// store's Secrets.URL) that builds URLs under baseURL, an absolute http or
// https URL without query or fragment (a trailing '/' is dropped).
func NewURLSigner(key []byte, baseURL string) (*URLSigner, error) {
	if err := CheckBaseURL(baseURL); err != nil {
		return nil, fmt.Errorf("batch: base URL: %w", err)
	}
	s := &URLSigner{baseURL: strings.TrimRight(baseURL, "/")}
	return s, s.SetKey(key)
}

// SetKey makes key (at least 32 bytes, copied) the one URLs are signed and
// verified with from now on, for a key rotation (coupond admin keys
// rotate): every URL signed with the previous key fails Verify
// (ErrURLInvalid), and the job's status signs a new one.
func (s *URLSigner) SetKey(key []byte) error {
	if len(key) < 32 {
		return errors.New("batch: URL signing key shorter than 32 bytes")
	}
	k := append([]byte(nil), key...)
	s.key.Store(&k)
	return nil
}

// CheckBaseURL returns an error, fit to follow the name of the setting that
// gave baseURL (a password in it masked), unless it is an absolute http or
// https URL with a host and without user, query or fragment: the base of
// signed result URLs.
func CheckBaseURL(baseURL string) error {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		// Not quoted: a URL that does not parse may still hold a password.
		return errors.New("want http(s)://host[:port][/prefix] such as https://coupons.example.com; the value given does not parse as a URL")
	case u.User != nil:
		return fmt.Errorf("want http(s)://host[:port][/prefix] without a user or password, got %q", u.Redacted())
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("want http(s)://host[:port][/prefix] such as https://coupons.example.com, got %q", u.Redacted())
	}
	return nil
}

// Grant is what a signed URL gives: job JobID of Tenant, minted for the
// credential ClientID whose token had secret generation Gen, with the
// lines' detalle when Detalle (the credential has explicar:leer). A Grant
// that Verify returns with an empty ClientID is a URL of the earlier form,
// bound to no credential.
type Grant struct {
	Tenant, JobID string
	ClientID      string
	Gen           uint32
	Detalle       bool
}

// Sign returns the URL that grants g until exp, which is truncated to
// whole seconds (report exp.Truncate(time.Second) as the expiry).
// g.Tenant, g.JobID and g.ClientID are expected to match the ID pattern; a
// JobID holding '/' yields a URL that never verifies.
func (s *URLSigner) Sign(g Grant, exp time.Time) string {
	e := exp.Unix()
	gen := strconv.FormatUint(uint64(g.Gen), 10)
	sig := mac(*s.key.Load(), sigContext(g.Detalle, true), "GET", DownloadPath(g.JobID), g.Tenant, g.ClientID, gen, g.JobID, strconv.FormatInt(e, 10))
	return s.baseURL + DownloadPath(url.PathEscape(g.JobID)) +
		"?t=" + url.QueryEscape(g.Tenant) +
		"&c=" + url.QueryEscape(g.ClientID) +
		"&g=" + gen +
		"&exp=" + strconv.FormatInt(e, 10) +
		"&sig=" + base64.RawURLEncoding.EncodeToString(sig)
}

// Verify checks a request for a signed URL and returns what it grants.
// method is the request method (HEAD is checked as GET: it returns no
// body), path the decoded request path (r.URL.Path) and rawQuery the query
// as received (r.URL.RawQuery), which Verify parses itself: it must hold
// exactly the keys t, c, g, exp and sig (or, a URL of the earlier form, t,
// exp and sig), once each, in any order, each value in the canonical
// encoding Sign produces; anything else (a key changed, repeated, added or
// missing, an empty pair, an alternative percent-encoding, a padded
// signature, a non-canonical number) is ErrURLInvalid, as is a wrong
// signature (compared in constant time). An authentic URL at or after exp,
// or whose exp lies more than ResultURLTTL ahead (clock.Expired: signed
// before the clock went back; the job's status signs a new one), is
// ErrURLExpired. Errors wrap one of the two sentinels. Verify does not
// know credentials: the caller checks that the Grant's ClientID is still
// active and accepts Gen.
func (s *URLSigner) Verify(method, path, rawQuery string, now time.Time) (Grant, error) {
	if method != "GET" && method != "HEAD" {
		return Grant{}, fmt.Errorf("batch: signed URL: method not allowed: %w", ErrURLInvalid)
	}
	jobID, ok := strings.CutPrefix(path, downloadPrefix)
	if ok {
		jobID, ok = strings.CutSuffix(jobID, downloadSuffix)
	}
	if !ok || jobID == "" || strings.Contains(jobID, "/") {
		return Grant{}, fmt.Errorf("batch: signed URL: bad path: %w", ErrURLInvalid)
	}
	q, err := parseSignedQuery(rawQuery)
	if err != nil {
		return Grant{}, err
	}
	g := Grant{Tenant: q.tenant, JobID: jobID, ClientID: q.client, Gen: q.gen}
	fields := []string{"GET", path, q.tenant, q.client, q.rawGen, jobID, q.rawExp}
	if !q.bound {
		fields = []string{"GET", path, q.tenant, jobID, q.rawExp}
	}
	key := *s.key.Load() // one key for both contexts, whatever SetKey does meanwhile
	g.Detalle = hmac.Equal(q.sig[:], mac(key, sigContext(true, q.bound), fields...))
	if !g.Detalle && !hmac.Equal(q.sig[:], mac(key, sigContext(false, q.bound), fields...)) {
		return Grant{}, fmt.Errorf("batch: signed URL: bad signature: %w", ErrURLInvalid)
	}
	if clock.Expired(time.Unix(q.exp, 0), ResultURLTTL, now) {
		return Grant{}, ErrURLExpired
	}
	return g, nil
}

// signedQuery is a signed URL's query, parsed and checked for canonical
// form; bound is false for a URL of the earlier form (no c and g).
type signedQuery struct {
	tenant, client string
	gen            uint32
	exp            int64
	rawGen, rawExp string
	sig            [sha256.Size]byte
	bound          bool
}

// parseSignedQuery parses rawQuery as Verify describes; its errors wrap
// ErrURLInvalid.
func parseSignedQuery(rawQuery string) (signedQuery, error) {
	var q signedQuery
	bad := func(what string) (signedQuery, error) {
		return signedQuery{}, fmt.Errorf("batch: signed URL: %s: %w", what, ErrURLInvalid)
	}
	if len(rawQuery) > maxSignedQuery {
		return bad("query too long")
	}
	vals := map[string]string{}
	for rest := rawQuery; ; {
		pair, tail, more := strings.Cut(rest, "&")
		k, v, hasEq := strings.Cut(pair, "=")
		if !hasEq {
			return bad("malformed query")
		}
		switch k {
		case "t", "c", "g", "exp", "sig":
		default:
			return bad("unexpected parameter")
		}
		if _, seen := vals[k]; seen {
			return bad("repeated parameter")
		}
		vals[k] = v
		if rest = tail; !more {
			break
		}
	}
	rawT, hasT := vals["t"]
	rawC, hasC := vals["c"]
	rawG, hasG := vals["g"]
	rawExp, hasExp := vals["exp"]
	rawSig, hasSig := vals["sig"]
	if !hasT || !hasExp || !hasSig || hasC != hasG {
		return bad("missing parameter")
	}
	q.bound, q.rawGen, q.rawExp = hasC, rawG, rawExp
	var ok bool
	if q.tenant, ok = canonicalID(rawT); !ok {
		return bad("bad tenant")
	}
	if q.bound {
		if q.client, ok = canonicalID(rawC); !ok {
			return bad("bad client")
		}
		gen, err := strconv.ParseUint(rawG, 10, 32)
		if err != nil || strconv.FormatUint(gen, 10) != rawG {
			return bad("bad generation")
		}
		q.gen = uint32(gen)
	}
	exp, err := strconv.ParseInt(rawExp, 10, 64)
	if err != nil || exp <= 0 || strconv.FormatInt(exp, 10) != rawExp {
		return bad("bad expiry")
	}
	q.exp = exp
	if base64.RawURLEncoding.EncodedLen(len(q.sig)) != len(rawSig) {
		return bad("bad signature")
	}
	if n, err := base64.RawURLEncoding.Strict().Decode(q.sig[:], []byte(rawSig)); err != nil || n != len(q.sig) {
		return bad("bad signature")
	}
	return q, nil
}

// canonicalID decodes a query value that must be non-empty and in the
// encoding url.QueryEscape gives it.
func canonicalID(raw string) (string, bool) {
	v, err := url.QueryUnescape(raw)
	return v, err == nil && v != "" && url.QueryEscape(v) == raw
}

// sigContext is the context string a URL is signed under: one per grant
// and form.
func sigContext(detalle, bound bool) string {
	switch {
	case bound && detalle:
		return urlSigContext
	case bound:
		return urlSigNoDetalle
	case detalle:
		return legacySigContext
	default:
		return legacySigNoDetalle
	}
}

// mac is the URL signature: HMAC-SHA256 under key over the context string
// ctx (the grant) and the length-prefixed fields.
func mac(key []byte, ctx string, fields ...string) []byte {
	m := hmac.New(sha256.New, key)
	writeField(m, ctx)
	for _, f := range fields {
		writeField(m, f)
	}
	return m.Sum(nil)
}

func writeField(h hash.Hash, f string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
	h.Write([]byte(f))
}
