package batch

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	testURLKey = bytes.Repeat([]byte{7}, 32)
	testNow    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func testSigner(t testing.TB) *URLSigner {
	t.Helper()
	s, err := NewURLSigner(testURLKey, "https://coupond.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// acme is the grant most tests sign: job lote_abc of tenant acme, for
// credential ci_crm at secret generation 2, with detalle.
var acme = Grant{Tenant: "acme", JobID: "lote_abc", ClientID: "ci_crm", Gen: 2, Detalle: true}

// with returns g with another tenant and job.
func with(g Grant, tenant, job string) Grant { g.Tenant, g.JobID = tenant, job; return g }

// signLegacy signs g in the earlier form, without c and g and bound to no
// credential, as a release before credential-bound URLs minted it.
func signLegacy(s *URLSigner, g Grant, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	sig := mac(*s.key.Load(), sigContext(g.Detalle, false), "GET", DownloadPath(g.JobID), g.Tenant, g.JobID, e)
	return s.baseURL + DownloadPath(url.PathEscape(g.JobID)) + "?t=" + url.QueryEscape(g.Tenant) +
		"&exp=" + e + "&sig=" + base64.RawURLEncoding.EncodeToString(sig)
}

// splitSigned returns the path and raw query of a signed URL.
func splitSigned(t testing.TB, raw string) (path, rawQuery string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("signed URL %q does not parse: %v", raw, err)
	}
	return u.Path, u.RawQuery
}

// errKind names the sentinel an error wraps, for table comparisons.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrURLExpired):
		return "expired"
	case errors.Is(err, ErrURLInvalid):
		return "invalid"
	default:
		return "other: " + err.Error()
	}
}

func TestSignFormat(t *testing.T) {
	s := testSigner(t)
	exp := testNow.Add(ResultURLTTL).Add(300 * time.Millisecond) // sub-second part dropped
	got := s.Sign(acme, exp)
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	type parts struct {
		Scheme, Host, Path string
		Keys               []string
		T, C, G, Exp       string
		SigLen             int
	}
	q := u.Query()
	var keys []string
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	gotParts := parts{u.Scheme, u.Host, u.Path, keys, q.Get("t"), q.Get("c"), q.Get("g"), q.Get("exp"), len(q.Get("sig"))}
	want := parts{"https", "coupond.example.com", "/v1/lotes-decision/lote_abc/descarga",
		[]string{"t", "c", "g", "exp", "sig"}, "acme", "ci_crm", "2", "1772370000", 43}
	if diff := cmp.Diff(want, gotParts); diff != "" {
		t.Errorf("Sign = %s; parts (-want +got):\n%s", got, diff)
	}
	// Deterministic: the same inputs sign the same URL.
	if again := s.Sign(acme, exp); again != got {
		t.Errorf("Sign not deterministic: %s then %s", got, again)
	}
}

func TestSignKeepsBasePathPrefixOutOfSignature(t *testing.T) {
	s, err := NewURLSigner(testURLKey, "https://shop.example.com/coupond")
	if err != nil {
		t.Fatal(err)
	}
	raw := s.Sign(with(acme, "acme", "lote_1"), testNow.Add(time.Hour))
	path, q := splitSigned(t, raw)
	if want := "/coupond/v1/lotes-decision/lote_1/descarga"; path != want {
		t.Fatalf("path = %s, want %s", path, want)
	}
	// Behind a proxy that strips /coupond, the server sees the API path.
	g, err := s.Verify("GET", strings.TrimPrefix(path, "/coupond"), q, testNow)
	if diff := cmp.Diff([]string{"acme", "lote_1", "ok"}, []string{g.Tenant, g.JobID, errKind(err)}); diff != "" {
		t.Errorf("Verify (-want +got):\n%s", diff)
	}
}

