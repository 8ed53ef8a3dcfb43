package lab

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/coupond/coupond/engine"
	pol "github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// WorldWeek is one week of a many-worlds run: the true expected reward
// per decision (MXN over the window) of the actions each policy chose,
// and what the engine sent.
type WorldWeek struct {
	Week       int     `json:"week"`
	Engine     float64 `json:"engine"`
	Never      float64 `json:"never_send"`
	BestSingle float64 `json:"best_single_action"`
	Random     float64 `json:"uniform_random"`
	Greedy     float64 `json:"greedy"`
	Reference  float64 `json:"reference"`
	Oracle     float64 `json:"oracle"`
	ObsOracle  float64 `json:"observable_oracle"`
	// EngineSends counts the engine's executed sends per catalog position
	// (position 0 is the first coupon); EngineSendShare is their share of
	// decisions; RareSendShare the share of the rare buyers (rate below
	// the world's 40th percentile) the engine sent a coupon.
	EngineSends     []int   `json:"engine_sends"`
	EngineSendShare float64 `json:"engine_send_share"`
	RareSendShare   float64 `json:"engine_rare_send_share"`
	// ObsRareSendShare is the share of the rare buyers to whom the
	// observable oracle sends a coupon (it knows a customer's rate only
	// through their purchase count: obsOracle).
	ObsRareSendShare float64 `json:"observable_oracle_rare_send_share"`
	Version          string  `json:"politica_version"`
	// EngineChoice is the world's true value (per decision, like Engine)
	// of the engine model's own choice on its point estimates, before the
	// gate, its confidence bar (GateSendZ) and the draw: the action of
	// highest μ in the decision's detalle, μ rounded to the cent
	// (never-send when no coupon's μ is above never-send's). Coupons has,
	// per catalog position, the coupon's true effect, the model's estimate
	// of it and how often it was that choice. Beside Engine and EngineSends they tell a
	// model that ranks the coupons badly from a gate that holds back a
	// good choice (policy/POLICY.md §7.10).
	EngineChoice float64      `json:"engine_choice"`
	Coupons      []CouponWeek `json:"coupons"`
	// Guard is the engine's guard state when engine.Status exports one
	// (see guardState), else "".
	Guard string `json:"guard,omitempty"`
	// Gate is the engine's send gate at the week's end (gateSummary):
	// each frequency band's state, test (MXN per choice ± its standard
	// error) and sending share.
	Gate string `json:"gate,omitempty"`
	// GateChecks set the gate's tests at the week's end beside the truth
	// of the choices they tested (GateCheck).
	GateChecks []GateCheck `json:"gate_checks,omitempty"`
	// LearnerLag counts the week's decisions answered while rewards of
	// the week before, come due when the clock moved, were not yet folded
	// into the model (engine.Learner.Backlog); counting stops at the first
	// decision that finds none. In process it is 0: the learner runs to the
	// end before the week starts (Target.CloseWindow).
	LearnerLag int `json:"learner_lag_decisions"`
}

// CouponWeek is one coupon's week in the engine's eyes and in truth.
type CouponWeek struct {
	// TrueEffect is the world's true value of the coupon minus never-send's
	// and ModelEffect the engine's μ minus never-send's μ (MXN over the
	// reward window), each averaged over the Candidates decisions where
	// the coupon was a candidate; Choice is the share of all decisions
	// whose choice (EngineChoice) it was.
	TrueEffect  float64 `json:"true_effect"`
	ModelEffect float64 `json:"model_effect"`
	// ModelSigma is the mean of the detalle's sigma_mxn, the standard
	// error of ModelEffect's per-customer terms; Covered the share of
	// candidates whose true effect lies within 2 of it from the model's.
	ModelSigma float64 `json:"model_sigma"`
	Covered    float64 `json:"covered"`
	Choice     float64 `json:"choice_share"`
	Candidates int     `json:"candidates"`
}

