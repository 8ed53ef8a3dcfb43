package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/server"
)

// browserPath finds a Chromium to drive; "" when none is installed.
func browserPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// apiClient calls the API as an integrator does.
type apiClient struct {
	t     *testing.T
	base  string
	token string
}

func (a *apiClient) do(method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd bytes.Buffer
	if body != nil {
		json.NewEncoder(&rd).Encode(body)
	}
	req, _ := http.NewRequest(method, a.base+path, &rd)
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestConsoleInBrowser drives the console in headless Chromium against a
// tenant with traffic sent through the real API in process: sign in with a
// one-time link, read the tenants page and the tenant page (confirmation
// share, the abuse warning the test provokes), pause the tenant from the
// console and see the API answer 503 inquilino_pausado. A 2083-character
// webhook URL wraps within the window.
func TestConsoleInBrowser(t *testing.T) {
	exe := browserPath()
	if exe == "" {
		t.Skip("no chromium, chromium-browser or google-chrome on PATH (.ci/run installs Debian's chromium)")
	}
	ctx := context.Background()
	e, err := openEnv(ctx, t.TempDir(), zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	api := httptest.NewServer(e.svc.api)
	defer api.Close()
	stop, err := startConsole("127.0.0.1:0", false, 0, e)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	admin := func(args ...string) string {
		var out bytes.Buffer
		if err := runAdminLine(e)(ctx, append([]string{"admin"}, args...), &out); err != nil {
			t.Fatalf("admin %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}

	// A tenant with traffic: 10 decisions, 8 confirmed; 500 events sent
	// once and then again until a minute holds MinReload duplicates, which
	// the abuse guard reads as a history reload (aviso).
	admin("tenant", "create", "acme")
	var cred struct{ ClientID, ClientSecret string }
	json.Unmarshal([]byte(strings.NewReplacer("client_id", "ClientID", "client_secret", "ClientSecret").Replace(
		admin("credential", "create", "--tenant", "acme", "--name", "crm", "--scopes", "eventos:publicar,decisiones:pedir,decisiones:confirmar,catalogo:escribir", "--json"))), &cred)
	c := &apiClient{t: t, base: api.URL}
	st, tok := c.do("POST", "/v1/token", map[string]string{"client_id": cred.ClientID, "client_secret": cred.ClientSecret, "grant_type": "client_credentials"})
	if st != 200 {
		t.Fatalf("token: %d %v", st, tok)
	}
	c.token = tok["access_token"].(string)
	if st, body := c.do("PUT", "/v1/catalogo-acciones", map[string]any{"acciones": []map[string]any{
		{"id": 1, "nombre": "diez", "tipo_cupon": "D10", "costo_envio_mxn": 0.5, "descuento_max_mxn": 50, "descuento_pct": 10, "activa": true}}}); st != 200 {
		t.Fatalf("catalog: %d %v", st, body)
	}
	// A webhook URL as long as the API takes (2083 characters, no space):
	// the tenant page must wrap it, not grow wider than the window.
	if _, err := e.svc.webhooks.Register("acme", "https://hooks.example/"+strings.Repeat("a", 2061), []string{"lote.completado"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var events []map[string]any
	ts := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	for i := range 500 {
		events = append(events, map[string]any{"event_id": fmt.Sprintf("ev%04d", i), "cliente_ref": fmt.Sprintf("cliente%04d", i%50), "ts": ts,
			"tipo": "COMPRA_CAT", "clave": "abarrotes", "valor": 120.5, "extra": map[string]any{"ticket_id": fmt.Sprintf("tk%04d", i), "margen": 30.25}})
	}
	for sent := 0; !strings.Contains(admin("abuse", "show", "--tenant", "acme"), "aviso"); {
		if sent > 3*server.DefaultAbuseConfig().MinReload/len(events) { // a minute holds MinReload duplicates well before
			t.Fatalf("no aviso after %d requests of %d events", sent, len(events))
		}
		switch st, body := c.do("POST", "/v1/eventos", map[string]any{"eventos": events}); st {
		case 200:
			sent++
		case 429: // the credential's rate: a second refills it
			time.Sleep(time.Second)
		default:
			t.Fatalf("eventos: %d %v", st, body)
		}
	}
	for i := range 10 {
		st, d := c.do("POST", "/v1/decisiones", map[string]any{"cliente_ref": fmt.Sprintf("cliente%04d", i), "contexto": map[string]any{"canal": "push"}})
		if st != 200 {
			t.Fatalf("decision: %d %v", st, d)
		}
		if i < 8 {
			if st, body := c.do("POST", "/v1/decisiones/"+d["decision_id"].(string)+"/ejecucion", map[string]any{"ejecutada": true}); st != 200 {
				t.Fatalf("confirm: %d %v", st, body)
			}
		}
		if i == 0 { // a second confirmation: one 409 ejecucion_ya_confirmada for the health section
			if st, _ := c.do("POST", "/v1/decisiones/"+d["decision_id"].(string)+"/ejecucion", map[string]any{"ejecutada": true}); st != http.StatusConflict {
				t.Fatalf("second confirmation: %d, want 409", st)
			}
		}
	}
	link := regexp.MustCompile(`http://\S+/login\?t=\S+`).FindString(admin("console", "login"))
	if link == "" {
		t.Fatal("admin console login printed no link")
	}

	shots, err := os.MkdirTemp("", "coupond-console-shots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(shots)
		}
	})
	t.Logf("screenshots in %s (kept if the test fails)", shots)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	bctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), buf, 0o600)
		}
	}
	text := func(sel string, out *string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			s, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			*out = s
			return chromedp.Void{}, err
		}
	}
	var listRow, confirmed, warnings, decisions, errorsTable, result, audit, verdict, guard string
	err = chromedp.Do(bctx,
		chromedp.Navigate(link),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#tenants")),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) { // the embedded style sheet applies under the CSP
			bg, err := chromedp.Evaluate[string]("getComputedStyle(document.querySelector('header.top')).backgroundColor")(ctx, tg)
			if err == nil && bg != "rgb(29, 35, 48)" {
				err = fmt.Errorf("header background %q: the style sheet did not apply", bg)
			}
			return chromedp.Void{}, err
		},
		text(`tr[data-tenant="acme"]`, &listRow),
		shot("tenants.png"),
		chromedp.Click(chromedp.CSS(`tr[data-tenant="acme"] a`)),
		chromedp.WaitVisible(chromedp.CSS("#fig-confirmed")),
		text("#fig-confirmed", &confirmed),
		text("#fig-decisions", &decisions),
		text("#warnings", &warnings),
		text("#errors", &errorsTable),
		shot("tenant.png"),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) { // long tenant text wraps
			w, err := chromedp.Evaluate[[]int]("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")(ctx, tg)
			if err == nil && w[0] > w[1] {
				err = fmt.Errorf("the tenant page is %d px wide in a %d px window: a long webhook URL widens it", w[0], w[1])
			}
			return chromedp.Void{}, err
		},
		chromedp.Click(chromedp.CSS("#act-pause")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		shot("confirm.png"),
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#message")),
		text("#message", &result),
		shot("paused.png"),
		chromedp.Click(chromedp.CSS("#back")),
		chromedp.WaitVisible(chromedp.CSS("#proof")),
		// The proof is computed in the background after the first view of
		// the page: reload until it shows.
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			for range 50 {
				if ok, err := chromedp.Evaluate[bool]("document.querySelector('#verdict') !== null")(ctx, tg); err != nil || ok {
					return chromedp.Void{}, err
				}
				time.Sleep(100 * time.Millisecond)
				if _, err := chromedp.Reload()(ctx, tg); err != nil {
					return chromedp.Void{}, err
				}
			}
			return chromedp.Void{}, fmt.Errorf("the proof section never showed a verdict")
		},
		text("#audit", &audit),
		text("#verdict", &verdict),
		text("#guard", &guard),
		shot("tenant-paused.png"),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) { // the top of the page, for the README
			buf, err := chromedp.CaptureScreenshot()(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, "tenant-top.png"), buf, 0o600)
		},
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	for _, chk := range []struct{ what, got, want string }{
		{"tenants row", listRow, "80.0 %"},
		{"tenants row", listRow, "aviso"},
		{"tenants row", listRow, "500"}, // events in 24 h: the reload's duplicates are not counted
		{"errors table", errorsTable, "ejecucion_ya_confirmada\t1\t1"},
		{"confirmed figure", confirmed, "80.0 %"},
		{"confirmed figure", confirmed, "8 of 10"},
		{"decisions figure", decisions, "10"},
		{"warnings", warnings, "aviso"},
		{"warnings", warnings, "recarga"},
		{"action result", result, "ok"},
		{"audit log", audit, "pause"},
		{"proof verdict", verdict, "not enough closed decisions"},
		{"policy guard", guard, "the send gate tests the learned policy's choices"},
	} {
		if !strings.Contains(chk.got, chk.want) {
			t.Errorf("%s %q lacks %q", chk.what, chk.got, chk.want)
		}
	}
	if out := admin("console", "audit", "--tenant", "acme"); !strings.Contains(out, "admin tenant set acme --paused true") || !strings.Contains(out, " ok ") {
		t.Errorf("admin console audit does not show the pause:\n%s", out)
	}
	st, body := c.do("POST", "/v1/decisiones", map[string]any{"cliente_ref": "cliente0042", "contexto": map[string]any{"canal": "push"}})
	if st != http.StatusServiceUnavailable || body["codigo"] != "inquilino_pausado" {
		t.Errorf("API after pausing from the console: %d %v, want 503 inquilino_pausado", st, body)
	}
}

