package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/coupond/coupond/internal/syncbuf"
)

// TestTokenOAuthErrors: stock OAuth clients, which send the OAuth 2.0
// form, read the RFC 6749 "error" of the token endpoint.
// golang.org/x/oauth2's clientcredentials is the judge: a wrong secret is
// invalid_client (in both of its auth styles), a scope the credential lacks
// is invalid_scope. The contract's fields stay. A JSON request (the spec's
// form) gets the spec's error bodies exactly (api-v1 "Error body").
func TestTokenOAuthErrors(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	h.token("acme", "eventos:publicar") // creates the credential
	id := mustCredentials(t, h)[0]
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, http.DefaultClient)
	for _, style := range []oauth2.AuthStyle{oauth2.AuthStyleInHeader, oauth2.AuthStyleInParams, oauth2.AuthStyleAutoDetect} {
		cases := []struct {
			name, secret string
			scopes       []string
			want         string
		}{
			{"wrong secret", "nope", nil, "invalid_client"},
			{"unknown scope held", "secret-" + id, []string{"webhooks:escribir"}, "invalid_scope"},
		}
		for _, tc := range cases {
			cfg := clientcredentials.Config{ClientID: id, ClientSecret: tc.secret, TokenURL: h.http.URL + "/v1/token", Scopes: tc.scopes, AuthStyle: style}
			_, err := cfg.Token(ctx)
			var re *oauth2.RetrieveError
			if !errors.As(err, &re) || re.ErrorCode != tc.want || re.ErrorDescription == "" {
				t.Errorf("style %d, %s: %v (%#v), want %s", style, tc.name, err, re, tc.want)
			}
		}
		cfg := clientcredentials.Config{ClientID: id, ClientSecret: "secret-" + id, TokenURL: h.http.URL + "/v1/token", AuthStyle: style}
		if tok, err := cfg.Token(ctx); err != nil || tok.AccessToken == "" {
			t.Errorf("style %d, good secret: %v", style, err)
		}
	}

	// The raw bodies. The OAuth 2.0 form (what stock clients send) gets the
	// contract's fields and the OAuth ones; the spec's JSON request gets the
	// spec's bodies exactly: ErrorV1 and HTTPValidationError reject unknown
	// properties, so neither carries error or error_description.
	errorV1 := []string{"campo", "codigo", "detalle", "mensaje", "trace_id"}
	withOAuth := []string{"campo", "codigo", "detalle", "error", "error_description", "mensaje", "trace_id"}
	cases := []struct {
		name, ct, body string
		status         int
		codigo, oauth  string
		keys           []string
	}{
		{"bad secret", "application/json", `{"client_id":"` + id + `","client_secret":"x","grant_type":"client_credentials"}`, 401, "no_autenticado", "", errorV1},
		{"bad secret form", "application/x-www-form-urlencoded", "grant_type=client_credentials&client_id=" + id + "&client_secret=x", 401, "no_autenticado", "invalid_client", withOAuth},
		{"scope lacking", "application/json", `{"client_id":"` + id + `","client_secret":"secret-` + id + `","grant_type":"client_credentials","scope":"webhooks:escribir"}`, 403, "sin_permiso", "", errorV1},
		{"bad grant", "application/json", `{"client_id":"` + id + `","client_secret":"x","grant_type":"password"}`, 422, "", "", []string{"detail"}},
		{"bad grant form", "application/x-www-form-urlencoded", "grant_type=password&client_id=a&client_secret=b", 422, "", "unsupported_grant_type", []string{"detail", "error", "error_description"}},
		{"repeated parameter form", "application/x-www-form-urlencoded", "grant_type=client_credentials&grant_type=password&client_id=" + id + "&client_secret=secret-" + id, 422, "", "invalid_request", []string{"detail", "error", "error_description"}},
		{"missing field", "application/json", `{"grant_type":"client_credentials"}`, 422, "", "", []string{"detail"}},
		{"not json", "text/plain", `x`, 415, "esquema_invalido", "", errorV1},
	}
	for _, tc := range cases {
		resp := h.raw("POST", "/v1/token", "", tc.body, "Content-Type", tc.ct)
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		var keys []string
		for k := range body {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		got := []any{resp.StatusCode, keys, body["error"]}
		want := []any{tc.status, tc.keys, nil}
		if tc.oauth != "" {
			want[2] = tc.oauth
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: status, keys, error (-want +got):\n%s%v", tc.name, diff, body)
		}
		if tc.codigo != "" && body["codigo"] != tc.codigo {
			t.Errorf("%s: %v lacks codigo %s", tc.name, body, tc.codigo)
		}
		if tc.status == 415 && body["mensaje"] != tokenNotJSON { // it named JSON alone
			t.Errorf("%s: mensaje %q, want %q", tc.name, body["mensaje"], tokenNotJSON)
		}
	}
	// Other routes keep the contract's body alone.
	if resp := h.raw("GET", "/v1/catalogo-acciones", "", nil); true {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(data), `"error"`) {
			t.Errorf("a 401 outside /v1/token carries OAuth fields: %s", data)
		}
	}
}

