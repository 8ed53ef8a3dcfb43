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
	"time"
)

// Signed result URLs let a client download a completed job's result file
// without a token (spec: GET /v1/lotes-decision/{job_id}, resultado_url).
// A URL has the form
//
//	{baseURL}/v1/lotes-decision/{job_id}/descarga?t={tenant}&exp={unix seconds}&sig={signature}
//
// where signature is the unpadded base64url HMAC-SHA256, under the
// installation's URL key, of the method GET, the path
// /v1/lotes-decision/{job_id}/descarga, the tenant, the job id and exp
// (contract section 7), each field length-prefixed so that no two different
// field lists share a signed message. The signature also says whether the
// download may carry detalle: a URL minted for a credential without
// explicar:leer is signed under another context and serves the lines
// without detalle, as /resultado does for that credential. The path signed and verified is the
// API path, without any path prefix that baseURL carries (a reverse proxy
// in front of coupond strips it). The URL is valid while the current time
// is before exp.

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
	urlSigContext  = "coupond/result-url/v1"
	// urlSigNoDetalle signs a URL whose download leaves detalle out. The
	// full grant keeps urlSigContext, so URLs signed before this existed
	// verify as they did.
	urlSigNoDetalle = "coupond/result-url/v1/sin-detalle"
	maxSignedQuery  = 1024 // longer raw queries are refused before parsing
)

// DownloadPath returns the path of the signed download of a job's result:
// /v1/lotes-decision/{job_id}/descarga. The route is
// "GET /v1/lotes-decision/{job_id}/descarga", served without a token.
func DownloadPath(jobID string) string { return downloadPrefix + jobID + downloadSuffix }

// URLSigner signs and verifies result URLs. It is safe for concurrent use.
type URLSigner struct {
	key     []byte
	baseURL string
}

