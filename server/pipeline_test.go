package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

func TestOrderOfChecks(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", "eventos:publicar")
	// 401 before 403: a bad token with a route the scope would also refuse.
	if st, b := h.do("POST", "/v1/decisiones", "ct1.bad.token", "not json"); st != 401 || b["codigo"] != "no_autenticado" {
		t.Errorf("bad token: %d %v", st, b)
	}
	// 403 before 503 and before 422.
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Paused = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if st, b := h.do("POST", "/v1/decisiones", tok, "not json"); st != 403 || b["codigo"] != "sin_permiso" {
		t.Errorf("missing scope on paused tenant: %d %v, want 403", st, b)
	}
	// 503 before 413/415/422.
	resp := h.raw("POST", "/v1/eventos", tok, "x", "Content-Type", "text/plain")
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("paused tenant: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Paused = false; return nil }); err != nil {
		t.Fatal(err)
	}
	// 415 before 422.
	if st, _ := h.do("POST", "/v1/eventos", tok, "{", "Content-Type", "text/plain"); st != 415 {
		t.Errorf("text/plain malformed: %d, want 415", st)
	}
}

func TestRateLimitEvents(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	tok := h.token("acme", "eventos:publicar")
	got429 := 0
	for i := 0; i < 45; i++ { // burst 40 at 20/s; the clock does not move
		resp := h.raw("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{}})
		resp.Body.Close()
		if resp.StatusCode == 429 {
			got429++
			if ra := resp.Header.Get("Retry-After"); ra != "1" {
				t.Errorf("Retry-After %q, want 1", ra)
			}
		}
	}
	if got429 != 5 {
		t.Errorf("%d answers 429 out of 45 with burst 40, want 5", got429)
	}
	h.clock.Advance(time.Second)
	resp := h.raw("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{}})
	resp.Body.Close()
	if resp.StatusCode == 429 {
		t.Errorf("still limited after the bucket refilled")
	}
}

func TestDailyQuota(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.QuotaDecisionsDay = 2; s.ControlShare = 0 })
	tok := h.token("acme", allScopes...)
	for i, want := range []int{200, 200, 429} {
		resp := h.raw("POST", "/v1/decisiones", tok, decideBody("quota-0000"+string(rune('1'+i)), nil))
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("decision %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}

func TestTokenLifetimeAndRevocation(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	tok := h.token("acme", "catalogo:escribir")
	if st, _ := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != 200 {
		t.Fatalf("fresh token: %d", st)
	}
	h.clock.Advance(15 * time.Minute)
	if st, _ := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != 401 {
		t.Errorf("token after 15 minutes: %d, want 401", st)
	}
	tok = h.token("acme", "catalogo:escribir")
	for _, c := range h.db.Credentials("acme") {
		if _, err := h.db.UpdateCredential(c.ClientID, func(c *store.Credential) error { c.Revoked = true; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != 401 {
		t.Errorf("revoked credential's token: %d, want 401", st)
	}
}

// TestTokenLivesItsExpiresIn: a token is accepted until expires_in (900)
// seconds after its answer, wherever in a second it was issued, and
// refused once that second is over. Its expiry, carried in whole seconds,
// was cut down to the second: a token issued half a second into one was
// refused 899.5 s later, before the expires_in its client was given.
func TestTokenLivesItsExpiresIn(t *testing.T) {
	for _, into := range []time.Duration{0, 500 * time.Millisecond, 999 * time.Millisecond} {
		t.Run(into.String(), func(t *testing.T) {
			h := newHarness(t)
			h.tenant("acme", false, nil)
			h.clock.Advance(into)
			id, secret := h.credential("acme", "catalogo:escribir")
			st, b := h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials"})
			if st != 200 {
				t.Fatalf("token: %d %v", st, b)
			}
			tok, life := b["access_token"].(string), time.Duration(b["expires_in"].(float64))*time.Second
			var got []string
			for _, at := range []time.Duration{life - time.Millisecond, life + time.Second} {
				h.clock.Set(testStart.Add(into + at))
				st, _ := h.do("GET", "/v1/catalogo-acciones", tok, nil)
				got = append(got, fmt.Sprintf("+%v: %d", at, st))
			}
			want := []string{"+14m59.999s: 200", "+15m1s: 401"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers after the token's answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTokenScopeRequest(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	h.token("acme", "eventos:publicar", "catalogo:escribir")
	id, secret := h.credential("acme", "eventos:publicar", "catalogo:escribir")
	st, b := h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials", "scope": "catalogo:escribir"})
	if st != 200 || b["scope"] != "catalogo:escribir" {
		t.Errorf("narrowed scope: %d %v", st, b)
	}
	st, b = h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials", "scope": "clientes:borrar"})
	if st != 403 {
		t.Errorf("scope the credential lacks: %d %v, want 403", st, b)
	}
	// A blank scope is an absent one: the credential's scopes, not none.
	for _, blank := range []string{"", "   ", "\t"} {
		st, b = h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials", "scope": blank})
		if st != 200 || b["scope"] != "eventos:publicar catalogo:escribir" {
			t.Errorf("scope %q: %d %v, want the credential's scopes", blank, st, b)
		}
	}
}

// TestTokenUnknownStoredScope: a credential stored with a scope this
// release does not know (a newer release's, after a downgrade) gets a
// token with the scopes it knows, not a 500; asking for the unknown one
// is 403, as for any scope the token cannot carry.
func TestTokenUnknownStoredScope(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	id, secret := h.credential("acme", "eventos:publicar", "futuro:leer")
	st, b := h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials"})
	if st != 200 || b["scope"] != "eventos:publicar" {
		t.Errorf("token of a credential with an unknown stored scope: %d %v, want 200 with eventos:publicar", st, b)
	}
	st, b = h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials", "scope": "futuro:leer"})
	if st != 403 {
		t.Errorf("asking for the unknown scope: %d %v, want 403", st, b)
	}
}

func TestUnknownPathAndErrorBody(t *testing.T) {
	h := newHarness(t)
	resp := h.raw("GET", "/v1/nada", "", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("X-Trace-Id") == "" {
		t.Errorf("unknown path: %d trace %q", resp.StatusCode, resp.Header.Get("X-Trace-Id"))
	}
	st, b := h.do("DELETE", "/v1/token", "", nil)
	if st != 404 || b["codigo"] != "no_encontrado" || b["trace_id"] == nil {
		t.Errorf("unknown method: %d %v", st, b)
	}
}

func TestPanicBecomesInternalError(t *testing.T) {
	h := newHarness(t)
	handler := h.srv.wrap(route{name: "boom", public: true, h: func(*call) error { panic("secret internal detail") }})
	rec := httptest.NewRecorder()
	handler(rec, httptest.NewRequest("GET", "/boom", nil), nil)
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || !strings.Contains(rec.Body.String(), "error_interno") {
		t.Errorf("panic: %d %s", rec.Code, rec.Body.String())
	}
}

// TestPanicAfterAnswerStartedCutsIt: a handler that panics once its answer
// is under way (a streamed result file) cannot be answered 500 any more;
// the response is cut short, so that the client sees it broken rather than
// a complete-looking body with an error object appended.
func TestPanicAfterAnswerStartedCutsIt(t *testing.T) {
	h := newHarness(t)
	handler := h.srv.wrap(route{name: "boom", public: true, h: func(c *call) error {
		c.w.Header().Set("Content-Type", "application/x-ndjson")
		c.w.WriteHeader(http.StatusOK)
		c.w.Write([]byte(`{"linea":1}` + "\n"))
		c.w.(http.Flusher).Flush()
		panic("secret internal detail")
	}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, nil) }))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil || strings.Contains(string(body), "error_interno") {
		t.Errorf("panic after the status line: body %q read to its end (err %v), want the response cut short", body, err)
	}
}

// BenchmarkAuthenticatedRequest measures token verification and the whole
// middleware chain (trace id, auth, scope, pause, rate limit, metrics,
// access log) around a trivial authenticated handler.
func BenchmarkAuthenticatedRequest(b *testing.B) {
	h := newHarness(&testing.T{})
	defer h.http.Close()
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	tok := h.token("acme", "catalogo:escribir")
	handler := h.srv.wrap(route{name: "trivial", scope: scopeCatalogo, class: classOther, h: func(c *call) error {
		c.w.WriteHeader(http.StatusNoContent)
		return nil
	}})
	req := httptest.NewRequest("GET", "/trivial", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		handler(w, req, nil)
	}
}

// BenchmarkTokenVerify measures token verification alone.
func BenchmarkTokenVerify(b *testing.B) {
	tk := newTokens(store.TestSecrets().Token)
	now := time.Now()
	tok := tk.issue("ci_abcdefghijklmnopqrst", scopeCatalogo|scopeEventos, 0, now.Add(tokenTTL))
	var buf [160]byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, _, ok := tk.verify(tok, now, &buf); !ok {
			b.Fatal("verify failed")
		}
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// rotateCredential rotates the credential's secret as `admin credential
// rotate --grace grace` does and returns the new secret.
func rotateCredential(t *testing.T, h *harness, id string, grace time.Duration) string {
	t.Helper()
	secret := fmt.Sprintf("rotated-%s-%d", id, h.clock.Now().UnixNano())
	now := h.clock.Now()
	_, err := h.db.UpdateCredential(id, func(c *store.Credential) error {
		c.Rotate(store.HashSecret(secret), now, grace)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// TestRotationCutsOldTokens: a token obtained with a secret stops working
// when that secret stops being accepted (at once with grace 0, at the end
// of the grace otherwise), while tokens of the new secret go on.
func TestRotationCutsOldTokens(t *testing.T) {
	tokenWith := func(h *harness, id, secret string) string {
		t.Helper()
		st, b := h.do("POST", "/v1/token", "", map[string]string{"client_id": id, "client_secret": secret, "grant_type": "client_credentials"})
		if st != 200 {
			t.Fatalf("token: %d %v", st, b)
		}
		return b["access_token"].(string)
	}
	type probe struct {
		after time.Duration // since the rotation
		tok   string        // "old": obtained before the rotation; "grace": with the old secret after it; "new": with the new secret
		want  int
	}
	tests := []struct {
		name   string
		grace  time.Duration
		twice  bool // rotate a second time right after the first
		probes []probe
	}{
		{"grace 0", 0, false, []probe{{0, "old", 401}, {0, "new", 200}, {10 * time.Minute, "new", 200}}},
		{"grace 5m", 5 * time.Minute, false, []probe{{0, "old", 200}, {0, "grace", 200}, {0, "new", 200},
			{5*time.Minute - time.Second, "old", 200}, {5 * time.Minute, "old", 401}, {5 * time.Minute, "grace", 401}, {5 * time.Minute, "new", 200}}},
		{"rotated twice", 10 * time.Minute, true, []probe{{0, "old", 401}, {0, "grace", 200}, {0, "new", 200}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.tenant("acme", false, nil)
			id, secret := h.credential("acme", "catalogo:escribir")
			toks := map[string]string{"old": tokenWith(h, id, secret)}
			newSecret := rotateCredential(t, h, id, tt.grace)
			if tt.twice {
				secret, newSecret = newSecret, rotateCredential(t, h, id, tt.grace)
			}
			if tt.grace > 0 {
				toks["grace"] = tokenWith(h, id, secret)
			}
			toks["new"] = tokenWith(h, id, newSecret)
			var at time.Duration
			var got, want []string
			for _, p := range tt.probes {
				h.clock.Advance(p.after - at)
				at = p.after
				st, _ := h.do("GET", "/v1/catalogo-acciones", toks[p.tok], nil)
				got = append(got, fmt.Sprintf("%s token at +%v: %d", p.tok, p.after, st))
				want = append(want, fmt.Sprintf("%s token at +%v: %d", p.tok, p.after, p.want))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOldFormatTokenRefused: a token of the format before secret
// generations (ct1: expiry, scopes, client id), correctly signed and not
// expired, is refused with the plain 401, so that no token escapes a
// rotation; clients fetch a new one.
func TestOldFormatTokenRefused(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	id, _ := h.credential("acme", "catalogo:escribir")
	payload := binary.BigEndian.AppendUint64(nil, uint64(h.clock.Now().Add(tokenTTL).Unix()))
	payload = binary.BigEndian.AppendUint32(payload, uint32(scopeCatalogo))
	payload = append(payload, id...)
	m := hmac.New(sha256.New, h.secrets.Token)
	m.Write(payload)
	enc := base64.RawURLEncoding
	tok := "ct1." + enc.EncodeToString(payload) + "." + enc.EncodeToString(m.Sum(nil))
	st, b := h.do("GET", "/v1/catalogo-acciones", tok, nil)
	if st != 401 || b["codigo"] != "no_autenticado" {
		t.Errorf("old-format token: %d %v, want 401 no_autenticado", st, b)
	}
}

// TestForbiddenNamesScope: a 403 sin_permiso names, in its mensaje, the
// scope the route needs, so that the integrator knows what to ask the
// operator for (it said only "no tiene el permiso necesario").
func TestForbiddenNamesScope(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", "webhooks:escribir")
	for _, tc := range []struct {
		method, path string
		body         any
		want         string
	}{
		{"POST", "/v1/decisiones", map[string]any{}, "la credencial no tiene el permiso necesario: decisiones:pedir"},
		{"POST", "/v1/eventos", map[string]any{}, "la credencial no tiene el permiso necesario: eventos:publicar"},
		{"POST", "/v1/decisiones/d.x.y/ejecucion", map[string]any{}, "la credencial no tiene el permiso necesario: decisiones:confirmar"},
		{"DELETE", "/v1/clientes/c-00000001", nil, "la credencial no tiene el permiso necesario: clientes:borrar"},
		{"GET", "/v1/clientes/c-00000001/exportacion", nil, "la credencial no tiene el permiso necesario: clientes:exportar"},
		{"PUT", "/v1/catalogo-acciones", map[string]any{}, "la credencial no tiene el permiso necesario: catalogo:escribir"},
	} {
		st, b := h.do(tc.method, tc.path, tok, tc.body)
		got := map[string]any{"status": st, "codigo": b["codigo"], "mensaje": b["mensaje"]}
		want := map[string]any{"status": 403, "codigo": "sin_permiso", "mensaje": tc.want}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}
}