func TestNewURLSignerRefuses(t *testing.T) {
	tests := []struct {
		name string
		key  []byte
		base string
	}{
		{"short key", make([]byte, 31), "https://x.example"},
		{"no scheme", testURLKey, "coupond.example.com"},
		{"ftp", testURLKey, "ftp://coupond.example.com"},
		{"query", testURLKey, "https://coupond.example.com/?a=1"},
		{"fragment", testURLKey, "https://coupond.example.com/#f"},
		{"user", testURLKey, "https://u:p@coupond.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewURLSigner(tt.key, tt.base); err == nil {
				t.Errorf("NewURLSigner(%q) = nil error, want an error", tt.base)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	s := testSigner(t)
	exp := testNow.Add(ResultURLTTL)
	path, q := splitSigned(t, s.Sign(acme, exp))
	otherTenantPath, otherTenantQ := splitSigned(t, s.Sign(with(acme, "globex", "lote_abc"), exp))
	otherJobPath, otherJobQ := splitSigned(t, s.Sign(with(acme, "acme", "lote_xyz"), exp))
	other, err := NewURLSigner(bytes.Repeat([]byte{8}, 32), "https://coupond.example.com")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKeyQ := splitSigned(t, other.Sign(acme, exp))
	otherClient, otherGen := acme, acme
	otherClient.ClientID, otherGen.Gen = "ci_pos", 3
	_, otherClientQ := splitSigned(t, s.Sign(otherClient, exp))
	_, otherGenQ := splitSigned(t, s.Sign(otherGen, exp))
	_, legacyQ := splitSigned(t, signLegacy(s, acme, exp))

	join := func(p ...string) string { return strings.Join(p, "&") }
	params := strings.Split(q, "&") // t=…, c=…, g=…, exp=…, sig=…
	tParam, cParam, gParam, expParam, sigParam := params[0], params[1], params[2], params[3], params[4]
	cg := join(cParam, gParam)
	sig := strings.TrimPrefix(sigParam, "sig=")
	flip := func(s string, i int) string { // a different character of the same alphabet
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	pick := func(q, key string) string {
		for _, p := range strings.Split(q, "&") {
			if strings.HasPrefix(p, key+"=") {
				return p
			}
		}
		t.Fatalf("no %s in %s", key, q)
		return ""
	}

	type result struct {
		Tenant, Job, Client string
		Gen                 uint32
		Err                 string
	}
	ok := result{"acme", "lote_abc", "ci_crm", 2, "ok"}
	invalid := result{Err: "invalid"}
	tests := []struct {
		name         string
		method, path string
		query        string
		now          time.Time
		want         result
	}{
		{"valid", "GET", path, q, testNow, ok},
		{"valid HEAD", "HEAD", path, q, testNow, ok},
		{"valid reordered", "GET", path, join(sigParam, gParam, tParam, expParam, cParam), testNow, ok},
		{"valid last second", "GET", path, q, exp.Add(-time.Nanosecond), ok},

		{"expired at exp", "GET", path, q, exp, result{Err: "expired"}},
		{"expired later", "GET", path, q, exp.Add(24 * time.Hour), result{Err: "expired"}},
		{"expired and tampered is invalid", "GET", path, join("t=globex", cg, expParam, sigParam), exp.Add(time.Hour), invalid},

		{"method POST", "POST", path, q, testNow, invalid},
		{"method lowercase get", "get", path, q, testNow, invalid},

		{"other job in path", "GET", otherJobPath, q, testNow, invalid},
		{"other job's signature", "GET", path, otherJobQ, testNow, invalid},
		{"other job, its own URL", "GET", otherJobPath, otherJobQ, testNow, result{"acme", "lote_xyz", "ci_crm", 2, "ok"}},
		{"other tenant in t", "GET", path, join("t=globex", cg, expParam, sigParam), testNow, invalid},
		{"other tenant's signature", "GET", path, join(tParam, cg, expParam, pick(otherTenantQ, "sig")), testNow, invalid},
		{"other tenant, its own URL", "GET", otherTenantPath, otherTenantQ, testNow, result{"globex", "lote_abc", "ci_crm", 2, "ok"}},
		{"other key", "GET", path, otherKeyQ, testNow, invalid},
		{"other client in c", "GET", path, join(tParam, "c=ci_pos", gParam, expParam, sigParam), testNow, invalid},
		{"other client's signature", "GET", path, join(tParam, cg, expParam, pick(otherClientQ, "sig")), testNow, invalid},
		{"other client, its own URL", "GET", path, otherClientQ, testNow, result{"acme", "lote_abc", "ci_pos", 2, "ok"}},
		{"other generation in g", "GET", path, join(tParam, cParam, "g=3", expParam, sigParam), testNow, invalid},
		{"other generation's signature", "GET", path, join(tParam, cg, expParam, pick(otherGenQ, "sig")), testNow, invalid},
		{"other generation, its own URL", "GET", path, otherGenQ, testNow, result{"acme", "lote_abc", "ci_crm", 3, "ok"}},
		{"g leading zero", "GET", path, join(tParam, cParam, "g=02", expParam, sigParam), testNow, invalid},
		{"g over 32 bits", "GET", path, join(tParam, cParam, "g=4294967298", expParam, sigParam), testNow, invalid},
		{"c empty", "GET", path, join(tParam, "c=", gParam, expParam, sigParam), testNow, invalid},
		{"c duplicated", "GET", path, join(tParam, cg, cParam, expParam, sigParam), testNow, invalid},

		{"earlier form", "GET", path, legacyQ, testNow, result{"acme", "lote_abc", "", 0, "ok"}},
		{"earlier form expired", "GET", path, legacyQ, exp, result{Err: "expired"}},
		{"earlier form's signature with c and g", "GET", path, join(tParam, cg, expParam, pick(legacyQ, "sig")), testNow, invalid},
		{"signature with c and g, earlier form", "GET", path, join(tParam, expParam, sigParam), testNow, invalid},
		{"earlier form, c added", "GET", path, join(legacyQ, cParam), testNow, invalid},

		{"path prefix changed", "GET", "/v2/lotes-decision/lote_abc/descarga", q, testNow, invalid},
		{"path suffix changed", "GET", "/v1/lotes-decision/lote_abc/resultado", q, testNow, invalid},
		{"path extra segment", "GET", "/v1/lotes-decision/x/lote_abc/descarga", q, testNow, invalid},
		{"path trailing slash", "GET", path + "/", q, testNow, invalid},
		{"path empty job", "GET", "/v1/lotes-decision//descarga", q, testNow, invalid},

		{"t changed", "GET", path, join("t=acmf", cg, expParam, sigParam), testNow, invalid},
		{"t empty", "GET", path, join("t=", cg, expParam, sigParam), testNow, invalid},
		{"t percent-encoded", "GET", path, join("t=%61cme", cg, expParam, sigParam), testNow, invalid},
		{"exp extended", "GET", path, join(tParam, cg, "exp=1772373601", sigParam), testNow, invalid},
		{"exp leading zero", "GET", path, join(tParam, cg, "exp=0"+strings.TrimPrefix(expParam, "exp="), sigParam), testNow, invalid},
		{"exp plus sign", "GET", path, join(tParam, cg, "exp=+"+strings.TrimPrefix(expParam, "exp="), sigParam), testNow, invalid},
		{"exp not a number", "GET", path, join(tParam, cg, "exp=soon", sigParam), testNow, invalid},
		{"sig first char", "GET", path, join(tParam, cg, expParam, "sig="+flip(sig, 0)), testNow, invalid},
		{"sig last char", "GET", path, join(tParam, cg, expParam, "sig="+flip(sig, len(sig)-1)), testNow, invalid},
		{"sig padded", "GET", path, join(tParam, cg, expParam, sigParam+"="), testNow, invalid},
		{"sig truncated", "GET", path, join(tParam, cg, expParam, sigParam[:len(sigParam)-1]), testNow, invalid},
		{"sig std alphabet char", "GET", path, join(tParam, cg, expParam, "sig=+"+sig[1:]), testNow, invalid},
		{"sig percent-encoded char", "GET", path, join(tParam, cg, expParam, "sig=%41"+sig[1:]), testNow, invalid},

		{"t duplicated", "GET", path, join(tParam, cg, tParam, expParam, sigParam), testNow, invalid},
		{"t duplicated other value", "GET", path, join(tParam, cg, expParam, sigParam, "t=globex"), testNow, invalid},
		{"exp duplicated", "GET", path, join(tParam, cg, expParam, expParam, sigParam), testNow, invalid},
		{"sig duplicated", "GET", path, join(tParam, cg, expParam, sigParam, sigParam), testNow, invalid},

		{"param added", "GET", path, join(q, "x=1"), testNow, invalid},
		{"param added first", "GET", path, join("download=1", q), testNow, invalid},
		{"key without value added", "GET", path, join(q, "x"), testNow, invalid},
		{"empty pair at end", "GET", path, q + "&", testNow, invalid},
		{"empty pair at start", "GET", path, "&" + q, testNow, invalid},
		{"empty pair inside", "GET", path, join(tParam, cg, "", expParam, sigParam), testNow, invalid},
		{"key case changed", "GET", path, join("T="+strings.TrimPrefix(tParam, "t="), cg, expParam, sigParam), testNow, invalid},
		{"key percent-encoded", "GET", path, join("%74="+strings.TrimPrefix(tParam, "t="), cg, expParam, sigParam), testNow, invalid},
		{"semicolon separator", "GET", path, tParam + ";" + cg + "&" + expParam + "&" + sigParam, testNow, invalid},

		{"t removed", "GET", path, join(cg, expParam, sigParam), testNow, invalid},
		{"c removed", "GET", path, join(tParam, gParam, expParam, sigParam), testNow, invalid},
		{"g removed", "GET", path, join(tParam, cParam, expParam, sigParam), testNow, invalid},
		{"c and g removed", "GET", path, join(tParam, expParam, sigParam), testNow, invalid},
		{"exp removed", "GET", path, join(tParam, cg, sigParam), testNow, invalid},
		{"sig removed", "GET", path, join(tParam, cg, expParam), testNow, invalid},
		{"query removed", "GET", path, "", testNow, invalid},
		{"huge query", "GET", path, q + strings.Repeat("&x=1", 1000), testNow, invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := s.Verify(tt.method, tt.path, tt.query, tt.now)
			got := result{g.Tenant, g.JobID, g.ClientID, g.Gen, errKind(err)}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Verify(%s %s?%s) = %+v (-want +got):\n%s", tt.method, tt.path, tt.query, got, diff)
			}
		})
	}
}

// TestVerifyAfterTheClockWentBack: a signed URL lives ResultURLTTL from
// now at most: one verified after the clock went back by more than a
// minute since it was signed is expired (a day back, it lived 25 hours);
// within its hour, or a step back of seconds, it verifies.
func TestVerifyAfterTheClockWentBack(t *testing.T) {
	s := testSigner(t)
	path, q := splitSigned(t, s.Sign(acme, testNow.Add(ResultURLTTL)))
	for _, tc := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"when signed", testNow, "ok"},
		{"59 minutes on", testNow.Add(59 * time.Minute), "ok"},
		{"an hour on", testNow.Add(time.Hour), "expired"},
		{"the clock 30 s back", testNow.Add(-30 * time.Second), "ok"},
		{"the clock 2 minutes back", testNow.Add(-2 * time.Minute), "expired"},
		{"the clock a day back", testNow.Add(-24 * time.Hour), "expired"},
	} {
		if _, err := s.Verify("GET", path, q, tc.now); errKind(err) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, errKind(err), tc.want)
		}
	}
}

