package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// harness is the console and the API over one in-memory store, each on its
// own test listener (the console's with the limits serve gives it).
type harness struct {
	t       testing.TB
	db      *store.DB
	clock   *clock.Fake
	eng     *engine.Engine
	api     *httptest.Server
	con     *httptest.Server
	mu      sync.Mutex
	ran     [][]string // admin command lines run by actions
	console *Console
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	db, err := store.Open("db", store.NewMemFS())
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, db: db, clock: clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC))}
	sec := store.TestSecrets()
	log := zerolog.Nop()
	h.eng = engine.New(engine.Config{DB: db, Secrets: sec, Log: log, Now: h.clock.Now, Seed: 1})
	signer, _ := batch.NewURLSigner(sec.URL, "http://127.0.0.1")
	hooks := batch.NewWebhooks(db, batch.NewDeliverer(batch.DelivererConfig{}), log, h.clock.Now, 1)
	runner := batch.NewRunner(batch.RunnerConfig{DB: db, Engine: h.eng, Log: log, Dir: filepath.Join(t.TempDir(), "r"), Now: h.clock.Now, Signer: signer, Webhooks: hooks})
	api := server.New(server.Deps{Log: log, DB: db, Secrets: sec, Now: h.clock.Now, Ready: func() bool { return true }, Engine: h.eng, Batch: runner, Webhooks: hooks})
	h.console = New(Deps{Log: log, DB: db, Engine: h.eng, API: api, Batch: runner, Webhooks: hooks, Now: h.clock.Now,
		Admin: func(_ context.Context, args []string, out io.Writer) error {
			h.mu.Lock()
			h.ran = append(h.ran, args)
			h.mu.Unlock()
			fmt.Fprintln(out, "ran", strings.Join(args, " "))
			return nil
		},
		Warnings: func(*store.Tenant) ([]string, error) { return []string{"a warning"}, nil },
	})
	h.api, h.con = httptest.NewServer(api), httptest.NewUnstartedServer(h.console)
	h.con.Config, h.con.Listener = server.HTTPServerFor(h.console, h.con.Listener, server.HTTPConfig{}, log) // as serve's
	h.con.Start()
	if err := db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: h.clock.Now(), Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.api.Close()
		h.con.Close()
		h.console.Close()
		db.Close()
	})
	return h
}

