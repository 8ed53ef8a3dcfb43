package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/google/go-cmp/cmp"
)

// TestRewardCostIsTheCostWhenSent: a decision's reward is the window's
// margin minus the sending cost of the coupon sent (contract §5), the cost
// that coupon had when it was sent. A catalog replaced before the reward
// is final (the coupon retired, left out, or its cost changed) changes
// neither: without the cost kept with the decision, a coupon left out of
// the catalog mid-run was rewarded as if it had cost nothing.
func TestRewardCostIsTheCostWhenSent(t *testing.T) {
	const day = 24 * time.Hour
	one := 1
	tests := []struct {
		name    string
		modify  bool     // confirm modificada with accion_real 1 (else: a decided send, ejecutada)
		catalog []Action // the catalog put before the reward is final
	}{
		{"decided coupon left out", false, []Action{{ID: 2, Nombre: "dos", TipoCupon: "T2", CostoEnvioCents: 50, Activa: true}}},
		{"accion_real left out", true, []Action{{ID: 2, Nombre: "dos", TipoCupon: "T2", CostoEnvioCents: 50, Activa: true}}},
		{"decided coupon's cost raised", false, []Action{
			{ID: 1, Nombre: "uno", TipoCupon: "T1", CostoEnvioCents: 900, Activa: true},
			{ID: 2, Nombre: "dos", TipoCupon: "T2", CostoEnvioCents: 900, Activa: true}}},
		{"accion_real's cost raised", true, []Action{{ID: 1, Nombre: "uno", TipoCupon: "T1", CostoEnvioCents: 900, Activa: true}}},
		{"decided coupon retired", false, []Action{
			{ID: 1, Nombre: "uno", TipoCupon: "T1", CostoEnvioCents: 50, Activa: false},
			{ID: 2, Nombre: "dos", TipoCupon: "T2", CostoEnvioCents: 50, Activa: false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 2 * day; s.RewardGrace = 0 })
			var d *Decision
			var ref string
			for i := 0; d == nil || (!tc.modify && d.Accion == 0); i++ {
				if i == 2000 {
					t.Fatal("no decision sent a coupon")
				}
				ref = fmt.Sprintf("cost-%08d", i)
				var err error
				if d, err = e.Decide("acme", Request{ClienteRef: ref, Canal: "push"}); err != nil {
					t.Fatal(err)
				}
			}
			c := Confirmation{Ejecutada: true}
			if tc.modify && d.Accion != 1 {
				c.AccionReal = &one
			}
			if _, err := e.Confirm("acme", d.DecisionID, c); err != nil {
				t.Fatal(err)
			}
			ev := Event{ID: "cost-ev-1", ClienteRef: ref, TS: t0.Add(time.Hour), Tipo: CompraCat, Clave: "c",
				ValorCents: 10000, TicketID: "cost-t1", MargenCents: 2500}
			ingestAll(t, e, IngestEvent{Event: ev, Canonical: []byte(ev.ID)})
			if _, err := e.Campaigns.ReplaceCatalog("acme", tc.catalog, t0); err != nil {
				t.Fatal(err)
			}
			advance(t, db, 3*day)
			learnAll(t, e)
			r, err := e.DecisionByID("acme", d.DecisionID)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(2500 - 50) // the test catalog's sending cost when sent
			if diff := cmp.Diff(&want, r.Recompensa); diff != "" {
				t.Errorf("reward in cents (-want +got):\n%s", diff)
			}
		})
	}
}
