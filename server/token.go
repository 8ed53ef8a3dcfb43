package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// tokenRequest is a client-credentials request in either accepted form.
type tokenRequest struct {
	clientID, secret, grantType, scope string
	basic                              bool // client authenticated with HTTP Basic
}

// dummyCredential keeps the failure path as slow as the success path: an
// unknown client_id is compared against it.
var dummyCredential = &store.Credential{SecretHash: store.HashSecret("coupond-no-such-client")}

// handleToken is POST /v1/token: JSON as the spec says, or the standard
// OAuth 2.0 form with the client in HTTP Basic or in form fields. Wrong
// secret, unknown client and revoked credential give the same 401.
// Errors of the form carry RFC 6749's error members for stock OAuth
// clients; errors of any other request are the spec's ErrorV1 and
// HTTPValidationError exactly, which reject unknown properties.
func (s *Server) handleToken(c *call) error {
	err := s.issueToken(c)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.kind == kindNotJSON && ae.campo == "" {
		ae.msg = tokenNotJSON // the form is accepted too
	}
	return tokenError(c.r, err)
}

// tokenError is err as the token endpoint answers request r: with RFC
// 6749's error members (withOAuthError) when r is the OAuth 2.0 form, and
// unchanged, the spec's ErrorV1 or HTTPValidationError exactly, otherwise.
func tokenError(r *http.Request, err error) error {
	if mt, ok := tokenMediaType(r); ok && mt == formMediaType {
		return withOAuthError(err)
	}
	return err
}

// tokenNotJSON is the mensaje of the token endpoint's 415.
const tokenNotJSON = "el cuerpo debe ser JSON (Content-Type: application/json) o un formulario (application/x-www-form-urlencoded)"

// formMediaType is the OAuth 2.0 token request's content type.
const formMediaType = "application/x-www-form-urlencoded"

// tokenMediaType is the media type of a token request's body: JSON when no
// Content-Type is given; ok is false when one is given and does not parse.
func tokenMediaType(r *http.Request) (mt string, ok bool) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "application/json", true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return mt, err == nil
}

// OAuth 2.0 error codes of the token endpoint (RFC 6749 section 5.2).
var (
	oauthInvalidClient   = oauthError{"invalid_client", "client authentication failed"}
	oauthInvalidScope    = oauthError{"invalid_scope", "the credential lacks a requested scope"}
	oauthInvalidRequest  = oauthError{"invalid_request", "the request is malformed: mensaje (detail in a 422) says how"}
	oauthUnsupportedType = oauthError{"unsupported_grant_type", "grant_type must be client_credentials"}
)

// withOAuthError adds the RFC 6749 error code to the token endpoint's
// errors: 401 invalid_client, 403 invalid_scope, 400/413/415 invalid_request,
// 422 unsupported_grant_type when grant_type's value is the only fault and
// invalid_request otherwise (a grant_type missing or repeated included).
// 429 and 500 have no OAuth code and keep the contract's body alone.
func withOAuthError(err error) error {
	var ve *validationError
	var ae *apiError
	switch {
	case err == nil:
	case errors.As(err, &ve):
		ve.oauth = oauthError{oauthInvalidRequest.code, violationsDescription(ve.detail)}
		if len(ve.detail) > 0 && !slices.ContainsFunc(ve.detail, func(v schema.Violation) bool {
			return len(v.Loc) != 2 || v.Loc[1] != "grant_type" || v.Type == "missing" || v.Type == "value_error"
		}) {
			ve.oauth = oauthUnsupportedType
		}
	case errors.As(err, &ae):
		switch ae.kind {
		case kindUnauthenticated:
			ae.oauth = oauthInvalidClient
		case kindForbidden:
			ae.oauth = oauthInvalidScope
		case kindTooLarge, kindNotJSON, kindBadRequest:
			ae.oauth = oauthInvalidRequest
		}
	}
	return err
}

