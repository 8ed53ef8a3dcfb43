package server

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/store"
)

// TestAccessLogCodigo: an error answer's access log line names its codigo,
// and its level is warn for a 5xx except 503 inquilino_pausado, the answer
// the operator chose by pausing the tenant, which is info.
func TestAccessLogCodigo(t *testing.T) {
	var logs syncbuf.Buffer
	h := newHarnessHTTP(t, zerolog.New(&logs), HTTPConfig{}, nil)
	h.tenant("acme", true, nil)
	h.tenant("pausado", true, func(s *store.Settings) { s.Paused = true })
	acme := h.token("acme", "decisiones:confirmar")
	paused := h.token("pausado", "decisiones:pedir")
	decide := map[string]any{"cliente_ref": "c-00000001", "contexto": map[string]any{"canal": "push"}}
	for _, tc := range []struct {
		name, path, token string
		body              any
		want              map[string]any
	}{
		{"paused tenant", "/v1/decisiones", paused, decide,
			map[string]any{"level": "info", "status": float64(503), "codigo": "inquilino_pausado", "route": "decisiones", "tenant": "pausado"}},
		{"unknown decision", "/v1/decisiones/dacme.nope/ejecucion", acme, map[string]any{"ejecutada": true},
			map[string]any{"level": "info", "status": float64(404), "codigo": "no_encontrado", "route": "ejecucion", "tenant": "acme"}},
		{"bad token", "/v1/decisiones", "ct2.bad", decide,
			map[string]any{"level": "info", "status": float64(401), "codigo": "no_autenticado", "route": "decisiones"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.raw("POST", tc.path, tc.token, tc.body)
			resp.Body.Close()
			line := waitLogLine(t, &logs, resp.Header.Get("X-Trace-Id"))
			got := maps.Clone(line)
			for _, k := range []string{"latency", "time", "trace_id", "client_id", "message"} {
				delete(got, k)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("access log line (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAccessLevel: warn for a 5xx an operator looks into, info otherwise.
func TestAccessLevel(t *testing.T) {
	for _, tc := range []struct {
		status int
		codigo string
		want   zerolog.Level
	}{
		{200, "", zerolog.InfoLevel},
		{404, "no_encontrado", zerolog.InfoLevel},
		{429, "limite_excedido", zerolog.InfoLevel},
		{503, "inquilino_pausado", zerolog.InfoLevel},
		{503, "almacenamiento_lleno", zerolog.WarnLevel},
		{500, "error_interno", zerolog.WarnLevel},
		{500, "", zerolog.WarnLevel}, // an answer cut short
	} {
		if got := accessLevel(tc.status, tc.codigo); got != tc.want {
			t.Errorf("accessLevel(%d, %q) = %v, want %v", tc.status, tc.codigo, got, tc.want)
		}
	}
}
