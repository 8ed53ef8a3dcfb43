package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// TestUnknownAccionReal: an accion_real that is neither 0 nor in the
// catalog is a 422 at body.accion_real, not a modificada confirmation.
func TestUnknownAccionReal(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	decide := func(ref string) string {
		st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil))
		if st != 200 {
			t.Fatalf("decide: %d %v", st, d)
		}
		return d["decision_id"].(string)
	}
	id := decide("accionreal-0001")
	st, body := h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, map[string]any{"ejecutada": true, "accion_real": 99})
	if st != 422 {
		t.Fatalf("accion_real 99 (not in the catalog): %d %v, want 422", st, body)
	}
	detail := body["detail"].([]any)[0].(map[string]any)
	if diff := cmp.Diff([]any{"body", "accion_real"}, detail["loc"]); diff != "" || detail["input"] != float64(99) {
		t.Errorf("violation %v: want loc body.accion_real with input 99 (-want +got loc):\n%s", detail, diff)
	}
	// Still unconfirmed: a good confirmation goes through afterwards.
	for _, accion := range []int{2, 0} {
		st, body = h.do("POST", "/v1/decisiones/"+decide("accionreal-000"+string(rune('2'+accion)))+"/ejecucion", tok, map[string]any{"ejecutada": true, "accion_real": accion})
		if st != 200 {
			t.Errorf("accion_real %d: %d %v, want 200", accion, st, body)
		}
	}
	if st, body = h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
		t.Errorf("the refused confirmation left the decision confirmed: %d %v", st, body)
	}
}