func TestVerifyEscapedIDs(t *testing.T) {
	// IDs with characters that need escaping in a query still round-trip,
	// and the signed query is what the server receives.
	s := testSigner(t)
	g := Grant{Tenant: "ac me+x:1", JobID: "lote:1", ClientID: "ci/1&c=2", Gen: 7}
	raw := s.Sign(g, testNow.Add(time.Minute))
	path, q := splitSigned(t, raw)
	got, err := s.Verify("GET", path, q, testNow)
	if diff := cmp.Diff([]any{g, "ok"}, []any{got, errKind(err)}); diff != "" {
		t.Errorf("Verify(%s) (-want +got):\n%s", raw, diff)
	}
}

// FuzzVerify checks that Verify never panics and accepts nothing but the
// URLs it signed (their five parameters in any order, GET or HEAD), in
// either form.
func FuzzVerify(f *testing.F) {
	s := testSigner(f)
	exp := testNow.Add(ResultURLTTL)
	type signed struct {
		g    Grant
		path string
	}
	valid := map[string]signed{} // sorted query pairs → what they grant
	for _, g := range []Grant{acme, with(acme, "globex", "lote_xyz")} {
		for _, raw := range []string{s.Sign(g, exp), signLegacy(s, g, exp)} {
			path, q := splitSigned(f, raw)
			want := g
			if !strings.Contains(q, "c=") {
				want.ClientID, want.Gen = "", 0
			}
			valid[sortedPairs(q)] = signed{want, path}
			f.Add("GET", path, q)
			f.Add("HEAD", path, q)
			f.Add("GET", path, q+"&t="+g.Tenant)
			f.Add("GET", path, strings.Replace(q, "exp=", "exp=0", 1))
		}
	}
	f.Add("GET", "/v1/lotes-decision/lote_abc/descarga", "t=acme&exp=1&sig=")
	f.Add("GET", "/", "")
	f.Fuzz(func(t *testing.T, method, path, rawQuery string) {
		got, err := s.Verify(method, path, rawQuery, testNow)
		if err != nil {
			if !errors.Is(err, ErrURLInvalid) && !errors.Is(err, ErrURLExpired) {
				t.Fatalf("Verify error %v wraps neither sentinel", err)
			}
			if got != (Grant{}) {
				t.Fatalf("Verify returned %+v with error %v", got, err)
			}
			return
		}
		want, ok := valid[sortedPairs(rawQuery)]
		if !ok || want.path != path || (method != "GET" && method != "HEAD") {
			t.Fatalf("Verify accepted a URL it did not sign: %s %s?%s", method, path, rawQuery)
		}
		if got != want.g {
			t.Fatalf("Verify(%s?%s) = %+v, want %+v", path, rawQuery, got, want.g)
		}
	})
}