// WorldReport is the outcome of one world.
type WorldReport struct {
	Family  Family      `json:"family"`
	Summary string      `json:"summary"`
	Weeks   []WorldWeek `json:"weeks"`
	// Capture is (policy − never) / (oracle − never) over the last third
	// of the weeks, per policy; ObsCapture the same against the observable
	// oracle (NaN when it beats never-send by under flatGain: then there
	// is nothing attainable to capture).
	Capture    Captures `json:"capture"`
	ObsCapture Captures `json:"capture_vs_observable_oracle"`
	// OracleGain and ObsGain are the oracle's and the observable oracle's
	// gain over never-send over the last third, relative to never-send.
	OracleGain float64 `json:"oracle_gain"`
	ObsGain    float64 `json:"observable_oracle_gain"`
	// EngineGain and RefGain are the engine's and the reference's gain
	// over never-send, the same way (negative: they lose money).
	EngineGain float64 `json:"engine_gain"`
	RefGain    float64 `json:"reference_gain"`
	// Flat: the oracle beats never-send by under 2 %. Separable: the
	// observable oracle beats it by at least 5 % (a coupon's effect is
	// large for a group the data can separate).
	Flat      bool `json:"flat"`
	Separable bool `json:"separable"`
	// Pass: the engine's capture is ≥ −0.05, or, in a flat world, the
	// engine is within 2 % of never-send; RefPass the same for the
	// reference.
	Pass    bool `json:"pass"`
	RefPass bool `json:"reference_pass"`
	// BestSingleAction is the catalog id of the best single action over
	// the last third (0: nothing).
	BestSingleAction int `json:"best_single_action_id"`
}

// A world is flat when the oracle beats never-send by under flatGain
// (relative to never-send); separable when the observable oracle beats it
// by at least separableGain.
const (
	flatGain      = 0.02
	separableGain = 0.05
)

// Captures are uplift captures per policy.
type Captures struct {
	Engine     float64 `json:"engine"`
	Reference  float64 `json:"reference"`
	Greedy     float64 `json:"greedy"`
	BestSingle float64 `json:"best_single_action"`
	Random     float64 `json:"uniform_random"`
	ObsOracle  float64 `json:"observable_oracle"`
}

// policy is one compared policy's path through a world: its own random
// stream (the random policy's choices; outcomes come from run.outcomes)
// and which customers opted out in its path.
type policy struct {
	rng *rand.Rand
	out []bool
	// sent counts the coupons each customer received in this path.
	sent []int
	// feats, for a learner, are each customer's engine features in this
	// path: the history, then this policy's own sampled windows folded by
	// engine.Features.Apply (the ingestion's own feature code).
	feats []engine.Features
}

func newPolicy(seed uint64, stream uint64, n int) *policy {
	return &policy{rng: rand.New(rand.NewPCG(seed, stream)), out: make([]bool, n), sent: make([]int, n)}
}

// outcomeStream is the PCG stream of a world's outcome draws whose
// stream is base with Family.Outcomes 0 (the world's own draws).
func outcomeStream(fam *Family, base uint64) uint64 { return base + fam.Outcomes<<32 }

// step counts the policy's choice k (-1: nothing) for customer i: the
// true value of what reaches the customer (nothing once they opted out in
// this path), then whether this send makes them opt out. It returns the
// value and the action delivered.
func (p *policy) step(w *mworld, i, k int) (float64, int) {
	c := w.custs[i]
	if p.out[i] || k < 0 {
		return w.trueValue(c, -1), -1
	}
	v := w.trueValue(c, k)
	return v, k
}

// sample draws, from rng (run.outcomes), the policy's reward (MXN) for
// delivered action k at now, records an opt-out and, for a learner, folds
// the window's events into its features of the customer.
func (p *policy) sample(w *mworld, ew *eventWriter, rng *rand.Rand, i, k int, now time.Time) sampled {
	o := w.sample(rng, w.custs[i], k, true, true)
	if k >= 0 {
		p.sent[i]++
	}
	if o.optout {
		p.out[i] = true
	}
	if p.feats != nil {
		for _, e := range ew.windowEvents(w.custs[i], k, o, now, rng) {
			p.feats[i].Apply(&e.Event)
		}
	}
	return sampled{reward: w.reward(o, k), o: o, marginRate: w.fam.MarginRate}
}

// sampled is one sampled window of a policy: its reward (MXN) and the
// purchase behind it, for the learners.
type sampled struct {
	reward     float64
	o          purchase
	marginRate float64
}