// TestValidationNeverEchoesSecrets: a 422 replaces the input of secret
// members by "***" and cuts echoed strings to 256 characters.
func TestValidationNeverEchoesSecrets(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	long := strings.Repeat("S3cr3t", 100) // 600 characters
	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		form                      string
	}{
		{name: "token JSON: client_secret too long", method: "POST", path: "/v1/token",
			body: map[string]any{"client_id": "abc", "client_secret": long, "grant_type": "client_credentials"}},
		{name: "token JSON: client_secret of the wrong type", method: "POST", path: "/v1/token",
			body: map[string]any{"client_id": "abc", "client_secret": []string{long}, "grant_type": "client_credentials"}},
		{name: "token form: client_secret too long", method: "POST", path: "/v1/token",
			form: "grant_type=client_credentials&client_id=abc&client_secret=" + long},
		{name: "token JSON: whole body echoed", method: "POST", path: "/v1/token",
			body: []any{map[string]any{"client_secret": long}}},
		{name: "webhook: unknown member secreto", method: "PUT", path: "/v1/webhooks", token: tok,
			body: map[string]any{"url": "https://example.com/h", "eventos": []string{"lote.completado"}, "secreto": long}},
		{name: "long free text", method: "PUT", path: "/v1/campanas/c1", token: tok,
			body: map[string]any{"canal": "push", "descripcion": long}},
		{name: "long unknown member name", method: "PUT", path: "/v1/campanas/c1", token: tok,
			body: map[string]any{"canal": "push", "descripcion": "d", long: 1}},
		{name: "long duplicate member name", method: "PUT", path: "/v1/campanas/c1", token: tok,
			body: `{"canal":"push","descripcion":"d","` + long + `":1,"` + long + `":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			body := tc.body
			if tc.form != "" {
				body, hdr = tc.form, []string{"Content-Type", "application/x-www-form-urlencoded"}
			}
			resp := h.raw(tc.method, tc.path, tc.token, body, hdr...)
			defer resp.Body.Close()
			var got struct {
				Detail []map[string]any `json:"detail"`
			}
			data, _ := io.ReadAll(resp.Body)
			raw := string(data)
			json.Unmarshal(data, &got)
			if resp.StatusCode != 422 || len(got.Detail) == 0 {
				t.Fatalf("got %d %s, want 422", resp.StatusCode, raw)
			}
			if strings.Contains(raw, strings.Repeat("S3cr3t", 43)) { // 258 characters
				t.Errorf("422 echoes more than 256 characters of the input: %s", raw)
			}
			if strings.Contains(tc.name, "secret") || strings.Contains(tc.name, "secreto") || strings.Contains(tc.name, "whole body") {
				if strings.Contains(raw, "S3cr3t") {
					t.Errorf("422 echoes the secret: %s", raw)
				}
			}
		})
	}
}

// TestValidationNeverEchoesSecretValues: a 422 never echoes a client
// secret, an access token or a webhook secret, whatever member carries it:
// an integrator who misnames client_secret ("clientSecret", "secret") or
// sends a token in a body gets "***" where the value would be echoed, in
// input, in a nested input and in loc (a secret sent as a member name).
func TestValidationNeverEchoesSecretValues(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	const clientSecret = "cs_W2CJbSjcsC1vXNWc2a5gtsteI0QRuGSxUZ7lzZVj0sU"
	const webhookSecret = "whsec_Jwo9cxyZX3ApBrs3m38VAEe63kAwsp11L6MEzhTMPds="
	for _, tc := range []struct {
		name, path, token, secret string
		body                      any
	}{
		{name: "token: client secret under clientSecret", path: "/v1/token", secret: clientSecret,
			body: map[string]any{"client_id": "ci_abc", "clientSecret": clientSecret, "grant_type": "client_credentials"}},
		{name: "token: client secret under secret, nested", path: "/v1/token", secret: clientSecret,
			body: map[string]any{"client_id": "ci_abc", "client_secret": "x", "grant_type": "client_credentials", "auth": map[string]any{"secret": clientSecret}}},
		{name: "token: client secret as a member name", path: "/v1/token", secret: clientSecret,
			body: map[string]any{"client_id": "ci_abc", "client_secret": "x", "grant_type": "client_credentials", clientSecret: 1}},
		{name: "token: client secret as grant_type", path: "/v1/token", secret: clientSecret,
			body: map[string]any{"client_id": "ci_abc", "client_secret": "x", "grant_type": clientSecret}},
		{name: "decision: access token under accessToken", path: "/v1/decisiones", token: tok, secret: tok,
			body: map[string]any{"cliente_ref": "cliente-0001", "contexto": map[string]any{"canal": "push"}, "accessToken": "Bearer " + tok}},
		{name: "webhook: signing secret under secret", path: "/v1/webhooks", token: tok, secret: webhookSecret,
			body: map[string]any{"url": "https://example.com/h", "eventos": []string{"lote.completado"}, "secret": webhookSecret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.path == "/v1/webhooks" {
				method = "PUT"
			}
			resp := h.raw(method, tc.path, tc.token, tc.body)
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 422 {
				t.Fatalf("got %d %s, want 422", resp.StatusCode, data)
			}
			if secret := tc.secret[len(tc.secret)-20:]; bytes.Contains(data, []byte(secret)) {
				t.Errorf("422 echoes the secret: %s", data)
			}
			if !bytes.Contains(data, []byte(`"***"`)) {
				t.Errorf("422 has no \"***\" where the secret was: %s", data)
			}
		})
	}
}

// TestValidationMsgEchoIsRedacted: a 422's msg that quotes what was sent
// (an unknown segment operator or feature, a webhook URL's port or host)
// echoes it as loc and input do: a secret-shaped part is "***" and no run
// of more than 256 characters of the input comes back. msg quoted the
// unknown operator or feature whole, a client secret and 10,000
// characters alike.
func TestValidationMsgEchoIsRedacted(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	if st, body := h.do("PUT", "/v1/campanas/c1", tok, map[string]any{"canal": "push", "descripcion": "d"}); st != 200 {
		t.Fatalf("campaign: %d %v", st, body)
	}
	const secret = "cs_W2CJbSjcsC1vXNWc2a5gtsteI0QRuGSxUZ7lzZVj0sU"
	long := strings.Repeat("Z", 10_000)
	segment := func(seg any) map[string]any { return map[string]any{"campana_id": "c1", "segmento": seg} }
	webhook := func(u string) map[string]any { return map[string]any{"url": u, "eventos": []string{"lote.completado"}} }
	for _, tc := range []struct {
		name, method, path string
		body               any
		sent               string // what must not come back whole
	}{
		{"segment: secret as the operator", "POST", "/v1/lotes-decision", segment(map[string]any{secret: map[string]any{"recencia_dias": 1}}), secret},
		{"segment: secret as the feature", "POST", "/v1/lotes-decision", segment(map[string]any{"<": map[string]any{secret: 1}}), secret},
		{"segment: long operator", "POST", "/v1/lotes-decision", segment(map[string]any{long: map[string]any{"recencia_dias": 1}}), long[:257]},
		{"segment: long feature", "POST", "/v1/lotes-decision", segment(map[string]any{"no": map[string]any{"<": map[string]any{long: 1}}}), long[:257]},
		{"webhook: secret as the port", "PUT", "/v1/webhooks", webhook("https://example.com:" + secret + "/h"), secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.raw(tc.method, tc.path, tok, tc.body)
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 422 {
				t.Fatalf("got %d %s, want 422", resp.StatusCode, data)
			}
			if strings.HasPrefix(tc.sent, "cs_") {
				if bytes.Contains(data, []byte(tc.sent[len(tc.sent)-20:])) {
					t.Errorf("422 echoes the secret: %s", data)
				}
			} else if bytes.Contains(data, []byte(tc.sent)) {
				t.Errorf("422 echoes more than 256 characters of the input (%d bytes)", len(data))
			}
		})
	}
}

// TestRejectionNeverEchoesSecretNames: a per-event rejection names the
// member at fault in campo as a 422's loc does: a member name that looks
// like a secret (a client secret, a token or a webhook secret sent as a
// key) is "***" and a long one is cut to 256 characters. campo echoed the
// name as sent, the secret and 3,000 characters alike.
func TestRejectionNeverEchoesSecretNames(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	const clientSecret = "cs_W2CJbSjcsC1vXNWc2a5gtsteI0QRuGSxUZ7lzZVj0sU"
	long := strings.Repeat("k", 3000)
	ts := testStart.Add(-time.Hour)
	with := func(id string, mod func(m map[string]any)) map[string]any {
		m := purchaseAt(id, "cliente-0001", ts)
		mod(m)
		return m
	}
	st, body := postEvents(h, tok,
		with("e1", func(m map[string]any) { m[clientSecret] = 1 }),
		with("e2", func(m map[string]any) { m["extra"].(map[string]any)[tok] = "x" }),
		with("e3", func(m map[string]any) { m[long] = 1 }),
		with("e4", func(m map[string]any) { m["tienda_nueva"] = 1 }),
	)
	if st != 200 {
		t.Fatalf("events: %d %v", st, body)
	}
	want := []rejection{
		{0, "campo_desconocido", "***"},
		{1, "campo_desconocido", "extra.***"},
		{2, "campo_desconocido", strings.Repeat("k", 256)},
		{3, "campo_desconocido", "tienda_nueva"},
	}
	if diff := cmp.Diff(want, rejections(body)); diff != "" {
		t.Errorf("rechazados (-want +got):\n%s", diff)
	}
}

// TestRejectionEventIDIsBounded: a refused event's event_id, echoed in
// rechazados, is cut to 256 characters as every echoed string is: an id of
// 100,000 characters came back whole.
func TestRejectionEventIDIsBounded(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	long := strings.Repeat("e", 100_000)
	st, body := postEvents(h, tok, purchaseAt(long, "cliente-0001", testStart.Add(-time.Hour)))
	if st != 200 {
		t.Fatalf("events: %d %v", st, body)
	}
	rs, _ := body["rechazados"].([]any)
	if len(rs) != 1 {
		t.Fatalf("rechazados: %v", rs)
	}
	r := rs[0].(map[string]any)
	if got, _ := r["event_id"].(string); got != strings.Repeat("e", 256) {
		t.Errorf("event_id echoed with %d characters, want 256", len(got))
	}
	if r["campo"] != "event_id" {
		t.Errorf("campo %v, want event_id", r["campo"])
	}
}

// TestLooksSecret: a secret's marker counts at the start of a string or
// after a non-alphanumeric character, not inside a word, so a value such
// as a cliente_ref "docs_…" is echoed as sent.
func TestLooksSecret(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"cs_W2CJbSjcsC1vXNWc2a5gtsteI0QRuGSxUZ7lzZVj0sU", true},
		{"Bearer ct2.W2CJbSjcsC1vXNWc2a5gts", true},
		{"x:whsec_Jwo9cxyZX3ApBrs3m38VAE", true},
		{"docs_W2CJbSjcsC1vXNWc2a5gtsteI0", false},
		{"metrics_W2CJbSjcsC1vXNWc2a5gtsteI0", false},
		{"cs_short", false},
		{"docs_x cs_W2CJbSjcsC1vXNWc2a5gts", true},
	} {
		if got := looksSecret(tc.s); got != tc.want {
			t.Errorf("looksSecret(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestEchoMsg: a msg keeps its own words, loses every secret-shaped part
// and is cut to 256 characters.
func TestEchoMsg(t *testing.T) {
	long := strings.Repeat("Z", 300)
	for _, tc := range []struct{ msg, want string }{
		{"Input should be a valid number", "Input should be a valid number"},
		{`operador desconocido "cs_W2CJbSjcsC1vXNWc2a5gtsteI0"; se espera uno de: <`, `operador desconocido "***"; se espera uno de: <`},
		{"a ct2.W2CJbSjcsC1vXNWc2a5gts.x y whsec_Jwo9cxyZX3ApBrs3m38VAE=", "a ***.x y ***"},
		{"docs_W2CJbSjcsC1vXNWc2a5gtsteI0 cs_short", "docs_W2CJbSjcsC1vXNWc2a5gtsteI0 cs_short"},
		{"característica desconocida: " + long, ("característica desconocida: " + long)[:257]},
	} {
		if got := echoMsg(tc.msg); got != tc.want {
			t.Errorf("echoMsg(%.60q) = %.80q, want %.80q", tc.msg, got, tc.want)
		}
	}
}

// TestControlCharacters: free text refuses control characters other than
// tab and newline, with a 422 or, inside POST /v1/eventos, a per-event
// esquema_invalido.
func TestControlCharacters(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"línea uno\nlínea dos\tcon tabulador", true},
		{"nul \x00 dentro", false},
		{"retorno \r de carro", false},
		{"escape \x1b[31m", false},
		{"borrar \x7f", false},
		{"c1 \u0085 siguiente línea", false},
		{"ñandú €", true},
	} {
		st, body := h.do("PUT", "/v1/campanas/c1", tok, map[string]any{"canal": "push", "descripcion": tc.text})
		if (st == 200) != tc.ok || !tc.ok && st != 422 {
			t.Errorf("descripcion %q: %d %v, want ok=%v (else 422)", tc.text, st, body, tc.ok)
		}
		if !tc.ok {
			d := body["detail"].([]any)[0].(map[string]any)
			if diff := cmp.Diff([]any{"body", "descripcion"}, d["loc"]); diff != "" || d["type"] != "value_error" {
				t.Errorf("descripcion %q: violation %v, want value_error at body.descripcion", tc.text, d)
			}
		}
	}
	ev := map[string]any{"event_id": "ev-ctl-1", "cliente_ref": "cliente-ctl-01", "ts": testStart.Format("2006-01-02T15:04:05Z"),
		"tipo": "ALTA", "clave": "tienda\x00", "valor": 0}
	st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{ev}})
	if st != 200 {
		t.Fatalf("eventos: %d %v", st, body)
	}
	rej, _ := body["rechazados"].([]any)
	if len(rej) != 1 || rej[0].(map[string]any)["codigo"] != "esquema_invalido" || rej[0].(map[string]any)["campo"] != "clave" {
		t.Errorf("event with \\u0000 in clave: %v, want one rechazado esquema_invalido at clave", body)
	}
}

// TestBatchLinesExplained: result lines carry detalle when the job's
// credential has explicar:leer, as online decisions do, and not otherwise.
func TestBatchLinesExplained(t *testing.T) {
	h, tok := batchHarness(t)
	explain := h.token("acme", "decisiones:pedir", "explicar:leer")
	for _, tc := range []struct {
		name, tok string
		want      bool
	}{{"explicar:leer", explain, true}, {"without explicar:leer", tok, false}} {
		id := submit(h, tc.tok, map[string]any{"campana_id": "camp", "clientes": refs("explica-"+tc.name[:7], 5)})
		runJobs(h)
		for i, l := range result(h, tc.tok, id) {
			det, ok := l["detalle"].(map[string]any)
			if ok != tc.want {
				t.Fatalf("%s: line %d has detalle = %v, want %v: %v", tc.name, i, ok, tc.want, l)
			}
			if ok && len(det["acciones"].([]any)) == 0 {
				t.Errorf("%s: line %d has an empty detalle", tc.name, i)
			}
		}
		advanceTenant(h, "acme", 2*time.Hour) // the next job: one per hour
	}
}

// TestBatchResultDetalleFollowsScope: detalle is present only for
// credentials with explicar:leer (spec, Decision), so /resultado of a job
// made with the scope gives a caller without it the same lines without
// detalle, whatever Accept-Encoding asks; the caller with the scope keeps
// it. The signed URL follows the scope of the credential whose status
// query minted it: a URL handed to a caller without explicar:leer gave it
// detalle that /resultado refuses it. 300 lines make the file longer than
// the part read before the status line.
func TestBatchResultDetalleFollowsScope(t *testing.T) {
	h, plain := batchHarness(t)
	explain := h.token("acme", "decisiones:pedir", "explicar:leer")
	id := submit(h, explain, map[string]any{"campana_id": "camp", "clientes": refs("scope", 300)})
	runJobs(h)
	full := result(h, explain, id)
	var stripped []map[string]any
	for i, l := range full {
		if l["detalle"] == nil {
			t.Fatalf("line %d of the explained job has no detalle: %v", i, l)
		}
		s := maps.Clone(l)
		delete(s, "detalle")
		stripped = append(stripped, s)
	}
	sp, sq := pathOf(t, status(h, plain, id)["resultado_url"].(string))
	ep, eq := pathOf(t, status(h, explain, id)["resultado_url"].(string))
	tests := []struct {
		name, path, tok, ae string
		want                []map[string]any
	}{
		{"without explicar:leer", "/v1/lotes-decision/" + id + "/resultado", plain, "", stripped},
		{"without explicar:leer, zstd", "/v1/lotes-decision/" + id + "/resultado", plain, "zstd", stripped},
		{"with explicar:leer, zstd", "/v1/lotes-decision/" + id + "/resultado", explain, "zstd", full},
		{"signed URL minted without explicar:leer", sp + "?" + sq, "", "", stripped},
		{"signed URL minted without explicar:leer, zstd", sp + "?" + sq, "", "zstd", stripped},
		{"signed URL minted with explicar:leer", ep + "?" + eq, "", "", full},
		{"signed URL minted with explicar:leer, zstd", ep + "?" + eq, "", "zstd", full},
	}
	for _, tt := range tests {
		st, hdr, body := get(h, tt.path, tt.tok, "Accept-Encoding", tt.ae)
		if st != 200 || hdr.Get("Content-Type") != batch.ResultContentType {
			t.Fatalf("%s: %d %v", tt.name, st, hdr)
		}
		if hdr.Get("Content-Encoding") == "zstd" {
			dec, _ := zstd.NewReader(nil)
			var err error
			body, err = dec.DecodeAll(body, nil)
			dec.Close()
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
		}
		if diff := cmp.Diff(tt.want, lines(t, body)); diff != "" {
			t.Errorf("%s: lines (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestOneAuthorizationHeader: a request with two Authorization headers is
// 401, whichever of them is good: which one a proxy in front checked cannot
// be known. It was served with the first one's credential.
func TestOneAuthorizationHeader(t *testing.T) {
	h, tok := newCatalogHarness(t, 1, noControl)
	for _, tc := range []struct {
		name   string
		auth   []string
		status int
	}{
		{"one good", []string{"Bearer " + tok}, 200},
		{"good twice", []string{"Bearer " + tok, "Bearer " + tok}, 401},
		{"good then junk", []string{"Bearer " + tok, "Bearer junk"}, 401},
		{"junk then good", []string{"Bearer junk", "Bearer " + tok}, 401},
		{"good then Basic", []string{"Bearer " + tok, "Basic YTpi"}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := "GET /v1/catalogo-acciones HTTP/1.1\r\nHost: x\r\n"
			for _, a := range tc.auth {
				req += "Authorization: " + a + "\r\n"
			}
			resp, body := h.rawExchange(req+"\r\n", false)
			got := []any{resp.StatusCode, body["codigo"], resp.Header.Get("WWW-Authenticate")}
			want := []any{200, nil, ""}
			if tc.status == 401 {
				want = []any{401, "no_autenticado", "Bearer"}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status, codigo, WWW-Authenticate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestContentEncodingRefused: a body with a Content-Encoding other than
// identity is 415 esquema_invalido naming the header, on every route that
// reads a body, the token endpoint's form included. A gzip body was a 422
// json_invalid and a plain one labelled br was served.
func TestContentEncodingRefused(t *testing.T) {
	h, tok := newCatalogHarness(t, 1, noControl)
	id, secret := h.credential("acme", allScopes...)
	plain := `{"cliente_ref":"cliente-enc-01","contexto":{"canal":"push"}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, plain)
	zw.Close()
	form := "grant_type=client_credentials&client_id=" + id + "&client_secret=" + secret
	for _, tc := range []struct {
		name, path, token, ct, ce string
		body                      any
		status                    int
	}{
		{"gzip body", "/v1/decisiones", tok, "application/json", "gzip", gz.Bytes(), 415},
		{"plain body labelled br", "/v1/decisiones", tok, "application/json", "br", plain, 415},
		{"identity then gzip", "/v1/decisiones", tok, "application/json", "identity, gzip", plain, 415},
		{"identity", "/v1/decisiones", tok, "application/json", "Identity", plain, 200},
		{"token JSON, gzip", "/v1/token", "", "application/json", "gzip", `{"client_id":"` + id + `","client_secret":"` + secret + `","grant_type":"client_credentials"}`, 415},
		{"token form, deflate", "/v1/token", "", "application/x-www-form-urlencoded", "deflate", form, 415},
		{"token form, none", "/v1/token", "", "application/x-www-form-urlencoded", "", form, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := []string{"Content-Type", tc.ct}
			if tc.ce != "" {
				hdr = append(hdr, "Content-Encoding", tc.ce)
			}
			st, body := h.do("POST", tc.path, tc.token, tc.body, hdr...)
			got := []any{st, body["codigo"], body["campo"]}
			want := []any{200, nil, nil}
			if tc.status == 415 {
				want = []any{415, "esquema_invalido", "Content-Encoding"}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status, codigo, campo (-want +got):\n%s\n%v", diff, body)
			}
		})
	}
}

