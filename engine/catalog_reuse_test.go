package engine

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// learnOnAction1 decides customers of acme, with action 1 the only coupon
// allowed, until it was sent to n of them, confirms every decision
// ejecutada, and learns the rewards.
func learnOnAction1(t *testing.T, e *Engine, n int) {
	t.Helper()
	sent := 0
	for i := 0; sent < n && i < 5000; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("learn-%05d", i), Canal: "push", Allowed: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion == 1 {
			sent++
		}
		if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
			t.Fatal(err)
		}
	}
	if sent < n {
		t.Fatalf("action 1 sent %d times, want %d", sent, n)
	}
	advance(t, e.db, 40*24*time.Hour)
	for range 5 {
		st, err := e.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		if st.Folded == 0 && st.Unconfirmed == 0 {
			break
		}
	}
}

// armScores scores actions 1 and 2 of acme's catalog for a customer
// without history: their μ and the standard error of their effect.
func armScores(t *testing.T, e *Engine) [2][2]float64 {
	t.Helper()
	ts, tn, now, err := e.stateNow("acme")
	if err != nil {
		t.Fatal(err)
	}
	cust, err := e.customer(&customer{}, "acme", "scored", now, tn.Settings.RewardWindow)
	if err != nil {
		t.Fatal(err)
	}
	cands, _ := eligible(ts.catalog.Load(), Request{Canal: "push"}, cust, nil)
	sc := ts.model.Load().score(cust, cands, 0, nil)
	var out [2][2]float64
	for i, c := range sc.cands {
		if c.id == 1 || c.id == 2 {
			out[c.id-1] = [2]float64{c.mu, sc.sigma(i)}
		}
	}
	return out
}

// TestCatalogIDReusedForAnotherCoupon: the model knows a coupon by its
// catalog id; an id a new catalog gives to another coupon (another
// tipo_cupon) must start without support, as any new action does (README:
// "A new action starts without support"), not with what the model learned
// of the coupon that had the id before. It carried it over: action 1,
// now another coupon, scored with the old coupon's learned effect and
// its narrower error, unlike action 2, new with the same economics. An id
// that keeps its tipo_cupon (re-priced, renamed, categorias changed) keeps
// what was learned of it.
func TestCatalogIDReusedForAnotherCoupon(t *testing.T) {
	fresh := func(id int, tipo string) Action {
		return Action{ID: id, Nombre: "nuevo " + tipo, TipoCupon: tipo, CostoEnvioCents: 80, DescuentoMaxCents: 3000, DescuentoPct: 15, Activa: true,
			Categorias: []string{"abarrotes"}}
	}
	for _, tc := range []struct {
		name  string
		away  bool   // a catalog without action 1 comes first
		tipo1 string // action 1's tipo_cupon in the new catalog (T1 before)
		same  bool   // action 1 scores as the new action 2
	}{
		{"another coupon", false, "OTRO", true},
		{"the same coupon re-priced", false, "T1", false},
		{"another coupon, after a catalog without the id", true, "OTRO", true},
		{"the same coupon, back", true, "T1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			learnOnAction1(t, e, 30)
			if tc.away {
				if _, err := e.Campaigns.ReplaceCatalog("acme", []Action{fresh(3, "OTRA")}, t0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.Campaigns.ReplaceCatalog("acme", []Action{fresh(1, tc.tipo1), fresh(2, "NUEVO")}, t0); err != nil {
				t.Fatal(err)
			}
			got := armScores(t, e)
			if same := cmp.Equal(got[0], got[1]); same != tc.same {
				t.Errorf("action 1 (μ, σ) %v, new action 2 %v: scored the same %v, want %v", got[0], got[1], same, tc.same)
			}
			// The decisions that send the coupon now teach the model of it
			// (their records keep its key), not of action 2, never sent.
			learnOnAction1(t, e, 30)
			after := armScores(t, e)
			if !(after[0][1] < after[1][1]) {
				t.Errorf("after 30 sends of action 1: its σ %v, action 2's %v: want action 1's narrower", after[0][1], after[1][1])
			}
			// The stored catalog and model keep the keys.
			if diff := cmp.Diff(after, armScores(t, restart(e.db))); diff != "" {
				t.Errorf("scores after a restart (-before +after):\n%s", diff)
			}
		})
	}
}

// TestEvaluateReusedIDHasNoEstimate: admin evaluate's "always id" reads
// the decisions of the coupon the id names now. An id a new catalog gave
// another coupon (another tipo_cupon) has, until that coupon is sent, no
// estimate, as a new coupon has none: the old coupon's decisions were read
// under the new coupon's name. An id that keeps its tipo_cupon keeps them.
func TestEvaluateReusedIDHasNoEstimate(t *testing.T) {
	for _, tc := range []struct {
		tipo string
		want string
	}{{"OTRO", "ESS 0, DR false"}, {"T1", "ESS 20, DR true"}} {
		t.Run(tc.tipo, func(t *testing.T) {
			e, _ := newTestEngine(t, 1, nil)
			a := Action{ID: 1, Nombre: "uno", TipoCupon: tc.tipo, CostoEnvioCents: 50, DescuentoMaxCents: 1000, Activa: true}
			if _, err := e.Campaigns.ReplaceCatalog("acme", []Action{a}, t0); err != nil {
				t.Fatal(err)
			}
			x := make([]float64, VectorDim)
			ev := evaluateRecords(t, e, 40, func(i int) *DecisionRecord { // decided under the first catalog (T1)
				reward := int64(1000 + 100*(i%7))
				return &DecisionRecord{Nonce: fmt.Sprintf("n%011d", i), ClienteRef: fmt.Sprintf("c%07d", i), At: t0, Accion: i % 2, Propension: 0.5,
					X: x, Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, Priors: []float64{0, 0}, Estado: EstadoEjecutada, Recompensa: &reward}
			})
			got := ""
			for _, p := range ev.Policies {
				if p.Policy == "always_1_uno" {
					got = fmt.Sprintf("ESS %.0f, DR %v", p.ESS, !math.IsNaN(p.DR.Value))
				}
			}
			if got != tc.want {
				t.Errorf("always_1_uno: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCatalogIDSwappedBack: an id that names coupon A, then B, then A again
// gives A back its model key (what was learned of A), and B its own. A
// coupon of the first catalog is known by its id; back after B, it was
// given a key of its own (newArmKey), and what was learned of it under the
// id was lost to it (a coupon keyed so from the start kept its key, the
// key being a function of id and tipo_cupon).
func TestCatalogIDSwappedBack(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	cat, err := e.Campaigns.Catalog("acme")
	if err != nil {
		t.Fatal(err)
	}
	first := *cat.Action(1)
	key := func(tipo string) int {
		t.Helper()
		a := first
		a.TipoCupon, a.Arm = tipo, 0
		c, err := e.Campaigns.ReplaceCatalog("acme", []Action{a}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return c.Action(1).armKey()
	}
	a := first.armKey()
	got := []int{key("OTRO"), key(first.TipoCupon), key("OTRO"), key(first.TipoCupon)}
	b := got[0]
	if diff := cmp.Diff([]int{b, a, b, a}, got); diff != "" || a == b {
		t.Errorf("model keys of id 1 as B, A, B, A after A (key %d) (-want +got):\n%s", a, diff)
	}
}