// run is the state of one many-worlds run.
type run struct {
	ctx context.Context
	fam *Family
	w   *mworld
	// target is the engine under test, which the world drives; db and eng
	// are its store and engine, which the world's measurements read.
	target Target
	db     *store.DB
	eng    *engine.Engine
	ew     *eventWriter
	// weekNo is the week being run (1 on): with the world's seed, the
	// outcome stream and a customer, it keys that customer's draws for the
	// week (outcomes).
	weekNo int
	acts   []engine.Action
	out    []bool // opted out in the engine's world
	pols   map[string]*policy
	obs    *obsOracle // the observable oracle's choices
	learn  map[string]learner
	// single[k+1][i] is the probability that customer i has not opted out
	// under "always send k" (k = -1: nothing).
	single [][]float64
	weeks  []WorldWeek
	// singleWeek[w][k+1] is "always k"'s mean value in week w.
	singleWeek [][]float64
	gate       *gateTruth // the truth of the engine's gate tests
}

// RunWorld runs the engine in process (InProcess) and the compared
// policies on one world. Each world has its own store on store.NewMemFS,
// so worlds may run concurrently.
func RunWorld(ctx context.Context, fam Family) (*WorldReport, error) {
	return RunWorldOn(ctx, fam, InProcess)
}

// RunWorldOn is RunWorld with the engine under test on the bench open
// opens (nil: InProcess). A bench that fails to close (over HTTP: a
// server that did not shut down, a store that did not close) is an error
// too.
func RunWorldOn(ctx context.Context, fam Family, open Opener) (rep *WorldReport, err error) {
	if err := fam.validate(); err != nil {
		return nil, err
	}
	if open == nil {
		open = InProcess
	}
	b, err := open(ctx, BenchSetup{Tenant: labTenantSetup(fam.ControlShare), Seed: fam.Seed + 1, Policy: fam.policy})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := b.Close(); cerr != nil && err == nil {
			rep, err = nil, fmt.Errorf("lab: closing the world's bench: %w", cerr)
		}
	}()
	r, err := newRun(ctx, &fam, b)
	if err != nil {
		return nil, err
	}
	if err := eachWeek(ctx, fam.Weeks, r.week); err != nil {
		return nil, err
	}
	return r.report(), nil
}

// newRun draws the world's customers on bench b and publishes their
// history and the catalog.
func newRun(ctx context.Context, fam *Family, b *Bench) (*run, error) {
	db, eng := b.DB, b.Engine
	_, start, err := tenantNow(db)
	if err != nil {
		return nil, err
	}
	seed := fam.Seed
	w := newWorld(fam, rand.New(rand.NewPCG(seed, 1)))
	pc := pol.DefaultConfig()
	if fam.policy != nil {
		pc = *fam.policy
	}
	r := &run{ctx: ctx, fam: fam, w: w, target: b.Target, db: db, eng: eng, out: make([]bool, fam.Customers),
		gate: newGateTruth(pc)}
	r.ew = &eventWriter{w: w}
	if err := r.ew.history(ctx, r.target, start, rand.New(rand.NewPCG(seed, 3))); err != nil {
		return nil, err
	}
	if err := w.installCatalog(ctx, r.target); err != nil {
		return nil, err
	}
	n := fam.Customers
	r.pols = map[string]*policy{}
	for i, name := range []string{"random", "greedy", "reference", "oracle", "observable"} {
		r.pols[name] = newPolicy(seed, outcomeStream(fam, 100+uint64(i)), n)
	}
	for _, name := range []string{"greedy", "reference"} {
		p := r.pols[name]
		p.feats = make([]engine.Features, n)
		for i, c := range w.custs {
			if p.feats[i], err = eng.CustomerFeatures(labTenant, c.ref); err != nil {
				return nil, err
			}
		}
	}
	r.obs = newObsOracle(w, rand.New(rand.NewPCG(seed, 105)))
	r.learn = map[string]learner{
		"greedy":    newEngineModelWith(fam.policy),
		"reference": newReference(fam.Categories, rand.New(rand.NewPCG(seed, 200))),
	}
	r.single = make([][]float64, len(w.coupons)+1)
	for k := range r.single {
		r.single[k] = make([]float64, n)
		for i := range n {
			r.single[k][i] = 1
		}
	}
	return r, nil
}

