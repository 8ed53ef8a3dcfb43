package server

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/internal/golden"
	"github.com/coupond/coupond/store"
)

// Golden files under the top-level testdata/ state what a client sees:
// run "go test ./server/ -run Golden -update" after a meant change and
// review the diff of testdata/.

// volatile are the members that change from run to run.
var volatile = []string{"trace_id", "decision_id", "generado_en", "creada_en", "caduca_en", "confirmada_en", "ts_ejecucion", "solicitado_en", "completado_en"}

// TestGoldenServedOpenAPI: the document served at /v1/openapi.json is
// testdata/openapi.json.
func TestGoldenServedOpenAPI(t *testing.T) {
	h := newHarness(t)
	resp := h.raw("GET", "/v1/openapi.json", "", nil)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %v", resp.StatusCode, err)
	}
	golden.Text(t, "openapi.json", body)
}

// TestGolden422Bodies: the validation answers of the main write endpoints,
// as a client reads them.
func TestGolden422Bodies(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	for _, tc := range []struct {
		name, method, path string
		body               any
	}{
		{"decision_sin_cliente", "POST", "/v1/decisiones", map[string]any{"contexto": map[string]any{"canal": "push"}}},
		{"decision_cliente_largo", "POST", "/v1/decisiones", map[string]any{"cliente_ref": strings.Repeat("a", 200), "contexto": map[string]any{"canal": "push"}}},
		{"decision_cuerpo_no_json", "POST", "/v1/decisiones", "{"},
		{"catalogo_accion_incompleta", "PUT", "/v1/catalogo-acciones", map[string]any{"acciones": []any{map[string]any{"id": 1}}}},
		{"eventos_sin_lista", "POST", "/v1/eventos", map[string]any{"eventos": "no"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.raw(tc.method, tc.path, tok, tc.body)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 422 {
				t.Fatalf("%s %s: %d, want 422: %s", tc.method, tc.path, resp.StatusCode, body)
			}
			golden.JSON(t, "422/"+tc.name+".json", body, volatile...)
		})
	}
}

// TestGoldenExport: a customer's export after a purchase, a decision and
// its confirmation.
func TestGoldenExport(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	const ana = "ana-00000001"
	h.acceptEvents(tok, purchaseAt("ev-1", ana, testStart.Add(-48*time.Hour)))
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ana, nil))
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	if st, body := h.do("POST", "/v1/decisiones/"+d["decision_id"].(string)+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
		t.Fatalf("confirm: %d %v", st, body)
	}
	resp := h.raw("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("export: %d %s", resp.StatusCode, body)
	}
	// What the policy chose is the policy's business (its own tests): the
	// golden holds the export's shape and the customer's data.
	policy := []string{"accion", "propension", "motivo", "explorado", "politica_version", "caracteristicas_usadas"}
	golden.JSON(t, "export.json", body, append(policy, volatile...)...)
}