// TestTokenFramingErrorShape: the token endpoint's 400 for a request with
// both Content-Length and Transfer-Encoding, which the pipeline answers
// before the handler runs, is shaped as the handler's errors are: ErrorV1
// exactly for a JSON request (it rejects unknown properties), the OAuth 2.0
// members too for the form.
func TestTokenFramingErrorShape(t *testing.T) {
	h := newHarness(t)
	errorV1 := []string{"campo", "codigo", "detalle", "mensaje", "trace_id"}
	withOAuth := []string{"campo", "codigo", "detalle", "error", "error_description", "mensaje", "trace_id"}
	for _, tc := range []struct {
		ct   string
		keys []string
	}{
		{"application/json", errorV1},
		{"", errorV1},
		{"application/x-www-form-urlencoded", withOAuth},
	} {
		ct := ""
		if tc.ct != "" {
			ct = "Content-Type: " + tc.ct + "\r\n"
		}
		resp, body := h.rawExchange("POST /v1/token HTTP/1.1\r\nHost: x\r\n"+ct+
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false)
		keys := slices.Sorted(maps.Keys(body))
		got := []any{resp.StatusCode, body["codigo"], keys}
		if diff := cmp.Diff([]any{400, "esquema_invalido", tc.keys}, got); diff != "" {
			t.Errorf("Content-Type %q: status, codigo, members (-want +got):\n%s", tc.ct, diff)
		}
	}
}

