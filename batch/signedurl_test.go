package batch

import (
	"bytes"
	"errors"
	"net/url"
	"slices"
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
	got := s.Sign("acme", "lote_abc", exp, true)
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	type parts struct {
		Scheme, Host, Path string
		Keys               []string
		T, Exp             string
		SigLen             int
	}
	q := u.Query()
	var keys []string
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	gotParts := parts{u.Scheme, u.Host, u.Path, keys, q.Get("t"), q.Get("exp"), len(q.Get("sig"))}
	want := parts{"https", "coupond.example.com", "/v1/lotes-decision/lote_abc/descarga",
		[]string{"t", "exp", "sig"}, "acme", "1772370000", 43}
	if diff := cmp.Diff(want, gotParts); diff != "" {
		t.Errorf("Sign = %s; parts (-want +got):\n%s", got, diff)
	}
	// Deterministic: the same inputs sign the same URL.
	if again := s.Sign("acme", "lote_abc", exp, true); again != got {
		t.Errorf("Sign not deterministic: %s then %s", got, again)
	}
}

func TestSignKeepsBasePathPrefixOutOfSignature(t *testing.T) {
	s, err := NewURLSigner(testURLKey, "https://shop.example.com/coupond")
	if err != nil {
		t.Fatal(err)
	}
	raw := s.Sign("acme", "lote_1", testNow.Add(time.Hour), true)
	path, q := splitSigned(t, raw)
	if want := "/coupond/v1/lotes-decision/lote_1/descarga"; path != want {
		t.Fatalf("path = %s, want %s", path, want)
	}
	// Behind a proxy that strips /coupond, the server sees the API path.
	tenant, job, _, err := s.Verify("GET", strings.TrimPrefix(path, "/coupond"), q, testNow)
	if diff := cmp.Diff([]string{"acme", "lote_1", "ok"}, []string{tenant, job, errKind(err)}); diff != "" {
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
	path, q := splitSigned(t, s.Sign("acme", "lote_abc", exp, true))
	otherTenantPath, otherTenantQ := splitSigned(t, s.Sign("globex", "lote_abc", exp, true))
	otherJobPath, otherJobQ := splitSigned(t, s.Sign("acme", "lote_xyz", exp, true))
	other, err := NewURLSigner(bytes.Repeat([]byte{8}, 32), "https://coupond.example.com")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKeyQ := splitSigned(t, other.Sign("acme", "lote_abc", exp, true))

	params := strings.Split(q, "&") // t=…, exp=…, sig=…
	tParam, expParam, sigParam := params[0], params[1], params[2]
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
	join := func(p ...string) string { return strings.Join(p, "&") }

	type result struct{ Tenant, Job, Err string }
	ok := result{"acme", "lote_abc", "ok"}
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
		{"valid reordered", "GET", path, join(sigParam, tParam, expParam), testNow, ok},
		{"valid last second", "GET", path, q, exp.Add(-time.Nanosecond), ok},

		{"expired at exp", "GET", path, q, exp, result{Err: "expired"}},
		{"expired later", "GET", path, q, exp.Add(24 * time.Hour), result{Err: "expired"}},
		{"expired and tampered is invalid", "GET", path, join("t=globex", expParam, sigParam), exp.Add(time.Hour), invalid},

		{"method POST", "POST", path, q, testNow, invalid},
		{"method lowercase get", "get", path, q, testNow, invalid},

		{"other job in path", "GET", otherJobPath, q, testNow, invalid},
		{"other job's signature", "GET", path, otherJobQ, testNow, invalid},
		{"other job, its own URL", "GET", otherJobPath, otherJobQ, testNow, result{"acme", "lote_xyz", "ok"}},
		{"other tenant in t", "GET", path, join("t=globex", expParam, sigParam), testNow, invalid},
		{"other tenant's signature", "GET", path, join(tParam, expParam, pick(otherTenantQ, "sig")), testNow, invalid},
		{"other tenant, its own URL", "GET", otherTenantPath, otherTenantQ, testNow, result{"globex", "lote_abc", "ok"}},
		{"other key", "GET", path, otherKeyQ, testNow, invalid},

		{"path prefix changed", "GET", "/v2/lotes-decision/lote_abc/descarga", q, testNow, invalid},
		{"path suffix changed", "GET", "/v1/lotes-decision/lote_abc/resultado", q, testNow, invalid},
		{"path extra segment", "GET", "/v1/lotes-decision/x/lote_abc/descarga", q, testNow, invalid},
		{"path trailing slash", "GET", path + "/", q, testNow, invalid},
		{"path empty job", "GET", "/v1/lotes-decision//descarga", q, testNow, invalid},

		{"t changed", "GET", path, join("t=acmf", expParam, sigParam), testNow, invalid},
		{"t empty", "GET", path, join("t=", expParam, sigParam), testNow, invalid},
		{"t percent-encoded", "GET", path, join("t=%61cme", expParam, sigParam), testNow, invalid},
		{"exp extended", "GET", path, join(tParam, "exp=1772373601", sigParam), testNow, invalid},
		{"exp leading zero", "GET", path, join(tParam, "exp=0"+strings.TrimPrefix(expParam, "exp="), sigParam), testNow, invalid},
		{"exp plus sign", "GET", path, join(tParam, "exp=+"+strings.TrimPrefix(expParam, "exp="), sigParam), testNow, invalid},
		{"exp not a number", "GET", path, join(tParam, "exp=soon", sigParam), testNow, invalid},
		{"sig first char", "GET", path, join(tParam, expParam, "sig="+flip(sig, 0)), testNow, invalid},
		{"sig last char", "GET", path, join(tParam, expParam, "sig="+flip(sig, len(sig)-1)), testNow, invalid},
		{"sig padded", "GET", path, join(tParam, expParam, sigParam+"="), testNow, invalid},
		{"sig truncated", "GET", path, join(tParam, expParam, sigParam[:len(sigParam)-1]), testNow, invalid},
		{"sig std alphabet char", "GET", path, join(tParam, expParam, "sig=+"+sig[1:]), testNow, invalid},
		{"sig percent-encoded char", "GET", path, join(tParam, expParam, "sig=%41"+sig[1:]), testNow, invalid},

		{"t duplicated", "GET", path, join(tParam, tParam, expParam, sigParam), testNow, invalid},
		{"t duplicated other value", "GET", path, join(tParam, expParam, sigParam, "t=globex"), testNow, invalid},
		{"exp duplicated", "GET", path, join(tParam, expParam, expParam, sigParam), testNow, invalid},
		{"sig duplicated", "GET", path, join(tParam, expParam, sigParam, sigParam), testNow, invalid},

		{"param added", "GET", path, join(q, "x=1"), testNow, invalid},
		{"param added first", "GET", path, join("download=1", q), testNow, invalid},
		{"key without value added", "GET", path, join(q, "x"), testNow, invalid},
		{"empty pair at end", "GET", path, q + "&", testNow, invalid},
		{"empty pair at start", "GET", path, "&" + q, testNow, invalid},
		{"empty pair inside", "GET", path, join(tParam, "", expParam, sigParam), testNow, invalid},
		{"key case changed", "GET", path, join("T="+strings.TrimPrefix(tParam, "t="), expParam, sigParam), testNow, invalid},
		{"key percent-encoded", "GET", path, join("%74="+strings.TrimPrefix(tParam, "t="), expParam, sigParam), testNow, invalid},
		{"semicolon separator", "GET", path, tParam + ";" + expParam + "&" + sigParam, testNow, invalid},

		{"t removed", "GET", path, join(expParam, sigParam), testNow, invalid},
		{"exp removed", "GET", path, join(tParam, sigParam), testNow, invalid},
		{"sig removed", "GET", path, join(tParam, expParam), testNow, invalid},
		{"query removed", "GET", path, "", testNow, invalid},
		{"huge query", "GET", path, q + strings.Repeat("&x=1", 1000), testNow, invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant, job, _, err := s.Verify(tt.method, tt.path, tt.query, tt.now)
			got := result{tenant, job, errKind(err)}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Verify(%s %s?%s) = %+v (-want +got):\n%s", tt.method, tt.path, tt.query, got, diff)
			}
		})
	}
}

