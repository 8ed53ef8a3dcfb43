package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coupond/coupond/internal/apitest"
)

// The end-to-end tests build the real binary and drive it as an operator
// and an integrator would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary the end-to-end tests built: it is 37 MB,
// and every run of the package would otherwise leave one behind in the
// system's temporary directory. Unless the environment sets one, the
// servers the tests start (in process and as child processes) keep a
// disk reserve of 256 MiB rather than auto's 5 % of the disk: on a
// machine with less free than that every such test waited for a /readyz
// that never came, instead of the few tests of the reserve, which pass
// --disk-reserve themselves, telling it.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv("COUPOND_DISK_RESERVE"); !ok {
		os.Setenv("COUPOND_DISK_RESERVE", "256MiB")
	}
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func coupondBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coupond-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "coupond")
		cmd := exec.Command("go", "build", "-o", binPath, "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// instance is a running "coupond serve".
type instance struct {
	t       *testing.T
	bin     string
	dataDir string
	addr    string
	cmd     *exec.Cmd
	logs    *bytes.Buffer
	extra   []string
}

func startServer(t *testing.T, dataDir string, extra ...string) *instance {
	t.Helper()
	in := &instance{t: t, bin: coupondBinary(t), dataDir: dataDir, addr: freeAddr(t), extra: extra}
	in.start()
	t.Cleanup(func() {
		// A failed test shows what the server said; the process is stopped
		// first, so its output is complete and no longer written.
		if t.Failed() {
			in.killIfRunning()
			t.Logf("server logs (%s):\n%s", in.addr, in.logs)
		}
	})
	return in
}

func (in *instance) start() {
	t := in.t
	t.Helper()
	args := append([]string{"serve", "--data-dir", in.dataDir, "--addr", in.addr, "--console-addr", ""}, in.extra...)
	in.cmd = exec.Command(in.bin, args...)
	in.logs = &bytes.Buffer{}
	in.cmd.Stdout = in.logs
	in.cmd.Stderr = in.logs
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if in.answers200("/readyz") {
			return
		}
		time.Sleep(30 * time.Millisecond)
	}
	in.cmd.Process.Kill()
	t.Fatalf("server did not become ready; logs:\n%s", in.logs)
}

// answers200 reports whether GET path answers 200; a refused connection
// (serve not listening yet, or between listeners) is false.
func (in *instance) answers200(path string) bool {
	resp, err := http.Get(in.url(path))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// stop sends SIGTERM and waits for a clean exit.
func (in *instance) stop() {
	in.t.Helper()
	in.stopWith(syscall.SIGTERM)
}

// stopWith sends sig and waits for a clean exit.
func (in *instance) stopWith(sig syscall.Signal) {
	in.t.Helper()
	in.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- in.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			in.t.Fatalf("serve exited with %v after %v; logs:\n%s", err, sig, in.logs)
		}
	case <-time.After(30 * time.Second):
		in.cmd.Process.Kill()
		<-done // Wait has returned: killIfRunning waits no more
		in.t.Fatalf("serve did not stop within 30s of %v", sig)
	}
}

func (in *instance) kill() {
	in.cmd.Process.Kill()
	in.cmd.Wait()
}

// killIfRunning kills serve unless it has exited already: the clean-up of
// a test that may have stopped or killed it itself.
func (in *instance) killIfRunning() {
	if in.cmd.ProcessState == nil {
		in.kill()
	}
}

// admin runs "coupond admin ... --json" against the data dir and decodes its
// output into v.
func (in *instance) admin(v any, args ...string) {
	in.t.Helper()
	out, err := runAdmin(in.bin, in.dataDir, args...)
	if err != nil {
		in.t.Fatalf("admin %v: %v\n%s", args, err, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			in.t.Fatalf("admin %v: output is not JSON: %v\n%s", args, err, out)
		}
	}
}