// week runs one week: every customer decided by every policy, the
// engine's outcomes ingested, the clock moved a window, the engine's
// learner run to the end and the other learners folded.
func (r *run) week(week int) error {
	_, now, err := tenantNow(r.db)
	if err != nil {
		return err
	}
	w := r.w
	r.weekNo = week
	if err := r.startWeek(week, now); err != nil {
		return err
	}
	r.obs.choose(w, r.pols["observable"].sent)
	row := WorldWeek{Week: week, EngineSends: make([]int, w.active), Coupons: make([]CouponWeek, w.active)}
	var rare, rareSent, obsRareSent int
	lag := lagCounter{eng: r.eng}
	for i, c := range w.custs {
		if err := lag.beforeDecision(&row); err != nil {
			return err
		}
		k, err := r.engineStep(i, now, &row)
		if err != nil {
			return err
		}
		if c.rare {
			rare++
			if k >= 0 {
				rareSent++
			}
			if r.obs.best[i] >= 0 {
				obsRareSent++
			}
		}
		row.Never += w.trueValue(c, -1)
		if !r.fam.engineOnly {
			r.baselines(i, now, &row)
		}
	}
	row.perDecision(len(w.custs))
	if rare > 0 {
		row.RareSendShare = float64(rareSent) / float64(rare)
		row.ObsRareSendShare = float64(obsRareSent) / float64(rare)
	}
	if !r.fam.engineOnly {
		r.singleWeek = append(r.singleWeek, r.singles())
	} else {
		r.singleWeek = append(r.singleWeek, make([]float64, w.active+1))
	}
	if err := r.closeWindow(&row); err != nil {
		return err
	}
	r.obs.advance(w)
	r.weeks = append(r.weeks, row)
	return nil
}

// lagCounter counts a week's decisions answered while rewards that had
// come due were not yet folded (WorldWeek.LearnerLag).
type lagCounter struct {
	eng    *engine.Engine
	folded bool // the learner has caught up once this week: stop looking
}

// beforeDecision adds one to row.LearnerLag when, as a decision is about
// to be asked, the learner's queue still holds a reward come due.
func (l *lagCounter) beforeDecision(row *WorldWeek) error {
	if l.folded {
		return nil
	}
	bl, err := l.eng.Learner.Backlog(labTenant, 1)
	if err != nil {
		return err
	}
	if bl.Pending == 0 {
		l.folded = true
		return nil
	}
	row.LearnerLag++
	return nil
}

// startWeek brings in the new coupon and the drift when their week comes
// and lists the week's catalog.
func (r *run) startWeek(week int, now time.Time) error {
	w := r.w
	if r.fam.NewCoupon != nil && week == r.fam.NewCouponWeek {
		w.active++
		if err := w.installCatalog(r.ctx, r.target); err != nil {
			return err
		}
	}
	if r.fam.DriftWeek > 0 && week == r.fam.DriftWeek {
		w.drift = true
	}
	r.acts = make([]engine.Action, w.active) // fresh: learners keep pointers into last week's
	for k := range r.acts {
		r.acts[k] = w.engineAction(k)
	}
	return nil
}

// perDecision turns the week's sums over n customers into means and
// sets the engine's send share.
func (row *WorldWeek) perDecision(n int) {
	for _, p := range []*float64{&row.Engine, &row.Never, &row.Random, &row.Greedy, &row.Reference, &row.Oracle, &row.ObsOracle, &row.EngineChoice} {
		*p /= float64(n)
	}
	for k := range row.Coupons {
		c := &row.Coupons[k]
		c.Choice /= float64(n)
		if c.Candidates > 0 {
			c.TrueEffect /= float64(c.Candidates)
			c.ModelEffect /= float64(c.Candidates)
			c.ModelSigma /= float64(c.Candidates)
			c.Covered /= float64(c.Candidates)
		}
	}
	sent := 0
	for _, s := range row.EngineSends {
		sent += s
	}
	row.EngineSendShare = float64(sent) / float64(n)
}

