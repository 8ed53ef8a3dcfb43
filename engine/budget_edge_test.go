package engine

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestDamagedBudgetAfterCapsLowered: a budget record lost to damage reads
// as spent at the highest caps the campaign had, not at the caps it has
// now: lowered below the spend since, they read the spend short, and the
// sends given back afterwards (rejected, expired) let the campaign send
// past its cap. It read at the current caps: 4 sent under a cap of 4, the
// cap lowered to 2, the record damaged, 2 sends rejected: 2 more went, 4
// outstanding against a cap of 2.
func TestDamagedBudgetAfterCapsLowered(t *testing.T) {
	put := func(t *testing.T, e *Engine, maxEnvios int64) {
		t.Helper()
		if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		caps  []int64 // PUT after the sends, in order
		read  int64   // envios the damaged budget reads as
		sends int     // new sends after 2 of the 4 are rejected
	}{
		{"cap kept", nil, 4, 2},
		{"cap lowered", []int64{2}, 4, 0},
		{"cap lowered twice", []int64{3, 1}, 4, 0},
		{"cap raised, then lowered", []int64{6, 2}, 6, 0},
		{"cap lowered, then raised", []int64{2, 5}, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			ids := campaignSends(t, e, 4, 4)
			for _, c := range tc.caps {
				put(t, e, c)
			}
			damage(t, db, store.BudgetKey("acme", "c1"), `{"envios":`)
			e = restart(db)
			if _, err := e.Decide("acme", Request{ClienteRef: "dmg-first", Canal: "push", CampanaID: "c1"}); err != nil {
				t.Fatal(err)
			}
			got := struct {
				Read  int64
				Sends int
			}{Read: storedBudget(t, db).Envios}
			for _, id := range ids[:2] {
				if _, err := e.Confirm("acme", id, Confirmation{Ejecutada: false, MotivoRechazo: "no"}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 400 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("after-%03d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					got.Sends++
				}
			}
			want := struct {
				Read  int64
				Sends int
			}{tc.read, tc.sends}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("damaged budget (-want +got):\n%s", diff)
			}
		})
	}
}