func TestVerifyEscapedIDs(t *testing.T) {
	// IDs with characters that need escaping in a query still round-trip,
	// and the signed query is what the server receives.
	s := testSigner(t)
	raw := s.Sign("ac me+x:1", "lote:1", testNow.Add(time.Minute), true)
	path, q := splitSigned(t, raw)
	tenant, job, _, err := s.Verify("GET", path, q, testNow)
	if diff := cmp.Diff([]string{"ac me+x:1", "lote:1", "ok"}, []string{tenant, job, errKind(err)}); diff != "" {
		t.Errorf("Verify(%s) (-want +got):\n%s", raw, diff)
	}
}

// FuzzVerify checks that Verify never panics and accepts nothing but the
// URLs it signed (their three parameters in any order, GET or HEAD).
func FuzzVerify(f *testing.F) {
	s := testSigner(f)
	exp := testNow.Add(ResultURLTTL)
	type signed struct{ tenant, job, path string }
	valid := map[string]signed{} // sorted query pairs → what they grant
	for _, c := range []struct{ tenant, job string }{{"acme", "lote_abc"}, {"globex", "lote_xyz"}} {
		path, q := splitSigned(f, s.Sign(c.tenant, c.job, exp, true))
		valid[sortedPairs(q)] = signed{c.tenant, c.job, path}
		f.Add("GET", path, q)
		f.Add("HEAD", path, q)
		f.Add("GET", path, q+"&t="+c.tenant)
		f.Add("GET", path, strings.Replace(q, "exp=", "exp=0", 1))
	}
	f.Add("GET", "/v1/lotes-decision/lote_abc/descarga", "t=acme&exp=1&sig=")
	f.Add("GET", "/", "")
	f.Fuzz(func(t *testing.T, method, path, rawQuery string) {
		tenant, job, _, err := s.Verify(method, path, rawQuery, testNow)
		if err != nil {
			if !errors.Is(err, ErrURLInvalid) && !errors.Is(err, ErrURLExpired) {
				t.Fatalf("Verify error %v wraps neither sentinel", err)
			}
			if tenant != "" || job != "" {
				t.Fatalf("Verify returned %q, %q with error %v", tenant, job, err)
			}
			return
		}
		want, ok := valid[sortedPairs(rawQuery)]
		if !ok || want.path != path || (method != "GET" && method != "HEAD") {
			t.Fatalf("Verify accepted a URL it did not sign: %s %s?%s", method, path, rawQuery)
		}
		if tenant != want.tenant || job != want.job {
			t.Fatalf("Verify(%s?%s) = %q, %q, want %q, %q", path, rawQuery, tenant, job, want.tenant, want.job)
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
	path, q := splitSigned(b, s.Sign("acme", "lote_abc", testNow.Add(time.Hour), true))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := s.Verify("GET", path, q, testNow); err != nil {
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
	_, fullQ := splitSigned(t, s.Sign("acme", "lote_abc", exp, true))
	path, plainQ := splitSigned(t, s.Sign("acme", "lote_abc", exp, false))
	if fullQ == plainQ {
		t.Fatalf("both grants sign the same URL: %s", plainQ)
	}
	type got struct {
		Tenant, Job string
		Detalle     bool
		Err         string
	}
	for _, tt := range []struct {
		name, query string
		want        got
	}{
		{"with detalle", fullQ, got{"acme", "lote_abc", true, "ok"}},
		{"without detalle", plainQ, got{"acme", "lote_abc", false, "ok"}},
	} {
		tenant, job, detalle, err := s.Verify("GET", path, tt.query, testNow)
		if diff := cmp.Diff(tt.want, got{tenant, job, detalle, errKind(err)}); diff != "" {
			t.Errorf("%s: Verify (-want +got):\n%s", tt.name, diff)
		}
	}
}