// NewURLSigner returns a signer with key (at least 32 bytes, copied; the
// store's Secrets.URL) that builds URLs under baseURL, an absolute http or
// https URL without query or fragment (a trailing '/' is dropped).
func NewURLSigner(key []byte, baseURL string) (*URLSigner, error) {
	if len(key) < 32 {
		return nil, errors.New("batch: URL signing key shorter than 32 bytes")
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("batch: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("batch: base URL %q must be http(s)://host[:port][/prefix]", baseURL)
	}
	return &URLSigner{key: append([]byte(nil), key...), baseURL: strings.TrimRight(baseURL, "/")}, nil
}

// Sign returns the URL that downloads job jobID of tenant until exp, which is
// truncated to whole seconds (report exp.Truncate(time.Second) as the expiry).
// detalle says whether the download may carry the lines' detalle (the
// credential the URL is minted for has explicar:leer); Verify reports it
// back. tenant and jobID are expected to match the ID pattern; a jobID
// holding '/' yields a URL that never verifies.
func (s *URLSigner) Sign(tenant, jobID string, exp time.Time, detalle bool) string {
	e := exp.Unix()
	sig := s.mac(sigContext(detalle), "GET", DownloadPath(jobID), tenant, jobID, e)
	return s.baseURL + DownloadPath(url.PathEscape(jobID)) +
		"?t=" + url.QueryEscape(tenant) +
		"&exp=" + strconv.FormatInt(e, 10) +
		"&sig=" + base64.RawURLEncoding.EncodeToString(sig)
}

// Verify checks a request for a signed URL and returns the tenant and job it
// grants. method is the request method (HEAD is checked as GET: it returns no
// body), path the decoded request path (r.URL.Path) and rawQuery the query as
// received (r.URL.RawQuery), which Verify parses itself: it must hold exactly
// the keys t, exp and sig, once each, in any order, each value in the
// canonical encoding Sign produces; anything else (a key changed, repeated,
// added or missing, an empty pair, an alternative percent-encoding, a
// padded signature, a non-canonical number) is ErrURLInvalid, as is a wrong
// signature (compared in constant time). An authentic URL at or after exp is
// ErrURLExpired. Errors wrap one of the two sentinels. detalle is what
// Sign was given: whether the download may carry detalle.
func (s *URLSigner) Verify(method, path, rawQuery string, now time.Time) (tenant, jobID string, detalle bool, err error) {
	if method != "GET" && method != "HEAD" {
		return "", "", false, fmt.Errorf("batch: signed URL: method not allowed: %w", ErrURLInvalid)
	}
	jobID, ok := strings.CutPrefix(path, downloadPrefix)
	if ok {
		jobID, ok = strings.CutSuffix(jobID, downloadSuffix)
	}
	if !ok || jobID == "" || strings.Contains(jobID, "/") {
		return "", "", false, fmt.Errorf("batch: signed URL: bad path: %w", ErrURLInvalid)
	}
	if len(rawQuery) > maxSignedQuery {
		return "", "", false, fmt.Errorf("batch: signed URL: query too long: %w", ErrURLInvalid)
	}
	var rawT, rawExp, rawSig string
	var seenT, seenExp, seenSig bool
	for rest := rawQuery; ; {
		var pair string
		var more bool
		pair, rest, more = strings.Cut(rest, "&")
		k, v, hasEq := strings.Cut(pair, "=")
		if !hasEq {
			return "", "", false, fmt.Errorf("batch: signed URL: malformed query: %w", ErrURLInvalid)
		}
		var seen *bool
		switch k {
		case "t":
			seen, rawT = &seenT, v
		case "exp":
			seen, rawExp = &seenExp, v
		case "sig":
			seen, rawSig = &seenSig, v
		default:
			return "", "", false, fmt.Errorf("batch: signed URL: unexpected parameter: %w", ErrURLInvalid)
		}
		if *seen {
			return "", "", false, fmt.Errorf("batch: signed URL: repeated parameter: %w", ErrURLInvalid)
		}
		*seen = true
		if !more {
			break
		}
	}
	if !seenT || !seenExp || !seenSig {
		return "", "", false, fmt.Errorf("batch: signed URL: missing parameter: %w", ErrURLInvalid)
	}
	tenant, err = url.QueryUnescape(rawT)
	if err != nil || tenant == "" || url.QueryEscape(tenant) != rawT {
		return "", "", false, fmt.Errorf("batch: signed URL: bad tenant: %w", ErrURLInvalid)
	}
	exp, err := strconv.ParseInt(rawExp, 10, 64)
	if err != nil || exp <= 0 || strconv.FormatInt(exp, 10) != rawExp {
		return "", "", false, fmt.Errorf("batch: signed URL: bad expiry: %w", ErrURLInvalid)
	}
	var sig [sha256.Size]byte
	if base64.RawURLEncoding.EncodedLen(len(sig)) != len(rawSig) {
		return "", "", false, fmt.Errorf("batch: signed URL: bad signature: %w", ErrURLInvalid)
	}
	if n, err := base64.RawURLEncoding.Strict().Decode(sig[:], []byte(rawSig)); err != nil || n != len(sig) {
		return "", "", false, fmt.Errorf("batch: signed URL: bad signature: %w", ErrURLInvalid)
	}
	full := hmac.Equal(sig[:], s.mac(sigContext(true), "GET", path, tenant, jobID, exp))
	if !full && !hmac.Equal(sig[:], s.mac(sigContext(false), "GET", path, tenant, jobID, exp)) {
		return "", "", false, fmt.Errorf("batch: signed URL: bad signature: %w", ErrURLInvalid)
	}
	if !now.Before(time.Unix(exp, 0)) {
		return "", "", false, ErrURLExpired
	}
	return tenant, jobID, full, nil
}

// sigContext is the context string a URL is signed under: one per grant.
func sigContext(detalle bool) string {
	if detalle {
		return urlSigContext
	}
	return urlSigNoDetalle
}

// mac is the URL signature: HMAC-SHA256 over the context string ctx (the
// grant) and the length-prefixed fields.
func (s *URLSigner) mac(ctx, method, path, tenant, jobID string, exp int64) []byte {
	m := hmac.New(sha256.New, s.key)
	writeField(m, ctx)
	writeField(m, method)
	writeField(m, path)
	writeField(m, tenant)
	writeField(m, jobID)
	writeField(m, strconv.FormatInt(exp, 10))
	return m.Sum(nil)
}

func writeField(h hash.Hash, f string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
	h.Write([]byte(f))
}
