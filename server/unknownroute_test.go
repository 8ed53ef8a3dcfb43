package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnknownRouteNamesIt: a request no route takes is 404 no_encontrado
// whose mensaje names its method and path and the methods the path takes,
// so that a typo in a path or a method does not read as a missing
// resource; a route's own 404 (an unknown job) keeps "recurso no
// encontrado".
func TestUnknownRouteNamesIt(t *testing.T) {
	h, tok := batchHarness(t)
	tests := []struct {
		name, method, path, token string
		want                      map[string]any
	}{
		{"accented path", "PUT", "/v1/campañas/navidad", tok,
			notFoundBody("ruta desconocida: PUT /v1/campañas/navidad (las rutas están en GET /v1/openapi.json)")},
		{"singular path", "POST", "/v1/decision", "",
			notFoundBody("ruta desconocida: POST /v1/decision (las rutas están en GET /v1/openapi.json)")},
		{"GET on a POST route", "GET", "/v1/decisiones", tok,
			notFoundBody("ruta desconocida: GET /v1/decisiones (esta ruta admite POST)")},
		{"DELETE on the catalog", "DELETE", "/v1/catalogo-acciones", tok,
			notFoundBody("ruta desconocida: DELETE /v1/catalogo-acciones (esta ruta admite PUT, GET)")},
		{"GET on a confirmation", "GET", "/v1/decisiones/dacme.x/ejecucion", tok,
			notFoundBody("ruta desconocida: GET /v1/decisiones/dacme.x/ejecucion (esta ruta admite POST)")},
		{"GET on the fallback route", "GET", "/v1/decisiones/respaldo", tok,
			notFoundBody("ruta desconocida: GET /v1/decisiones/respaldo (esta ruta admite POST)")},
		{"unknown job", "GET", "/v1/lotes-decision/lote_nada", tok, notFoundBody("recurso no encontrado")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, body := h.do(tt.method, tt.path, tt.token, nil)
			delete(body, "trace_id")
			if diff := cmp.Diff([]any{404, tt.want}, []any{st, body}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// notFoundBody is the body of a 404 with mensaje msg, without its trace_id.
func notFoundBody(msg string) map[string]any {
	return map[string]any{"codigo": "no_encontrado", "mensaje": msg, "campo": nil, "detalle": nil}
}