// client returns an HTTP client with a cookie jar that does not follow
// redirects.
func (h *harness) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) link() string {
	h.t.Helper()
	tok, err := NewLink(h.db, h.clock.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// signIn redeems a link token and returns the answer's status.
func (h *harness) signIn(c *http.Client, tok string) int {
	h.t.Helper()
	resp, err := c.PostForm(h.con.URL+"/login", url.Values{"t": {tok}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// messageRE finds the text of a message page or of the sign-in page's error.
var messageRE = regexp.MustCompile(`<p (?:id="message"|class="bad" id="signin-error")>([^<]*)</p>`)

func TestNoSessionNoData(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	for _, rt := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/t/acme"}, {"GET", "/t/nope"}, {"POST", "/t/acme/action"}, {"POST", "/t/acme/proof"},
		{"POST", "/logout"}, {"GET", "/anything"}, {"GET", "/v1/openapi.json"}, {"PUT", "/login"},
	} {
		t.Run(rt.method+rt.path, func(t *testing.T) {
			var st int
			var body string
			if rt.method == "GET" {
				st, body = get(t, c, h.con.URL+rt.path)
			} else {
				req, _ := http.NewRequest(rt.method, h.con.URL+rt.path, strings.NewReader("action=pause&confirm=yes"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				st, body = resp.StatusCode, string(b)
			}
			if st != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", st)
			}
			if !strings.Contains(body, "coupond admin console login") || strings.Contains(body, "acme") {
				t.Errorf("body does not just say how to sign in:\n%s", body)
			}
		})
	}
	if len(h.ran) != 0 {
		t.Errorf("actions ran without a session: %v", h.ran)
	}
}

func TestLinkOnceAndExpiry(t *testing.T) {
	h := newHarness(t)
	tok := h.link()
	if st := h.signIn(h.client(), tok); st != http.StatusSeeOther {
		t.Fatalf("first use: status %d, want 303", st)
	}
	if st := h.signIn(h.client(), tok); st != http.StatusUnauthorized {
		t.Errorf("reused link: status %d, want 401", st)
	}
	old := h.link()
	h.clock.Advance(LinkTTL)
	if st := h.signIn(h.client(), old); st != http.StatusUnauthorized {
		t.Errorf("expired link: status %d, want 401", st)
	}
	if st := h.signIn(h.client(), "made-up"); st != http.StatusUnauthorized {
		t.Errorf("invented link: status %d, want 401", st)
	}
}

// TestSignInAfterTheClockWentBack: a sign-in link and a session live
// their 10 minutes and 12 hours from now at most: made before the clock
// went back by more than a minute they are expired (a day back, a session
// lived 36 hours and a link a day); a step back of seconds keeps them.
func TestSignInAfterTheClockWentBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		back time.Duration
		want int // a session's page, and a link's sign-in
	}{
		{"30 s back", 30 * time.Second, http.StatusOK},
		{"2 minutes back", 2 * time.Minute, http.StatusUnauthorized},
		{"a day back", 24 * time.Hour, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := h.client()
			h.signIn(c, h.link())
			link := h.link()
			h.clock.Advance(-tc.back)
			if st, _ := get(t, c, h.con.URL+"/"); st != tc.want {
				t.Errorf("session: status %d, want %d", st, tc.want)
			}
			want := http.StatusSeeOther
			if tc.want != http.StatusOK {
				want = http.StatusUnauthorized
			}
			if st := h.signIn(h.client(), link); st != want {
				t.Errorf("link: status %d, want %d", st, want)
			}
		})
	}
}

func TestSessionCookieAndLifetime(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	resp, err := c.PostForm(h.con.URL+"/login", url.Values{"t": {h.link()}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].MaxAge != int(SessionTTL.Seconds()) {
		t.Fatalf("cookie %+v: want one HttpOnly SameSite=Strict cookie of 12 h", ck)
	}
	if st, body := get(t, c, h.con.URL+"/"); st != 200 || !strings.Contains(body, `data-tenant="acme"`) {
		t.Fatalf("tenants page: %d\n%s", st, body)
	}
	h.clock.Advance(SessionTTL)
	if st, _ := get(t, c, h.con.URL+"/"); st != http.StatusUnauthorized {
		t.Errorf("after 12 h: status %d, want 401", st)
	}
	c2 := h.client()
	h.signIn(c2, h.link())
	if n, err := RevokeAll(h.db); err != nil || n != 1 {
		t.Fatalf("RevokeAll = %d, %v; want 1 session (the expired one went with the second link)", n, err)
	}
	if st, _ := get(t, c2, h.con.URL+"/"); st != http.StatusUnauthorized {
		t.Errorf("after logout --all: status %d, want 401", st)
	}
}

func TestPostNeedsCSRFAndConfirmation(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf token on the tenant page:\n%s", page)
	}
	csrf := m[1]
	first := "x" // a first character other than the token's own
	if csrf[0] == 'x' {
		first = "y"
	}
	for _, bad := range []string{"", first + csrf[1:], csrf + "x"} {
		if st, _ := post(t, c, h.con.URL+"/t/acme/action", url.Values{"action": {"pause"}, "confirm": {"yes"}, "csrf": {bad}}); st != http.StatusForbidden {
			t.Errorf("csrf %q: status %d, want 403", bad, st)
		}
	}
	if st, body := post(t, c, h.con.URL+"/t/acme/action", url.Values{"action": {"pause"}, "csrf": {csrf}}); st != 200 || !strings.Contains(body, "coupond admin tenant set acme --paused true") {
		t.Fatalf("confirm step: %d\n%s", st, body)
	}
	if len(h.ran) != 0 {
		t.Fatalf("ran before confirmation: %v", h.ran)
	}
	if st, body := post(t, c, h.con.URL+"/t/acme/action", url.Values{"action": {"pause"}, "csrf": {csrf}, "confirm": {"yes"}}); st != 200 {
		t.Fatalf("confirmed action: %d\n%s", st, body)
	}
	if diff := cmp.Diff([][]string{{"admin", "tenant", "set", "acme", "--paused", "true"}}, h.ran); diff != "" {
		t.Errorf("commands run (-want +got):\n%s", diff)
	}
	audit, err := Audit(h.db, "acme", 10)
	if err != nil || len(audit) != 1 || audit[0].Outcome != "ok" || audit[0].Action != "pause" || len(audit[0].Session) != 12 {
		t.Errorf("audit = %+v, %v; want one ok pause entry with the session id", audit, err)
	}
	if st, _ := post(t, c, h.con.URL+"/t/acme/action", url.Values{"action": {"abuse-clear"}, "client": {"ci_other"}, "csrf": {csrf}, "confirm": {"yes"}}); st != http.StatusBadRequest {
		t.Errorf("clearing a credential without steps: status %d, want 400", st)
	}
	if st, _ := post(t, c, h.con.URL+"/t/acme/action", url.Values{"action": {"rm -rf"}, "csrf": {csrf}, "confirm": {"yes"}}); st != http.StatusBadRequest {
		t.Errorf("unknown action: status %d, want 400", st)
	}
}

// TestFormProblemsSayWhat: a form over the console's size limit is refused
// with 413 and says it is too large, and one that does not parse with 400
// and says so, before any CSRF check; neither reads as a missing CSRF
// token (an oversized form with a good token did). Sign-in's form too.
func TestFormProblemsSayWhat(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf token on the tenant page:\n%s", page)
	}
	big := url.Values{"csrf": {m[1]}, "action": {"pause"}, "note": {strings.Repeat("a", 17<<10)}}.Encode()
	tests := []struct {
		name, path, body string
		wantStatus       int
		wantText         string
	}{
		{"action form over 16 KiB", "/t/acme/action", big, http.StatusRequestEntityTooLarge, "The form is larger than 16 KiB"},
		{"action form that does not parse", "/t/acme/action", "csrf=" + m[1] + "&action=%zz", http.StatusBadRequest, "The form could not be read"},
		{"sign-in form over 4 KiB", "/login", "t=" + strings.Repeat("a", 5<<10), http.StatusRequestEntityTooLarge, "The form is larger than 4 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Post(h.con.URL+tt.path, "application/x-www-form-urlencoded", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			msg := messageRE.FindStringSubmatch(string(b))
			if msg == nil {
				t.Fatalf("status %d, no message:\n%s", resp.StatusCode, b)
			}
			if resp.StatusCode != tt.wantStatus || !strings.Contains(msg[1], tt.wantText) || strings.Contains(msg[1], "CSRF") {
				t.Errorf("status %d, message %q; want %d with %q and no word of CSRF", resp.StatusCode, msg[1], tt.wantStatus, tt.wantText)
			}
		})
	}
	if len(h.ran) != 0 {
		t.Errorf("commands ran: %v", h.ran)
	}
}