// engineStep decides customer i through engine.Decide, confirms it (a
// RejectShare of sends as not executed), draws the outcome in the
// engine's world and queues its events. It returns the delivered action.
func (r *run) engineStep(i int, now time.Time, row *WorldWeek) (int, error) {
	c := r.w.custs[i]
	d, err := r.target.Decide(r.ctx, c.ref)
	if err != nil {
		return 0, err
	}
	r.modelView(c, d.Detalle, row)
	k := r.actIndex(d.Accion)
	conf := engine.Confirmation{Ejecutada: true}
	rng, reject := r.outcomes(i)
	if k >= 0 && reject < r.fam.RejectShare {
		conf = engine.Confirmation{Ejecutada: false, MotivoRechazo: "envío fallido"}
		k = -1
	}
	if err := r.target.Confirm(r.ctx, d.DecisionID, conf); err != nil {
		return 0, err
	}
	if conf.Ejecutada {
		if err := r.checkGate(c, d.DecisionID); err != nil {
			return 0, err
		}
	}
	if r.out[i] {
		k = -1 // the engine's eligibility already says so; kept for safety
	}
	row.Engine += r.w.trueValue(c, k)
	o := r.w.sample(rng, c, k, true, true)
	if o.optout {
		r.out[i] = true
	}
	if k >= 0 {
		row.EngineSends[k]++
	}
	r.ew.window(c, k, o, d.DecisionID, now, rng)
	return k, nil
}

// outcomes returns the random source of customer i's window this week,
// the same for every policy (the engine and those it is compared with),
// and its first draw, which decides whether an engine's send is refused
// (RejectShare; the other policies skip it). A window's draws are keyed
// by the world's seed, its outcome stream, the customer and the week, not
// drawn in turn from one stream: a policy that decides one customer
// otherwise changes that customer's window only, not every draw after it,
// so two runs of the same world under two policies (lab compare) differ
// by what the policies did, not by a redrawn world, and the policies of
// one run meet the same luck (common random numbers).
func (r *run) outcomes(i int) (*rand.Rand, float64) {
	key := mix64(r.fam.Seed ^ mix64(uint64(r.weekNo)<<32|uint64(i)))
	rng := rand.New(rand.NewPCG(key, mix64(outcomeStream(r.fam, 2)+key)))
	return rng, rng.Float64()
}

// mix64 is SplitMix64's finalizer: nearby inputs give unrelated outputs,
// so keys built from small numbers seed unrelated PCG states.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// checkGate adds decision id, executed as drawn for customer c, to the
// truth of the gate's tests (gateTruth): the engine's record says what it
// chose and with which probabilities, the world what each coupon is worth.
func (r *run) checkGate(c *wCustomer, id string) error {
	rec, err := r.eng.DecisionByID(labTenant, id)
	if err != nil {
		return err
	}
	never := r.w.trueValue(c, -1)
	r.gate.observe(rec, func(action int) float64 { return r.w.trueValue(c, r.actIndex(action)) - never })
	return nil
}

// modelView adds one decision's detalle to row's EngineChoice and
// Coupons: the model's choice and its estimates beside the world's truth.
func (r *run) modelView(c *wCustomer, det *engine.Detalle, row *WorldWeek) {
	if det == nil {
		row.EngineChoice += r.w.trueValue(c, -1)
		return
	}
	mu0 := math.Inf(-1)
	for _, a := range det.Acciones {
		if a.Accion == 0 {
			mu0 = a.MuMXN
		}
	}
	best, bestMu := -1, mu0
	never := r.w.trueValue(c, -1)
	for _, a := range det.Acciones {
		k := r.actIndex(a.Accion)
		if k < 0 || k >= len(row.Coupons) {
			continue
		}
		if cw := &row.Coupons[k]; !math.IsInf(mu0, -1) {
			te := r.w.trueValue(c, k) - never
			cw.Candidates++
			cw.TrueEffect += te
			cw.ModelEffect += a.MuMXN - mu0
			cw.ModelSigma += a.SigmaMXN
			if math.Abs(a.MuMXN-mu0-te) <= 2*a.SigmaMXN {
				cw.Covered++
			}
		}
		if a.MuMXN > bestMu {
			best, bestMu = k, a.MuMXN
		}
	}
	row.EngineChoice += r.w.trueValue(c, best)
	if best >= 0 {
		row.Coupons[best].Choice++
	}
}

func (r *run) actIndex(id int) int {
	for k := range r.acts {
		if r.acts[k].ID == id {
			return k
		}
	}
	return -1
}

