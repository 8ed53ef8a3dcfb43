package privacy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// spend is a campaign's sends and their expected discount (cents), as the
// budget record stores them.
type spend struct {
	Envios         int64 `json:"envios"`
	DescuentoCents int64 `json:"descuento_cents"`
}

func (s spend) plus(o spend) spend {
	return spend{s.Envios + o.Envios, s.DescuentoCents + o.DescuentoCents}
}

// caps are a campaign's max_envios and max_descuento_mxn (cents); nil: none.
type caps struct{ envios, descuento *int64 }

// budgetWorld drives a real engine and erasure over in-memory Pebble and
// keeps what the stored decision records cannot tell: the sends of erased
// customers that went out (they stay counted), and the excess a damaged
// budget record was read with (it counts as spent, contract §8).
type budgetWorld struct {
	t      *testing.T
	rng    *rand.Rand
	open   func() (*store.DB, error) // the store again from its files
	db     *store.DB
	e      *engine.Engine
	s      *Service
	clk    *clock.Fake
	refs   []string
	caps   map[string]caps
	gone   map[string]spend // sends of erased customers still counted
	excess map[string]spend // counted beyond the records since a damage
	// damaged: campaigns whose budget record was damaged and not read since.
	damaged map[string]bool
	erasing string   // the customer being erased (countGone)
	ids     []string // decision ids delivered to the caller
	failed  []string // failed batch jobs (voided, maybe again)
	jobs    int
}

var budgetCampaigns = []string{"c1", "c2"}

func newBudgetWorld(t *testing.T, seed uint64) *budgetWorld {
	fs := store.NewMemFS()
	w := &budgetWorld{t: t, rng: rand.New(rand.NewPCG(seed, 99)), clk: clock.NewFake(t0),
		open: func() (*store.DB, error) { return store.Open("db", fs) },
		caps: map[string]caps{}, gone: map[string]spend{}, excess: map[string]spend{}, damaged: map[string]bool{}}
	db, err := w.open()
	if err != nil {
		t.Fatal(err)
	}
	s := store.DefaultSettings()
	s.ControlShare, s.RateLimits = 0, false
	s.RewardWindow, s.RewardGrace = 24*time.Hour, 0
	if err := db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: t0, Sandbox: true, ClockNow: t0, Settings: s}); err != nil {
		t.Fatal(err)
	}
	w.attach(db)
	t.Cleanup(func() { w.db.Close() })
	for i := range 30 {
		w.refs = append(w.refs, fmt.Sprintf("cliente-%03d", i))
	}
	w.catalog()
	for _, c := range budgetCampaigns {
		w.redefine(c)
	}
	return w
}

// attach builds the engine and the privacy service over db, as a start does.
func (w *budgetWorld) attach(db *store.DB) {
	w.db = db
	// Without the send gate, a new tenant's policy sends often enough for
	// budgets to bind (the test's configuration, not the product's).
	cfg := policy.DefaultConfig()
	cfg.Gate = false
	w.e = engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: w.clk.Now, Seed: w.rng.Uint64(), Policy: &cfg})
	w.s = newService(w.e, db, w.clk.Now)
	w.s.beforeCommit = w.countGone
}

// countGone runs in an erasure under the customer's locks, before its
// commit: the customer's sends that went out stay counted.
func (w *budgetWorld) countGone() {
	for _, r := range w.recount() {
		if r.rec.ClienteRef == w.erasing && r.counted && r.rec.Estado != engine.EstadoPendiente {
			w.gone[r.rec.CampanaID] = w.gone[r.rec.CampanaID].plus(spend{1, r.rec.BudgetCents})
		}
	}
}

// reopen closes the store and opens it again from its files.
func (w *budgetWorld) reopen() {
	if err := w.db.Close(); err != nil {
		w.t.Fatal(err)
	}
	db, err := w.open()
	if err != nil {
		w.t.Fatal(err)
	}
	w.attach(db)
}