// TestIdempotencyKeyCanonicalBody: with an Idempotency-Key, a repeat whose
// body has the same content in other bytes (spacing, key order, number
// spelling, escapes) replays the first answer, as a resent event is a
// duplicate; only other content is 409 idempotencia_conflicto. The bodies
// were compared byte for byte.
func TestIdempotencyKeyCanonicalBody(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody("cliente-canon-00", nil))
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	confirm := "/v1/decisiones/" + d["decision_id"].(string) + "/ejecucion"
	for _, tc := range []struct {
		name, path    string
		first, repeat string
		status        int
	}{
		{"decision, respaced and reordered", "/v1/decisiones",
			`{"cliente_ref":"cliente-canon-01","contexto":{"canal":"push","acciones_permitidas":[1,2]}}`,
			"{ \"contexto\" : { \"acciones_permitidas\" : [ 1.0, 2e0 ], \"canal\" : \"pu\\u0073h\" },\n \"cliente_ref\" : \"cliente-canon-01\" }", 200},
		{"decision, other content", "/v1/decisiones",
			`{"cliente_ref":"cliente-canon-02","contexto":{"canal":"push"}}`,
			`{"cliente_ref":"cliente-canon-02","contexto":{"canal":"sms"}}`, 409},
		{"fallback, reordered", "/v1/decisiones/respaldo",
			`{"accion":1,"canal":"push","cliente_ref":"cliente-canon-03"}`,
			`{"cliente_ref":"cliente-canon-03","canal":"push","accion":1.00}`, 200},
		{"fallback, other content", "/v1/decisiones/respaldo",
			`{"accion":1,"canal":"push","cliente_ref":"cliente-canon-04"}`,
			`{"accion":2,"canal":"push","cliente_ref":"cliente-canon-04"}`, 409},
		{"confirmation, reordered", confirm,
			`{"ejecutada":true,"accion_real":1}`,
			`{"accion_real":1,"ejecutada":true}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := []string{"Idempotency-Key", "k-" + tc.name}
			st1, a1 := h.do("POST", tc.path, tok, tc.first, key...)
			st2, a2 := h.do("POST", tc.path, tok, tc.repeat, key...)
			if st1 != 200 {
				t.Fatalf("first: %d %v", st1, a1)
			}
			if st2 != tc.status {
				t.Fatalf("repeat: %d %v, want %d", st2, a2, tc.status)
			}
			if tc.status == 200 {
				if diff := cmp.Diff(a1, a2); diff != "" {
					t.Errorf("the repeat is not the first answer (-first +repeat):\n%s", diff)
				}
			} else if a2["codigo"] != "idempotencia_conflicto" {
				t.Errorf("repeat: %v, want idempotencia_conflicto", a2)
			}
		})
	}
}

// TestValidationListIsBounded: a 422 lists at most schema.MaxViolations
// violations, then one value_error at the root that counts them all, so a
// body of many bad items cannot draw an answer many times its size (a 2 MB
// batch of one-character cliente_ref drew 72 MB).
func TestValidationListIsBounded(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	refs := func(n int) []string { return slices.Repeat([]string{"x"}, n) }
	negatives := func(n int) []int { return slices.Repeat([]int{-1}, n) }
	for _, tc := range []struct {
		name, method, path string
		body               any
		listed, found      int // found 0: no trailing count
		first              []any
	}{
		{"batch of 20,000 short cliente_ref", "POST", "/v1/lotes-decision",
			map[string]any{"campana_id": "c1", "clientes": refs(20_000)}, 100, 20_000, []any{"body", "clientes", float64(0)}},
		{"batch of 101 short cliente_ref", "POST", "/v1/lotes-decision",
			map[string]any{"campana_id": "c1", "clientes": refs(101)}, 100, 101, []any{"body", "clientes", float64(0)}},
		{"batch of exactly 100 short cliente_ref", "POST", "/v1/lotes-decision",
			map[string]any{"campana_id": "c1", "clientes": refs(100)}, 100, 0, []any{"body", "clientes", float64(0)}},
		{"decision with 1,000 negative acciones_permitidas", "POST", "/v1/decisiones",
			decideBody("bounded-0001", map[string]any{"canal": "push", "acciones_permitidas": negatives(1000)}), 100, 1000,
			[]any{"body", "contexto", "acciones_permitidas", float64(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := h.do(tc.method, tc.path, tok, tc.body)
			if st != 422 {
				t.Fatalf("status %d %v, want 422", st, body)
			}
			detail := body["detail"].([]any)
			want := tc.listed
			if tc.found > 0 {
				want++
			}
			if len(detail) != want {
				t.Fatalf("%d items, want %d", len(detail), want)
			}
			if diff := cmp.Diff(tc.first, detail[0].(map[string]any)["loc"]); diff != "" {
				t.Errorf("first item's loc (-want +got):\n%s", diff)
			}
			if tc.found == 0 {
				return
			}
			got := detail[len(detail)-1].(map[string]any)
			wantLast := map[string]any{"loc": []any{"body"}, "type": "value_error",
				"msg": "Value error, se listan los primeros 100 de " + strconv.Itoa(tc.found) + " errores",
				"ctx": map[string]any{"max_errors": float64(100), "errors": float64(tc.found)}}
			if diff := cmp.Diff(wantLast, got); diff != "" {
				t.Errorf("last item (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidationEchoIsBounded: a 422 echoes at most schema.MaxEchoValues
// values of an array or object input (the first, in document order), so a
// list one item too long or an unknown member holding a large array is not
// sent back whole (a 65 MB batch of 500,001 cliente_ref was).
func TestValidationEchoIsBounded(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	ints := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = float64(i)
		}
		return out
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		loc                []any
		input              any
	}{
		{"acciones_permitidas one too long", "POST", "/v1/decisiones",
			decideBody("bounded-0001", map[string]any{"canal": "push", "acciones_permitidas": ints(1001)}),
			[]any{"body", "contexto", "acciones_permitidas"}, ints(31)},
		{"unknown member holding a long array", "PUT", "/v1/campanas/c1",
			map[string]any{"canal": "push", "descripcion": "d", "extra": ints(5000)},
			[]any{"body", "extra"}, ints(31)},
		{"unknown member holding nested arrays", "PUT", "/v1/campanas/c1",
			map[string]any{"canal": "push", "descripcion": "d", "extra": []any{ints(40), ints(40)}},
			[]any{"body", "extra"}, []any{ints(30)}},
		{"short array echoed whole", "PUT", "/v1/campanas/c1",
			map[string]any{"canal": "push", "descripcion": "d", "extra": ints(31)},
			[]any{"body", "extra"}, ints(31)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := h.do(tc.method, tc.path, tok, tc.body)
			if st != 422 {
				t.Fatalf("status %d %v, want 422", st, body)
			}
			got := body["detail"].([]any)[0].(map[string]any)
			if diff := cmp.Diff(tc.loc, got["loc"]); diff != "" {
				t.Errorf("loc (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.input, got["input"]); diff != "" {
				t.Errorf("input (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBatchCreationOneBodyAtATime: while one batch creation of a tenant is
// being read, another of that tenant is 429 with Retry-After before its
// body is read (bodies of up to 96 MB multiplied the memory); other tenants
// are not held, and the turn comes back when the first is answered.
func TestBatchCreationOneBodyAtATime(t *testing.T) {
	h := newHarness(t)
	noLimits := func(s *store.Settings) { s.ControlShare, s.RateLimits = 0, false }
	h.tenant("acme", true, noLimits)
	h.tenant("beta", true, noLimits)
	tok, tokBeta := h.token("acme", allScopes...), h.token("beta", allScopes...)
	body := map[string]any{"campana_id": "c1", "clientes": []string{"cliente-0001"}}

	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, err := http.NewRequest("POST", h.http.URL+"/v1/lotes-decision", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	first := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"campana_id":"c1","clientes":[`)); err != nil {
		t.Fatal(err)
	}
	// The first request holds the turn once the server reads its body; the
	// second is sent only then (sent sooner, it could take the turn itself
	// and the first would be the one refused).
	held := func() bool {
		r := &h.srv.batchReads
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.held["acme"]
	}
	for deadline := time.Now().Add(10 * time.Second); !held(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first creation never took its turn")
		}
	}
	resp := h.raw("POST", "/v1/lotes-decision", tok, body)
	got := apitest.Object(t, resp)
	st := resp.StatusCode
	if ra := resp.Header.Get("Retry-After"); st == 429 && ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if msg, _ := got["mensaje"].(string); st != 429 || !strings.HasPrefix(msg, "otra creación de lote del inquilino") {
		t.Fatalf("second creation while the first is read: %d %v, want 429 for the batch being read", st, got)
	}
	if st, got := h.do("POST", "/v1/lotes-decision", tokBeta, body); st == 429 {
		t.Errorf("another tenant meanwhile: %d %v, want no 429", st, got)
	}
	if _, err := pw.Write([]byte(`"cliente-0001"]}`)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if st := <-first; st != 422 { // campaign c1 is not defined
		t.Errorf("first creation: %d, want 422", st)
	}
	if st, got := h.do("POST", "/v1/lotes-decision", tok, body); st != 422 {
		t.Errorf("after the first was answered: %d %v, want 422 (campaign not defined)", st, got)
	}
}