func sortedPairs(q string) string {
	p := strings.Split(q, "&")
	slices.Sort(p)
	return strings.Join(p, "&")
}

func BenchmarkVerify(b *testing.B) {
	s := testSigner(b)
	path, q := splitSigned(b, s.Sign(acme, testNow.Add(time.Hour)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify("GET", path, q, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSignedURLGrant: Verify reports the detalle grant Sign was given, and
// a URL without it cannot be turned into one with it: the signatures of
// the two grants differ, and each verifies only as its own.
func TestSignedURLGrant(t *testing.T) {
	s := testSigner(t)
	exp := testNow.Add(ResultURLTTL)
	plain := acme
	plain.Detalle = false
	_, fullQ := splitSigned(t, s.Sign(acme, exp))
	path, plainQ := splitSigned(t, s.Sign(plain, exp))
	_, legacyFullQ := splitSigned(t, signLegacy(s, acme, exp))
	_, legacyPlainQ := splitSigned(t, signLegacy(s, plain, exp))
	if fullQ == plainQ || legacyFullQ == legacyPlainQ {
		t.Fatalf("both grants sign the same URL: %s, %s", plainQ, legacyPlainQ)
	}
	unbound := func(g Grant) Grant { g.ClientID, g.Gen = "", 0; return g }
	for _, tt := range []struct {
		name, query string
		want        Grant
	}{
		{"with detalle", fullQ, acme},
		{"without detalle", plainQ, plain},
		{"earlier form with detalle", legacyFullQ, unbound(acme)},
		{"earlier form without detalle", legacyPlainQ, unbound(plain)},
	} {
		g, err := s.Verify("GET", path, tt.query, testNow)
		if diff := cmp.Diff([]any{tt.want, "ok"}, []any{g, errKind(err)}); diff != "" {
			t.Errorf("%s: Verify (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestVerifiesURLsOfTheEarlierForm: URLs an earlier release minted (these
// two, with testURLKey, by the code before URLs named their credential)
// still verify until their exp, with the grant they were signed for.
func TestVerifiesURLsOfTheEarlierForm(t *testing.T) {
	s := testSigner(t)
	for _, tt := range []struct {
		raw     string
		detalle bool
	}{
		{"https://coupond.example.com/v1/lotes-decision/lote_abc/descarga?t=acme&exp=1772370000&sig=f8vc-CdhmYOcowxlVvyREDgKNap8wyimH03TSbUlhVs", true},
		{"https://coupond.example.com/v1/lotes-decision/lote_abc/descarga?t=acme&exp=1772370000&sig=8Ip8oBKzaHJRk92Fm8lweaOQSec7p0pmsHFJddp8g64", false},
	} {
		path, q := splitSigned(t, tt.raw)
		g, err := s.Verify("GET", path, q, testNow)
		want := Grant{Tenant: "acme", JobID: "lote_abc", Detalle: tt.detalle}
		if diff := cmp.Diff([]any{want, "ok"}, []any{g, errKind(err)}); diff != "" {
			t.Errorf("Verify(%s) (-want +got):\n%s", tt.raw, diff)
		}
		if raw := signLegacy(s, want, testNow.Add(ResultURLTTL)); raw != tt.raw {
			t.Errorf("signLegacy = %s, want %s", raw, tt.raw)
		}
	}
}

// TestCheckBaseURLNeverShowsAPassword: serve's --base-url is refused with a
// message that never holds the password of a URL that carries one, whether
// the URL parses or not, and a good one passes.
func TestCheckBaseURLNeverShowsAPassword(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"https://coupons.example.com", true},
		{"http://127.0.0.1:8080/coupond", true},
		{"https://u:hunter2@coupons.example.com", false},
		{"htps://u:hunter2@coupons.example.com", false},
		{"https://u:hunter2@coupons.example.com/?q=1", false},
		{"https://u:hunter2@[::1", false},
		{"https://u:hunter2@host/%zz", false},
		{"https://coupons.example.com/#frag", false},
	} {
		err := CheckBaseURL(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("CheckBaseURL(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("CheckBaseURL(%q) = %q: shows the password", tc.in, err)
		}
	}
}

// TestSetKey: after SetKey (a key rotation) a URL signed before fails
// Verify as any forged one (ErrURLInvalid), one signed now verifies, and a
// short key is refused, leaving the key in force.
func TestSetKey(t *testing.T) {
	s := testSigner(t)
	exp := testNow.Add(ResultURLTTL)
	before := s.Sign(acme, exp)
	if err := s.SetKey(bytes.Repeat([]byte{9}, 32)); err != nil {
		t.Fatal(err)
	}
	after := s.Sign(acme, exp)
	if err := s.SetKey(make([]byte, 31)); err == nil {
		t.Error("SetKey of a 31-byte key: nil error")
	}
	tests := []struct {
		name string
		url  string
		want error
	}{
		{"signed before the rotation", before, ErrURLInvalid},
		{"signed after", after, nil},
	}
	for _, tc := range tests {
		path, q := splitSigned(t, tc.url)
		if _, err := s.Verify("GET", path, q, testNow); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}