func (w *budgetWorld) now() time.Time {
	now, err := w.e.Records().TenantNow("acme")
	if err != nil {
		w.t.Fatal(err)
	}
	return now
}

// catalog replaces the catalog: three coupons with random descuento_max.
func (w *budgetWorld) catalog() {
	var acts []engine.Action
	for i := 1; i <= 3; i++ {
		acts = append(acts, engine.Action{ID: i, Nombre: fmt.Sprintf("cupon%d", i), TipoCupon: fmt.Sprintf("T%d", i),
			CostoEnvioCents: 0, DescuentoMaxCents: int64(100 * (1 + w.rng.IntN(20))), DescuentoPct: 10, Activa: true})
	}
	if _, err := w.e.Campaigns.ReplaceCatalog("acme", acts, w.now()); err != nil {
		w.t.Fatal(err)
	}
}

// redefine puts campaign c with random caps (absent, 0, or small enough
// to bind, often below what is already spent).
func (w *budgetWorld) redefine(c string) {
	pick := func(scale int64) *int64 {
		if w.rng.IntN(5) == 0 {
			return nil
		}
		v := w.rng.Int64N(12) * scale
		return &v
	}
	cp := caps{envios: pick(1), descuento: pick(500)}
	if _, err := w.e.Campaigns.PutCampaign("acme", engine.Campaign{ID: c, Canal: "push", Descripcion: "d",
		MaxEnvios: cp.envios, MaxDescuentoCents: cp.descuento}, w.now()); err != nil {
		w.t.Fatal(err)
	}
	w.caps[c] = cp
}

func (w *budgetWorld) ref() string { return w.refs[w.rng.IntN(len(w.refs))] }

func (w *budgetWorld) campaign() string { return budgetCampaigns[w.rng.IntN(len(budgetCampaigns))] }

// decide makes an online decision.
func (w *budgetWorld) decide(ref, c string) (string, error) {
	d, err := w.e.Decide("acme", engine.Request{ClienteRef: ref, Canal: "push", CampanaID: c, CapExempt: true})
	if err != nil {
		return "", err
	}
	return d.DecisionID, nil
}

// confirm confirms decision id with a random outcome; refused ones are fine.
func (w *budgetWorld) confirm(id string) error {
	var c engine.Confirmation
	switch w.rng.IntN(3) {
	case 0:
		c.Ejecutada = true
	case 1:
		c.MotivoRechazo = "no"
	case 2:
		other := 0
		c.Ejecutada, c.AccionReal = true, &other
	}
	return w.confirmAs(id, c)
}

// confirmAs confirms decision id with c; refused ones are fine.
func (w *budgetWorld) confirmAs(id string, c engine.Confirmation) error {
	_, err := w.e.Confirm("acme", id, c)
	if errors.Is(err, engine.ErrAlreadyConfirmed) || errors.Is(err, engine.ErrDecisionExpired) || errors.Is(err, engine.ErrNotFound) {
		return nil
	}
	return err
}

// batch runs a batch job over some customers, as the runner does: the
// sends the budget affords go to the first customers. A job that fails
// (its pending chunk dropped, or its committed decisions never delivered)
// is voided, at once or later (a restart's Recover).
func (w *budgetWorld) batch(c string, refs []string, fail bool) ([]string, string, error) {
	w.jobs++
	job := fmt.Sprintf("job-%d", w.jobs)
	bd, err := w.e.NewBatchDecider("acme", job, c)
	if err != nil {
		return nil, "", err
	}
	defer bd.Close()
	remaining, limited := bd.SendBudget()
	var ids []string
	sends := int64(0)
	for _, ref := range refs {
		d, err := bd.Decide(ref, limited && sends >= remaining)
		if err != nil {
			return nil, "", err
		}
		if d.Accion != 0 {
			sends++
		}
		ids = append(ids, d.DecisionID)
	}
	if fail && w.rng.IntN(2) == 0 {
		return nil, job, nil // dropped by Close
	}
	if err := bd.Flush(); err != nil {
		return nil, "", err
	}
	if fail {
		return nil, job, nil
	}
	return ids, "", nil
}

