package server

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTokenScopeRefusalNamesScopes: a token request for scopes the
// credential lacks, or that do not exist, is 403 sin_permiso on scope whose
// mensaje names them (as a route's 403 names the scope it needs), and
// never more than three unknown names, each cut and redacted as echoes are.
func TestTokenScopeRefusalNamesScopes(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	h.token("acme", "eventos:publicar", "decisiones:pedir") // creates the credential
	id := mustCredentials(t, h)[0]
	const prefix = "la credencial no tiene los permisos pedidos en scope: "
	tests := []struct{ scope, mensaje string }{
		{"webhooks:escribir", prefix + "webhooks:escribir"},
		{"eventos:publicar clientes:borrar webhooks:escribir", prefix + "clientes:borrar webhooks:escribir"},
		{"eventos:publicar eventos:leer", prefix + `"eventos:leer" (desconocido)`},
		{"a b c d", prefix + `"a" (desconocido) "b" (desconocido) "c" (desconocido) …`},
		{"clientes:borrar cs_0123456789abcdef0123456789abcdef0123456789a", prefix + `clientes:borrar "***" (desconocido)`},
	}
	for _, tc := range tests {
		body, _ := json.Marshal(map[string]string{"client_id": id, "client_secret": "secret-" + id, "grant_type": "client_credentials", "scope": tc.scope})
		resp := h.raw("POST", "/v1/token", "", string(body), "Content-Type", "application/json")
		var got struct {
			Codigo, Mensaje string
			Campo           *string
		}
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		campo := ""
		if got.Campo != nil {
			campo = *got.Campo
		}
		if diff := cmp.Diff([]any{403, "sin_permiso", "scope", tc.mensaje}, []any{resp.StatusCode, got.Codigo, campo, got.Mensaje}); diff != "" {
			t.Errorf("scope %q: status, codigo, campo, mensaje (-want +got):\n%s", tc.scope, diff)
		}
	}
}