// runAdmin runs "coupond admin ... --json" in process through Run (the
// server, when one runs, is a real process: the command reaches it through
// the admin socket as the binary would). bin is unused and kept for the
// callers.
func runAdmin(_ string, dataDir string, args ...string) ([]byte, error) {
	full := append([]string{"admin"}, args...)
	full = append(full, "--data-dir", dataDir, "--json")
	var out, stderr bytes.Buffer
	if err := Run(context.Background(), full, strings.NewReader(""), &out, &stderr); err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return out.Bytes(), err // an exit status the command chose: its output stands
		}
		return append(out.Bytes(), stderr.Bytes()...), err
	}
	return out.Bytes(), nil
}

type credJSON struct {
	ClientID     string   `json:"client_id"`
	ClientSecret string   `json:"client_secret"`
	Scopes       []string `json:"scopes"`
	Tenant       string   `json:"tenant"`
}

func (in *instance) url(path string) string { return "http://" + in.addr + path }

// do sends a request and returns status, headers and decoded JSON body.
func (in *instance) do(method, path, token string, body any, hdr ...string) (int, http.Header, map[string]any) {
	in.t.Helper()
	resp := apitest.Do(in.t, method, in.url(path), token, body, hdr...)
	return resp.StatusCode, resp.Header, apitest.Object(in.t, resp)
}

func (in *instance) token(c credJSON) string {
	in.t.Helper()
	st, _, body := in.do("POST", "/v1/token", "", map[string]string{"client_id": c.ClientID, "client_secret": c.ClientSecret, "grant_type": "client_credentials"})
	if st != 200 {
		in.t.Fatalf("token: status %d body %v", st, body)
	}
	return body["access_token"].(string)
}

// TestServeStopsOnHangup: SIGHUP (a closed terminal) stops serve cleanly,
// as SIGTERM does; before, the default action killed it mid-request.
func TestServeStopsOnHangup(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("the tests run ignoring SIGHUP (nohup): serve inherits that and, by design, keeps running on it")
	}
	in := startServer(t, t.TempDir())
	defer in.killIfRunning()
	in.stopWith(syscall.SIGHUP)
	if !strings.Contains(in.logs.String(), `"message":"stopped"`) {
		t.Errorf("serve did not shut down cleanly on SIGHUP; logs:\n%s", in.logs)
	}
}