// learn advances the tenant clock by d and runs the learner until nothing is due.
func (w *budgetWorld) learn(d time.Duration) error {
	if _, err := w.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil }); err != nil {
		return err
	}
	for range 20 {
		st, err := w.e.Learner.Learn("acme")
		if err != nil || !st.Worked() {
			return err
		}
	}
	return nil
}

// erase deletes customer ref as the deletion job does; its sends that went
// out stay counted.
func (w *budgetWorld) erase(ref string) error {
	w.erasing = ref
	_, err := w.s.eraseCustomer("acme", ref, w.s.CustomerHash("acme", ref), nil)
	return err
}

// damage overwrites campaign c's budget record with bytes that do not
// decode and starts again: the budget must then read as spent.
func (w *budgetWorld) damage(c string) {
	b := w.db.NewBatch()
	defer b.Close()
	b.Set(store.BudgetKey("acme", c), []byte("{not json"))
	if err := b.Commit(); err != nil {
		w.t.Fatal(err)
	}
	w.damaged[c] = true
	w.reopen()
}

// countedRecord is a stored campaign send and whether it still counts
// against its budget: confirmed as sent, or pending and not yet given back
// by its expiry (its expiry queue entry is still there).
type countedRecord struct {
	rec     *engine.DecisionRecord
	counted bool
}

// recount reads every stored campaign send.
func (w *budgetWorld) recount() []countedRecord {
	var nonces []string
	lo, hi := store.CustomerDecisionIndexSpan("acme")
	if err := w.db.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, nonce, ok := store.ParseCustomerDecisionKey("acme", k); ok {
			nonces = append(nonces, nonce)
		}
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
	var out []countedRecord
	for _, n := range nonces {
		r, err := w.e.Records().LoadDecision("acme", n)
		if errors.Is(err, engine.ErrNotFound) {
			continue // erased meanwhile
		}
		if err != nil {
			w.t.Fatalf("decision %s: %v", n, err)
		}
		if r.Accion == 0 || r.CampanaID == "" || r.EnRespaldo {
			continue
		}
		// A modificada confirmation counts accion_real's send instead (0: none).
		counted := r.Estado == engine.EstadoEjecutada || r.Estado == engine.EstadoModificada && *r.AccionReal != 0
		if r.Estado == engine.EstadoPendiente {
			has, err := w.db.Has(store.RewardQueueKey("acme", r.CaducaEn, "x", n))
			if err != nil {
				w.t.Fatal(err)
			}
			counted = has
		}
		out = append(out, countedRecord{r, counted})
	}
	return out
}