func mustCredentials(t *testing.T, h *harness) []string {
	t.Helper()
	var ids []string
	for _, ten := range h.db.Tenants() {
		for _, c := range h.db.Credentials(ten.ID) {
			ids = append(ids, c.ClientID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("want one credential, have %v", ids)
	}
	return ids
}

// TestAcceptedHasLocation: every 202 names where to follow the work, and
// JSON answers keep "&" (resultado_url) as it is.
func TestAcceptedHasLocation(t *testing.T) {
	h, tok := batchHarness(t)
	resp := h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": refs("loc", 2)})
	var id string
	if resp.StatusCode == 202 {
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		id, _ = m["job_id"].(string)
	}
	resp.Body.Close()
	if want := "/v1/lotes-decision/" + url.PathEscape(id); resp.StatusCode != 202 || id == "" || resp.Header.Get("Location") != want {
		t.Fatalf("POST /v1/lotes-decision: %d, Location %q, want 202 and %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	if st, _ := h.do("GET", resp.Header.Get("Location"), tok, nil); st != 200 {
		t.Errorf("GET Location: %d", st)
	}
	runJobs(h)
	resp = h.raw("GET", "/v1/lotes-decision/"+id, tok, nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(data), `"resultado_url":"`) || strings.Contains(string(data), `\u0026`) || !strings.Contains(string(data), "&") {
		t.Errorf("status body escapes the URL's &: %s", data)
	}

	ref := "cliente-borrar-001"
	resp = h.raw("DELETE", "/v1/clientes/"+ref, tok, nil)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 202 || loc != "/v1/clientes/"+ref+"/exportacion" {
		t.Fatalf("DELETE /v1/clientes: %d, Location %q", resp.StatusCode, loc)
	}
	st, x := h.do("GET", loc, tok, nil)
	if borrado, _ := x["borrado"].(map[string]any); st != 200 || borrado["estado"] != "programado" {
		t.Errorf("GET %s: %d %v; want the deletion record", loc, st, x)
	}
}

// TestTokenUnreadableBasic: a token request whose HTTP Basic client
// authentication cannot be read (not base64, no colon, an empty Basic, or
// more than one Authorization header) is 401 no_autenticado with
// WWW-Authenticate: Basic in both body forms (invalid_client too for the
// OAuth form): bad client credentials. It was read as a request without
// Basic, a 422 naming client_id and client_secret as missing from the body
// (form) or served from the body (JSON).
func TestTokenUnreadableBasic(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	id, secret := h.credential("acme", "eventos:publicar")
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
	form := "grant_type=client_credentials"
	jsonBody := `{"client_id":"` + id + `","client_secret":"` + secret + `","grant_type":"client_credentials"}`
	for _, tc := range []struct {
		name, ct, body string
		auth           []string
		status         int
	}{
		{"form, good Basic", "application/x-www-form-urlencoded", form, []string{good}, 200},
		{"form, Basic not base64", "application/x-www-form-urlencoded", form, []string{"Basic !!!!"}, 401},
		{"form, Basic without a colon", "application/x-www-form-urlencoded", form, []string{"Basic " + base64.StdEncoding.EncodeToString([]byte(id))}, 401},
		{"form, empty Basic", "application/x-www-form-urlencoded", form, []string{"Basic"}, 401},
		{"form, Basic twice", "application/x-www-form-urlencoded", form, []string{good, good}, 401},
		{"JSON, no Authorization", "application/json", jsonBody, nil, 200},
		{"JSON, stray Bearer ignored", "application/json", jsonBody, []string{"Bearer x"}, 200},
		{"JSON, Basic not base64", "application/json", jsonBody, []string{"Basic !!!!"}, 401},
		{"JSON, Bearer and Basic", "application/json", jsonBody, []string{"Bearer x", good}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := fmt.Sprintf("POST /v1/token HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n", tc.ct, len(tc.body))
			for _, a := range tc.auth {
				req += "Authorization: " + a + "\r\n"
			}
			resp, body := h.rawExchange(req+"\r\n"+tc.body, false)
			got := []any{resp.StatusCode, body["codigo"], body["error"], resp.Header.Get("WWW-Authenticate")}
			want := []any{200, nil, nil, ""}
			if tc.status == 401 {
				want = []any{401, "no_autenticado", nil, "Basic"}
				if tc.ct == formMediaType { // OAuth 2.0's error only for the OAuth form
					want[2] = "invalid_client"
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status, error, WWW-Authenticate (-want +got):\n%s\n%v", diff, body)
			}
		})
	}
}

// TestTokenFormDescribesViolations: a token request in the OAuth 2.0 form
// that fails validation says in error_description, which stock OAuth
// clients report (they do not read detail), which parameter is at fault
// and how; it said "mensaje (detail in a 422) says how", and a 422 has no
// mensaje.
func TestTokenFormDescribesViolations(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		body string
		want map[string]any
	}{
		{"grant_type=client_credentials", map[string]any{"error": "invalid_request",
			"error_description": "the request is malformed: client_id: Field required; client_secret: Field required"}},
		{"grant_type=client_credentials&grant_type=client_credentials&client_id=a&client_secret=b", map[string]any{"error": "invalid_request",
			"error_description": "the request is malformed: grant_type: Value error, parametro repetido"}},
		{"grant_type=password&client_id=a&client_secret=b", map[string]any{"error": "unsupported_grant_type",
			"error_description": "grant_type must be client_credentials"}},
	} {
		resp := h.raw("POST", "/v1/token", "", tc.body, "Content-Type", "application/x-www-form-urlencoded")
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := map[string]any{"error": body["error"], "error_description": body["error_description"]}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tc.body, diff)
		}
	}
}

// TestTokenRequestLogNamesCredential: the access log line of a token
// request that got a token names its tenant and client_id, as the lines of
// calls made with a token do, so that the operator can tell which system
// asks for tokens; a refused one names neither (its client_id is only what
// the caller claimed).
func TestTokenRequestLogNamesCredential(t *testing.T) {
	var logs syncbuf.Buffer
	h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{}, nil)
	h.tenant("acme", true, nil)
	id, secret := h.credential("acme", "eventos:publicar")
	for _, tc := range []struct {
		secret string
		want   map[string]any
	}{
		{secret, map[string]any{"status": float64(200), "tenant": "acme", "client_id": id}},
		{"wrong", map[string]any{"status": float64(401), "tenant": nil, "client_id": nil}},
	} {
		resp := h.raw("POST", "/v1/token", "", map[string]any{"client_id": id, "client_secret": tc.secret, "grant_type": "client_credentials"})
		resp.Body.Close()
		line := waitRequestLine(t, &logs, resp.Header.Get("X-Trace-Id"))
		got := map[string]any{"status": line["status"], "tenant": line["tenant"], "client_id": line["client_id"]}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("secret %q: the token request's log line (-want +got):\n%s", tc.secret, diff)
		}
	}
}
