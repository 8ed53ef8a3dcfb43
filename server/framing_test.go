package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/syncbuf"
)

// rawExchange sends req over a fresh TCP connection to h, half-closes it
// when halfClose, and reads one response.
func (h *harness) rawExchange(req string, halfClose bool) (*http.Response, map[string]any) {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		h.t.Fatal(err)
	}
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		h.t.Fatalf("answer %d is not a JSON object: %q", resp.StatusCode, data)
	}
	return resp, m
}

// TestFramingErrors sends requests with broken framing over raw TCP: each is
// a 400 esquema_invalido in the contract's error body, never a 500.
func TestFramingErrors(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	auth := "Authorization: Bearer " + tok + "\r\n"
	const body = `{"cliente_ref":"cliente-0001","contexto":{"canal":"push"}}`
	for _, tc := range []struct {
		name, req string
		halfClose bool
	}{
		{"bad chunk size", "POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n", false},
		{"chunk longer than its size", fmt.Sprintf("POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n"+auth+"Transfer-Encoding: chunked\r\n\r\n%x\r\n%sEXTRA\r\n0\r\n\r\n", len(body), body), false},
		{"body ends early", "POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 500\r\n\r\n" + body, true},
		{"chunked body ends early", "POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n100\r\n" + body, true},
		{"Content-Length and Transfer-Encoding", fmt.Sprintf("POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), len(body), body), false},
		{"Transfer-Encoding and Content-Length, public route", fmt.Sprintf("POST /v1/token HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\ncontent-length: 3\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", 2, "{}"), false},
		{"Content-Length and Transfer-Encoding on a GET", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"malformed form body on the token endpoint", "POST /v1/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\nq\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, m := h.rawExchange(tc.req, tc.halfClose)
			if resp.StatusCode != http.StatusBadRequest || m["codigo"] != "esquema_invalido" || m["trace_id"] != resp.Header.Get("X-Trace-Id") {
				t.Errorf("got %d %v, want 400 esquema_invalido with the trace id", resp.StatusCode, m)
			}
		})
	}
}

// TestNetHTTPErrorsAreJSON: what net/http answers by itself, before any
// handler (a request it cannot read), is the API's error body too, with
// its status and a trace id; it was plain text.
func TestNetHTTPErrorsAreJSON(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, req string
		status    int
		mensaje   string
	}{
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400, "cabeceras ilegibles"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "(missing required Host header)"},
		{"header block over the limit", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2*MaxHeaderBytes) + "\r\n\r\n", 431, "exceden 32 KiB"},
		{"unknown Transfer-Encoding", "POST /v1/token HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding no admitido"},
		{"Expect other than 100-continue", "POST /v1/decisiones HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "Expect no admitido"},
		{"Expect other than 100-continue, HTTP/1.0", "GET /healthz HTTP/1.0\r\nExpect: foo\r\n\r\n", 417, "Expect no admitido"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, m := h.rawExchange(tc.req, false)
			msg, _ := m["mensaje"].(string)
			if resp.StatusCode != tc.status || m["codigo"] != "esquema_invalido" || !strings.Contains(msg, tc.mensaje) ||
				m["trace_id"] == nil || m["trace_id"] != resp.Header.Get("X-Trace-Id") || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %v %v, want %d esquema_invalido naming %q with the trace id", resp.StatusCode, resp.Header, m, tc.status, tc.mensaje)
			}
		})
	}
}

// TestFramingKeepAlive checks that the framing watcher follows ordinary
// traffic on one connection (bodies by Content-Length and by chunks,
// trailers, bodiless requests) without refusing any of it.
func TestFramingKeepAlive(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	auth := "Authorization: Bearer " + tok + "\r\n"
	for i := range 12 {
		body := fmt.Sprintf(`{"cliente_ref":"keepalive-%04d","contexto":{"canal":"push"}}`, i)
		want := http.StatusOK
		if i%4 == 0 {
			// A body that looks like a head with both headers must not
			// fool the watcher: 422 for its control characters, not 400.
			body = fmt.Sprintf(`{"cliente_ref":"keepalive-%04d","contexto":{"canal":"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"}}`, i)
			want = http.StatusUnprocessableEntity
		}
		var req string
		switch i % 3 {
		case 0:
			req = fmt.Sprintf("POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", auth, len(body), body)
		case 1:
			half := len(body) / 2
			req = fmt.Sprintf("POST /v1/decisiones HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n%s\r\n%X\r\n%s\r\n0\r\nX-Trailer: content-length: 9\r\n\r\n", auth, half, body[:half], len(body)-half, body[half:])
		case 2:
			req = "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
			want = http.StatusOK
		}
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %s, want %d", i, resp.StatusCode, data, want)
		}
	}
}