// baselines decides customer i by every other policy and lets the
// learners observe their own sampled rewards, each on the customer's
// features in its own path.
func (r *run) baselines(i int, now time.Time, row *WorldWeek) {
	w, c := r.w, r.w.custs[i]
	bestT, bestO := -1, r.obs.best[i]
	for k := range w.active {
		if w.trueValue(c, k) > w.trueValue(c, bestT) {
			bestT = k
		}
	}
	for _, pc := range []struct {
		name string
		k    int
		sum  *float64
	}{
		{"oracle", bestT, &row.Oracle},
		{"observable", bestO, &row.ObsOracle},
		{"random", r.pols["random"].rng.IntN(w.active+1) - 1, &row.Random},
	} {
		p := r.pols[pc.name]
		val, k := p.step(w, i, pc.k)
		*pc.sum += val
		if k >= 0 {
			rng, _ := r.outcomes(i)
			p.sample(w, r.ew, rng, i, k, now)
		}
	}
	for name, sum := range map[string]*float64{"greedy": &row.Greedy, "reference": &row.Reference} {
		p, l := r.pols[name], r.learn[name]
		// What this learner's own path shows, as of the decision (a copy:
		// the window's events are folded into p.feats before observe).
		snap, ok := engine.DecodeFeatures(p.feats[i].AppendEncode(nil))
		if !ok {
			panic("lab: features do not survive their own encoding")
		}
		lv := &custView{f: &snap, now: now}
		k := -1
		if !p.out[i] {
			k = l.choose(lv, r.acts)
		}
		val, k := p.step(w, i, k)
		*sum += val
		rng, _ := r.outcomes(i)
		l.observe(lv, r.acts, k, p.sample(w, r.ew, rng, i, k, now))
	}
}

// singles returns the week's mean value of "always k" for every k (-1
// first) and moves each customer's probability of not having opted out.
func (r *run) singles() []float64 {
	w := r.w
	out := make([]float64, w.active+1)
	for k := -1; k < w.active; k++ {
		s := r.single[k+1]
		for i, c := range w.custs {
			out[k+1] += s[i]*w.trueValue(c, k) + (1-s[i])*w.trueValue(c, -1)
			if k >= 0 && c.dog {
				s[i] *= 1 - w.fam.OptoutProb
			}
		}
		out[k+1] /= float64(len(w.custs))
	}
	return out
}

// closeWindow hands the week's events to the target, which moves the
// clock one window (in process, running the engine's learner until it has
// folded everything due), and folds the other learners.
func (r *run) closeWindow(row *WorldWeek) error {
	if err := r.target.CloseWindow(r.ctx, r.ew.take(), window); err != nil {
		return err
	}
	for _, l := range r.learn {
		l.fold()
	}
	st, err := r.eng.Learner.Status(labTenant)
	if err != nil {
		return err
	}
	row.Version, row.Guard, row.Gate = st.PoliticaVersion, guardState(st), gateSummary(st.Guard.Gate)
	row.GateChecks = r.gate.closeWeek(st.Guard.Gate)
	return nil
}

// gateSummary writes the gate's bands on one line ("" without a gate):
// "0-1 probando +0.12±0.40 q=0.31; …" ("no evidence" for a band whose
// test has none yet).
func gateSummary(g *pol.GateStatus) string {
	if g == nil {
		return ""
	}
	var b strings.Builder
	for i, bs := range g.Bands {
		if i > 0 {
			b.WriteString("; ")
		}
		if bs.SE == nil { // no evidence yet
			fmt.Fprintf(&b, "%s %s no evidence q=%.2f", bs.Tickets, bs.State, bs.Sending)
			continue
		}
		fmt.Fprintf(&b, "%s %s %+.2f±%.2f q=%.2f", bs.Tickets, bs.State, bs.Diff, *bs.SE, bs.Sending)
	}
	return b.String()
}

