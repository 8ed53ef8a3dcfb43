package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// decidedAction is the action of decision id as recorded.
func decidedAction(tb testing.TB, e *Engine, id string) int {
	tb.Helper()
	nonce, ok := e.ids.parse("acme", id)
	if !ok {
		tb.Fatalf("decision id %q does not parse", id)
	}
	r, err := e.loadDecision("acme", nonce)
	if err != nil {
		tb.Fatal(err)
	}
	return r.Accion
}

// TestConfirmedBudgetCountsWhatWasSent: a campaign's budget counts what a
// confirmation says was sent. A modificada confirmation (accion_real other
// than the decided action) gives the decided send back, as a rechazada
// does, and counts accion_real's (one send, its descuento_max), past the
// caps too, since it went out; a replay with its Idempotency-Key counts
// nothing more, and the expiry of the confirmed decision gives nothing
// back. Before, a modificada confirmation kept the decided reservation:
// in shadow mode the engine's suggestions spent the budget although the
// caller sent its own coupons (or none), and a coupon sent where the
// engine decided 0 was never counted.
func TestConfirmedBudgetCountsWhatWasSent(t *testing.T) {
	cents := func(a int) int64 { return int64(1000 * a) } // newTestEngine's catalog
	ptr := func(a int) *int { return &a }
	for _, tc := range []struct {
		name      string
		onSpent   bool // confirm the decision answered 0 once the budget (max_envios 1) was spent
		ejecutada bool
		real      func(decided int) *int // accion_real
		replays   int                    // confirmed again with the same Idempotency-Key
		want      func(decided int) budget
	}{
		{"ejecutada", false, true, func(int) *int { return nil }, 0,
			func(d int) budget { return budget{1, cents(d)} }},
		{"ejecutada as decided", false, true, func(d int) *int { return ptr(d) }, 0,
			func(d int) budget { return budget{1, cents(d)} }},
		{"rechazada", false, false, func(int) *int { return nil }, 0,
			func(int) budget { return budget{} }},
		{"modificada: nothing sent", false, true, func(int) *int { return ptr(0) }, 1,
			func(int) budget { return budget{} }},
		{"modificada: another coupon sent", false, true, func(d int) *int { return ptr(3 - d) }, 1,
			func(d int) budget { return budget{1, cents(3 - d)} }},
		{"modificada: sent where the spent budget decided 0", true, true, func(int) *int { return ptr(2) }, 1,
			func(d int) budget { return budget{2, cents(d) + cents(2)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, func(s *store.Settings) { s.Shadow = true })
			id := campaignSends(t, e, 1, 1)[0]
			decided := decidedAction(t, e, id)
			if tc.onSpent {
				if _, err := e.Confirm("acme", id, Confirmation{Ejecutada: true}); err != nil {
					t.Fatal(err)
				}
				d, err := e.Decide("acme", Request{ClienteRef: "spent-0001", Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					t.Fatalf("decision on a spent budget: accion %d, want 0", d.Accion)
				}
				id = d.DecisionID
			}
			c := Confirmation{Ejecutada: tc.ejecutada, AccionReal: tc.real(decided),
				Idempotency: Idempotency{Key: "k-" + tc.name, BodyHash: HashConfirmBody(id, []byte(tc.name))}}
			if !tc.ejecutada {
				c.MotivoRechazo = "no"
			}
			for range 1 + tc.replays {
				if _, err := e.Confirm("acme", id, c); err != nil {
					t.Fatal(err)
				}
			}
			want := tc.want(decided)
			if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, memBudget(t, e)); diff != "" {
				t.Errorf("budget in memory (-want +got):\n%s", diff)
			}
			advance(t, db, DecisionTTL+time.Second)
			if _, err := e.Learner.Learn("acme"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget after caduca_en (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFallbackCountsAgainstCampaignBudget: a fallback record with a send
// (accion ≠ 0) for a defined campaign went out, so it counts against the
// campaign's budget, one send and its descuento_max, past the caps too,
// and the next decision finds the budget spent; a keyed replay counts
// nothing more; accion 0 and an undefined campaign count nothing. Before,
// fallback records were never counted and the engine overspent the caps
// once it answered again.
func TestFallbackCountsAgainstCampaignBudget(t *testing.T) {
	keyed := func(accion int, campana, key string) FallbackInput {
		return FallbackInput{Accion: accion, Canal: "push", ClienteRef: "fallback01", CampanaID: campana,
			Idempotency: Idempotency{Key: key, BodyHash: HashFallbackBody([]byte(key))}}
	}
	for _, tc := range []struct {
		name string
		in   []FallbackInput
		want budget // of c1, whose max_envios is 1
	}{
		{"send", []FallbackInput{keyed(1, "c1", "")}, budget{1, 1000}},
		{"keyed send replayed", []FallbackInput{keyed(2, "c1", "k-1"), keyed(2, "c1", "k-1")}, budget{1, 2000}},
		{"sends without a key, past the cap", []FallbackInput{keyed(1, "c1", ""), keyed(2, "c1", "")}, budget{2, 3000}},
		{"nothing sent", []FallbackInput{keyed(0, "c1", "")}, budget{}},
		{"undefined campaign", []FallbackInput{keyed(1, "c9", "")}, budget{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			one := int64(1)
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &one}, t0); err != nil {
				t.Fatal(err)
			}
			for _, in := range tc.in {
				if err := e.Fallback("acme", in); err != nil {
					t.Fatal(err)
				}
			}
			var stored budget
			if err := db.GetJSON(store.BudgetKey("acme", "c1"), &stored); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, stored); diff != "" {
				t.Errorf("stored budget (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, memBudget(t, e)); diff != "" {
				t.Errorf("budget in memory (-want +got):\n%s", diff)
			}
			if has, err := db.Has(store.BudgetKey("acme", "c9")); err != nil || has {
				t.Errorf("budget record of an undefined campaign: %v (%v), want none", has, err)
			}
			if tc.want.Envios == 0 {
				return
			}
			for i := range 20 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("after-%04d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					t.Fatalf("decision %d after the fallback spent the budget: accion %d, want 0", i, d.Accion)
				}
			}
		})
	}
}

// TestConfirmRetiredCouponBudget: a confirmation naming coupons that left
// the catalog after the decision counts them as it counts coupons of the
// catalog. A modificada to a retired coupon counts one send and the
// descuento_max it had when it left, and the record keeps the sending cost
// it had then for the reward; a rechazada of a decided coupon retired since
// gives its send back once, expiry included. Before, a retired coupon's
// send counted no descuento and its cost was unknown (nil: the reward took
// nothing off).
func TestConfirmRetiredCouponBudget(t *testing.T) {
	cents := func(a int) int64 { return int64(1000 * a) } // newTestEngine's catalog
	ptr := func(a int) *int { return &a }
	p64 := func(c int64) *int64 { return &c }
	const retiredCents, retiredCost = 7000, 70 // the coupon other than the decided one, repriced before it left
	for _, tc := range []struct {
		name      string
		ejecutada bool
		real      func(decided, other int) *int
		want      func(decided, second int) budget
		cost      func(decided int) *int64
	}{
		{"rechazada", false, func(int, int) *int { return nil },
			func(_, s int) budget { return budget{1, cents(s)} }, func(int) *int64 { return p64(50) }},
		{"ejecutada, the decided coupon retired", true, func(d, _ int) *int { return ptr(d) },
			func(d, s int) budget { return budget{2, cents(d) + cents(s)} }, func(int) *int64 { return p64(50) }},
		{"modificada to a retired coupon", true, func(_, o int) *int { return ptr(o) },
			func(_, s int) budget { return budget{2, retiredCents + cents(s)} }, func(int) *int64 { return p64(retiredCost) }},
		{"modificada to nothing", true, func(int, int) *int { return ptr(0) },
			func(_, s int) budget { return budget{1, cents(s)} }, func(int) *int64 { return p64(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 3, nil)
			ids := campaignSends(t, e, 2, 2)
			decided, second := decidedAction(t, e, ids[0]), decidedAction(t, e, ids[1])
			other := 1
			if other == decided {
				other = 2
			}
			var repriced, kept []Action
			for i := 1; i <= 3; i++ {
				a := Action{ID: i, Nombre: fmt.Sprintf("cupon%d", i), TipoCupon: fmt.Sprintf("T%d", i), CostoEnvioCents: 50, DescuentoMaxCents: cents(i), DescuentoPct: 10, Activa: true}
				if i == other {
					a.CostoEnvioCents, a.DescuentoMaxCents = retiredCost, retiredCents
				}
				repriced = append(repriced, a)
				if i != other && i != decided {
					kept = append(kept, a)
				}
			}
			for _, cat := range [][]Action{repriced, kept} {
				if _, err := e.Campaigns.ReplaceCatalog("acme", cat, t0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.Confirm("acme", ids[1], Confirmation{Ejecutada: true}); err != nil {
				t.Fatal(err)
			}
			c := Confirmation{Ejecutada: tc.ejecutada, AccionReal: tc.real(decided, other)}
			if !tc.ejecutada {
				c.MotivoRechazo = "no"
			}
			if _, err := e.Confirm("acme", ids[0], c); err != nil {
				t.Fatal(err)
			}
			want := tc.want(decided, second)
			if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget (-want +got):\n%s", diff)
			}
			r, err := e.DecisionByID("acme", ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.cost(decided), r.CostoEnvioCents); diff != "" {
				t.Errorf("record's sending cost (-want +got):\n%s", diff)
			}
			advance(t, db, DecisionTTL+time.Second)
			if _, err := e.Learner.Learn("acme"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget after caduca_en (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFallbackRetiredCouponBudget: a fallback record naming a coupon that
// left the catalog (sent under the caller's rule before the change, the
// record queued until the engine answered again) is stored and counts one
// send and the descuento_max the coupon had when it left; an id no catalog
// held is ErrUnknownAction. Before, the retired coupon was ErrUnknownAction.
func TestFallbackRetiredCouponBudget(t *testing.T) {
	e, db := newTestEngine(t, 3, nil)
	maxEnvios := int64(5)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
		t.Fatal(err)
	}
	repriced := Action{ID: 2, Nombre: "cupon2", TipoCupon: "T2", CostoEnvioCents: 70, DescuentoMaxCents: 7000, Activa: true}
	for _, cat := range [][]Action{{repriced}, {{ID: 1, Nombre: "cupon1", TipoCupon: "T1", CostoEnvioCents: 50, DescuentoMaxCents: 1000, Activa: true}}} {
		if _, err := e.Campaigns.ReplaceCatalog("acme", cat, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Fallback("acme", FallbackInput{Accion: 2, Canal: "push", ClienteRef: "fallback01", CampanaID: "c1"}); err != nil {
		t.Fatalf("fallback naming a retired coupon: %v", err)
	}
	if err := e.Fallback("acme", FallbackInput{Accion: 9, Canal: "push", ClienteRef: "fallback02", CampanaID: "c1"}); !errors.Is(err, ErrUnknownAction) {
		t.Errorf("fallback naming an id no catalog held: %v, want ErrUnknownAction", err)
	}
	if diff := cmp.Diff(budget{1, 7000}, storedBudget(t, db)); diff != "" {
		t.Errorf("stored budget (-want +got):\n%s", diff)
	}
}
