// Package lab runs a simulated retailer against the real engine: decider,
// learner and evaluator in process, on a sandbox tenant's clock, and
// compares what the engine earns with baselines that know more (the
// oracle) or explore differently.
//
// The world. Customers are of four kinds, which the engine never sees but
// can infer from their history (purchase frequency, ticket size, how they
// treated past coupons):
//
//	persuadable  buys more with a coupon; the lift grows with the discount's
//	             share of the ticket (so the best coupon depends on the ticket)
//	sure thing   buys often anyway; a coupon only gives margin away
//	lost cause   hardly buys; coupons barely move them
//	sleeping dog buys like a persuadable but opts out when contacted
//
// Purchases of a week are spread over the reward window's days. Rewards
// follow contract section 5: margin in the window minus the sending cost
// minus the opt-out penalty.
//
// Every week each customer is decided once: the engine through
// engine.Decide (with its exploration), the baselines on the same customers
// and features. A policy's weekly figure is the true expected reward of the
// actions it chose (no sampling noise in the comparison); the engine and
// the greedy baselines learn from sampled outcomes.
package lab

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	policypkg "github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// Config sets up a lab run.
type Config struct {
	Customers int
	Weeks     int
	Seed      uint64
	// Scenario: "base", "new-coupon" (a fourth coupon appears at mid-run,
	// best for high tickets) or "drift" (persuadables' response changes at
	// mid-run: fixed-amount coupons start to work better).
	Scenario string
}