func TestListenersAreSeparate(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	for _, p := range []string{"/v1/openapi.json", "/healthz", "/metrics", "/v1/token"} {
		if st, body := get(t, c, h.con.URL+p); st != http.StatusNotFound || strings.Contains(body, "openapi") || strings.Contains(body, "coupond_http") {
			t.Errorf("console answered API route %s: %d", p, st)
		}
	}
	for _, p := range []string{"/", "/login", "/t/acme", "/login?t=x"} {
		st, body := get(t, http.DefaultClient, h.api.URL+p)
		if st != http.StatusNotFound || !strings.Contains(body, "no_encontrado") {
			t.Errorf("API answered console route %s: %d %s", p, st, body)
		}
	}
	if st, _ := post(t, http.DefaultClient, h.api.URL+"/login", url.Values{"t": {h.link()}}); st != http.StatusNotFound {
		t.Errorf("API answered POST /login: %d", st)
	}
}

func TestCountersFeedThePages(t *testing.T) {
	h := newHarness(t)
	cnt := h.eng.Counters()
	now := h.clock.Now()
	cnt.Add("acme", now.Add(-2*time.Hour), engine.CountDecisions, 100)
	cnt.Add("acme", now.Add(-2*time.Hour), engine.CountConfirmed, 90)
	cnt.Add("acme", now, engine.CountErrorPfx+"limite_excedido", 3)
	if err := cnt.Flush(); err != nil {
		t.Fatal(err)
	}
	cnt.Add("acme", now, engine.CountDecisions, 10) // pending, not flushed
	c := h.client()
	h.signIn(c, h.link())
	_, list := get(t, c, h.con.URL+"/")
	if !strings.Contains(list, `class="row-red"`) || !strings.Contains(list, "81.8 %") {
		t.Errorf("tenants page: want acme red at 90/110 = 81.8 %%:\n%s", list)
	}
	_, page := get(t, c, h.con.URL+"/t/acme")
	for _, want := range []string{"81.8 %", `id="ratelimited">3<`, "<svg", "<title>", "a warning"} {
		if !strings.Contains(page, want) {
			t.Errorf("tenant page lacks %q", want)
		}
	}
}

