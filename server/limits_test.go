package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLimiterNoReset: 200k made-up ids do not reset the limit of a real
// credential (the old map was cleared at 100k ids), and memory stays
// bounded.
func TestLimiterNoReset(t *testing.T) {
	l := newLimiter()
	now := testStart
	burst := classRates[classToken].burst
	for i := range burst {
		if ok, _ := l.allow("real", classToken, now, 1); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	if ok, _ := l.allow("real", classToken, now, 1); ok {
		t.Fatal("burst+1 allowed")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		l.allow(fmt.Sprintf("made-up-%x", rng.Uint64()), classToken, now, 1)
		if i%10_000 == 0 {
			// The real credential keeps being used, as a real one is.
			if ok, _ := l.allow("real", classToken, now, 1); ok {
				t.Fatalf("after %d made-up ids the real credential's limit was reset", i)
			}
		}
	}
	if ok, _ := l.allow("real", classToken, now, 1); ok {
		t.Fatal("after 200k made-up ids the real credential's limit was reset")
	}
	if n := len(l.keys); n > limiterCapacity {
		t.Errorf("limiter holds %d keys, want at most %d", n, limiterCapacity)
	}
}

// TestLimiterEvictsLeastRecentlyUsed checks the recency order directly.
func TestLimiterEvictsLeastRecentlyUsed(t *testing.T) {
	l := newLimiterCap(3)
	now := testStart
	for _, id := range []string{"a", "b", "c", "a", "d"} { // d evicts b, the least recently used
		l.allow(id, classOther, now, 1)
	}
	for id, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := l.keys[id]; ok != want {
			t.Errorf("key %s held = %v, want %v", id, ok, want)
		}
	}
	var order []string
	for e := l.lru.next; e != &l.lru; e = e.next {
		order = append(order, e.key)
	}
	if got := strings.Join(order, ","); got != "d,a,c" {
		t.Errorf("recency order %s, want d,a,c", got)
	}
}

// tokenCall posts a JSON token request from addr in-process.
func tokenCall(h *harness, addr, clientID, secret string) *httptest.ResponseRecorder {
	body := fmt.Sprintf(`{"client_id":%q,"client_secret":%q,"grant_type":"client_credentials"}`, clientID, secret)
	r := httptest.NewRequest(http.MethodPost, "/v1/token", strings.NewReader(body))
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	h.srv.ServeHTTP(w, r)
	return w
}

// TestTokenNoLockOut: whoever knows a client_id but not its secret cannot
// lock it out; their failures are limited per source address.
func TestTokenNoLockOut(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	h.token("acme", "decisiones:pedir")
	id, secret := h.credential("acme", "decisiones:pedir")

	fails := classRates[classTokenFailure].burst
	for i := range fails + 30 {
		w := tokenCall(h, "203.0.113.7:4000", id, "wrong-secret")
		want := http.StatusUnauthorized
		if i >= fails {
			want = http.StatusTooManyRequests // the attacker's address is out of failures
		}
		if w.Code != want {
			t.Fatalf("wrong secret #%d: %d, want %d", i, w.Code, want)
		}
	}
	if w := tokenCall(h, "198.51.100.1:5000", id, secret); w.Code != http.StatusOK {
		t.Fatalf("the real client was locked out: %d %s", w.Code, w.Body)
	}
	// Made-up client ids from many addresses do not reset or charge it.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		tokenCall(h, fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255), fmt.Sprintf("made-up-%x", rng.Uint64()), "x")
	}
	if w := tokenCall(h, "198.51.100.1:5000", id, secret); w.Code != http.StatusOK {
		t.Fatalf("after made-up ids: %d %s", w.Code, w.Body)
	}
	// The credential's own limit still holds for its valid requests.
	limited := false
	for range classRates[classToken].burst + 1 {
		if tokenCall(h, "198.51.100.1:5000", id, secret).Code == http.StatusTooManyRequests {
			limited = true
		}
	}
	if !limited {
		t.Error("valid requests past the burst were never limited")
	}
}

