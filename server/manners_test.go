package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// TestTokenOAuthErrors: stock OAuth clients read the RFC 6749 "error" of
// the token endpoint. golang.org/x/oauth2's clientcredentials is the judge:
// a wrong secret is invalid_client (in both of its auth styles), a scope
// the credential lacks is invalid_scope. The contract's fields stay.
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

	// The raw bodies: the contract's fields and the OAuth ones.
	cases := []struct {
		name, ct, body string
		status         int
		codigo, oauth  string
	}{
		{"bad secret", "application/json", `{"client_id":"` + id + `","client_secret":"x","grant_type":"client_credentials"}`, 401, "no_autenticado", "invalid_client"},
		{"bad grant", "application/json", `{"client_id":"` + id + `","client_secret":"x","grant_type":"password"}`, 422, "", "unsupported_grant_type"},
		{"bad grant form", "application/x-www-form-urlencoded", "grant_type=password&client_id=a&client_secret=b", 422, "", "unsupported_grant_type"},
		{"repeated parameter form", "application/x-www-form-urlencoded", "grant_type=client_credentials&grant_type=password&client_id=" + id + "&client_secret=secret-" + id, 422, "", "invalid_request"},
		{"missing field", "application/json", `{"grant_type":"client_credentials"}`, 422, "", "invalid_request"},
		{"not json", "text/plain", `x`, 415, "esquema_invalido", "invalid_request"},
	}
	for _, tc := range cases {
		resp := h.raw("POST", "/v1/token", "", tc.body, "Content-Type", tc.ct)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(data)
		if resp.StatusCode != tc.status || !strings.Contains(body, `"error":"`+tc.oauth+`"`) || !strings.Contains(body, `"error_description":`) {
			t.Errorf("%s: %d %s; want %d with error %s", tc.name, resp.StatusCode, body, tc.status, tc.oauth)
		}
		if tc.codigo != "" && !strings.Contains(body, `"codigo":"`+tc.codigo+`"`) {
			t.Errorf("%s: %s lacks codigo %s", tc.name, body, tc.codigo)
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
