package server

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestCampaignPathValidation: the campana_id path parameter follows the
// rules of every other ID (contract §2 and §7: pydantic v2's types, the
// length checked before the pattern), as the body's campana_id does.
func TestCampaignPathValidation(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	tok := h.token("acme", allScopes...)
	body := map[string]any{"canal": "push", "descripcion": "x"}
	for _, tc := range []struct{ id, typ string }{
		{strings.Repeat("c", 129), "string_too_long"},
		{"-mal", "string_pattern_mismatch"},
		{"a%20b", "string_pattern_mismatch"},
	} {
		for _, method := range []string{"PUT", "GET"} {
			var b any
			if method == "PUT" {
				b = body
			}
			st, got := h.do(method, "/v1/campanas/"+tc.id, tok, b)
			var types []any
			if detail, ok := got["detail"].([]any); ok {
				for _, v := range detail {
					v := v.(map[string]any)
					types = append(types, v["type"], v["loc"])
				}
			}
			want := []any{tc.typ, []any{"path", "campana_id"}}
			if st != 422 {
				t.Errorf("%s %s: %d %v, want 422", method, tc.id, st, got)
			} else if diff := cmp.Diff(want, types); diff != "" {
				t.Errorf("%s %s: violations (-want +got):\n%s", method, tc.id, diff)
			}
		}
	}
}

// TestCampaignNullCaps: a null cap is no cap, as absent, since the answer
// shows a missing cap as null: a campaign's caps read back can be sent
// again as they came, and a null removes a cap set before.
func TestCampaignNullCaps(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	caps := func(m map[string]any) map[string]any {
		return map[string]any{"max_descuento_mxn": m["max_descuento_mxn"], "max_envios": m["max_envios"]}
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want map[string]any
	}{
		{"caps set", map[string]any{"canal": "push", "descripcion": "d", "max_descuento_mxn": 150.5, "max_envios": 10},
			map[string]any{"max_descuento_mxn": 150.5, "max_envios": float64(10)}},
		{"caps null", map[string]any{"canal": "push", "descripcion": "d", "max_descuento_mxn": nil, "max_envios": nil},
			map[string]any{"max_descuento_mxn": nil, "max_envios": nil}},
		{"one cap null", map[string]any{"canal": "push", "descripcion": "d", "max_descuento_mxn": nil, "max_envios": 3},
			map[string]any{"max_descuento_mxn": nil, "max_envios": float64(3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, got := h.do("PUT", "/v1/campanas/c1", tok, tc.body)
			if st != 200 {
				t.Fatalf("PUT: %d %v", st, got)
			}
			if diff := cmp.Diff(tc.want, caps(got)); diff != "" {
				t.Errorf("PUT answer's caps (-want +got):\n%s", diff)
			}
			if _, got = h.do("GET", "/v1/campanas/c1", tok, nil); cmp.Diff(tc.want, caps(got)) != "" {
				t.Errorf("GET caps %v, want %v", caps(got), tc.want)
			}
		})
	}
}
