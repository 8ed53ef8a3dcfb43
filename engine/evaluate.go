package engine

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/coupond/coupond/engine/ope"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// PolicyValue is the estimated value of one target policy, in MXN of
// reward per decision.
type PolicyValue struct {
	Policy     string       `json:"policy"`
	IPS        ope.Estimate `json:"ips"`
	SNIPS      ope.Estimate `json:"snips"`
	DR         ope.Estimate `json:"dr"`
	ESS        float64      `json:"effective_sample_size"`
	MaxWeight  float64      `json:"largest_weight"`
	MeanWeight float64      `json:"mean_weight"`
}

// MeasuredValue is an on-policy mean with a normal 95 % interval (the
// control group's counts each customer as one draw: clusterMean).
type MeasuredValue struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
}

// Evaluation is the off-policy evaluation of a tenant's log.
type Evaluation struct {
	Tenant          string         `json:"tenant"`
	Campana         string         `json:"campana,omitempty"`
	PoliticaVersion string         `json:"policy_version"`
	Records         int            `json:"records"`
	Excluded        map[string]int `json:"excluded"`
	Policies        []PolicyValue  `json:"policies"`
	Logged          MeasuredValue  `json:"logged_behaviour"`
	Control         MeasuredValue  `json:"control_group"`
	// Guard is the policy guard's state and its running estimates
	// (policy.Guard), beside the log's evaluation above.
	Guard policy.GuardStatus `json:"policy_guard"`
}

// EvalOptions tune Evaluate.
type EvalOptions struct {
	Campana    string
	Replicates int
	Seed       uint64
}

// Evaluate estimates, from the tenant's closed decisions (reward final,
// confirmed ejecutada, not control, not fallback, not shadow, not of a
// failed batch job; a record
// whose logged propensity no draw can give is counted as left out, never
// a reason to stop), the value per decision
// of the current policy, of "never send", of each single action and of the
// logged behaviour, with IPS, SNIPS and DR and 95 % bootstrap intervals;
// the control group's measured value is reported beside them. Rewards are
// in MXN over the reward window. It stops with ctx's error once ctx ends
// (the admin client went away, serve stops): before it starts, then
// within evalChunkSize records.
func (e *Evaluator) Evaluate(ctx context.Context, tenant string, opt EvalOptions) (*Evaluation, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	run, err := newEvalRun(tenant, opt, ts.model.Load(), ts.catalog.Load())
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	lo, hi := store.DecisionSpan(tenant)
	if err := run.pipeline(ctx, snap, lo, hi); err != nil {
		return nil, err
	}
	return run.result(), nil
}

// evalRun is one Evaluate: the target policies' bootstrap evaluators and
// the on-policy means, fed from the decision log.
type evalRun struct {
	opt       EvalOptions
	pm        *publishedModel
	names     []string // target policies, in evals order
	actionIDs []int    // the "always id" targets' model keys (Action.Arm), from names[2] on
	evals     []*ope.Evaluator
	ev        *Evaluation
	logged    welford
	control   clusterMean
	// sent counts, per model key, the evaluated records that logged its
	// coupon done: an "always id" target no record did has no estimate
	// (result). Keyed by model key, so that the coupon an id named before
	// (another tipo_cupon) lends the coupon it names now no record.
	sent map[int]int
}