// check compares each campaign's stored budget with the recount from the
// decision records, and, when sent names campaigns that got new sends in
// the step, that their spend is within the caps.
func (w *budgetWorld) check(step string, sent map[string]bool) {
	w.t.Helper()
	recs := map[string]spend{}
	for _, r := range w.recount() {
		if r.counted {
			recs[r.rec.CampanaID] = recs[r.rec.CampanaID].plus(spend{1, r.rec.BudgetCents})
		}
	}
	for _, c := range budgetCampaigns {
		v, err := w.db.Get(store.BudgetKey("acme", c))
		var stored spend
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			w.t.Fatal(err)
		default:
			if json.Unmarshal(v, &stored) != nil {
				if !w.damaged[c] {
					w.t.Fatalf("%s: campaign %s budget record does not decode: %q", step, c, v)
				}
				continue // not read since it was damaged
			}
		}
		real := recs[c].plus(w.gone[c])
		if w.damaged[c] && !errors.Is(err, store.ErrNotFound) {
			// Read as spent: what it counts beyond the records stays.
			w.excess[c] = spend{stored.Envios - real.Envios, stored.DescuentoCents - real.DescuentoCents}
			delete(w.damaged, c)
			if w.excess[c].Envios < 0 || w.excess[c].DescuentoCents < 0 {
				w.t.Fatalf("%s: campaign %s damaged budget read as %+v, below the %+v its records count", step, c, stored, real)
			}
		}
		if want := real.plus(w.excess[c]); stored != want {
			w.t.Fatalf("%s: campaign %s stored budget %+v, want %+v (records %+v, erased %+v, damage %+v)",
				step, c, stored, want, recs[c], w.gone[c], w.excess[c])
		}
		cp := w.caps[c]
		if sent[c] && (cp.envios != nil && real.Envios > *cp.envios || cp.descuento != nil && real.DescuentoCents > *cp.descuento) {
			w.t.Fatalf("%s: campaign %s spends %+v over its caps envios %v descuento %v", step, c, real, deref(cp.envios), deref(cp.descuento))
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// sentTo returns the campaigns of ids that got a send, leaving out the
// ids in known (an open reward window answers with its decision) and
// adding the others to known.
func (w *budgetWorld) sentTo(known map[string]bool, ids ...string) map[string]bool {
	out := map[string]bool{}
	for _, id := range ids {
		if id == "" || known[id] {
			continue
		}
		known[id] = true
		r, err := w.e.DecisionByID("acme", id)
		if err == nil && r.Accion != 0 && r.CampanaID != "" {
			out[r.CampanaID] = true
		}
	}
	return out
}

// step runs one random operation and returns its name and the decisions it made.
func (w *budgetWorld) step() (string, []string, error) {
	switch op := w.rng.IntN(100); {
	case op < 30:
		ref, c := w.ref(), w.campaign()
		id, err := w.decide(ref, c)
		if id != "" {
			w.ids = append(w.ids, id)
		}
		return "decide " + ref + " " + c, []string{id}, err
	case op < 45 && len(w.ids) > 0:
		id := w.ids[w.rng.IntN(len(w.ids))]
		return "confirm", nil, w.confirm(id)
	case op < 55:
		refs := slices.Clone(w.refs)
		w.rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
		fail := w.rng.IntN(3) == 0
		ids, job, err := w.batch(w.campaign(), refs[:1+w.rng.IntN(12)], fail)
		w.ids = append(w.ids, ids...)
		if job != "" {
			w.failed = append(w.failed, job)
			if w.rng.IntN(2) == 0 {
				_, err = w.e.VoidJob("acme", job)
			}
		}
		return fmt.Sprintf("batch (fail %v)", fail), ids, err
	case op < 62 && len(w.failed) > 0:
		_, err := w.e.VoidJob("acme", w.failed[w.rng.IntN(len(w.failed))])
		return "void", nil, err
	case op < 67:
		ref := w.ref()
		return "erase " + ref, nil, w.erase(ref)
	case op < 74:
		c := w.campaign()
		w.redefine(c)
		return "redefine " + c, nil, nil
	case op < 78:
		w.catalog()
		return "catalog", nil, nil
	case op < 92:
		d := time.Duration(w.rng.IntN(4*24)) * time.Hour
		return "learn +" + d.String(), nil, w.learn(d)
	case op < 97:
		w.reopen()
		return "reopen", nil, nil
	default:
		c := w.campaign()
		if !w.capsCover(c) {
			return "no damage", nil, nil
		}
		w.damage(c)
		return "damage " + c, nil, nil
	}
}

// capsCover reports whether campaign c's caps are at or above what it
// spends: a damaged budget reads as spent at the caps, which undercounts
// a campaign redefined below its spend (see the report: left alone).
func (w *budgetWorld) capsCover(c string) bool {
	var real spend
	for _, r := range w.recount() {
		if r.counted && r.rec.CampanaID == c {
			real = real.plus(spend{1, r.rec.BudgetCents})
		}
	}
	real = real.plus(w.gone[c]).plus(w.excess[c])
	cp := w.caps[c]
	return (cp.envios == nil || *cp.envios >= real.Envios) && (cp.descuento == nil || *cp.descuento >= real.DescuentoCents)
}

// TestBudgetInvariantRandomSteps runs random sequences of online and batch
// decisions, confirmations, failed jobs voided (again), erasures, campaign
// and catalog redefinitions, expiries, restarts and damaged budget records,
// and after each step checks the stored budgets against a recount of the
// stored decisions (given back once, never twice) and the caps.
func TestBudgetInvariantRandomSteps(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newBudgetWorld(t, seed)
			known := map[string]bool{}
			for i := range 250 {
				name, ids, err := w.step()
				if err != nil {
					t.Fatalf("step %d %s: %v", i, name, err)
				}
				w.check(fmt.Sprintf("step %d %s", i, name), w.sentTo(known, ids...))
			}
			w.reopen()
			w.check("after reopen", nil)
		})
	}
}

