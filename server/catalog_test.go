package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCatalogCategorias: categorias (contract §4) round-trips through PUT
// and GET, reaches the engine, is optional, and bad values get a 422
// naming the field.
func TestCatalogCategorias(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", false, nil)
	tok := h.token("acme", "catalogo:escribir")
	body := map[string]any{"acciones": []any{
		map[string]any{"id": 1, "nombre": "10% abarrotes", "tipo_cupon": "PCT10", "costo_envio_mxn": 0.5, "descuento_pct": 10, "descuento_max_mxn": 50, "categorias": []string{"abarrotes", "lacteos"}},
		map[string]any{"id": 2, "nombre": "$30", "tipo_cupon": "MXN30", "costo_envio_mxn": 0.5, "descuento_max_mxn": 30},
	}}
	if st, b := h.do("PUT", "/v1/catalogo-acciones", tok, body); st != 200 {
		t.Fatalf("PUT: %d %v", st, b)
	}
	st, b := h.do("GET", "/v1/catalogo-acciones", tok, nil)
	if st != 200 {
		t.Fatalf("GET: %d", st)
	}
	acts := b["acciones"].([]any)
	if diff := cmp.Diff([]any{"abarrotes", "lacteos"}, acts[0].(map[string]any)["categorias"]); diff != "" {
		t.Errorf("categorias after GET (-want +got):\n%s", diff)
	}
	if _, ok := acts[1].(map[string]any)["categorias"]; ok {
		t.Errorf("an action without categorias shows them: %v", acts[1])
	}
	cat, err := h.engine.Campaigns.Catalog("acme")
	if err != nil || !cmp.Equal(cat.Action(1).Categorias, []string{"abarrotes", "lacteos"}) {
		t.Fatalf("engine catalog: %v %v", err, cat)
	}
	long := strings.Repeat("x", 257)
	many := make([]string, 65)
	for i := range many {
		many[i] = "c"
	}
	for name, cats := range map[string]any{"empty": []string{}, "too many": many, "too long": []string{long}, "empty string": []string{""}, "not a list": "abarrotes", "not strings": []any{1}} {
		bad := map[string]any{"acciones": []any{map[string]any{"id": 1, "nombre": "x", "tipo_cupon": "X", "costo_envio_mxn": 0.5, "categorias": cats}}}
		st, b := h.do("PUT", "/v1/catalogo-acciones", tok, bad)
		if st != 422 || !strings.Contains(fmt.Sprint(b), "categorias") {
			t.Errorf("%s: %d %v, want 422 naming categorias", name, st, b)
		}
	}
	if cat, _ := h.engine.Campaigns.Catalog("acme"); cat.Version != 1 {
		t.Errorf("a rejected PUT changed the catalog: version %d", cat.Version)
	}
}
