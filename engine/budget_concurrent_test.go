package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBudgetEdgeConcurrentDecisions: 200 goroutines decide at once for a
// campaign whose cap is reached within them; sends are counted first come,
// first served under the campaign's budget, so no more than the cap are
// answered or counted, whichever cap binds, and the counters in memory and
// in the store agree with the sends answered. (Run with -race.)
func TestBudgetEdgeConcurrentDecisions(t *testing.T) {
	envios, descuento := int64(50), int64(60_000) // descuento: 30 sends of coupon 2 (2000 cents), 60 of coupon 1
	for _, tc := range []struct {
		name string
		camp Campaign
	}{
		{"max_envios 50", Campaign{MaxEnvios: &envios}},
		{"max_descuento_mxn 600", Campaign{MaxDescuentoCents: &descuento}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			c := tc.camp
			c.ID, c.Canal, c.Descripcion = "c1", "push", "d"
			if _, err := e.Campaigns.PutCampaign("acme", c, t0); err != nil {
				t.Fatal(err)
			}
			var sends, cents atomic.Int64
			var wg sync.WaitGroup
			for g := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("edge-%03d-%02d", g, i), Canal: "push", CampanaID: "c1"})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Accion != 0 {
							sends.Add(1)
							cents.Add(int64(1000 * d.Accion)) // newTestEngine: coupon i has descuento_max 1000·i cents
						}
					}
				}()
			}
			wg.Wait()
			answered := budget{Envios: sends.Load(), DescuentoCents: cents.Load()}
			if c.MaxEnvios != nil && answered.Envios != *c.MaxEnvios || c.MaxDescuentoCents != nil && answered.DescuentoCents > *c.MaxDescuentoCents {
				t.Errorf("answered %+v under %s: want the cap reached, never passed", answered, tc.name)
			}
			if diff := cmp.Diff(answered, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget (-answered +stored):\n%s", diff)
			}
			if diff := cmp.Diff(answered, memBudget(t, e)); diff != "" {
				t.Errorf("budget in memory (-answered +memory):\n%s", diff)
			}
		})
	}
}
