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