func TestEndToEndFoundation(t *testing.T) {
	dataDir := t.TempDir()
	in := startServer(t, dataDir)
	defer in.killIfRunning()

	var tenant map[string]any
	in.admin(&tenant, "tenant", "create", "acme", "--sandbox")
	if tenant["tenant"] != "acme" || tenant["sandbox"] != true {
		t.Fatalf("tenant create --json: got %v", tenant)
	}
	var full, limited credJSON
	in.admin(&full, "credential", "create", "--tenant", "acme", "--name", "crm", "--scopes", "eventos:publicar,decisiones:pedir,catalogo:escribir")
	in.admin(&limited, "credential", "create", "--tenant", "acme", "--name", "pos", "--scopes", "eventos:publicar")
	if full.ClientID == "" || len(full.ClientSecret) < 43 || full.Tenant != "acme" {
		t.Fatalf("credential create --json: got %+v", full)
	}

	// Token by JSON.
	st, hdr, body := in.do("POST", "/v1/token", "", map[string]string{"client_id": full.ClientID, "client_secret": full.ClientSecret, "grant_type": "client_credentials"})
	if st != 200 || body["token_type"] != "Bearer" || body["expires_in"] != float64(900) || body["scope"] != "eventos:publicar decisiones:pedir catalogo:escribir" {
		t.Fatalf("JSON token: status %d body %v", st, body)
	}
	if hdr.Get("Cache-Control") != "no-store" {
		t.Errorf("token Cache-Control: got %q, want no-store", hdr.Get("Cache-Control"))
	}
	tok := body["access_token"].(string)

	// Token by the OAuth 2.0 form with HTTP Basic.
	form := url.Values{"grant_type": {"client_credentials"}}
	req, _ := http.NewRequest("POST", in.url("/v1/token"), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(limited.ClientID), url.QueryEscape(limited.ClientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var formTok map[string]any
	json.NewDecoder(resp.Body).Decode(&formTok)
	resp.Body.Close()
	if resp.StatusCode != 200 || formTok["scope"] != "eventos:publicar" {
		t.Fatalf("form token: status %d body %v", resp.StatusCode, formTok)
	}
	limitedTok := formTok["access_token"].(string)

	// An authenticated call works.
	if st, _, body := in.do("GET", "/v1/catalogo-acciones", tok, nil); st != 200 || body["version"] != float64(0) {
		t.Fatalf("GET catalog: status %d body %v", st, body)
	}

	// 401: wrong secret and unknown client answer the same.
	st1, h1, b1 := in.do("POST", "/v1/token", "", map[string]string{"client_id": full.ClientID, "client_secret": "wrong", "grant_type": "client_credentials"})
	st2, h2, b2 := in.do("POST", "/v1/token", "", map[string]string{"client_id": "ci_nobody", "client_secret": "wrong", "grant_type": "client_credentials"})
	delete(b1, "trace_id")
	delete(b2, "trace_id")
	if st1 != 401 || st2 != 401 || fmt.Sprint(b1) != fmt.Sprint(b2) || h1.Get("WWW-Authenticate") != h2.Get("WWW-Authenticate") || b1["codigo"] != "no_autenticado" {
		t.Errorf("401s differ: %d %v %v / %d %v %v", st1, b1, h1, st2, b2, h2)
	}
	if st, hdr, body := in.do("GET", "/v1/catalogo-acciones", "", nil); st != 401 || body["codigo"] != "no_autenticado" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") || hdr.Get("X-Trace-Id") == "" || body["trace_id"] != hdr.Get("X-Trace-Id") {
		t.Errorf("no token: status %d headers %v body %v", st, hdr, body)
	}
	// 403: scope missing.
	if st, _, body := in.do("GET", "/v1/catalogo-acciones", limitedTok, nil); st != 403 || body["codigo"] != "sin_permiso" {
		t.Errorf("missing scope: status %d body %v", st, body)
	}
	// 422: validation lists every violation.
	st, _, body = in.do("POST", "/v1/token", "", map[string]any{"client_id": "", "grant_type": "password", "Client_Secret": "x"})
	if st != 422 {
		t.Fatalf("bad token body: status %d body %v", st, body)
	}
	if detail, _ := body["detail"].([]any); len(detail) < 3 {
		t.Errorf("422 detail: got %v, want at least 3 violations", body["detail"])
	}
	// 429: token endpoint burst of 20 per client_id.
	got429 := false
	for i := 0; i < 40 && !got429; i++ {
		st, hdr, body := in.do("POST", "/v1/token", "", map[string]string{"client_id": "ci_flood", "client_secret": "x", "grant_type": "client_credentials"})
		if st == 429 {
			got429 = true
			if hdr.Get("Retry-After") == "" || body["codigo"] != "limite_excedido" {
				t.Errorf("429: headers %v body %v", hdr, body)
			}
		}
	}
	if !got429 {
		t.Error("no 429 after 40 token requests in a burst")
	}

	// Revocation stops existing tokens at once (through the admin socket).
	in.admin(nil, "credential", "revoke", limited.ClientID)
	if st, _, _ := in.do("GET", "/v1/catalogo-acciones", limitedTok, nil); st != 401 {
		t.Errorf("revoked credential's token: status %d, want 401", st)
	}

	// Metrics and health.
	if st, _, _ := in.do("GET", "/healthz", "", nil); st != 200 {
		t.Errorf("healthz: %d", st)
	}
	resp, err = http.Get(in.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	found := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "coupond_http_requests_total{route=\"token\"") {
			found = true
		}
	}
	resp.Body.Close()
	if !found {
		t.Error("metrics: no coupond_http_requests_total for route token")
	}

	// Clean stop and restart: state survives, admin works offline too.
	in.stop()
	if _, err := os.Stat(filepath.Join(dataDir, adminSocket)); err == nil {
		t.Error("admin.sock left behind after a clean stop")
	}
	var shown map[string]any
	in.admin(&shown, "tenant", "show", "acme")
	if shown["tenant"] != "acme" {
		t.Errorf("offline tenant show: %v", shown)
	}
	in.start()
	defer in.stop()
	if st, _, _ := in.do("GET", "/v1/catalogo-acciones", tok, nil); st != 200 {
		t.Errorf("token after restart: status %d, want 200 (keys survive restarts)", st)
	}
}