// TestTokenLivesItsTTLWhenTheClockGoesBack: a token is refused once its
// 15 minutes are up, and also when the clock has gone back since it was
// issued by more than a minute's slack: a day back, it lived a day and 15
// minutes. A token issued after the jump lives its 15 minutes.
func TestTokenLivesItsTTLWhenTheClockGoesBack(t *testing.T) {
	tests := []struct {
		name string
		move time.Duration // the clock's move after the token was issued
		want int
	}{
		{"at once", 0, 200},
		{"14 minutes on", 14 * time.Minute, 200},
		{"15 minutes on", 15 * time.Minute, 401},
		{"the clock 30 s back", -30 * time.Second, 200},
		{"the clock 2 minutes back", -2 * time.Minute, 401},
		{"the clock a day back", -24 * time.Hour, 401},
		{"the clock a day back, then 15 minutes on", -24*time.Hour + 15*time.Minute, 401},
	}
	h := newHarness(t)
	h.tenant("acme", false, noControl)
	for _, tc := range tests {
		h.clock.Set(testStart)
		tok := h.token("acme", "catalogo:escribir")
		h.clock.Set(testStart.Add(tc.move))
		if st, got := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, st, got, tc.want)
		}
	}
	h.clock.Set(testStart.Add(-24 * time.Hour))
	tok := h.token("acme", "catalogo:escribir")
	h.clock.Advance(14 * time.Minute)
	if st, got := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != 200 {
		t.Errorf("a token issued after the jump, 14 minutes on: %d %v, want 200", st, got)
	}
}

