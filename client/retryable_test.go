package client

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestErrorRetryable: Error.Retryable follows the README's table of
// codigos: a later attempt can succeed for a rate limit, a paused tenant,
// a full disk, a fault and an Idempotency-Key still in use; never for one
// customer's daily cap, a refused credential or scope, a missing
// resource, a settled or expired confirmation, or a request to fix.
func TestErrorRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  Error
		want bool
	}{
		{"rate limit", Error{Status: 429, Codigo: "limite_excedido"}, true},
		{"customer's daily cap", Error{Status: 429, Codigo: "limite_excedido", Campo: "cliente_ref"}, false},
		{"paused tenant", Error{Status: 503, Codigo: "inquilino_pausado"}, true},
		{"disk full", Error{Status: 503, Codigo: "almacenamiento_lleno"}, true},
		{"fault", Error{Status: 500, Codigo: "error_interno"}, true},
		{"proxy's 502", Error{Status: 502, Codigo: "http_502"}, true},
		{"key in use", Error{Status: 409, Codigo: "idempotencia_conflicto"}, true},
		{"confirmed", Error{Status: 409, Codigo: "ejecucion_ya_confirmada"}, false},
		{"expired", Error{Status: 409, Codigo: "decision_caducada"}, false},
		{"not authenticated", Error{Status: 401, Codigo: "no_autenticado"}, false},
		{"scope", Error{Status: 403, Codigo: "sin_permiso"}, false},
		{"not found", Error{Status: 404, Codigo: "no_encontrado"}, false},
		{"validation", Error{Status: 422, Codigo: CodigoValidacion, Campo: "clientes"}, false},
		{"too large", Error{Status: 413, Codigo: "esquema_invalido"}, false},
	}
	got, want := map[string]bool{}, map[string]bool{}
	for _, tc := range tests {
		got[tc.name], want[tc.name] = tc.err.Retryable(), tc.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Retryable (-want +got):\n%s", diff)
	}
}