// TestTokenFailureBudgetRefills: an address out of failures gets answers
// again once its bucket refills.
func TestTokenFailureBudgetRefills(t *testing.T) {
	h := newHarness(t)
	for range classRates[classTokenFailure].burst {
		tokenCall(h, "203.0.113.9:1", "nobody", "x")
	}
	w := tokenCall(h, "203.0.113.9:1", "nobody", "x")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("got %d Retry-After=%q, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	h.clock.Advance(2 * time.Second)
	if w := tokenCall(h, "203.0.113.9:1", "nobody", "x"); w.Code != http.StatusUnauthorized {
		t.Fatalf("after the refill: %d, want 401", w.Code)
	}
}

// TestClientAddress: behind a trusted proxy the client is the last
// forwarded address that is not a trusted proxy; an untrusted peer's
// X-Forwarded-For is ignored (anyone can send one).
func TestClientAddress(t *testing.T) {
	s := &Server{Deps: Deps{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	for _, tc := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"198.51.100.7:1", nil, "198.51.100.7"},
		{"198.51.100.7:1", []string{"203.0.113.1"}, "198.51.100.7"}, // not a proxy of ours
		{"127.0.0.1:1", nil, "127.0.0.1"},
		{"127.0.0.1:1", []string{"203.0.113.1"}, "203.0.113.1"},
		{"[::1]:1", []string{"203.0.113.1"}, "203.0.113.1"},
		{"127.0.0.1:1", []string{"192.0.2.99, 203.0.113.1"}, "203.0.113.1"},             // the client may forge what is left of it
		{"127.0.0.1:1", []string{"203.0.113.1, 10.1.2.3"}, "203.0.113.1"},               // through two proxies
		{"127.0.0.1:1", []string{"192.0.2.99", "203.0.113.1, 10.1.2.3"}, "203.0.113.1"}, // several headers
		{"127.0.0.1:1", []string{"2001:db8:1:2::5"}, "2001:db8:1:2::/64"},
		{"127.0.0.1:1", []string{"[2001:db8:1:2::5]:443"}, "2001:db8:1:2::/64"},
		{"127.0.0.1:1", []string{"not-an-ip"}, "127.0.0.1"},
		{"127.0.0.1:1", []string{"10.9.9.9"}, "127.0.0.1"}, // only proxies: the peer
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/token", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := s.clientAddress(r); got != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %q, want %q", tc.peer, tc.xff, got, tc.want)
		}
	}
}

// TestTokenNoLockOutBehindProxy: behind a reverse proxy on the same
// machine, one client's failed secrets do not use up the failure budget of
// every client the proxy forwards.
func TestTokenNoLockOutBehindProxy(t *testing.T) {
	h := newHarness(t)
	h.srv.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	h.tenant("acme", true, nil)
	id, secret := h.credential("acme", "decisiones:pedir")
	viaProxy := func(client, secret string) int {
		body := fmt.Sprintf(`{"client_id":%q,"client_secret":%q,"grant_type":"client_credentials"}`, id, secret)
		r := httptest.NewRequest(http.MethodPost, "/v1/token", strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:50000"
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		h.srv.ServeHTTP(w, r)
		return w.Code
	}
	for range classRates[classTokenFailure].burst + 5 {
		viaProxy("203.0.113.7", "wrong-secret")
	}
	if code := viaProxy("203.0.113.7", "wrong-secret"); code != http.StatusTooManyRequests {
		t.Errorf("the guessing client, past its failures: %d, want 429", code)
	}
	if code := viaProxy("198.51.100.1", "wrong-secret"); code != http.StatusUnauthorized {
		t.Errorf("another client through the same proxy, a wrong secret: %d, want 401", code)
	}
	if code := viaProxy("198.51.100.1", secret); code != http.StatusOK {
		t.Errorf("another client through the same proxy: %d, want 200", code)
	}
}

// TestTokenNoLockOutFromTheSameAddress: a client that keeps failing (a
// secret left behind by a rotation) does not lock out a valid client at
// the same address (a NAT, the same host): its failures past the budget
// get 429, the valid client's right secret a token, every time.
func TestTokenNoLockOutFromTheSameAddress(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	stale, _ := h.credential("acme", "eventos:publicar")
	id, secret := h.credential("acme", "decisiones:pedir")
	type answers struct{ Stale, Valid int }
	var got []answers
	for i := range classRates[classTokenFailure].burst + 10 {
		a := answers{Stale: tokenCall(h, "192.0.2.50:1000", stale, "rotated-away").Code}
		if i%5 == 4 { // the valid client asks now and then (its own limit is per credential)
			a.Valid = tokenCall(h, "192.0.2.50:2000", id, secret).Code
		}
		got = append(got, a)
	}
	var want []answers
	for i := range classRates[classTokenFailure].burst + 10 {
		a := answers{Stale: http.StatusUnauthorized}
		if i >= classRates[classTokenFailure].burst {
			a.Stale = http.StatusTooManyRequests
		}
		if i%5 == 4 {
			a.Valid = http.StatusOK
		}
		want = append(want, a)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers at one address (-want +got):\n%s", diff)
	}
}

func TestSourceAddress(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7:4000":             "203.0.113.7",
		"[2001:db8:1:2:3:4:5:6]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":     "2001:db8:1:2::/64",
		"[::ffff:198.51.100.1]:80":     "198.51.100.1",
		"not an address":               "not an address",
		"@":                            "@",
		"[fe80::1%eth0]:1":             "fe80::/64",
		"192.0.2.1":                    "192.0.2.1",
		"[2001:db8::1]:1":              "2001:db8::/64",
		"[2001:db8:0:0:1::]:65535":     "2001:db8::/64",
		"[2001:db8:0:1::]:65535":       "2001:db8:0:1::/64",
		"[2001:db8:0:1:ffff:ffff::]:1": "2001:db8:0:1::/64",
	} {
		if got := sourceAddress(in); got != want {
			t.Errorf("sourceAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTokenBasicAndBodyCredentials: a client authenticated twice is OAuth
// 2.0's invalid_request, as a 400 in the contract's error body (which adds
// the OAuth error member for a form request).
func TestTokenBasicAndBodyCredentials(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	h.token("acme", "decisiones:pedir")
	id, secret := h.credential("acme", "decisiones:pedir")
	basic := func(r *http.Request) { r.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret)) }
	form := "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		name, ct, body string
		want           int
	}{
		{"Basic and JSON", "application/json", fmt.Sprintf(`{"client_id":%q,"client_secret":%q,"grant_type":"client_credentials"}`, id, secret), 400},
		{"Basic and form secret", form, "grant_type=client_credentials&client_secret=" + url.QueryEscape(secret), 400},
		{"Basic and another form client_id", form, "grant_type=client_credentials&client_id=someone-else", 400},
		{"Basic and the same form client_id", form, "grant_type=client_credentials&client_id=" + url.QueryEscape(id), 200},
		{"Basic alone", form, "grant_type=client_credentials", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/token", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ct)
			basic(r)
			w := httptest.NewRecorder()
			h.srv.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("got %d %s, want %d", w.Code, w.Body, tc.want)
			}
			// OAuth 2.0's error member only for the OAuth form: a JSON
			// request gets ErrorV1 exactly.
			if tc.want == 400 && !strings.Contains(w.Body.String(), `"codigo":"esquema_invalido"`) || tc.want == 400 && strings.Contains(w.Body.String(), `"error":"invalid_request"`) != (tc.ct == form) {
				t.Errorf("body %s: want esquema_invalido, with error invalid_request for the form only", w.Body)
			}
		})
	}
}