func newEvalRun(tenant string, opt EvalOptions, pm *publishedModel, cat *Catalog) (*evalRun, error) {
	run := &evalRun{opt: opt, pm: pm, names: []string{"current_policy", "never_send"}, actionIDs: []int{},
		ev:   &Evaluation{Tenant: tenant, Campana: opt.Campana, PoliticaVersion: pm.version, Excluded: map[string]int{}, Guard: guardStatus(pm.m, cat)},
		sent: map[int]int{}}
	for _, a := range cat.Acciones {
		run.actionIDs = append(run.actionIDs, a.armKey())
		run.names = append(run.names, fmt.Sprintf("always_%d_%s", a.ID, a.Nombre))
	}
	run.evals = make([]*ope.Evaluator, len(run.names))
	for i := range run.evals {
		var err error
		if run.evals[i], err = ope.NewEvaluator(ope.Options{Replicates: cmp.Or(opt.Replicates, 100), Seed: opt.Seed + uint64(i)}); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// evalJob is one record for the evaluator of target policy j.
type evalJob struct {
	j   int
	rec ope.Record
}

// evalChunk is a run of raw decision records on its way through the
// pipeline: scored by a worker, then folded in log order.
type evalChunk struct {
	raw  [][]byte
	jobs []evalJob
	st   chunkStats
	err  error
	done chan struct{}
}

// evalChunkSize is how many records a chunk of Evaluate's pipeline holds;
// Evaluate looks at its ctx once a chunk.
const evalChunkSize = 2000

// pipeline reads the log in [lo, hi) of snap in chunks; two workers decode
// and rescore chunks in parallel and one goroutine folds them into the
// bootstrap evaluators in log order, so the result depends only on the
// seed. It stops reading with ctx's error once ctx ends.
func (run *evalRun) pipeline(ctx context.Context, snap *store.Snapshot, lo, hi []byte) error {
	work := make(chan *evalChunk, 8)
	ordered := make(chan *evalChunk, 8)
	for w := 0; w < 2; w++ {
		go func() {
			for c := range work {
				run.score(c)
			}
		}()
	}
	folded := make(chan error, 1)
	go func() { folded <- run.fold(ordered) }()
	cur := &evalChunk{done: make(chan struct{})}
	send := func() {
		ordered <- cur
		work <- cur
		cur = &evalChunk{done: make(chan struct{})}
	}
	err := snap.Scan(lo, hi, func(_, v []byte) error {
		cur.raw = append(cur.raw, append([]byte(nil), v...))
		if len(cur.raw) == evalChunkSize {
			send()
			return ctx.Err()
		}
		return nil
	})
	send()
	close(work)
	close(ordered)
	if ferr := <-folded; err == nil {
		err = ferr
	}
	return err
}

// fold adds the scored chunks, in order, to the evaluators and the counts;
// it returns the first error met.
func (run *evalRun) fold(ordered <-chan *evalChunk) error {
	var first error
	for c := range ordered {
		<-c.done
		if c.err != nil && first == nil {
			first = c.err
		}
		for _, jb := range c.jobs {
			if err := run.evals[jb.j].Add(jb.rec); err != nil && first == nil {
				first = err
			}
		}
		for k, n := range c.st.excl {
			run.ev.Excluded[k] += n
		}
		for _, x := range c.st.logged {
			run.logged.add(x)
			run.ev.Records++
		}
		for _, x := range c.st.control {
			run.control.add(x.ref, x.reward)
		}
		for id, n := range c.st.sent {
			run.sent[id] += n
		}
	}
	return first
}

// evalControl is evalExclusion's answer for a closed control-group
// decision: measured apart, not evaluated.
const evalControl = "control_group"

// evalExclusion says why a decision record is not evaluated ("" when it
// is): its reason in Evaluation.Excluded, or evalControl.
func evalExclusion(r *DecisionRecord) string {
	switch {
	case r.EnRespaldo:
		return "fallback"
	case r.EnSombra: // the caller applied its own rule: the propensity is not of what was done
		return "shadow"
	case replacedByFallback(r): // never delivered: the fallback record that replaced it says what was done
		return "replaced"
	case r.Anulada: // never delivered: not the control group's, nor the policy's, outcome
		return "voided_batch"
	case r.Recompensa == nil:
		return "reward_not_final"
	case r.EnControl:
		return evalControl
	case r.Estado == EstadoPendiente:
		return "unconfirmed"
	case r.Estado == EstadoModificada:
		return "modificada"
	case r.Estado == EstadoRechazada:
		return "rechazada"
	case len(r.Candidates) == 0 || len(r.Priors) != len(r.Candidates) || len(r.X) != VectorDim:
		return "no_policy_inputs"
	case !(r.Propension > 0 && r.Propension <= 1): // no draw logs it: damage
		return "invalid_propensity"
	}
	return ""
}

// score decodes and rescores a chunk's records.
func (run *evalRun) score(c *evalChunk) {
	defer close(c.done)
	var mu []float64
	for _, v := range c.raw {
		var r DecisionRecord
		if err := unmarshalRecord(v, &r); err != nil {
			c.st.excluded("damaged") // the learner quarantines it when it meets it
			continue
		}
		if run.opt.Campana != "" && r.CampanaID != run.opt.Campana {
			continue
		}
		switch why := evalExclusion(&r); why {
		case "":
			mu = run.scoreOne(c, &r, mu[:0])
		case evalControl:
			c.st.control = append(c.st.control, controlReward{r.ClienteRef, float64(*r.Recompensa) / 100})
		default:
			c.st.excluded(why)
		}
	}
}

// scoreOne rescores one closed decision with the current model and adds its
// record for every target policy to c; mu is a reused buffer.
func (run *evalRun) scoreOne(c *evalChunk, r *DecisionRecord, mu []float64) []float64 {
	reward := float64(*r.Recompensa) / 100
	sc := run.pm.scoreRecord(r)
	li := -1
	for i, cd := range sc.cands {
		mu = append(mu, cd.mu/100)
		if cd.id == r.Accion {
			li = i
		}
	}
	if li < 0 {
		c.st.excluded("logged_action_not_candidate")
		return mu
	}
	logged := sc.cands[li].arm.ID
	probs, _ := run.pm.distribution(sc)
	qpi := 0.0
	for i := range probs {
		qpi += probs[i] * mu[i]
	}
	first := len(c.jobs)
	add := func(j int, target float64, qpi float64) {
		c.jobs = append(c.jobs, evalJob{j, ope.Record{Reward: reward, Logged: r.Propension, Target: target, QHat: mu[li], QPi: qpi}})
	}
	add(0, probs[li], qpi)
	add(1, b2f(r.Accion == 0), mu[0])
	for j, key := range run.actionIDs {
		// "Always id": where its coupon is not eligible (nor was the id's
		// coupon then the same, Action.Arm) the policy sends nothing.
		pick := 0
		for i, cd := range sc.cands {
			if cd.arm.ID == key {
				pick = i
			}
		}
		add(2+j, b2f(li == pick), mu[pick])
	}
	// A record one target cannot take (a propensity so small that its
	// weight is beyond float64) is left out of every target's estimate,
	// so that they all read the same decisions.
	for _, jb := range c.jobs[first:] {
		if jb.rec.Check() != nil {
			c.jobs = c.jobs[:first]
			c.st.excluded("weight_out_of_range")
			return mu
		}
	}
	c.st.logged = append(c.st.logged, reward)
	if c.st.sent == nil {
		c.st.sent = map[int]int{}
	}
	c.st.sent[logged]++
	return mu
}

// result is the evaluation, once the log is folded. An "always id"
// target whose coupon no evaluated record logged done (a new coupon, one
// never sent in the campaign) has no estimate, as ope gives a target with
// no support: its records read the same as never-send's (where id is not
// a candidate "always id" sends nothing), whose value under the coupon's
// name would pass for what the coupon earns.
func (run *evalRun) result() *Evaluation {
	ev := run.ev
	for j, name := range run.names {
		res := run.evals[j].Result()
		if j >= 2 && run.sent[run.actionIDs[j-2]] == 0 {
			res = noSupport(res)
		}
		ev.Policies = append(ev.Policies, PolicyValue{Policy: name, IPS: res.IPS, SNIPS: res.SNIPS, DR: res.DR,
			ESS: res.ESS, MaxWeight: res.MaxWeight, MeanWeight: res.MeanWeight})
	}
	ev.Logged, ev.Control = run.logged.value(), run.control.value()
	return ev
}

// noSupport is res without estimates: IPS, SNIPS and DR are NaN and the
// effective sample size is 0, as ope.Result reads a target the log never
// took.
func noSupport(res ope.Result) ope.Result {
	nan := math.NaN()
	none := ope.Estimate{Value: nan, Lo: nan, Hi: nan, StdErr: nan}
	res.IPS, res.SNIPS, res.DR, res.DRLift, res.ESS = none, none, none, none, 0
	return res
}

// PolicyProbs returns the current policy's distribution over a logged
// decision's candidates (cands[i] drawn with probs[i]): the current model
// rescoring the inputs the decision recorded, as Evaluate's
// current_policy and Shadow's engine value weigh the decision. It changes
// nothing. A simulation that knows each action's true value
// (engine/lab's proof) computes from it the truth those estimates aim at.
func (e *Evaluator) PolicyProbs(tenant string, r *DecisionRecord) (cands []int, probs []float64, err error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, nil, err
	}
	pm := ts.model.Load()
	sc := pm.scoreRecord(r)
	probs, _ = pm.distribution(sc)
	for _, c := range sc.cands {
		cands = append(cands, c.id)
	}
	return cands, probs, nil
}

// welford keeps a running mean and variance.
type welford struct {
	n        int
	mean, m2 float64
}

func (w *welford) add(x float64) {
	w.n++
	d := x - w.mean
	w.mean += d / float64(w.n)
	w.m2 += d * (x - w.mean)
}

func (w *welford) value() MeasuredValue {
	v := MeasuredValue{N: w.n, Mean: w.mean, Lo: math.NaN(), Hi: math.NaN()}
	if w.n >= 2 {
		se := math.Sqrt(w.m2/float64(w.n-1)) / math.Sqrt(float64(w.n))
		v.Lo, v.Hi = w.mean-1.96*se, w.mean+1.96*se
	}
	if w.n == 0 {
		v.Mean = math.NaN()
	}
	return v
}

// controlReward is a closed control-group decision's reward (MXN) and
// its customer.
type controlReward struct {
	ref    string
	reward float64
}

// clusterMean is the mean of rewards drawn by customer, with the
// cluster-robust (by customer) standard error. The control group is a
// stable set of customers (a keyed hash of cliente_ref), each decided
// again once her reward window closes, and its value is read against the
// policy's over the other customers: who fell in the group is part of the
// error, which decisions of the same customer do not average out. With
// one decision per customer it is welford's.
type clusterMean struct {
	n     int
	sum   float64
	byRef map[string]*welford // each customer's count and sum (n, n·mean)
}

func (c *clusterMean) add(ref string, x float64) {
	if c.byRef == nil {
		c.byRef = map[string]*welford{}
	}
	w := c.byRef[ref]
	if w == nil {
		w = &welford{}
		c.byRef[ref] = w
	}
	w.add(x)
	c.n++
	c.sum += x
}

// value is the mean with its 95 % interval: the variance of the ratio
// estimator Σy/Σn over G customers, G/(G−1)·Σ_g (Y_g − mean·n_g)² / N²
// (no interval with fewer than two customers).
func (c *clusterMean) value() MeasuredValue {
	v := MeasuredValue{N: c.n, Mean: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	if c.n == 0 {
		return v
	}
	v.Mean = c.sum / float64(c.n)
	g := float64(len(c.byRef))
	if g < 2 {
		return v
	}
	ss := 0.0
	for _, w := range c.byRef {
		d := float64(w.n) * (w.mean - v.Mean)
		ss += d * d
	}
	se := math.Sqrt(g/(g-1)*ss) / float64(c.n)
	v.Lo, v.Hi = v.Mean-1.96*se, v.Mean+1.96*se
	return v
}

// ShadowReport is what the operator needs to decide whether a tenant in
// shadow mode can leave it. A share of nothing (ConfirmedShare without
// decisions, LabelledShare without coupons received, Agreement with none
// compared) is NaN, as a MeasuredValue without values is.
type ShadowReport struct {
	Tenant          string        `json:"tenant"`
	Decisions       int           `json:"decisions"`
	Confirmed       int           `json:"confirmed"`
	ConfirmedShare  float64       `json:"confirmed_share"`
	CouponsReceived int64         `json:"coupons_received"`
	CouponsLabelled int64         `json:"coupons_with_decision_id"`
	LabelledShare   float64       `json:"labelled_share"`
	Compared        int           `json:"compared"`
	Agreement       float64       `json:"agreement"`
	RewardsFinal    int           `json:"rewards_final"`
	CallerRule      MeasuredValue `json:"caller_rule_value_mxn"`
	Engine          MeasuredValue `json:"engine_value_mxn"`
	Lift            MeasuredValue `json:"engine_minus_caller_mxn"`   // the model's lift over the rule, with its error (Shadow): the verdict needs its interval above 0
	Damaged         int           `json:"damaged_records,omitempty"` // decision records that did not decode: skipped
	Ready           bool          `json:"ready"`
	Verdict         string        `json:"verdict"`
	Reasons         []string      `json:"reasons"`
}

// MinShadowRewards is how many final rewards the shadow verdict needs.
const MinShadowRewards = 200

// Shadow reports on the tenant's shadow-mode decisions of its last shadow
// period, made from the moment shadow mode was last switched on
// (Settings.ShadowSince; all of them for a tenant switched on before that
// time was recorded), the period whose coupons it counts: the share
// confirmed (spec: at least 95 %), the share of coupons labelled with a
// decision_id (at least 95 %), the agreement between the engine's action
// and accion_real, and the value of the engine's policy against the caller's
// rule. The caller's rule is measured (mean final reward of what was
// done). The lift (engine − rule) is the reward model's estimate, customer
// by customer, of what the policy's distribution earns beyond the action
// done (direct method: the caller's rule has no logged propensities, so
// importance weighting is not possible, and where the policy departs from
// a deterministic rule no reward ever measured it); its normal 95 %
// interval joins the spread over customers and the model's own standard
// error of the effects it reads, which the customers share (EffectSum):
// more decisions of the same kind do not shrink it. The engine's value is
// the rule's plus the lift. It stops with ctx's error once ctx ends (the
// admin client went away, serve stops): before it starts, then within
// evalChunkSize records, as Evaluate does. For a tenant in shadow mode
// no more, the verdict says so first.
func (e *Evaluator) Shadow(ctx context.Context, tenant string) (*ShadowReport, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	q, err := e.loadQuality(tenant)
	if err != nil {
		return nil, err
	}
	rep := &ShadowReport{Tenant: tenant, Reasons: []string{}}
	off := false       // switched off since: the tenant is live
	var from time.Time // the shadow period reported: its decisions are made from then on
	if t, ok := e.db.Tenant(tenant); ok {
		off = !t.Settings.Shadow
		from = t.Settings.ShadowSince
		switch since := t.Settings.ShadowSince; {
		case since.IsZero():
			// Never switched on since the switch's time is recorded: no
			// shadow period to count from (its coupons ingested before were
			// never counted in it), so all coupons received, as before.
			rep.CouponsReceived, rep.CouponsLabelled = q.CuponesRecibidos, q.CuponesRecibidos-q.CuponesSinDecision
		case q.SombraDesde.Equal(since):
			rep.CouponsReceived, rep.CouponsLabelled = q.CuponesSombra, q.CuponesSombra-q.CuponesSombraSinDecision
		}
	}
	t := &shadowTally{rep: rep, pm: ts.model.Load(), from: from}
	lo, hi := store.DecisionSpan(tenant)
	n := 0
	if err := e.db.Scan(lo, hi, func(_, v []byte) error {
		t.add(v)
		if n++; n%evalChunkSize == 0 {
			return ctx.Err()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	t.finish()
	rep.judge()
	if off && rep.Decisions > 0 {
		// Its verdict was about leaving shadow mode, which the tenant did;
		// the engine's values re-read those decisions with the model
		// learned since, so they move after go-live.
		rep.Verdict = "shadow mode is off; its decisions read with the current model: " + rep.Verdict
	}
	return rep, nil
}

// shadowTally folds the shadow decisions of the log into a ShadowReport.
type shadowTally struct {
	rep     *ShadowReport
	pm      *publishedModel
	from    time.Time // the period's start: shadow decisions made before are another period's
	caller  welford
	lift    welford          // engine − caller, per decision: the model's difference
	effects policy.EffectSum // the effects the lift reads, for its standard error (modelLift)
	agree   int
}

// add counts one stored decision record.
func (t *shadowTally) add(v []byte) {
	rep := t.rep
	var r DecisionRecord
	if err := unmarshalRecord(v, &r); err != nil {
		rep.Damaged++ // skipped; the learner quarantines it when it meets it
		return
	}
	if !r.EnSombra || r.EnRespaldo || r.Anulada { // a voided batch decision never reached the caller
		return
	}
	if r.At.Before(t.from) {
		return
	}
	rep.Decisions++
	if r.Estado == EstadoPendiente {
		return
	}
	rep.Confirmed++
	done := r.Accion
	if r.Estado == EstadoRechazada {
		done = 0
	} else if r.AccionReal != nil {
		done = *r.AccionReal
	}
	rep.Compared++
	if done == r.Accion {
		t.agree++
	}
	if r.Recompensa == nil || r.EnControl || len(r.X) != VectorDim || len(r.Priors) != len(r.Candidates) {
		return
	}
	rep.RewardsFinal++
	reward := float64(*r.Recompensa) / 100
	t.caller.add(reward)
	sc := t.pm.scoreRecord(&r)
	probs, _ := t.pm.distribution(sc)
	t.lift.add(t.modelLift(sc, probs, done, reward))
}

// modelLift is the model's estimate (MXN) of what the policy's
// distribution probs over sc's candidates earns beyond action done, the
// caller's, for one customer: Σ_a (probs[a] − [a = done])·μ_a, in which
// the customer's level cancels out, so only the coupons' effects are
// read. It adds those effects with their coefficients to t.effects, for
// the standard error the model's own uncertainty gives the mean. When done
// is not among the candidates (the caller sent what the engine could not)
// the policy's expected value is set against the measured reward instead:
// the customer's level is then read too, and its error, which the model
// keeps no covariance for, is not in the standard error (only the
// effects' are).
func (t *shadowTally) modelLift(sc *scored, probs []float64, done int, reward float64) float64 {
	di := -1
	for i, c := range sc.cands {
		if c.id == done {
			di = i
		}
	}
	d := 0.0
	if di < 0 {
		d = -reward
	}
	for i, c := range sc.cands {
		coef := probs[i]
		if i == di {
			coef--
		}
		d += coef * c.mu / 100
		t.effects.Add(&sc.scores[i], coef)
	}
	return d
}

// finish sets the report's shares and values from the counts.
func (t *shadowTally) finish() {
	rep := t.rep
	rep.ConfirmedShare = share(int64(rep.Confirmed), int64(rep.Decisions))
	rep.LabelledShare = share(rep.CouponsLabelled, rep.CouponsReceived)
	rep.Agreement = share(int64(t.agree), int64(rep.Compared))
	rep.CallerRule, rep.Lift = t.caller.value(), t.lift.value()
	if n := t.lift.n; n >= 2 {
		// The model's error is shared by like customers (the same
		// coefficients): it does not average out over the decisions as
		// their spread does. Its standard error joins the spread's.
		model := t.pm.m.SE(&t.effects) / 100 / float64(n)
		rep.Lift.Lo, rep.Lift.Hi = widen(rep.Lift, model)
	}
	// The engine's value: the rule's measured value plus the model's lift,
	// the two errors joined.
	c := rep.CallerRule
	rep.Engine = MeasuredValue{N: c.N, Mean: c.Mean + rep.Lift.Mean, Lo: c.Mean + rep.Lift.Lo, Hi: c.Mean + rep.Lift.Hi}
	rep.Engine.Lo, rep.Engine.Hi = widen(rep.Engine, (c.Hi-c.Lo)/2/1.96)
}

// widen returns v's 95 % interval with another independent error of
// standard error se joined to it in quadrature.
func widen(v MeasuredValue, se float64) (lo, hi float64) {
	half := (v.Hi - v.Lo) / 2
	half = math.Sqrt(half*half + 1.96*1.96*se*se)
	return v.Mean - half, v.Mean + half
}

// share is n/of, or NaN when of is 0 (a share of nothing).
func share(n, of int64) float64 {
	if of == 0 {
		return math.NaN()
	}
	return float64(n) / float64(of)
}

// centsMXN is an amount in MXN rounded to cents for a sentence: a value
// that rounds to zero is 0, never the "-0.00" of a small loss.
func centsMXN(x float64) float64 {
	r := math.Round(x*100) / 100
	if r == 0 {
		return 0
	}
	return r
}

// judge decides whether the tenant is ready to leave shadow mode, with the
// reasons when not. It reads a share only when its denominator is not 0.
func (rep *ShadowReport) judge() {
	rep.Ready = true
	fail := func(format string, args ...any) {
		rep.Ready = false
		rep.Reasons = append(rep.Reasons, fmt.Sprintf(format, args...))
	}
	switch {
	case rep.Decisions == 0:
		fail("no shadow decisions yet")
	case rep.ConfirmedShare < 0.95:
		fail("only %.1f%% of decisions confirmed (needs at least 95%%)", 100*rep.ConfirmedShare)
	}
	switch {
	case rep.CouponsReceived == 0:
		fail("no coupon reported received yet (CUPON_RECIBIDO events, each with its decision_id)")
	case rep.LabelledShare < 0.95:
		fail("only %.1f%% of coupons carry a decision_id (needs at least 95%%)", 100*rep.LabelledShare)
	}
	if rep.RewardsFinal < MinShadowRewards {
		// Confirmed: the rewards of unconfirmed decisions become final too
		// (a caller that confirms nothing has them all), but say nothing
		// of what its rule did.
		noun := "confirmed decisions with their final reward"
		if rep.RewardsFinal == 1 {
			noun = "confirmed decision with its final reward"
		}
		fail("%d %s (needs at least %d for a comparison)", rep.RewardsFinal, noun, MinShadowRewards)
	} else if !(rep.Lift.Lo > 0) { // a lead within the noise is no proof
		fail("the engine's estimated value %.2f MXN does not beat the caller's rule %.2f MXN (difference %.2f MXN, 95%% interval [%.2f, %.2f])",
			centsMXN(rep.Engine.Mean), centsMXN(rep.CallerRule.Mean), centsMXN(rep.Lift.Mean), centsMXN(rep.Lift.Lo), centsMXN(rep.Lift.Hi))
	}
	if rep.Ready {
		rep.Verdict = fmt.Sprintf("ready to leave shadow mode: the engine is estimated at %.2f MXN per decision against %.2f MXN for the current rule",
			centsMXN(rep.Engine.Mean), centsMXN(rep.CallerRule.Mean))
	} else {
		rep.Verdict = "not ready to leave shadow mode"
	}
	sort.Strings(rep.Reasons)
}

// chunkStats is what a chunk of the log adds besides evaluator records.
type chunkStats struct {
	excl    map[string]int
	logged  []float64
	control []controlReward
	sent    map[int]int // evaluated records by action done
}

func (c *chunkStats) excluded(why string) {
	if c.excl == nil {
		c.excl = map[string]int{}
	}
	c.excl[why]++
}

// Evaluator estimates, off-policy, what the policy would earn against what
// it did (Evaluate) and compares the model with the logged decisions
// (Shadow), from the stored decision records.
type Evaluator struct{ *core }