// TestServeConsoleFlag runs the real binary with --console-addr: "admin
// console login" through admin.sock prints a link to that listener, the
// link opens a session once, the API's port has no console, and "logout
// --all" ends the session. With --console-tls-proxy the session cookie is
// Secure and the answers carry Strict-Transport-Security.
func TestServeConsoleFlag(t *testing.T) {
	conAddr := freeAddr(t)
	in := startServer(t, t.TempDir(), "--console-addr", conAddr, "--console-tls-proxy")
	defer in.stop()
	var login struct {
		URL string `json:"url"`
	}
	in.admin(&login, "console", "login")
	if !strings.HasPrefix(login.URL, "http://"+conAddr+"/login?t=") {
		t.Fatalf("link %q does not point at the console listener %s", login.URL, conAddr)
	}
	tok := login.URL[strings.Index(login.URL, "?t=")+3:]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func() *http.Response {
		resp, err := noRedirect.PostForm("http://"+conAddr+"/login", map[string][]string{"t": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := signIn()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	cookie := resp.Cookies()[0]
	if !cookie.Secure || resp.Header.Get("Strict-Transport-Security") == "" {
		t.Errorf("behind --console-tls-proxy: session cookie %v, Strict-Transport-Security %q; want Secure and HSTS", cookie, resp.Header.Get("Strict-Transport-Security"))
	}
	if again := signIn(); again.StatusCode != http.StatusUnauthorized {
		t.Errorf("second use of the link: %d, want 401", again.StatusCode)
	}
	page := func() int {
		req, _ := http.NewRequest("GET", "http://"+conAddr+"/", nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := page(); st != 200 {
		t.Fatalf("tenants page with the session: %d", st)
	}
	if st, _, _ := in.do("GET", "/login?t="+tok, "", nil); st != http.StatusNotFound {
		t.Errorf("API port answered the console's /login: %d", st)
	}
	var out map[string]int
	in.admin(&out, "console", "logout", "--all")
	if out["sessions_ended"] != 1 || page() != http.StatusUnauthorized {
		t.Errorf("logout --all: %v, then the page answers %d; want 1 session ended and 401", out, page())
	}
}

// TestConsoleLoginForwardsItsPort: the SSH hint of "admin console login"
// forwards the console's own port, not always the default's.
func TestConsoleLoginForwardsItsPort(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	out := string(runIn(t, dir, "admin", "console", "login", "--url", "http://127.0.0.1:18081"))
	if !strings.Contains(out, "ssh -L 18081:127.0.0.1:18081") {
		t.Errorf("console login on port 18081 printed:\n%s\nwant the hint to forward 18081", out)
	}
}

// TestConsoleLoginHintWithURL: with --url, the SSH hint forwards the port
// of --url (where the browser goes) to the running server's console port
// (where it listens); it printed the --url port on both sides, a forward to
// a port nothing listens on. A --url that is not this machine's loopback
// (a TLS proxy's name) is reached without a tunnel: no hint.
func TestConsoleLoginHintWithURL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	serveInProcess(t, dir, "--console-addr", "127.0.0.1:0")
	link := regexp.MustCompile(`http://127\.0\.0\.1:(\d+)/login`).FindStringSubmatch(string(runIn(t, dir, "admin", "console", "login")))
	if link == nil {
		t.Fatal("console login printed no link on the server's console address")
	}
	port := link[1]
	tests := []struct {
		url, want string
	}{
		{"http://localhost:9999", "ssh -L 9999:127.0.0.1:" + port + " user@vm"},
		{"http://127.0.0.1:" + port, "ssh -L " + port + ":127.0.0.1:" + port + " user@vm"},
		{"https://console.example", ""},
	}
	for _, tt := range tests {
		out := string(runIn(t, dir, "admin", "console", "login", "--url", tt.url))
		got := regexp.MustCompile(`ssh -L \S+ user@vm`).FindString(out)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("console login --url %s: SSH hint (-want +got):\n%s\n%s", tt.url, diff, out)
		}
	}
}

// TestConsoleLoginURL: --url must be the console's http or https base URL
// (else an error naming --url, and no link is issued): no user, query or
// fragment, which the appended "/login?t=TOKEN" would land in, and a port
// a browser can reach; a trailing slash does not double the link's.
func TestConsoleLoginURL(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, bad := range []string{"localhost:8081", "ftp://127.0.0.1:8081", "http://", "127.0.0.1:8081",
		"http://127.0.0.1:8081/#x", "http://127.0.0.1:8081#", "http://127.0.0.1:8081/?a=1", "http://127.0.0.1:8081?",
		"http://user:pw@127.0.0.1:8081", "https://[::1]:99999", "http://127.0.0.1:0"} {
		if _, _, err := runCLI(t, "admin", "console", "login", "--url", bad, "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "--url") {
			t.Errorf("--url %q: err %v, want one naming --url", bad, err)
		}
	}
	out := string(runIn(t, dir, "admin", "console", "login", "--url", "https://console.example/"))
	if !strings.HasPrefix(out, "https://console.example/login?t=") {
		t.Errorf("--url with a trailing slash printed:\n%s", out)
	}
}