// TestTokenOneCharacterAltered: an access token with any one character of
// either base64url part's end replaced is refused (401), including the
// spellings that differ only in padding bits, which decode to the same
// bytes unless the decoder is strict.
func TestTokenOneCharacterAltered(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	dot := strings.LastIndexByte(tok, '.')
	var accepted []string
	for _, pos := range []int{dot - 1, len(tok) - 1} {
		for _, r := range alphabet {
			if byte(r) == tok[pos] {
				continue
			}
			altered := tok[:pos] + string(r) + tok[pos+1:]
			if st, _ := h.do("GET", "/v1/catalogo-acciones", altered, nil); st != 401 {
				accepted = append(accepted, altered[pos-3:pos+1])
			}
		}
	}
	if diff := cmp.Diff([]string(nil), accepted); diff != "" {
		t.Errorf("altered tokens accepted (their last 4 characters, -want +got):\n%s", diff)
	}
	if st, body := h.do("GET", "/v1/catalogo-acciones", tok, nil); st != 200 {
		t.Errorf("the token itself: %d %v", st, body)
	}
}

// TestTokenDescriptionEchoIsRedacted: the token endpoint's
// error_description (the 422 of a form request) echoes a violation's
// parameter name and msg as every 422 echoes them: a secret-shaped part is
// "***". Today's token messages are fixed text; this guards the day one
// quotes input. Fails if violationsDescription copies msg or name as sent.
func TestTokenDescriptionEchoIsRedacted(t *testing.T) {
	secret := "cs_" + strings.Repeat("A1b2", 12)
	got := violationsDescription([]schema.Violation{
		{Loc: []any{"body", secret}, Msg: "Extra inputs are not permitted"},
		{Loc: []any{"body", "scope"}, Msg: "alcance desconocido " + secret},
	})
	if strings.Contains(got, "A1b2A1b2") {
		t.Errorf("error_description echoes a secret: %s", got)
	}
	if want := "***: Extra inputs"; !strings.Contains(got, want) {
		t.Errorf("error_description %q lacks %q", got, want)
	}
}