// violationsDescription is the error_description of a token request's 422:
// each parameter at fault and what is wrong with it, since stock OAuth
// clients report that member and not detail. It keeps to the characters
// RFC 6749 allows there (printable ASCII but '"' and '\\': a Spanish letter
// loses its accent, any other character is one '?') and to 512 bytes. A
// name or msg that quotes what was sent is echoed as every 422 echoes it
// (echoString, echoMsg): a secret-shaped part is "***".
func violationsDescription(detail []schema.Violation) string {
	var b strings.Builder
	b.WriteString("the request is malformed")
	for i, v := range detail {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		name := "body"
		if len(v.Loc) > 0 {
			name = echoString(fmt.Sprint(v.Loc[len(v.Loc)-1]))
		}
		b.WriteString(sep + name + ": " + echoMsg(v.Msg))
	}
	out := strings.Map(func(r rune) rune {
		if a, ok := unaccented[r]; ok {
			return a
		}
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, b.String())
	if len(out) > 512 {
		out = out[:509] + "..."
	}
	return out
}

// unaccented are the letters of Spanish messages that violationsDescription
// writes without their accent rather than as '?'.
var unaccented = map[rune]rune{'á': 'a', 'é': 'e', 'í': 'i', 'ó': 'o', 'ú': 'u', 'ü': 'u', 'ñ': 'n',
	'Á': 'A', 'É': 'E', 'Í': 'I', 'Ó': 'O', 'Ú': 'U', 'Ü': 'U', 'Ñ': 'N'}

func (s *Server) issueToken(c *call) error {
	c.w.Header().Set("Cache-Control", "no-store")
	c.w.Header().Set("Pragma", "no-cache")
	req, err := s.readTokenRequest(c)
	if err != nil {
		return err
	}
	// The secret is checked before any limit is charged, so that nobody
	// who only knows a client_id can lock it out. Failures are limited per
	// source address instead: an address over its failure budget gets 429
	// for every failed attempt until the budget refills, but a right secret
	// of an active credential is never refused by it, so that a client
	// failing over and over (one left with a rotated secret, say) does not
	// lock out the valid clients that share its address (a NAT, the same
	// host). Secrets carry 256 bits: the budget slows nobody's guessing in
	// a way that matters, it bounds the failures' work and log lines.
	addr := s.clientAddress(c.r)
	cred, known := s.DB.Credential(req.clientID)
	check := cred
	if !known {
		check = dummyCredential
	}
	gen, match := check.SecretMatches(req.secret, c.start)
	if !known || !match || !cred.Active() || s.abuse.suspended(cred.ClientID) {
		if empty, wait := s.tokenFailures.exhausted(addr, classTokenFailure, c.start); empty {
			return rateLimited(classTokenFailure, 1, wait)
		}
		s.tokenFailures.allow(addr, classTokenFailure, c.start, 1)
		return &apiError{kind: kindUnauthenticated, basic: req.basic}
	}
	if ok, wait := s.limits.allow("token:"+cred.ClientID, classToken, c.start, 1); !ok {
		return rateLimited(classToken, 1, wait)
	}
	// A scope this release does not know (stored by a newer one, say) is
	// not granted: the token carries the others, not a 500.
	granted, unknown := knownScopes(cred.Scopes)
	if len(unknown) > 0 {
		s.log.Warn().Str("client_id", cred.ClientID).Strs("scopes", unknown).Msg("credential holds scopes this release does not know: they are not granted")
	}
	// A scope of only blanks asks for nothing in particular, as an absent
	// one: the credential's scopes (it gave a token good for nothing).
	if names := strings.Fields(req.scope); len(names) > 0 {
		want, unknown := knownScopes(names)
		if len(unknown) > 0 || want&^granted != 0 {
			return errScopesNotGranted(want&^granted, unknown)
		}
		granted = want
	}
	s.DB.TouchCredential(cred.ClientID, c.start)
	tok := s.tokens.issue(cred.ClientID, granted, gen, tokenExpiry(c.start))
	c.tokenFor = cred
	c.answer = answer{http.StatusOK, map[string]any{
		"access_token": tok,
		"expires_in":   int(tokenTTL.Seconds()),
		"scope":        granted.String(),
		"token_type":   "Bearer",
	}}
	return nil
}

// tokenExpiry is the expiry of a token issued at now: tokenTTL later,
// rounded up to the whole second the token carries, so that it lives at
// least the expires_in its answer gives (900 s). Cut down to the second,
// a token issued at 12:00:00.9 was refused from 12:15:00, 899.1 s later,
// and a client that renews at expires_in got a 401 first.
func tokenExpiry(now time.Time) time.Time {
	exp := now.Add(tokenTTL)
	if whole := exp.Truncate(time.Second); whole.Before(exp) {
		return whole.Add(time.Second)
	}
	return exp
}

// errTwoClientAuth answers a token request that authenticates the client
// twice, with HTTP Basic and with credentials in the body: OAuth 2.0's
// invalid_request (RFC 6749 sections 2.3 and 5.2), a 400 in the contract's
// error body (withOAuthError adds the OAuth code).
func errTwoClientAuth() error {
	return &apiError{kind: kindBadRequest, campo: "Authorization",
		msg: "invalid_request: el cliente se autentica con HTTP Basic y con credenciales en el cuerpo; use solo uno de los dos"}
}

// clientAddress is the key failed token requests are limited by: the
// client's IP address (sourceAddress). It is the peer's, unless the peer is
// a trusted proxy (Deps.TrustedProxies): then it is the last address of
// X-Forwarded-For that is not itself a trusted proxy, so that behind a
// reverse proxy one client's failures do not use up every client's budget.
// A forwarded list that does not parse stops the walk at the proxy itself.
func (s *Server) clientAddress(r *http.Request) string {
	peer := sourceAddress(r.RemoteAddr)
	ip, ok := parseIP(r.RemoteAddr)
	if !ok || !s.trustedProxy(ip) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		ip, ok := parseIP(hop)
		if !ok {
			return peer
		}
		if !s.trustedProxy(ip) {
			return sourceAddress(hop)
		}
	}
	return peer
}

