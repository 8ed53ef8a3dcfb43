package engine

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestBudgetCountersAtTheInt64Range: a campaign's spent budget neither
// wraps nor lets a send through past the top of the int64 range. The API
// takes any max_envios up to 9223372036854775807 and a campaign without
// max_descuento_mxn counts each send's descuento_max (up to 1,000,000,000
// MXN) with no bound, so ~92 million such sends reach the range. A wrapped
// discount sum read as a hugely negative spend: once the operator set a
// max_descuento_mxn, the campaign sent far past it. A damaged budget of a
// campaign whose max_envios is the largest reads as spent at that cap, and
// one more send wrapped the count and went out.
func TestBudgetCountersAtTheInt64Range(t *testing.T) {
	top := int64(math.MaxInt64)
	type result struct {
		Budget            budget
		Sends, SendsAfter int // SendsAfter: in the last 100 decisions, after any cap was set
	}
	near := fmt.Sprintf(`{"envios":5,"descuento_cents":%d}`, top-500)
	for _, tc := range []struct {
		name   string
		stored string // the budget record before the sends: JSON, or damage
		cap    *int64 // max_descuento_mxn (cents) set after 100 decisions
		want   func(sends, after int) result
	}{
		{"discount sum near the top", near, nil, func(sends, after int) result {
			return result{budget{Envios: 5 + int64(sends), DescuentoCents: top}, sends, after}
		}},
		{"discount cap set on a spend near the top", near, new(int64(100_000_000_000)), func(sends, _ int) result {
			return result{budget{Envios: 5 + int64(sends), DescuentoCents: top}, sends, 0}
		}},
		{"damaged budget at the largest max_envios", `{"envios":`, nil, func(int, int) result {
			return result{budget{Envios: top, DescuentoCents: unknownSpend}, 0, 0}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &top}, t0); err != nil {
				t.Fatal(err)
			}
			damage(t, db, store.BudgetKey("acme", "c1"), tc.stored)
			e = restart(db)
			var got result
			for i := 0; i < 200; i++ {
				if i == 100 && tc.cap != nil {
					if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &top, MaxDescuentoCents: tc.cap}, t0); err != nil {
						t.Fatal(err)
					}
				}
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("range-%04d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					got.Sends++
					if i >= 100 {
						got.SendsAfter++
					}
				}
			}
			got.Budget = storedBudget(t, db)
			if diff := cmp.Diff(tc.want(got.Sends, got.SendsAfter), got); diff != "" {
				t.Errorf("budget (-want +got):\n%s", diff)
			}
		})
	}
}
