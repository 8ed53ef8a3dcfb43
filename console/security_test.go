package console

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestSecurityHeadersOnEveryAnswer: every console answer, signed in or
// not, page, error or redirect, carries the CSP (no script, the style
// sheet by its hash, no framing), nosniff, no-store and no-referrer; no
// page holds a script, and the sign-in page, which carries the link's
// token, also says no-referrer in its markup.
func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	tok := h.link()
	type req struct{ method, path, body string }
	anon := []req{{"GET", "/login?t=" + tok, ""}, {"GET", "/", ""}, {"POST", "/login", "t=made-up"}, {"GET", "/nope", ""}}
	authed := []req{{"GET", "/", ""}, {"GET", "/t/acme", ""}, {"GET", "/t/nope", ""}, {"GET", "/nope", ""}, {"POST", "/t/acme/action", "action=pause"}}
	do := func(r req) (*http.Response, string) {
		t.Helper()
		rq, _ := http.NewRequest(r.method, h.con.URL+r.path, strings.NewReader(r.body))
		rq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	check := func(name string, resp *http.Response, body string) {
		t.Helper()
		hd := resp.Header
		csp := hd.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", name, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") {
			t.Errorf("%s: CSP %q allows scripts or unsafe sources", name, csp)
		}
		for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
			if got := hd.Get(k); got != want {
				t.Errorf("%s: %s %q, want %q", name, k, got, want)
			}
		}
		if strings.Contains(strings.ToLower(body), "<script") {
			t.Errorf("%s: the page holds a script", name)
		}
		if i, j := strings.Index(body, "<style>"), strings.Index(body, "</style>"); i >= 0 && j > i {
			sum := sha256.Sum256([]byte(body[i+len("<style>") : j]))
			if !strings.Contains(csp, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") {
				t.Errorf("%s: the CSP does not allow the page's own style sheet", name)
			}
		}
	}
	for _, r := range anon {
		resp, body := do(r)
		check("signed out "+r.method+" "+r.path, resp, body)
	}
	resp, body := do(req{"GET", "/login?t=" + tok, ""})
	if !strings.Contains(body, `<meta name="referrer" content="no-referrer">`) || strings.Contains(body, "src=") {
		t.Errorf("sign-in page: want a no-referrer meta and nothing fetched\n%s", body)
	}
	check("sign-in page", resp, body)
	resp, body = do(req{"POST", "/login", "t=" + tok})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	check("sign in", resp, body)
	for _, r := range authed {
		resp, body := do(r)
		check("signed in "+r.method+" "+r.path, resp, body)
	}
}

// TestSessionTokens: the sign-in issues a fresh session token whatever
// cookie the browser brought (no fixation), stores only hashes of link and
// session tokens, and signing out ends the session on the server: its
// cookie value, replayed, is refused. GET requests change nothing.
func TestSessionTokens(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	u, _ := url.Parse(h.con.URL)
	planted := "attacker-chosen-value"
	c.Jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: planted, Path: "/"}})
	link := h.link()
	if st := h.signIn(c, link); st != http.StatusSeeOther {
		t.Fatalf("sign in: %d", st)
	}
	var session string
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == cookieName {
			session = ck.Value
		}
	}
	if session == "" || session == planted {
		t.Fatalf("session cookie %q: want a fresh token", session)
	}
	for _, span := range []func() (lo, hi []byte){store.ConsoleSessionSpan, store.ConsoleLinkSpan} {
		lo, hi := span()
		h.db.Scan(lo, hi, func(k, v []byte) error {
			for _, raw := range []string{session, link} {
				if bytes.Contains(k, []byte(raw)) || bytes.Contains(v, []byte(raw)) {
					t.Errorf("a raw token is stored: %q = %q", k, v)
				}
			}
			return nil
		})
	}
	_, page := get(t, c, h.con.URL+"/")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no csrf token on the tenants page")
	}
	for _, p := range []string{"/logout", "/t/acme/action?action=pause&confirm=yes&csrf=" + url.QueryEscape(m[1]), "/t/acme/proof?csrf=" + url.QueryEscape(m[1])} {
		get(t, c, h.con.URL+p)
	}
	if len(h.ran) != 0 {
		t.Errorf("a GET ran %v", h.ran)
	}
	if st, _ := get(t, c, h.con.URL+"/"); st != http.StatusOK {
		t.Fatalf("after GETs: %d, want the session still open", st)
	}
	if st, _ := post(t, c, h.con.URL+"/logout", url.Values{"csrf": {m[1]}}); st != http.StatusOK {
		t.Fatalf("sign out: %d", st)
	}
	replay := &http.Client{}
	rq, _ := http.NewRequest("GET", h.con.URL+"/", nil)
	rq.AddCookie(&http.Cookie{Name: cookieName, Value: session})
	resp, err := replay.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the signed-out session's cookie replayed: %d, want 401", resp.StatusCode)
	}
}