// concurrentJob runs batch job job over ten customers picked by j and,
// when fail, voids it after its commit; it returns its decision ids.
func (w *budgetWorld) concurrentJob(job, c string, j int, fail bool) ([]string, error) {
	bd, err := w.e.NewBatchDecider("acme", job, c)
	if err != nil {
		return nil, err
	}
	defer bd.Close()
	remaining, limited := bd.SendBudget()
	sends := int64(0)
	var ids []string
	for k := range 10 {
		d, err := bd.Decide(w.refs[(j*7+k*3)%len(w.refs)], limited && sends >= remaining)
		if err != nil {
			return nil, err
		}
		if d.Accion != 0 {
			sends++
		}
		ids = append(ids, d.DecisionID)
	}
	if err := bd.Flush(); err != nil {
		return nil, err
	}
	if fail {
		if _, err := w.e.VoidJob("acme", job); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// TestBudgetInvariantConcurrent runs online decisions, batch jobs (some
// failing and voided), confirmations, erasures and learner passes at once,
// with the clock moving, and checks the stored budgets and caps after each
// round and after a restart.
func TestBudgetInvariantConcurrent(t *testing.T) {
	w := newBudgetWorld(t, 42)
	known := map[string]bool{}
	for round := range 6 {
		w.redefine("c1")
		w.redefine("c2")
		var mu sync.Mutex // guards the world's bookkeeping, not the engine
		var wg sync.WaitGroup
		errs, made := make(chan error, 16), []string(nil)
		run := func(seed uint64, fn func(r *rand.Rand) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(rand.New(rand.NewPCG(seed, uint64(round)))); err != nil {
					errs <- err
				}
			}()
		}
		for g := range 4 {
			run(uint64(g), func(r *rand.Rand) error {
				for range 25 {
					id, err := w.decide(w.refs[r.IntN(len(w.refs))], budgetCampaigns[r.IntN(2)])
					if err != nil {
						return err
					}
					mu.Lock()
					made = append(made, id)
					ids := slices.Clone(w.ids)
					mu.Unlock()
					if len(ids) > 0 && r.IntN(2) == 0 {
						if err := w.confirmAs(ids[r.IntN(len(ids))], engine.Confirmation{MotivoRechazo: "no"}); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
		run(10, func(r *rand.Rand) error {
			for j := range 4 {
				ids, err := w.concurrentJob(fmt.Sprintf("conc-%d-%d", round, j), budgetCampaigns[r.IntN(2)], j, j%2 == 1)
				if err != nil {
					return err
				}
				mu.Lock()
				made = append(made, ids...)
				if j%2 == 0 {
					w.ids = append(w.ids, ids...)
				}
				mu.Unlock()
			}
			return nil
		})
		run(11, func(r *rand.Rand) error {
			for range 5 {
				if err := w.learn(time.Duration(r.IntN(3*24)) * time.Hour); err != nil {
					return err
				}
			}
			return nil
		})
		run(12, func(r *rand.Rand) error {
			for range 3 {
				if err := w.erase(w.refs[r.IntN(len(w.refs))]); err != nil { // the only erasure: w.gone is its own
					return err
				}
			}
			return nil
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		w.ids = append(w.ids, made...)
		w.check(fmt.Sprintf("round %d", round), w.sentTo(known, made...))
	}
	w.reopen()
	w.check("after reopen", nil)
}