// TestUnknownMethods: OPTIONS and any method no route has are 404
// no_encontrado (contract section 7), not httprouter's automatic answers.
func TestUnknownMethods(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodOptions, "/v1/decisiones"},
		{http.MethodOptions, "*"},
		{http.MethodOptions, "/healthz"},
		{"PATCH", "/v1/catalogo-acciones"},
		{"BREW", "/v1/token"},
		{http.MethodDelete, "/v1/decisiones"},
	} {
		if tc.path == "*" {
			resp, m := h.rawExchange("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", false)
			if resp.StatusCode != http.StatusNotFound || m["codigo"] != "no_encontrado" {
				t.Errorf("OPTIONS *: got %d %v, want 404 no_encontrado", resp.StatusCode, m)
			}
			continue
		}
		resp := h.raw(tc.method, tc.path, "", nil)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		json.Unmarshal(data, &m)
		if resp.StatusCode != http.StatusNotFound || m["codigo"] != "no_encontrado" || resp.Header.Get("Allow") != "" {
			t.Errorf("%s %s: got %d Allow=%q %s, want 404 no_encontrado", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), data)
		}
	}
}

// TestClientGoneLogged499: a client that disconnects mid-body is in the
// access log as 499, and nothing is logged as an error.
func TestClientGoneLogged499(t *testing.T) {
	var logs syncbuf.Buffer // safe for the server's goroutines
	h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{}, nil)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/decisiones HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 400\r\n\r\n{\"cliente_ref\":", tok)
	time.Sleep(50 * time.Millisecond)
	conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `"route":"decisiones"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for the request; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == "error" || m["level"] == "warn" {
			t.Errorf("logged as a fault: %s", line)
		}
		if m["route"] == "decisiones" && m["status"] != float64(statusClientGone) {
			t.Errorf("access log status %v, want 499: %s", m["status"], line)
		}
	}
}

// TestBodyTimeout: a body slower than the read timeout gets 400
// esquema_invalido and the connection closed; the access log says 408.
func TestBodyTimeout(t *testing.T) {
	var logs syncbuf.Buffer // safe for the server's goroutines
	h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{ReadTimeout: 300 * time.Millisecond}, nil)
	start := time.Now()
	resp, m := h.rawExchange("POST /v1/token HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"client_id\":", false)
	if resp.StatusCode != http.StatusBadRequest || m["codigo"] != "esquema_invalido" || !resp.Close {
		t.Fatalf("got %d close=%v %v, want 400 esquema_invalido and the connection closed", resp.StatusCode, resp.Close, m)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v, want about the 300ms read timeout", d)
	}
	if !strings.Contains(logs.String(), `"route":"token","status":408`) {
		t.Errorf("access log does not say 408:\n%s", logs.String())
	}
}

// TestNetHTTPErrorsLogged: net/http's own answers (a request it could not
// read) get their access log line as the pipeline's requests do: route
// "unreadable", the status the client got, the trace id it got, net/http's
// fixed reason, no tenant and none of the client's bytes (here a token and
// a customer reference in the unreadable head); and /metrics counts them.
func TestNetHTTPErrorsLogged(t *testing.T) {
	var logs syncbuf.Buffer
	h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{}, nil)
	const secrets = "Authorization: Bearer ct2.SECRET-TOKEN\r\nX-Cliente: cliente-RAW-0001\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		reason    any
	}{
		{"header line without a colon", "GET /v1/clientes/cliente-RAW-0001/exportacion HTTP/1.1\r\nHost: x\r\n" + secrets + "Bad Header\r\n\r\n", 400, nil},
		{"no Host", "GET /healthz HTTP/1.1\r\n" + secrets + "\r\n", 400, "missing required Host header"},
		{"header block over the limit", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + secrets + "X-Big: " + strings.Repeat("a", 2*MaxHeaderBytes) + "\r\n\r\n", 431, nil},
		{"unknown Transfer-Encoding", "POST /v1/token HTTP/1.1\r\nHost: x\r\n" + secrets + "Transfer-Encoding: gzip\r\n\r\n", 501, nil},
		{"Expect other than 100-continue", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + secrets + "Expect: foo\r\n\r\n", 417, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := h.rawExchange(tc.req, false)
			trace := resp.Header.Get("X-Trace-Id")
			line := waitLogLine(t, &logs, trace)
			// info, 501 too: the client's mistake, nothing to act on.
			want := map[string]any{"level": "info", "message": "request", "route": "unreadable", "status": float64(tc.status), "trace_id": trace}
			if tc.reason != nil {
				want["reason"] = tc.reason
			}
			got := maps.Clone(line)
			delete(got, "latency")
			if _, ok := line["latency"].(float64); !ok {
				t.Errorf("no latency in %v", line)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("access log line (-want +got):\n%s", diff)
			}
			if s := logs.String(); strings.Contains(s, "SECRET-TOKEN") || strings.Contains(s, "RAW-0001") {
				t.Errorf("the log holds the client's bytes:\n%s", s)
			}
		})
	}
	_, body := h.rawExchange("GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", false)
	if body["codigo"] != "esquema_invalido" {
		t.Fatalf("got %v", body)
	}
	resp := h.raw("GET", "/metrics", "", nil)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(data), `coupond_http_requests_total{route="unreadable",status="400"}`) {
		t.Errorf("/metrics does not count net/http's answers:\n%s", data)
	}
}

// waitLogLine returns the JSON log line of logs that carries trace_id
// trace, waiting for it up to 5 s (the server logs after it answers).
func waitLogLine(t *testing.T, logs *syncbuf.Buffer, trace string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["trace_id"] == trace && trace != "" {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with trace_id %q; log:\n%s", trace, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTooLargeClosesConnection: a body over its route's limit, declared
// by Content-Length or met while reading a chunked body, is answered 413
// at once with Connection: close while the rest of the body is still to
// come (net/http would otherwise read on, or wait for it until the read
// timeout, before answering); once the client ends its side the
// connection is closed.
func TestTooLargeClosesConnection(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	auth := "Authorization: Bearer " + tok + "\r\n"
	sized := func(path string, declared int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", path, auth, declared, strings.Repeat("a", 1<<10))
	}
	chunk := func(path string, n int) string { // one chunk over the limit, and the body never ends
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", path, auth, n, strings.Repeat("a", n))
	}
	for _, tc := range []struct {
		name, req string
		limit     int // the route's limit, which the mensaje names
	}{
		{"events, declared", sized("/v1/eventos", eventsBody+1), eventsBody},
		{"events, chunked", chunk("/v1/eventos", eventsBody+1), eventsBody},
		{"decision, declared", sized("/v1/decisiones", smallBody+1), smallBody},
		{"token, declared", sized("/v1/token", smallBody+1), smallBody},
		{"token, chunked", chunk("/v1/token", smallBody+1), smallBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second)) // a bound for the failure, not a timing assertion
			go io.WriteString(conn, tc.req)                   // the server may answer before it reads it all
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while the body is still to come: %v", err)
			}
			var body struct{ Codigo, Mensaje string }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Errorf("413 body: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf("el cuerpo excede el tamaño máximo de %d bytes", tc.limit)
			if diff := cmp.Diff(struct{ Codigo, Mensaje string }{"esquema_invalido", want}, body); diff != "" {
				t.Errorf("413 body (-want +got):\n%s", diff)
			}
			conn.(*net.TCPConn).CloseWrite()
			_, err = br.ReadByte()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || err != io.EOF {
				t.Errorf("status %d, Connection: close %v, then reading on: %v; want 413, close, EOF", resp.StatusCode, resp.Close, err)
			}
		})
	}
}
