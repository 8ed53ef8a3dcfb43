package engine

import (
	"fmt"
	"math"
	"testing"
)

// TestSendGainMatchesDecision: a customer's SendGain is what the decision
// will compute when the budget leaves every coupon it can afford
// affordable: PSend is the decision's probability of sending (1 − the
// detalle's probability of 0) and Cents its best coupon's μ minus
// never-send's. Under max_descuento_mxn a percentage coupon without
// descuento_max_mxn is never sent (fitBudget drops it), so it must not
// count in the gain either: with it the budget cut ranked customers by a
// coupon they cannot get and counted sends their decisions cannot draw.
func TestSendGainMatchesDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		cap  int64 // max_descuento_mxn in cents, 0: max_envios
	}{{"max_envios", 0}, {"max_descuento_mxn", 1_000_000_000}, {"max_descuento_mxn below a coupon", 1500}} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			acts := []Action{
				{ID: 1, Nombre: "fijo", TipoCupon: "T1", CostoEnvioCents: 50, DescuentoMaxCents: 1000, DescuentoPct: 10, Activa: true},
				{ID: 2, Nombre: "porcentaje", TipoCupon: "T2", CostoEnvioCents: 50, DescuentoPct: 30, Activa: true},
				{ID: 3, Nombre: "caro", TipoCupon: "T3", CostoEnvioCents: 50, DescuentoMaxCents: 2000, DescuentoPct: 20, Activa: true},
			}
			if _, err := e.Campaigns.ReplaceCatalog("acme", acts, t0); err != nil {
				t.Fatal(err)
			}
			big := int64(1_000_000_000)
			camp := Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &big}
			if tc.cap > 0 {
				camp = Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxDescuentoCents: &tc.cap}
			}
			if _, err := e.Campaigns.PutCampaign("acme", camp, t0); err != nil {
				t.Fatal(err)
			}
			bd, err := e.NewBatchDecider("acme", "lote_g", "c1")
			if err != nil {
				t.Fatal(err)
			}
			defer bd.Close()
			bd.Explain = true
			for i := range 20 {
				ref := fmt.Sprintf("g-%02d", i)
				g, err := bd.SendGain(ref)
				if err != nil {
					t.Fatal(err)
				}
				d, err := bd.Decide(ref, false)
				if err != nil {
					t.Fatal(err)
				}
				p0, best, zero := 0.0, math.Inf(-1), 0.0
				for _, a := range d.Detalle.Acciones {
					switch {
					case a.Accion == 0:
						p0, zero = a.Probabilidad, a.MuMXN*100
					case a.MuMXN*100 > best:
						best = a.MuMXN * 100
					}
				}
				if !g.OK || math.Abs(g.PSend-(1-p0)) > 1e-9 || math.Abs(g.Cents-(best-zero)) > 1 {
					t.Fatalf("%s: SendGain %+v; the decision sends with probability %v, best μ − never-send's %v (detalle %+v)",
						ref, g, 1-p0, best-zero, d.Detalle.Acciones)
				}
				if d.Accion != 0 && tc.cap > 0 && tc.cap < big {
					break // the send spent the budget the gains were read at
				}
			}
		})
	}
}