// BenchmarkTenantPage times the tenant page of a tenant whose counters hold
// 10 million decisions over the 8 days the page reads: the page reads the
// hourly records, never the decisions, so its cost does not grow with them.
func BenchmarkTenantPage(b *testing.B) {
	h := newHarness(b)
	now := h.clock.Now()
	cnt := h.eng.Counters()
	for i := range historyHours {
		at := now.Add(-time.Duration(i) * time.Hour)
		cnt.Add("acme", at, engine.CountDecisions, 10_000_000/historyHours)
		cnt.Add("acme", at, engine.CountConfirmed, 9_700_000/historyHours)
		cnt.Add("acme", at, engine.CountExplored, 500_000/historyHours)
		cnt.Add("acme", at, engine.CountEvents, 40_000_000/historyHours)
		for _, code := range []string{"422", "limite_excedido", "no_encontrado", "no_autenticado"} {
			cnt.Add("acme", at, engine.CountErrorPfx+code, 100)
		}
	}
	if err := cnt.Flush(); err != nil {
		b.Fatal(err)
	}
	tok, _ := NewLink(h.db, now)
	c := h.client()
	if st := h.signIn(c, tok); st != http.StatusSeeOther {
		b.Fatal("sign in", st)
	}
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Get(h.con.URL + "/t/acme")
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp.StatusCode)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestProofInBackground: the proof is computed off the page view, then
// shown with the shadow report's go-live verdict for a shadow tenant.
func TestProofInBackground(t *testing.T) {
	h := newHarness(t)
	s := store.DefaultSettings()
	s.Shadow = true
	if err := h.db.CreateTenant(&store.Tenant{ID: "sombra", CreatedAt: h.clock.Now(), Settings: s}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Decide("sombra", engine.Request{ClienteRef: "cliente0001", Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	_, first := get(t, c, h.con.URL+"/t/sombra")
	if !strings.Contains(first, "Computing the evaluation in the background") {
		t.Errorf("first view does not say the proof is being computed")
	}
	var page string
	for range 100 {
		if _, page = get(t, c, h.con.URL+"/t/sombra"); strings.Contains(page, `id="golive"`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{`id="golive">not ready to leave shadow mode`, "only 0.0% of decisions confirmed", `id="verdict">not enough closed decisions`, "Shadow report"} {
		if !strings.Contains(page, want) {
			t.Errorf("proof section lacks %q", want)
		}
	}
}

// logTo sends the console's log to a buffer the test reads.
func (h *harness) logTo() *syncbuf.Buffer {
	var log syncbuf.Buffer
	h.console.d.Log = zerolog.New(&log)
	return &log
}

// signedInGet signs a new client in and gets path: the answer's status,
// page and trace id.
func (h *harness) signedInGet(path string) (status int, page, trace string) {
	h.t.Helper()
	c := h.client()
	h.signIn(c, h.link())
	resp, err := c.Get(h.con.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), resp.Header.Get("X-Trace-Id")
}

// TestTenantsPagePastUnreadableTenant: a tenant whose state the console
// cannot read (here a store read error) is listed with a warning that
// names the trace id of its log line, not the error itself; the other
// tenants are listed as usual, not hidden behind a 500.
func TestTenantsPagePastUnreadableTenant(t *testing.T) {
	h := newHarness(t)
	if err := h.db.CreateTenant(&store.Tenant{ID: "beta", CreatedAt: h.clock.Now(), Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	// A store read error on one tenant's state (damaged records are
	// quarantined by the engine and read conservatively; an I/O error is not).
	h.console.d.Warnings = func(t *store.Tenant) ([]string, error) {
		if t.ID == "acme" {
			return nil, errors.New("store: read: input/output error")
		}
		return nil, nil
	}
	log := h.logTo()
	st, page, trace := h.signedInGet("/")
	if st != http.StatusOK {
		t.Fatalf("tenants page: %d, want 200\n%s", st, page)
	}
	for _, want := range []string{`data-tenant="beta"`, `data-tenant="acme"`, "cannot read this tenant", "trace_id " + trace} {
		if !strings.Contains(page, want) {
			t.Errorf("tenants page lacks %q", want)
		}
	}
	if strings.Contains(page, "input/output error") {
		t.Errorf("tenants page shows the store's error itself")
	}
	if l := traceLines(log, trace); len(l) != 1 || l[0]["error"] != "store: read: input/output error" || l[0]["tenant"] != "acme" {
		t.Errorf("log lines with the page's trace id: %v; want the error of tenant acme", l)
	}
}

// TestTenantPagePastUnreadablePart: a part of a tenant's page that the
// console cannot read (here the tenant's warnings, a store read error)
// shows a note naming the answer's trace id, and the rest of the page, its
// actions among them, still shows: an operator on a bad day can still
// pause the tenant from the console.
func TestTenantPagePastUnreadablePart(t *testing.T) {
	h := newHarness(t)
	h.console.d.Warnings = func(*store.Tenant) ([]string, error) {
		return nil, errors.New("store: read: input/output error")
	}
	log := h.logTo()
	st, page, trace := h.signedInGet("/t/acme")
	if st != http.StatusOK {
		t.Fatalf("tenant page: %d, want 200\n%s", st, page)
	}
	for _, want := range []string{"cannot read this tenant", "trace_id " + trace, `id="act-pause"`, `id="fig-decisions"`, `id="errors"`, `id="audit"`} {
		if !strings.Contains(page, want) {
			t.Errorf("tenant page lacks %q", want)
		}
	}
	if strings.Contains(page, "input/output error") {
		t.Errorf("tenant page shows the store's error itself")
	}
	if l := traceLines(log, trace); len(l) != 1 || l[0]["error"] != "store: read: input/output error" || l[0]["part"] != "row" {
		t.Errorf("log lines with the page's trace id: %v; want the row's error", l)
	}
}

func TestExpiredSessionsAndLinksPurged(t *testing.T) {
	h := newHarness(t)
	h.signIn(h.client(), h.link())
	h.link() // never used
	h.clock.Advance(SessionTTL)
	live := h.link()
	for _, span := range []struct {
		name string
		lo   func() (lo, hi []byte)
		want int
	}{{"sessions", store.ConsoleSessionSpan, 0}, {"links", store.ConsoleLinkSpan, 1}} {
		if n, err := h.db.Count(span.lo()); err != nil || n != span.want {
			t.Errorf("%s after a new link: %d, %v; want %d (the expired ones removed)", span.name, n, err, span.want)
		}
	}
	if st := h.signIn(h.client(), live); st != http.StatusSeeOther {
		t.Errorf("the new link: status %d, want 303", st)
	}
}

func TestDamagedSessionRecordSignsOut(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	lo, hi := store.ConsoleSessionSpan()
	var keys [][]byte
	h.db.Scan(lo, hi, func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil })
	if len(keys) != 1 {
		t.Fatalf("%d session records, want 1", len(keys))
	}
	b := h.db.NewBatch()
	b.Set(keys[0], []byte("{not json"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if st, body := get(t, c, h.con.URL+"/"); st != http.StatusUnauthorized || !strings.Contains(body, "coupond admin console login") {
		t.Errorf("damaged session: status %d, want 401 and how to sign in:\n%s", st, body)
	}
	if n, _ := h.db.Count(lo, hi); n != 0 {
		t.Errorf("damaged session record still stored (%d records)", n)
	}
	if st := h.signIn(c, h.link()); st != http.StatusSeeOther {
		t.Errorf("signing in again: status %d, want 303", st)
	}
}

func TestDamagedLinkRecordIsABadLink(t *testing.T) {
	h := newHarness(t)
	tok := h.link()
	b := h.db.NewBatch()
	b.Set(store.ConsoleLinkKey(hashToken(tok)), []byte("\xff"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if st := h.signIn(h.client(), tok); st != http.StatusUnauthorized {
		t.Errorf("damaged link: status %d, want 401", st)
	}
}

func TestSecureCookieBehindTLSProxy(t *testing.T) {
	for _, secure := range []bool{false, true} {
		h := newHarness(t)
		h.console.d.Secure = secure
		resp, err := h.client().PostForm(h.con.URL+"/login", url.Values{"t": {h.link()}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ck := resp.Cookies(); len(ck) != 1 || ck[0].Secure != secure {
			t.Errorf("Deps.Secure %v: cookies %+v, want one with Secure %v", secure, ck, secure)
		}
	}
}

// TestVerdictNeedsIntervalsApart: the proof claims a gain over never-send
// only when the policy's interval lies above never-send's whole interval,
// not when it lies above never-send's point estimate alone.
func TestVerdictNeedsIntervalsApart(t *testing.T) {
	ev := func(lo, neverHi float64) *engine.Evaluation {
		return &engine.Evaluation{Records: 50, Policies: []engine.PolicyValue{
			{Policy: "current_policy", DR: ope.Estimate{Value: 10, Lo: lo, Hi: 14}},
			{Policy: "never_send", DR: ope.Estimate{Value: 5, Lo: 1, Hi: neverHi}},
		}}
	}
	for _, tc := range []struct {
		lo, neverHi float64
		want        bool
	}{{6, 9, false}, {9.5, 9, true}, {4, 9, false}} {
		if _, verdict, ok := evalRows(ev(tc.lo, tc.neverHi)); ok != tc.want {
			t.Errorf("policy from %.1f, never-send up to %.1f: %q (%v), want a proven gain %v", tc.lo, tc.neverHi, verdict, ok, tc.want)
		}
	}
}

// TestAmountsNeverNegativeZero: an amount that rounds to zero cents prints
// as 0.00 on the pages and in the proof's verdict, not -0.00 (a tiny
// negative estimate did); one that rounds to a cent keeps its sign.
func TestAmountsNeverNegativeZero(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{-0.001, "0.00"}, {-0.004999, "0.00"}, {math.Copysign(0, -1), "0.00"}, {0.001, "0.00"},
		{-0.006, "-0.01"}, {-1.234, "-1.23"}, {12.345678, "12.35"}, {math.NaN(), "n/a"}, {math.Inf(-1), "n/a"},
	} {
		if got := mxnText(tc.v); got != tc.want {
			t.Errorf("mxnText(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
	ev := &engine.Evaluation{Records: 50, Policies: []engine.PolicyValue{
		{Policy: "current_policy", DR: ope.Estimate{Value: -0.001, Lo: -0.003, Hi: 0.002}},
		{Policy: "never_send", DR: ope.Estimate{Value: -0.002, Lo: -0.004, Hi: 0.001}},
	}}
	_, verdict, _ := evalRows(ev)
	if want := "no proven gain over never-send yet: 0.00 MXN [0.00, 0.00] against 0.00 MXN per decision"; verdict != want {
		t.Errorf("verdict %q, want %q", verdict, want)
	}
}

// TestAbuseStateOutOfRangeLevel: a stored abuse state whose level is none
// the guard knows (a record written wrong, not one that fails to decode)
// is left out like a record that does not decode; the tenant page still
// renders, with the tenant's other credentials.
func TestAbuseStateOutOfRangeLevel(t *testing.T) {
	h := newHarness(t)
	at := h.clock.Now()
	for _, st := range []server.AbuseState{
		{ClientID: "ci_bad", Level: 9, Steps: []server.AbuseStep{{At: at, Level: "freno", Reason: "recarga"}}},
		{ClientID: "ci_neg", Level: -1, Steps: []server.AbuseStep{{At: at, Level: "aviso", Reason: "recarga"}}},
		{ClientID: "ci_good", Level: 1, Steps: []server.AbuseStep{{At: at, Level: "aviso", Reason: "recarga"}}},
	} {
		raw, _ := json.Marshal(st)
		if err := h.db.PutAbuseState("acme", st.ClientID, raw); err != nil {
			t.Fatal(err)
		}
	}
	h.console.d.API = server.New(server.Deps{Log: zerolog.Nop(), DB: h.db, Secrets: store.TestSecrets(), Now: h.clock.Now, Ready: func() bool { return true }, Engine: h.eng})
	c := h.client()
	h.signIn(c, h.link())
	st, page := get(t, c, h.con.URL+"/t/acme")
	if st != http.StatusOK {
		t.Fatalf("tenant page: %d, want 200\n%s", st, page)
	}
	if !strings.Contains(page, `data-client="ci_good"`) || strings.Contains(page, "ci_bad") || strings.Contains(page, "ci_neg") {
		t.Errorf("abuse section: want ci_good only")
	}
}

// TestTenantTextIsBidiIsolated: text the tenant chose (here its webhook
// URL, which may carry a right-to-left override) is isolated on the
// tenant page, so it cannot reverse the console's text after it.
func TestTenantTextIsBidiIsolated(t *testing.T) {
	h := newHarness(t)
	if _, err := h.console.d.Webhooks.Register("acme", "https://hooks.example/a\u202eb", []string{"lote.completado"}, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	st, page := get(t, c, h.con.URL+"/t/acme")
	if st != http.StatusOK || !strings.Contains(page, "hooks.example") {
		t.Fatalf("tenant page: %d, without the webhook\n%s", st, page)
	}
	if !isolatedBidi(page) {
		t.Errorf("the webhook URL's bidi control is not isolated")
	}
}

// TestWebhookPasswordMasked: a webhook registered with a password in its
// URL (accepted before PUT /v1/webhooks refused them) shows it masked.
func TestWebhookPasswordMasked(t *testing.T) {
	h := newHarness(t)
	if _, err := h.console.d.Webhooks.Register("acme", "https://hook:s3cr3t@hooks.example/in", []string{"lote.completado"}, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	st, page := get(t, c, h.con.URL+"/t/acme")
	if st != http.StatusOK || !strings.Contains(page, "https://hook:xxxxx@hooks.example/in") || strings.Contains(page, "s3cr3t") {
		t.Errorf("tenant page: %d, want the webhook URL with its password masked\n%s", st, page)
	}
}

// TestWebhookQueryValuesMasked: a receiver's token in the webhook URL's
// query is masked on the tenant page, its name kept.
func TestWebhookQueryValuesMasked(t *testing.T) {
	h := newHarness(t)
	if _, err := h.console.d.Webhooks.Register("acme", "https://hooks.example/in?token=s3cr3t&canal=crm", []string{"lote.completado"}, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	st, page := get(t, c, h.con.URL+"/t/acme")
	if st != http.StatusOK || !strings.Contains(page, "https://hooks.example/in?canal=xxxxx&amp;token=xxxxx") || strings.Contains(page, "s3cr3t") {
		t.Errorf("tenant page: %d, want the webhook URL with its query values masked\n%s", st, page)
	}
}

// TestShadowTableUndefinedShares: the shadow report's shares without a
// denominator (no coupon received yet, no decision compared with the
// caller's rule) read n/a, as the page's other shares do, not 0.0 %.
func TestShadowTableUndefinedShares(t *testing.T) {
	h := newHarness(t)
	s := store.DefaultSettings()
	s.Shadow = true
	if err := h.db.CreateTenant(&store.Tenant{ID: "sombra", CreatedAt: h.clock.Now(), Settings: s}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Decide("sombra", engine.Request{ClienteRef: "cliente0001", Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	var page string
	for range 100 {
		if _, page = get(t, c, h.con.URL+"/t/sombra"); strings.Contains(page, `id="shadow"`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	row := regexp.MustCompile(`<tr><td>([^<]+)</td><td class="num">([^<]*)</td></tr>`)
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(page, -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{"confirmed": "0.0 %", "coupons with decision_id": "n/a", "agreement engine / caller": "n/a (0)"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("shadow row %q = %q, want %q", k, got[k], v)
		}
	}
}

// TestPendingDeletionShowsRequestTime: a pending deletion's "requested"
// is its record's solicitado_en, as "admin deletions" prints it (the
// tenant's clock for a sandbox tenant, the original request for one
// re-applied from a backup's ledger), not the real time at which its queue
// entry was written.
func TestPendingDeletionShowsRequestTime(t *testing.T) {
	h := newHarness(t)
	tenantNow := time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := h.db.CreateTenant(&store.Tenant{ID: "sb", CreatedAt: h.clock.Now(), Sandbox: true, ClockNow: tenantNow, Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	priv := privacy.New(privacy.Config{DB: h.db, Engine: h.eng, Secrets: store.TestSecrets(), Now: h.clock.Now, Log: zerolog.Nop()})
	restored := time.Date(2026, 10, 1, 9, 0, 0, 0, time.UTC) // a request older than the restore that re-applies it
	for _, tc := range []struct {
		name, tenant string
		schedule     func() (*privacy.DeletionRecord, error)
		want         time.Time
	}{
		{"sandbox tenant", "sb", func() (*privacy.DeletionRecord, error) { return priv.RequestDeletion("sb", "cliente-0001", "ci_x") }, tenantNow},
		{"from a backup's ledger", "acme", func() (*privacy.DeletionRecord, error) {
			return priv.ScheduleDeletionByHash("acme", strings.Repeat("ab", 20), restored, "ci_x")
		}, restored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := tc.schedule()
			if err != nil {
				t.Fatal(err)
			}
			c := h.client()
			h.signIn(c, h.link())
			_, page := get(t, c, h.con.URL+"/t/"+tc.tenant)
			row := regexp.MustCompile(`<tr><td><code>` + rec.Hash + `</code></td><td>([^<]*)</td>`).FindStringSubmatch(page)
			if row == nil {
				t.Fatalf("no pending deletion row for %s in:\n%s", rec.Hash, page)
			}
			if diff := cmp.Diff(tc.want.Format("2006-01-02 15:04:05Z"), row[1]); diff != "" {
				t.Errorf("requested (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBestSingleByLowerBound: the proof's "best single" row is the coupon
// whose interval's lower end is highest, not the largest estimate, which
// is mostly a seldom-sent coupon's noise (the winner's curse); a coupon
// with an estimate but no interval ranks below those with one.
func TestBestSingleByLowerBound(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name     string
		policies []engine.PolicyValue
		want     string
	}{
		{"wide high estimate", []engine.PolicyValue{
			{Policy: "always_1_noisy", DR: ope.Estimate{Value: 40, Lo: -20, Hi: 100}},
			{Policy: "always_2_steady", DR: ope.Estimate{Value: 12, Lo: 10, Hi: 14}},
		}, "best single: 2_steady"},
		{"no interval ranks last", []engine.PolicyValue{
			{Policy: "always_1_one", DR: ope.Estimate{Value: 90, Lo: nan, Hi: nan}},
			{Policy: "always_2_low", DR: ope.Estimate{Value: 1, Lo: -5, Hi: 7}},
		}, "best single: 2_low"},
		{"only without interval", []engine.PolicyValue{
			{Policy: "always_1_a", DR: ope.Estimate{Value: 3, Lo: nan, Hi: nan}},
			{Policy: "always_2_b", DR: ope.Estimate{Value: 5, Lo: nan, Hi: nan}},
			{Policy: "always_3_never_sent", DR: ope.Estimate{Value: nan, Lo: nan, Hi: nan}},
		}, "best single: 2_b"},
	} {
		rows, _, _ := evalRows(&engine.Evaluation{Records: 50, Policies: tc.policies})
		var got []string
		for _, r := range rows {
			if strings.HasPrefix(r.Name, "best single") {
				got = append(got, r.Name)
			}
		}
		if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
			t.Errorf("%s: best single (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestProofOfATenantCreatedAgain: a tenant deleted and created again under
// the same id is a new tenant: its page never shows the proof computed
// from the deleted tenant's decisions, which the console kept in memory
// (by id alone, it showed the deleted one's shadow report and estimates
// until they were 10 minutes old), but computes its own.
func TestProofOfATenantCreatedAgain(t *testing.T) {
	h := newHarness(t)
	s := store.DefaultSettings()
	s.Shadow = true
	if err := h.db.CreateTenant(&store.Tenant{ID: "sombra", CreatedAt: h.clock.Now(), Settings: s}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Decide("sombra", engine.Request{ClienteRef: "cliente0001", Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	h.signIn(c, h.link())
	const computing = "Computing the evaluation in the background"
	// proofShown is the tenant's page once its proof is computed.
	proofShown := func() string {
		var page string
		for range 200 {
			if _, page = get(t, c, h.con.URL+"/t/sombra"); !strings.Contains(page, computing) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return page
	}
	if page := proofShown(); !strings.Contains(page, "Shadow report") {
		t.Fatalf("the first tenant's proof has no shadow report")
	}

	if _, err := h.db.MarkTenantDeleting("sombra", "test", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.EraseTenant("sombra", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.eng.Records().ForgetTenant("sombra")
	if _, err := h.db.CompleteTenantDeletion(context.Background(), "sombra", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	if err := h.db.CreateTenant(&store.Tenant{ID: "sombra", CreatedAt: h.clock.Now(), Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	_, page := get(t, c, h.con.URL+"/t/sombra")
	if !strings.Contains(page, computing) || strings.Contains(page, "Shadow report") {
		t.Errorf("the tenant created again shows a proof at once (the deleted tenant's), want it computed anew")
	}
	if page := proofShown(); strings.Contains(page, "Shadow report") {
		t.Errorf("the tenant created again, without a decision, shows a shadow report")
	}
}