// report computes the captures over the last third of the weeks.
func (r *run) report() *WorldReport {
	rep := &WorldReport{Family: *r.fam, Summary: r.fam.Summary(), Weeks: r.weeks}
	from := len(r.weeks) - len(r.weeks)/3
	var t WorldWeek
	singles := make([]float64, len(r.w.coupons)+1)
	for wi, wk := range r.weeks[from:] {
		t.Engine, t.Never, t.Random, t.Greedy = t.Engine+wk.Engine, t.Never+wk.Never, t.Random+wk.Random, t.Greedy+wk.Greedy
		t.Reference, t.Oracle, t.ObsOracle = t.Reference+wk.Reference, t.Oracle+wk.Oracle, t.ObsOracle+wk.ObsOracle
		for k, v := range r.singleWeek[from+wi] {
			singles[k] += v
		}
	}
	best := 0
	for k := range singles {
		if singles[k] > singles[best] {
			best = k
		}
	}
	if best > 0 {
		rep.BestSingleAction = r.w.coupons[best-1].ID
	}
	for wi := range r.weeks {
		sw := r.singleWeek[wi]
		if best < len(sw) {
			r.weeks[wi].BestSingle = sw[best]
		} else {
			r.weeks[wi].BestSingle = sw[0] // the new coupon is not out yet: nothing
		}
	}
	t.BestSingle = singles[best]
	gain := func(v float64) float64 { return (v - t.Never) / t.Never }
	rep.OracleGain, rep.ObsGain, rep.EngineGain, rep.RefGain = gain(t.Oracle), gain(t.ObsOracle), gain(t.Engine), gain(t.Reference)
	rep.Capture = captures(t, t.Oracle)
	rep.ObsCapture = captures(t, t.ObsOracle)
	if rep.ObsGain < flatGain {
		rep.ObsCapture = captures(t, t.Never) // all NaN: nothing attainable to capture
	}
	rep.Flat, rep.Separable = rep.OracleGain < flatGain, rep.ObsGain >= separableGain
	rep.Pass = passes(rep.Flat, t.Engine, t.Never, rep.Capture.Engine)
	rep.RefPass = passes(rep.Flat, t.Reference, t.Never, rep.Capture.Reference)
	return rep
}

// captures returns (policy − never) / (top − never) per policy of the
// totals t; NaN when top does not beat never.
func captures(t WorldWeek, top float64) Captures {
	c := func(v float64) float64 {
		if top-t.Never <= 1e-9*math.Abs(t.Never) {
			return math.NaN()
		}
		return (v - t.Never) / (top - t.Never)
	}
	return Captures{Engine: c(t.Engine), Reference: c(t.Reference), Greedy: c(t.Greedy), BestSingle: c(t.BestSingle),
		Random: c(t.Random), ObsOracle: c(t.ObsOracle)}
}

// passes is the rule: capture ≥ −0.05, or within 2 % of
// never-send in a flat world.
func passes(flat bool, v, never, capture float64) bool {
	if flat {
		return v >= never-0.02*math.Abs(never)
	}
	return capture >= -0.05
}

// guardState returns the engine's guard state if engine.Status has a
// field Guard (the baseline guard of issue 18), else "".
func guardState(st engine.Status) string {
	s, _ := guardField(st)
	return s
}

// guardField reads engine.Status.Guard through reflection, so that the
// lab builds against engines with and without the guard; ok is false
// without one. A struct with a bool field Active (and an int Baseline,
// the action id exploited, 0 for never-send) reads "inactive" or
// "active baseline=N"; any other type reads as fmt prints it.
func guardField(st engine.Status) (state string, ok bool) {
	f := reflect.ValueOf(st).FieldByName("Guard")
	if !f.IsValid() {
		return "", false
	}
	return readGuard(f), true
}

// readGuard reads a guard value as guardField says.
func readGuard(f reflect.Value) string {
	for f.Kind() == reflect.Pointer || f.Kind() == reflect.Interface {
		if f.IsNil() {
			return "inactive"
		}
		f = f.Elem()
	}
	if f.Kind() != reflect.Struct {
		return fmt.Sprint(f.Interface())
	}
	active := f.FieldByName("Active")
	if !active.IsValid() || active.Kind() != reflect.Bool {
		return fmt.Sprint(f.Interface())
	}
	if !active.Bool() {
		return "inactive"
	}
	if b := f.FieldByName("Baseline"); b.IsValid() && b.CanInt() {
		return fmt.Sprintf("active baseline=%d", b.Int())
	}
	return "active"
}