// trustedProxy says whether ip is in Deps.TrustedProxies.
func (s *Server) trustedProxy(ip netip.Addr) bool {
	for _, p := range s.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parseIP reads an address with or without a port ("192.0.2.1",
// "[2001:db8::1]:443"), IPv4-mapped IPv6 as IPv4.
func parseIP(addr string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// sourceAddress is a client's key for failed token requests: its IP address,
// with IPv6 cut to its /64 (what one host usually holds).
func sourceAddress(remote string) string {
	ip, ok := parseIP(remote)
	if !ok {
		return remote
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

var tokenSchema = schema.Object(
	schema.Field("client_id", schema.String().Len(1, 64)).Required(),
	schema.Field("client_secret", schema.String().Len(1, 256)).Required(),
	schema.Field("grant_type", schema.String().Pattern("^client_credentials$", func(s string) bool { return s == "client_credentials" })).Required(),
	schema.Field("scope", schema.String().Len(0, 1024)),
)

func (s *Server) readTokenRequest(c *call) (*tokenRequest, error) {
	mt, ok := tokenMediaType(c.r)
	if !ok {
		return nil, errKind(kindNotJSON)
	}
	if mt == formMediaType {
		return s.readTokenForm(c)
	}
	if err := readBody(c, smallBody); err != nil {
		return nil, err
	}
	if _, _, present, ok := clientBasic(c.r); !ok && present {
		return nil, &apiError{kind: kindUnauthenticated, basic: true}
	} else if present {
		return nil, errTwoClientAuth() // the JSON body always carries the client
	}
	v, err := decode(c.body, tokenSchema)
	if err != nil {
		return nil, err
	}
	return &tokenRequest{
		clientID: v.Field("client_id").String(), secret: v.Field("client_secret").String(),
		grantType: v.Field("grant_type").String(), scope: v.Field("scope").String(),
	}, nil
}

// clientBasic reads a token request's HTTP Basic client authentication.
// present is false when no Authorization header names the Basic scheme
// (another scheme is ignored: the client is in the body); ok is false when
// one does but cannot be read (not base64, no colon) or more than one
// Authorization header came: bad client credentials, which the token
// endpoint answers 401 invalid_client (RFC 6749 section 5.2) rather than
// read the body as if the client had sent none.
func clientBasic(r *http.Request) (id, secret string, present, ok bool) {
	vals := r.Header.Values("Authorization")
	if !slices.ContainsFunc(vals, func(v string) bool { return len(v) >= 5 && strings.EqualFold(v[:5], "basic") }) {
		return "", "", false, false
	}
	if len(vals) > 1 {
		return "", "", true, false
	}
	id, secret, ok = r.BasicAuth()
	return id, secret, true, ok
}

// readTokenForm reads the OAuth 2.0 form (RFC 6749 section 4.4), with the
// client in HTTP Basic (preferred) or in client_id/client_secret fields.
func (s *Server) readTokenForm(c *call) (*tokenRequest, error) {
	if err := encodedBody(c.r); err != nil {
		return nil, err
	}
	if c.r.ContentLength > smallBody {
		return nil, tooLarge(c, smallBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, smallBody))
	if err != nil {
		return nil, bodyError(c, err)
	}
	f, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, &validationError{detail: []schema.Violation{schema.ValueError([]any{"body"}, "cuerpo de formulario mal codificado", nil)}}
	}
	req := &tokenRequest{grantType: f.Get("grant_type"), scope: f.Get("scope")}
	if id, secret, present, ok := clientBasic(c.r); present {
		if !ok {
			return nil, &apiError{kind: kindUnauthenticated, basic: true}
		}
		// RFC 6749 2.3.1: Basic credentials are form-urlencoded first.
		uid, e1 := url.QueryUnescape(id)
		usec, e2 := url.QueryUnescape(secret)
		if e1 != nil || e2 != nil {
			return nil, &apiError{kind: kindUnauthenticated, basic: true}
		}
		// RFC 6749 2.3: one client authentication method per request. A
		// client_id in the form that repeats Basic's is tolerated (some
		// libraries send it); a secret, or another client_id, is not.
		if f.Has("client_secret") || f.Has("client_id") && f.Get("client_id") != uid {
			return nil, errTwoClientAuth()
		}
		req.clientID, req.secret, req.basic = uid, usec, true
	} else {
		req.clientID, req.secret = f.Get("client_id"), f.Get("client_secret")
	}
	var bad []schema.Violation
	// RFC 6749 3.1: a parameter must not be sent more than once (the JSON
	// body refuses duplicate keys the same way).
	for _, name := range []string{"grant_type", "client_id", "client_secret", "scope"} {
		if len(f[name]) > 1 {
			bad = append(bad, schema.ValueError([]any{"body", name}, "parámetro repetido", nil))
		}
	}
	check := func(name, v string, max int) {
		switch {
		case v == "" && !req.basic || v == "" && name == "grant_type":
			bad = append(bad, schema.Missing("body", name))
		case len(v) > max:
			bad = append(bad, schema.TooLong("body", name, v, max))
		}
	}
	check("client_id", req.clientID, 64)
	check("client_secret", req.secret, 256)
	check("grant_type", req.grantType, 64)
	if req.grantType != "" && req.grantType != "client_credentials" {
		bad = append(bad, schema.PatternMismatch("body", "grant_type", req.grantType, "^client_credentials$"))
	}
	if len(req.scope) > 1024 { // as tokenSchema's scope
		bad = append(bad, schema.TooLong("body", "scope", req.scope, 1024))
	}
	if len(bad) > 0 {
		return nil, &validationError{detail: bad}
	}
	return req, nil
}