// TestHSTSOnlyOverTLS: Strict-Transport-Security is sent on every answer,
// signed in or not, when the console is served over TLS (its own, or a
// proxy's with Deps.Secure), and never over plain HTTP, where a browser
// would ignore it at best.
func TestHSTSOnlyOverTLS(t *testing.T) {
	for _, tc := range []struct {
		name        string
		secure, tls bool
		want        string
	}{
		{"plain HTTP", false, false, ""},
		{"behind a TLS proxy", true, false, "max-age=31536000"},
		{"TLS", false, true, "max-age=31536000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.console.d.Secure = tc.secure
			srv, c := h.con, h.client()
			if tc.tls {
				srv = httptest.NewTLSServer(h.console)
				defer srv.Close()
				c.Transport = srv.Client().Transport
			}
			var got []string
			for _, p := range []string{"/login?t=x", "/", "/t/acme"} {
				resp, err := c.Get(srv.URL + p)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got = append(got, resp.Header.Get("Strict-Transport-Security"))
			}
			if diff := cmp.Diff([]string{tc.want, tc.want, tc.want}, got); diff != "" {
				t.Errorf("Strict-Transport-Security (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCrossSitePostsRefused: a form another site's page posts (the browser
// says so with Sec-Fetch-Site, or an Origin other than the console's) is
// refused with 403 before anything is done: the sign-in form, which has no
// CSRF token (a planted link would sign the operator into someone else's
// session), and the signed-in forms even with a good token. The console's
// own pages' forms (same-origin) and tools that send neither header work.
func TestCrossSitePostsRefused(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	csrf := csrfRE.FindStringSubmatch(page)[1]
	link := h.link()
	send := func(path string, form url.Values, hdr map[string]string) int {
		t.Helper()
		rq, _ := http.NewRequest("POST", h.con.URL+path, strings.NewReader(form.Encode()))
		rq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			rq.Header.Set(k, v)
		}
		resp, err := c.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	pause := url.Values{"action": {"pause"}, "confirm": {"yes"}, "csrf": {csrf}}
	tests := []struct {
		name, path string
		form       url.Values
		hdr        map[string]string
		want       int
	}{
		{"sign-in from another site", "/login", url.Values{"t": {link}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"sign-in from another origin", "/login", url.Values{"t": {link}}, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"action from another site", "/t/acme/action", pause, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"sign-out from a sibling site", "/logout", url.Values{"csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"action from the console's page", "/t/acme/action", pause, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"sign-in from the console's page", "/login", url.Values{"t": {link}}, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
	}
	for _, tt := range tests {
		if got := send(tt.path, tt.form, tt.hdr); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	if diff := cmp.Diff([][]string{{"admin", "tenant", "set", "acme", "--paused", "true"}}, h.ran); diff != "" {
		t.Errorf("commands run (-want +got):\n%s", diff)
	}
}

// TestEndedSessionCookieDeleted: a request whose session cookie names no
// live session (revoked by "logout --all", expired, or made up) gets 401
// and a Set-Cookie that deletes it, so the browser stops sending a dead
// token; a request without the cookie gets no Set-Cookie.
func TestEndedSessionCookieDeleted(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	if _, err := RevokeAll(h.db); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(h.con.URL)
	for _, tc := range []struct {
		name   string
		client *http.Client
		want   []string // Set-Cookie headers
	}{
		{"revoked session", c, []string{cookieName + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"}},
		{"no cookie", h.client(), nil},
	} {
		resp, err := tc.client.Get(h.con.URL + "/t/acme")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if diff := cmp.Diff(tc.want, resp.Header.Values("Set-Cookie")); resp.StatusCode != http.StatusUnauthorized || diff != "" {
			t.Errorf("%s: status %d, Set-Cookie (-want +got):\n%s", tc.name, resp.StatusCode, diff)
		}
	}
	if ck := c.Jar.Cookies(u); len(ck) != 0 {
		t.Errorf("the browser still holds %v", ck)
	}
}

// TestOversizedFormClosesConnection: a form over its limit, declared by
// Content-Length or found while reading a chunked body, is answered 413
// at once with Connection: close while the rest of the body is still to
// come (net/http would otherwise wait for up to 256 KiB of it before
// answering, and keep the connection); a client that then ends its side
// sees the connection closed.
func TestOversizedFormClosesConnection(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	u, _ := url.Parse(h.con.URL)
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		cookie = ck.String()
	}
	sized := func(declared, sent int) string {
		return fmt.Sprintf("Content-Length: %d\r\n\r\n%s", declared, strings.Repeat("a", sent))
	}
	chunk := func(n int) string { // one chunk, and the body never ends
		return fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", n, strings.Repeat("a", n))
	}
	for _, tc := range []struct{ name, path, body string }{
		{"sign-in, declared", "/login", sized(12<<10, 1<<10)},
		{"sign-in, chunked", "/login", chunk(8 << 10)},
		{"action, declared", "/t/acme/action", sized(24<<10, 1<<10)},
		{"action, chunked", "/t/acme/action", chunk(20 << 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second)) // a bound for the failure, not a timing assertion
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n%s", tc.path, u.Host, cookie, tc.body)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while the body is still to come: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			conn.(*net.TCPConn).CloseWrite()
			_, err = br.ReadByte()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || err != io.EOF {
				t.Errorf("status %d, Connection: close %v, then reading on: %v; want 413, close, EOF", resp.StatusCode, resp.Close, err)
			}
		})
	}
}

// TestUnknownMethodsAnswerNotFound: a method a console path does not take
// is answered as a page that does not exist, as the API answers an
// unknown method (404, contract section 7): the console's 404 page with a
// session, its 401 sign-in page without one. So are the requests whose
// target is not a path (CONNECT's host:port, OPTIONS *), which
// http.ServeMux answered with its own plain 405 and 400.
func TestUnknownMethodsAnswerNotFound(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	u, _ := url.Parse(h.con.URL)
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		cookie = ck.String()
	}
	type answer struct {
		Status int
		Text   string
		Traced bool
	}
	do := func(target string, signedIn bool) answer {
		t.Helper()
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		req := target + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
		if signedIn {
			req += "Cookie: " + cookie + "\r\n"
		}
		io.WriteString(conn, req+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := answer{Status: resp.StatusCode, Traced: resp.Header.Get("X-Trace-Id") != ""}
		if m := messageRE.FindStringSubmatch(string(b)); m != nil {
			a.Text = m[1]
		} else if strings.Contains(string(b), "admin console login") {
			a.Text = "sign-in page"
		}
		return a
	}
	notFound := answer{http.StatusNotFound, "No such console page.", true}
	signIn := answer{http.StatusUnauthorized, "sign-in page", true}
	for _, target := range []string{"PUT /login", "DELETE /t/acme", "GET /t/acme/action", "GET /logout", "OPTIONS /", "CONNECT evil.example:443", "OPTIONS *"} {
		got := []answer{do(target, true), do(target, false)}
		if diff := cmp.Diff([]answer{notFound, signIn}, got); diff != "" {
			t.Errorf("%s, signed in and not (-want +got):\n%s", target, diff)
		}
	}
}
