package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
)

// TestPendingSendsHallucinate checks the uncertainty of a new action given
// its pending sends: n sends of weight w to customers with the same φ leave
// φᵀA⁻¹φ = q₀/(1 + n·w·q₀), q₀ the new-effect variance factor; the
// expected reward does not move; actions the model knows and models
// without data count nothing; the first folded reward ends the count.
func TestPendingSendsHallucinate(t *testing.T) {
	m := newPolicyModel()
	rng := rand.New(rand.NewPCG(5, 6))
	vec := func() []float64 { return randomVector(rng) }
	for i := 0; i < 300; i++ {
		m.update(vec(), i%2, 8000+4000*rng.NormFloat64(), 7000, 1)
	}
	pm := &publishedModel{m: m}
	x := vec()
	score := func(p *pendingSends) candidate {
		sc := pm.scoreX(x, []candidate{{id: 7, prior: 1000}, {id: 1, prior: 900}})
		p.shrink(m, x, sc)
		return sc.cands[0]
	}
	var p pendingSends
	before := score(&p)
	const n, w = 25, 2.0
	for i := 0; i < n; i++ {
		p.add(m, x, 7, w)
		p.add(m, x, 1, 1) // known to the model: not counted
	}
	after := score(&p)
	var buf [basisDim]float64
	phi := basis(x, &buf)
	q0 := m.newVar / m.noise() * dot(phi, phi)
	want := before.sigma / math.Sqrt(1+n*w*q0)
	if math.Abs(after.sigma-want) > 1e-9*want {
		t.Errorf("σ after %d sends of weight %v: %v, want %v (before %v)", n, w, after.sigma, want, before.sigma)
	}
	if after.mu != before.mu {
		t.Errorf("μ moved with pending sends: %v → %v", before.mu, after.mu)
	}
	if _, ok := p.arms[1]; ok {
		t.Error("sends of an action the model knows were counted")
	}
	var cold pendingSends
	cold.add(newPolicyModel(), x, 7, 1)
	if len(cold.arms) != 0 {
		t.Error("a model without data counted pending sends: cold-start exploration must keep its optimism")
	}
	m.update(x, 7, 5000, 1000, 1)
	model := pm.scoreX(x, []candidate{{id: 7, prior: 1000}}).cands[0]
	if got := score(&p); got.sigma != model.sigma {
		t.Errorf("after the action's first folded reward σ = %v, want the model's %v", got.sigma, model.sigma)
	}
	if _, ok := p.arms[7]; ok {
		t.Error("the pending matrix outlived the action's first folded reward")
	}
}

// TestNewActionOptimismFadesWithSends adds a coupon to a catalog whose
// other actions the model has learned, then decides new customers (all
// with the same features) before any of its rewards is final: its σ and
// its probability must fall as it is sent, its μ must not move. (How far σ
// falls depends on how large the learned effects are, τ², so the test asks
// only that it falls; without pending sends it would not move at all.)
func TestNewActionOptimismFadesWithSends(t *testing.T) {
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	rewardBacklog(t, e, db, 200)
	if st, err := e.Learn("acme"); err != nil || st.Folded == 0 {
		t.Fatalf("learn: %+v %v", st, err)
	}
	cat := e.catalogOf("acme")
	acts := append([]Action(nil), cat.Acciones...)
	acts = append(acts, Action{ID: 3, Nombre: "nuevo", TipoCupon: "T3", CostoEnvioCents: 50, DescuentoMaxCents: 2000, DescuentoPct: 10, Activa: true})
	_, now, _ := e.tenantNow("acme")
	if _, err := e.ReplaceCatalog("acme", acts, now); err != nil {
		t.Fatal(err)
	}
	type view struct{ mu, sigma, p float64 }
	var first, last view
	sent := 0
	for i := 0; i < 400; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("nuevo-%d", i), Canal: "push", CapExempt: true, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		var v view
		for _, a := range d.Detalle.Acciones {
			if a.Accion == 3 {
				v = view{a.MuMXN, a.SigmaMXN, a.Probabilidad}
			}
		}
		if i == 0 {
			first = v
		}
		last = v
		if d.Accion == 3 {
			sent++
		}
	}
	t.Logf("new action: first %+v, last %+v, sent %d of 400", first, last, sent)
	if sent == 0 {
		t.Fatal("the new action was never sent")
	}
	if !(last.sigma < first.sigma && last.p < first.p) || last.mu != first.mu {
		t.Errorf("new action after %d sends: σ %v → %v, p %v → %v, μ %v → %v; want σ and p lower, μ unchanged",
			sent, first.sigma, last.sigma, first.p, last.p, first.mu, last.mu)
	}
}