// Row is one week of the report: reward per decision (MXN) per policy.
type Row struct {
	Week       int     `json:"week"`
	Engine     float64 `json:"engine"`
	Never      float64 `json:"never_send"`
	BestSingle float64 `json:"best_single_action"`
	Random     float64 `json:"uniform_random"`
	Greedy     float64 `json:"greedy"`
	EpsGreedy  float64 `json:"epsilon_greedy_0_05"`
	Oracle     float64 `json:"oracle"`
	// EngineTop is what the engine would earn without exploring: the
	// action of highest expected value in its own model (its detalle).
	EngineTop float64 `json:"engine_top_action"`
	// EffectError is how far the engine's model is from the truth: the
	// root mean square, over customers and coupons, of the estimated effect
	// μ(coupon) − μ(none) (its detalle) minus the true one (MXN). Week 1
	// shows the economic prior's error.
	EffectError float64 `json:"effect_error_mxn"`
	// NewShare is the share of customers the engine sent the new coupon
	// (scenario new-coupon), OracleNewShare the oracle's.
	NewShare       float64 `json:"new_coupon_share,omitempty"`
	OracleNewShare float64 `json:"oracle_new_coupon_share,omitempty"`
	Version        string  `json:"politica_version"`
	// Gate is the engine's send gate at the week's end (as in a world's
	// weeks: each frequency band's state, test and sending share); Guard
	// the guard's state ("inactive", "active baseline=0").
	Gate  string `json:"gate,omitempty"`
	Guard string `json:"guard,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Config Config `json:"config"`
	Rows   []Row  `json:"weeks"`
	// UpliftCapture is (engine − never) / (oracle − never) over the last
	// third of the weeks; GreedyCapture and EpsCapture the same for the
	// baselines.
	UpliftCapture float64 `json:"uplift_capture_last_third"`
	GreedyCapture float64 `json:"greedy_capture_last_third"`
	EpsCapture    float64 `json:"epsilon_greedy_capture_last_third"`
	// TopCapture is the same for EngineTop: UpliftCapture's shortfall from
	// it is the price of exploration.
	TopCapture float64 `json:"engine_top_action_capture_last_third"`
	// WeeksToOracleShare: weeks after its introduction until the engine
	// sends the new coupon to at least half the oracle's share (-1: never).
	WeeksToOracleShare int `json:"weeks_to_new_coupon_oracle_share,omitempty"`
	// Losses says where the engine falls short of the oracle over the last
	// third, by customer kind (persuadable, sure thing, lost cause,
	// sleeping dog: the lab's truth, which the engine never sees).
	Losses []Loss `json:"losses_last_third"`
}

// Loss is one customer kind's share of the engine's shortfall over the
// last third. Money is MXN per decision of the last third (all kinds), so
// the kinds' RegretMXN add up to the oracle's reward minus the engine's.
type Loss struct {
	Kind      string `json:"kind"`
	Decisions int    `json:"decisions"`
	// RegretMXN is the oracle's expected reward minus that of the action
	// the engine drew; TopRegretMXN the same for its top-ranked action
	// (no exploration).
	RegretMXN    float64 `json:"regret_mxn"`
	TopRegretMXN float64 `json:"top_action_regret_mxn"`
	// Mistakes are the costliest pairs (top-ranked action, oracle's
	// action), most costly first, at most three.
	Mistakes []Mistake `json:"mistakes"`
	// EffectBiasMXN is, per coupon, the mean over this kind's decisions of
	// the engine's estimated effect μ(coupon) − μ(none) minus the true
	// effect (MXN over the window): positive, the engine overrates the
	// coupon for these customers.
	EffectBiasMXN map[string]float64 `json:"effect_bias_mxn"`
}

// Mistake is a (top-ranked action, oracle's action) pair and what it cost.
type Mistake struct {
	Engine    int     `json:"engine_action"`
	Oracle    int     `json:"oracle_action"`
	Decisions int     `json:"decisions"`
	RegretMXN float64 `json:"regret_mxn"`
}

type kind int

const (
	persuadable kind = iota
	sureThing
	lostCause
	sleepingDog
	kinds // the number of kinds
)

func (k kind) String() string {
	return [...]string{"persuadable", "sure thing", "lost cause", "sleeping dog"}[k]
}

type simCustomer struct {
	ref    string
	kind   kind
	ticket float64 // MXN without VAT
	base   float64 // weekly purchase probability without a coupon
	optout bool
}

const (
	marginRate   = 0.35
	penaltyMXN   = 50
	window       = 7 * 24 * time.Hour
	labTenant    = "lab"
	newCouponID  = 4
	newCouponDay = 0
)

type coupon struct {
	id    int
	name  string
	pct   float64 // share of the ticket, capped by max
	max   float64 // MXN
	fixed float64 // fixed amount MXN (pct 0)
	cost  float64 // MXN per send
	canal string
}

var coupons = []coupon{
	{1, "10pct_max50", 0.10, 50, 0, 0.5, ""},
	{2, "20pct_max150", 0.20, 150, 0, 0.5, ""},
	{3, "100mxn", 0, 0, 100, 1.0, ""},
}

// lateCoupon is cheap to send (app push) and best for high tickets.
var lateCoupon = coupon{newCouponID, "12pct_max120_app", 0.12, 120, 0, 0.1, ""}

func (c coupon) discount(ticket float64) float64 {
	if c.fixed > 0 {
		return math.Min(c.fixed, ticket)
	}
	return math.Min(c.pct*ticket, c.max)
}

// world holds the truth.
type world struct {
	drift bool
}

// buyProb is the probability the customer buys in the window given coupon c
// (nil: none).
func (w *world) buyProb(s *simCustomer, c *coupon) float64 {
	if c == nil || s.optout {
		return s.base
	}
	share := c.discount(s.ticket) / s.ticket
	switch s.kind {
	case persuadable:
		lift := 0.6 * math.Sqrt(share)
		if w.drift && c.fixed > 0 {
			lift *= 1.8
		}
		return math.Min(0.95, s.base+lift)
	case lostCause:
		return math.Min(0.95, s.base+0.05*share)
	default:
		return s.base
	}
}

func redeemProb(k kind) float64 {
	switch k {
	case sureThing:
		return 0.7
	case sleepingDog:
		return 0 // sleeping dogs never use coupons; their history shows it
	default:
		return 0.9
	}
}

func optoutProb(s *simCustomer, c *coupon) float64 {
	if c == nil || s.kind != sleepingDog || s.optout {
		return 0
	}
	return 0.3
}

// expected is the true expected reward (MXN) of coupon c for s.
func (w *world) expected(s *simCustomer, c *coupon) float64 {
	p := w.buyProb(s, c)
	r := p * s.ticket * marginRate
	if c != nil {
		r -= p*redeemProb(s.kind)*c.discount(s.ticket) + c.cost
		r -= optoutProb(s, c) * penaltyMXN
	}
	return r
}

// Run executes the lab. logf, if not nil, receives progress lines.
func Run(ctx context.Context, cfg Config, logf func(string, ...any)) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s, err := newSingleRun(cfg)
	if err != nil {
		return nil, err
	}
	defer s.db.Close()
	err = eachWeek(ctx, cfg.Weeks, func(week int) error {
		row, err := s.week(week)
		if err == nil {
			logf("week %2d  engine %7.2f  never %7.2f  oracle %7.2f", week, row.Engine, row.Never, row.Oracle)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.rep.Losses = s.losses.report()
	s.rep.captures()
	return s.rep, nil
}

// withDefaults fills cfg's unset sizes and checks its scenario.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Customers <= 0 {
		cfg.Customers = 2000
	}
	if cfg.Weeks <= 0 {
		cfg.Weeks = 12
	}
	if cfg.Scenario == "" {
		cfg.Scenario = "base"
	}
	switch cfg.Scenario {
	case "base", "new-coupon", "drift":
	default:
		return cfg, fmt.Errorf("lab: unknown scenario %q (base, new-coupon, drift)", cfg.Scenario)
	}
	return cfg, nil
}

// singleRun is the state of one run of the single-world lab.
type singleRun struct {
	cfg    Config
	db     *store.DB
	clk    *clock.Fake
	eng    *engine.Engine
	brng   *rand.Rand // the baselines' own stream
	w      *world
	active []coupon
	custs  []*simCustomer
	sim    *simulator
	rep    *Report
	losses *lossTally
	// greedy and eps are the greedy and ε-greedy 0.05 baselines.
	greedy, eps *engineModel
	introduced  int // week the new coupon came (-1: not yet)
}

// newSingleRun opens the run's store, tenant and engine, installs the
// catalog and draws the customers and their 12 weeks of history.
func newSingleRun(cfg Config) (*singleRun, error) {
	l, err := openLab(BenchSetup{Tenant: labTenantSetup(0), Seed: cfg.Seed + 1})
	if err != nil {
		return nil, err
	}
	db, clk, eng := l.db, l.clk, l.eng
	start := clk.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0xc0ffee))
	// The baselines draw from their own stream, so that a change in what
	// the engine does (which moves the world's stream) leaves their
	// choices and outcomes as they were: the engine's rivals in a run do
	// not depend on the engine's luck.
	brng := rand.New(rand.NewPCG(cfg.Seed^0x5eed, cfg.Seed+0xba5e))
	r := &singleRun{cfg: cfg, db: db, clk: clk, eng: eng, brng: brng, w: &world{}, active: append([]coupon(nil), coupons...),
		rep: &Report{Config: cfg, WeeksToOracleShare: -1}, losses: newLossTally(), greedy: newEngineModel(), eps: newEngineModel(), introduced: -1}
	if err := installCatalog(eng, r.active, start); err != nil {
		db.Close()
		return nil, err
	}
	r.custs = drawCustomers(cfg.Customers, rng)
	r.sim = &simulator{eng: eng, db: db, rng: rng, w: r.w, seq: 0}
	if err := r.sim.history(r.custs, start); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

// drawCustomers draws n customers of the four kinds.
func drawCustomers(n int, rng *rand.Rand) []*simCustomer {
	custs := make([]*simCustomer, n)
	for i := range custs {
		c := &simCustomer{ref: fmt.Sprintf("lab-cliente-%06d", i), ticket: 200 + rng.Float64()*1300}
		switch u := rng.Float64(); {
		case u < 0.40:
			c.kind, c.base = persuadable, 0.20+0.1*rng.Float64()
		case u < 0.65:
			c.kind, c.base = sureThing, 0.7+0.2*rng.Float64()
		case u < 0.90:
			c.kind, c.base = lostCause, 0.02+0.03*rng.Float64()
		default:
			c.kind, c.base = sleepingDog, 0.20+0.1*rng.Float64()
		}
		custs[i] = c
	}
	return custs
}

// weekTally accumulates one week of the single-world lab.
type weekTally struct {
	row          Row
	actionTotals []float64 // per action (0: nothing), for the best single action
	events       []engine.IngestEvent
	newSent      int // customers the engine sent the new coupon
	oracleNew    int // customers whose best action is the new coupon
	effSq        float64
	effN         int
}

// week runs one week: the new coupon or the drift when their week comes,
// every customer decided by the engine and the baselines, the engine's
// outcomes ingested, the clock moved a window and the learner run.
func (s *singleRun) week(week int) (*Row, error) {
	_, now, err := tenantNow(s.db)
	if err != nil {
		return nil, err
	}
	mid := week == s.cfg.Weeks/2+1
	if mid && s.cfg.Scenario == "new-coupon" {
		s.active = append(s.active, lateCoupon)
		if err := installCatalog(s.eng, s.active, now); err != nil {
			return nil, err
		}
		s.introduced = week
	}
	if mid && s.cfg.Scenario == "drift" {
		s.w.drift = true
	}
	t := &weekTally{row: Row{Week: week}, actionTotals: make([]float64, len(s.active)+1)}
	for _, c := range s.custs {
		if err := s.customer(t, c, week, now); err != nil {
			return nil, err
		}
	}
	s.finishRow(t, week)
	if err := s.closeWindow(t.events); err != nil {
		return nil, err
	}
	status, err := s.eng.Learner.Status(labTenant)
	if err != nil {
		return nil, err
	}
	t.row.Version, t.row.Guard, t.row.Gate = status.PoliticaVersion, guardState(status), gateSummary(status.Guard.Gate)
	s.rep.Rows = append(s.rep.Rows, t.row)
	return &s.rep.Rows[len(s.rep.Rows)-1], nil
}

// customer decides c once by the engine and by every baseline, tallies
// their true expected rewards and samples the outcomes.
func (s *singleRun) customer(t *weekTally, c *simCustomer, week int, now time.Time) error {
	eng, w, active, row := s.eng, s.w, s.active, &t.row
	f, err := eng.CustomerFeatures(labTenant, c.ref)
	if err != nil {
		return err
	}
	d, err := eng.Decide(labTenant, engine.Request{ClienteRef: c.ref, Canal: "push", CapExempt: true, Explain: true})
	if err != nil {
		return err
	}
	chosen := couponByID(active, d.Accion)
	if _, err := eng.Confirm(labTenant, d.DecisionID, engine.Confirmation{Ejecutada: true}); err != nil {
		return err
	}
	topID := topAction(d)
	drawnV, topV := w.expected(c, chosen), w.expected(c, couponByID(active, topID))
	row.Engine += drawnV
	row.EngineTop += topV
	errs := effectErrors(w, c, active, d)
	for _, e := range errs {
		t.effSq += e.err * e.err
	}
	t.effN += len(errs)
	if d.Accion == newCouponID {
		t.newSent++
	}
	// Baselines on the same customer and features.
	best, bestV := (*coupon)(nil), w.expected(c, nil)
	t.actionTotals[0] += bestV
	for j := range active {
		v := w.expected(c, &active[j])
		t.actionTotals[j+1] += v
		row.Random += v
		if v > bestV {
			best, bestV = &active[j], v
		}
	}
	row.Random += w.expected(c, nil)
	row.Oracle += bestV
	if week > s.cfg.Weeks-s.cfg.Weeks/3 {
		s.losses.add(c.kind, bestV, drawnV, topV, topID, toID(best), errs, active)
	}
	if best != nil && best.id == newCouponID {
		t.oracleNew++
	}
	row.Never += w.expected(c, nil)
	gc := pickGreedy(s.greedy, &f, now, active, s.brng, 0)
	ec := pickGreedy(s.eps, &f, now, active, s.brng, 0.05)
	row.Greedy += w.expected(c, gc)
	row.EpsGreedy += w.expected(c, ec)
	// Outcomes: the engine's become events; the baselines' only teach them.
	t.events = append(t.events, s.sim.outcome(c, chosen, d.DecisionID, now)...)
	learnGreedy(s.greedy, &f, now, active, gc, 100*s.sim.sample(s.brng, c, gc))
	learnGreedy(s.eps, &f, now, active, ec, 100*s.sim.sample(s.brng, c, ec))
	return nil
}

// finishRow turns the week's sums into per-decision figures.
func (s *singleRun) finishRow(t *weekTally, week int) {
	row := &t.row
	n := float64(len(s.custs))
	row.Random /= float64(len(s.active) + 1)
	row.Engine, row.Never, row.Random, row.Greedy, row.EpsGreedy, row.Oracle, row.EngineTop = row.Engine/n, row.Never/n, row.Random/n, row.Greedy/n, row.EpsGreedy/n, row.Oracle/n, row.EngineTop/n
	if t.effN > 0 {
		row.EffectError = math.Sqrt(t.effSq / float64(t.effN))
	}
	best := t.actionTotals[0]
	for _, v := range t.actionTotals[1:] {
		best = math.Max(best, v)
	}
	row.BestSingle = best / n
	if s.introduced > 0 {
		row.NewShare, row.OracleNewShare = float64(t.newSent)/n, float64(t.oracleNew)/n
		if s.rep.WeeksToOracleShare < 0 && t.oracleNew > 0 && row.NewShare >= 0.5*row.OracleNewShare {
			s.rep.WeeksToOracleShare = week - s.introduced
		}
	}
}

// closeWindow ingests the week's events, moves the clock a window and
// runs the learner until nothing is due.
func (s *singleRun) closeWindow(events []engine.IngestEvent) error {
	if err := s.sim.ingest(events); err != nil {
		return err
	}
	return advanceAndLearn(&openedLab{db: s.db, clk: s.clk, eng: s.eng}, window)
}

// captures sets the report's captures over the last third of the weeks.
func (rep *Report) captures() {
	from := len(rep.Rows) - len(rep.Rows)/3
	var e, nv, o, g, ep, tp float64
	for _, r := range rep.Rows[from:] {
		e, nv, o, g, ep, tp = e+r.Engine, nv+r.Never, o+r.Oracle, g+r.Greedy, ep+r.EpsGreedy, tp+r.EngineTop
	}
	if o-nv > 0 {
		rep.TopCapture = (tp - nv) / (o - nv)
		rep.UpliftCapture = (e - nv) / (o - nv)
		rep.GreedyCapture = (g - nv) / (o - nv)
		rep.EpsCapture = (ep - nv) / (o - nv)
	}
}

// effectErr is the error (MXN) of the effect a decision's detalle
// estimates for one coupon, against the truth.
type effectErr struct {
	id  int
	err float64
}

// effectErrors returns the errors of the effects μ(coupon) − μ(none) the
// decision's detalle estimates for c's coupons.
func effectErrors(w *world, c *simCustomer, active []coupon, d *engine.Decision) []effectErr {
	if d.Detalle == nil {
		return nil
	}
	var none float64
	found := false
	for _, a := range d.Detalle.Acciones {
		if a.Accion == 0 {
			none, found = a.MuMXN, true
		}
	}
	if !found {
		return nil
	}
	base := w.expected(c, nil)
	var errs []effectErr
	for _, a := range d.Detalle.Acciones {
		cp := couponByID(active, a.Accion)
		if a.Accion == 0 || cp == nil {
			continue
		}
		errs = append(errs, effectErr{a.Accion, (a.MuMXN - none) - (w.expected(c, cp) - base)})
	}
	return errs
}

// lossTally accumulates Report.Losses.
type lossTally struct {
	n       int
	kinds   [kinds]Loss
	pairs   [kinds]map[[2]int]*Mistake
	biasSum [kinds]map[string]float64
	biasN   [kinds]map[string]int
}

func newLossTally() *lossTally {
	t := &lossTally{}
	for k := range t.kinds {
		t.kinds[k].Kind = kind(k).String()
		t.pairs[k] = map[[2]int]*Mistake{}
		t.biasSum[k], t.biasN[k] = map[string]float64{}, map[string]int{}
	}
	return t
}

// add counts one decision for a customer of kind k: the oracle's, the
// drawn action's and the top-ranked action's expected rewards, the top and
// oracle actions, and the decision's effect errors.
func (t *lossTally) add(k kind, oracle, drawn, top float64, topID, oracleID int, errs []effectErr, active []coupon) {
	t.n++
	l := &t.kinds[k]
	l.Decisions++
	l.RegretMXN += oracle - drawn
	l.TopRegretMXN += oracle - top
	if topID != oracleID {
		m := t.pairs[k][[2]int{topID, oracleID}]
		if m == nil {
			m = &Mistake{Engine: topID, Oracle: oracleID}
			t.pairs[k][[2]int{topID, oracleID}] = m
		}
		m.Decisions++
		m.RegretMXN += oracle - top
	}
	for _, e := range errs {
		name := couponByID(active, e.id).name
		t.biasSum[k][name] += e.err
		t.biasN[k][name]++
	}
}

// report returns the losses per kind, in MXN per decision of all kinds.
func (t *lossTally) report() []Loss {
	if t.n == 0 {
		return nil
	}
	n := float64(t.n)
	out := make([]Loss, 0, kinds)
	for k := range t.kinds {
		l := t.kinds[k]
		if l.Decisions == 0 {
			continue
		}
		l.RegretMXN /= n
		l.TopRegretMXN /= n
		l.Mistakes = []Mistake{}
		for _, m := range t.pairs[k] {
			mm := *m
			mm.RegretMXN /= n
			l.Mistakes = append(l.Mistakes, mm)
		}
		slices.SortFunc(l.Mistakes, func(a, b Mistake) int {
			if c := cmp.Compare(b.RegretMXN, a.RegretMXN); c != 0 {
				return c
			}
			return cmp.Compare(a.Engine*1000+a.Oracle, b.Engine*1000+b.Oracle)
		})
		l.Mistakes = l.Mistakes[:min(3, len(l.Mistakes))]
		l.EffectBiasMXN = map[string]float64{}
		for name, s := range t.biasSum[k] {
			l.EffectBiasMXN[name] = s / float64(t.biasN[k][name])
		}
		out = append(out, l)
	}
	return out
}

func toID(c *coupon) int {
	if c == nil {
		return 0
	}
	return c.id
}

// topAction is the action of d with the highest μ in its detalle.
func topAction(d *engine.Decision) int {
	if d.Detalle == nil || len(d.Detalle.Acciones) == 0 {
		return d.Accion
	}
	best := d.Detalle.Acciones[0]
	for _, a := range d.Detalle.Acciones[1:] {
		if a.MuMXN > best.MuMXN {
			best = a
		}
	}
	return best.Accion
}

func couponByID(active []coupon, id int) *coupon {
	for i := range active {
		if active[i].id == id {
			return &active[i]
		}
	}
	return nil
}

func toAction(c *coupon) *engine.Action {
	if c == nil {
		return nil
	}
	a := catalogAction(*c)
	return &a
}

func catalogAction(c coupon) engine.Action {
	a := engine.Action{ID: c.id, Nombre: c.name, TipoCupon: c.name, CostoEnvioCents: int64(c.cost * 100), Activa: true}
	if c.fixed > 0 {
		a.DescuentoMaxCents = int64(c.fixed * 100)
	} else {
		a.DescuentoMaxCents, a.DescuentoPct = int64(c.max*100), c.pct*100
	}
	return a
}

func installCatalog(eng *engine.Engine, active []coupon, now time.Time) error {
	var acts []engine.Action
	for _, c := range active {
		acts = append(acts, catalogAction(c))
	}
	_, err := eng.Campaigns.ReplaceCatalog(labTenant, acts, now)
	return err
}

// learnGreedy folds into m the reward (cents) of c (nil: nothing) among
// the active coupons: the reward itself (the single world's simulator
// gives no tickets, so the model's ticket target does not apply).
func learnGreedy(m *engineModel, f *engine.Features, now time.Time, active []coupon, c *coupon, reward float64) {
	acts := make([]engine.Action, len(active))
	k := -1
	for i := range active {
		acts[i] = catalogAction(active[i])
		if c != nil && active[i].id == c.id {
			k = i
		}
	}
	m.update(f, now, acts, k, policypkg.Outcome{Reward: reward})
}

// pickGreedy chooses by the model's expected reward (ε: uniformly at random).
func pickGreedy(m *engineModel, f *engine.Features, now time.Time, active []coupon, rng *rand.Rand, eps float64) *coupon {
	if eps > 0 && rng.Float64() < eps {
		i := rng.IntN(len(active) + 1)
		if i == 0 {
			return nil
		}
		return &active[i-1]
	}
	best, bestV := (*coupon)(nil), m.predict(f, now, nil)
	for i := range active {
		if v := m.predict(f, now, toAction(&active[i])); v > bestV {
			best, bestV = &active[i], v
		}
	}
	return best
}

func tenantNow(db *store.DB) (*store.Tenant, time.Time, error) {
	t, ok := db.Tenant(labTenant)
	if !ok {
		return nil, time.Time{}, fmt.Errorf("lab: tenant missing")
	}
	return t, t.ClockNow, nil
}

// simulator turns outcomes into events.
type simulator struct {
	eng  *engine.Engine
	db   *store.DB
	rng  *rand.Rand
	w    *world
	seq  int
	past bool // generating history: nobody opts out
}

func (s *simulator) id(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s-%08d", prefix, s.seq)
}

// sample draws a reward (MXN) for c under coupon cp from rng without
// recording it.
func (s *simulator) sample(rng *rand.Rand, c *simCustomer, cp *coupon) float64 {
	r := 0.0
	if rng.Float64() < s.w.buyProb(c, cp) {
		r += c.ticket * marginRate
		if cp != nil && rng.Float64() < redeemProb(c.kind) {
			r -= cp.discount(c.ticket)
		}
	}
	if cp != nil {
		r -= cp.cost
		if rng.Float64() < optoutProb(c, cp) {
			r -= penaltyMXN
		}
	}
	return r
}

// outcome draws what c does in the window after receiving cp (nil: nothing)
// and returns the events the retailer would publish.
func (s *simulator) outcome(c *simCustomer, cp *coupon, decisionID string, now time.Time) []engine.IngestEvent {
	var evs []engine.IngestEvent
	ev := func(e engine.Event) {
		e.ID = s.id("ev")
		e.ClienteRef = c.ref
		evs = append(evs, engine.IngestEvent{Event: e, Canonical: []byte(e.ID)})
	}
	cupon := ""
	if cp != nil {
		cupon = s.id("cup")
		ev(engine.Event{TS: now.Add(time.Minute), Tipo: engine.CuponRecibido, Clave: cp.name, DecisionID: decisionID,
			CuponEmitidoID: cupon, Caducidad: now.Add(window)})
		if !s.past && s.rng.Float64() < optoutProb(c, cp) {
			c.optout = true
			ev(engine.Event{TS: now.Add(2 * time.Hour), Tipo: engine.Baja, Clave: engine.BajaComunicaciones})
		}
	}
	if s.rng.Float64() < s.w.buyProb(c, cp) {
		at := now.Add(time.Duration(s.rng.Float64() * float64(window-time.Hour)))
		ticket := s.id("t")
		valor := int64(c.ticket * 100)
		margin := int64(c.ticket * marginRate * 100)
		redeemed := cp != nil && s.rng.Float64() < redeemProb(c.kind)
		if redeemed {
			d := int64(cp.discount(c.ticket) * 100)
			margin -= d
			ev(engine.Event{TS: at, Tipo: engine.CuponRedimido, Clave: cp.name, ValorCents: d, CuponEmitidoID: cupon, TicketID: ticket})
		}
		ev(engine.Event{TS: at, Tipo: engine.CompraCat, Clave: "general", ValorCents: valor, TicketID: ticket, MargenCents: margin})
	} else if cp != nil {
		ev(engine.Event{TS: now.Add(window - time.Minute), Tipo: engine.CuponCaducado, Clave: cp.name, CuponEmitidoID: cupon})
	}
	return evs
}

func (s *simulator) ingest(evs []engine.IngestEvent) error {
	for len(evs) > 0 {
		n := min(len(evs), 1000)
		if _, err := s.eng.Ingester.Ingest(labTenant, evs[:n]); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// history publishes 12 weeks of past behaviour: purchases at the base rate
// and coupons sent by the retailer's old campaigns, redeemed according to
// each kind.
func (s *simulator) history(custs []*simCustomer, start time.Time) error {
	s.past = true
	defer func() { s.past = false }()
	var evs []engine.IngestEvent
	for _, c := range custs {
		for wk := 12; wk >= 1; wk-- {
			at := start.Add(-time.Duration(wk) * window)
			var cp *coupon
			if s.rng.Float64() < 0.35 {
				cp = &coupons[s.rng.IntN(len(coupons))]
			}
			evs = append(evs, s.outcome(c, cp, "", at)...)
			if len(evs) >= 5000 {
				if err := s.ingest(evs); err != nil {
					return err
				}
				evs = evs[:0]
			}
		}
	}
	return s.ingest(evs)
}