// TestRateLimitNamesItsLimit: a 429 of a rate limit says in its mensaje
// which limit it met (the route's rate and burst, scaled under the brake;
// the token endpoint's per client_id; failed token requests per address),
// and its Retry-After lets the next request through.
func TestRateLimitNamesItsLimit(t *testing.T) {
	h, tok, _, g := newAbuseHarness(t)
	braked := h.token("acme", "decisiones:pedir")
	brakedID, _ := h.credential("acme", "decisiones:pedir")
	stepToCuarentena(t, g, brakedID)
	cid, secret := h.credential("acme", "eventos:publicar")
	decision := map[string]any{"cliente_ref": "x", "contexto": map[string]any{}} // 422: the limit comes first
	for _, tc := range []struct {
		name string
		call func() (int, map[string]any)
		want string
	}{
		{"events", func() (int, map[string]any) {
			return h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{}})
		}, "límite de peticiones de la credencial en esta ruta excedido (20 por segundo, ráfaga 40); reintente tras Retry-After segundos"},
		{"decisions, braked", func() (int, map[string]any) {
			return h.do("POST", "/v1/decisiones", braked, decision)
		}, "límite de peticiones de la credencial en esta ruta excedido (12.5 por segundo, ráfaga 25); reintente tras Retry-After segundos"},
		{"token", func() (int, map[string]any) {
			w := tokenCall(h, "198.51.100.1:5000", cid, secret)
			return w.Code, decodeObject(t, w.Body.Bytes())
		}, "límite de solicitudes de token del client_id excedido (10 por segundo, ráfaga 20); reintente tras Retry-After segundos"},
		{"token failures", func() (int, map[string]any) {
			w := tokenCall(h, "203.0.113.7:4000", cid, "wrong")
			return w.Code, decodeObject(t, w.Body.Bytes())
		}, "límite de solicitudes de token fallidas desde esta dirección excedido (1 por segundo, ráfaga 20); reintente tras Retry-After segundos"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st int
			var body map[string]any
			for range 200 {
				if st, body = tc.call(); st == http.StatusTooManyRequests {
					break
				}
			}
			type answer struct {
				Status          int
				Codigo, Mensaje any
			}
			if diff := cmp.Diff(answer{429, "limite_excedido", tc.want}, answer{st, body["codigo"], body["mensaje"]}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			h.clock.Advance(time.Second) // Retry-After: 1
			if st, _ := tc.call(); st == http.StatusTooManyRequests {
				t.Errorf("after Retry-After: still 429")
			}
		})
	}
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}
