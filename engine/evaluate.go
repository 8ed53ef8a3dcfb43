package engine

import (
	"cmp"
	"fmt"
	"math"
	"sort"

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

// MeasuredValue is an on-policy mean with a normal 95 % interval.
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
	PoliticaVersion string         `json:"politica_version"`
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
// confirmed ejecutada, not control, not fallback), the value per decision
// of the current policy, of "never send", of each single action and of the
// logged behaviour, with IPS, SNIPS and DR and 95 % bootstrap intervals;
// the control group's measured value is reported beside them. Rewards are
// in MXN over the reward window.
func (e *Evaluator) Evaluate(tenant string, opt EvalOptions) (*Evaluation, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	pm := ts.model.Load()
	cat := ts.catalog.Load()
	ev := &Evaluation{Tenant: tenant, Campana: opt.Campana, PoliticaVersion: pm.version, Excluded: map[string]int{}, Guard: pm.m.GuardStatus()}
	names := []string{"current_policy", "never_send"}
	actionIDs := []int{}
	for _, a := range cat.Acciones {
		actionIDs = append(actionIDs, a.ID)
		names = append(names, fmt.Sprintf("always_%d_%s", a.ID, a.Nombre))
	}
	evals := make([]*ope.Evaluator, len(names))
	for i := range evals {
		if evals[i], err = ope.NewEvaluator(ope.Options{Replicates: cmp.Or(opt.Replicates, 100), Seed: opt.Seed + uint64(i)}); err != nil {
			return nil, err
		}
	}
	var logged, control welford
	lo, hi := store.DecisionSpan(tenant)
	snap := e.db.NewSnapshot()
	defer snap.Close()
	// The log is read in chunks; two workers decode and rescore chunks in
	// parallel and one goroutine folds them into the bootstrap evaluators in
	// log order, so the result depends only on the seed.
	type job struct {
		j   int
		rec ope.Record
	}
	type chunk struct {
		raw  [][]byte
		jobs []job
		st   chunkStats
		err  error
		done chan struct{}
	}
	score := func(c *chunk) {
		defer close(c.done)
		var mu []float64
		for _, v := range c.raw {
			var r DecisionRecord
			if err := unmarshalRecord(v, &r); err != nil {
				c.st.excluded("damaged") // the learner quarantines it when it meets it
				continue
			}
			if opt.Campana != "" && r.CampanaID != opt.Campana {
				continue
			}
			switch {
			case r.EnRespaldo:
				c.st.excluded("fallback")
				continue
			case r.Recompensa == nil:
				c.st.excluded("reward_not_final")
				continue
			case r.EnControl:
				c.st.control = append(c.st.control, float64(*r.Recompensa)/100)
				continue
			case r.Estado == EstadoPendiente:
				c.st.excluded("unconfirmed")
				continue
			case r.Estado == EstadoModificada:
				c.st.excluded("modificada")
				continue
			case r.Estado == EstadoRechazada:
				c.st.excluded("rechazada")
				continue
			case len(r.Candidates) == 0 || len(r.Priors) != len(r.Candidates) || len(r.X) != VectorDim:
				c.st.excluded("no_policy_inputs")
				continue
			}
			reward := float64(*r.Recompensa) / 100
			mu = mu[:0]
			sc := pm.scoreRecord(&r)
			li := -1
			for i, cd := range sc.cands {
				mu = append(mu, cd.mu/100)
				if cd.id == r.Accion {
					li = i
				}
			}
			if li < 0 {
				c.st.excluded("logged_action_not_candidate")
				continue
			}
			c.st.logged = append(c.st.logged, reward)
			probs, _ := pm.distribution(sc)
			qpi := 0.0
			for i := range probs {
				qpi += probs[i] * mu[i]
			}
			add := func(j int, target float64, qpi float64) {
				c.jobs = append(c.jobs, job{j, ope.Record{Reward: reward, Logged: r.Propension, Target: target, QHat: mu[li], QPi: qpi}})
			}
			add(0, probs[li], qpi)
			add(1, b2f(r.Accion == 0), mu[0])
			for j, id := range actionIDs {
				// "Always id": where id is not eligible the policy sends nothing.
				pick := 0
				for i, cid := range r.Candidates {
					if cid == id {
						pick = i
					}
				}
				add(2+j, b2f(li == pick), mu[pick])
			}
		}
	}
	work := make(chan *chunk, 8)
	ordered := make(chan *chunk, 8)
	for w := 0; w < 2; w++ {
		go func() {
			for c := range work {
				score(c)
			}
		}()
	}
	folded := make(chan error, 1)
	go func() {
		var first error
		for c := range ordered {
			<-c.done
			if c.err != nil && first == nil {
				first = c.err
			}
			for _, jb := range c.jobs {
				if err := evals[jb.j].Add(jb.rec); err != nil && first == nil {
					first = err
				}
			}
			for k, n := range c.st.excl {
				ev.Excluded[k] += n
			}
			for _, x := range c.st.logged {
				logged.add(x)
				ev.Records++
			}
			for _, x := range c.st.control {
				control.add(x)
			}
		}
		folded <- first
	}()
	cur := &chunk{done: make(chan struct{})}
	send := func() {
		ordered <- cur
		work <- cur
		cur = &chunk{done: make(chan struct{})}
	}
	err = snap.Scan(lo, hi, func(_, v []byte) error {
		cur.raw = append(cur.raw, append([]byte(nil), v...))
		if len(cur.raw) == 2000 {
			send()
		}
		return nil
	})
	send()
	close(work)
	close(ordered)
	if ferr := <-folded; err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	for j, name := range names {
		res := evals[j].Result()
		ev.Policies = append(ev.Policies, PolicyValue{Policy: name, IPS: res.IPS, SNIPS: res.SNIPS, DR: res.DR,
			ESS: res.ESS, MaxWeight: res.MaxWeight, MeanWeight: res.MeanWeight})
	}
	ev.Logged, ev.Control = logged.value(), control.value()
	return ev, nil
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

// ShadowReport is what the operator needs to decide whether a tenant in
// shadow mode can leave it.
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
	Damaged         int           `json:"damaged_records,omitempty"` // decision records that did not decode: skipped
	Ready           bool          `json:"ready"`
	Verdict         string        `json:"verdict"`
	Reasons         []string      `json:"reasons"`
}

// MinShadowRewards is how many final rewards the shadow verdict needs.
const MinShadowRewards = 200

// Shadow reports on the tenant's shadow-mode decisions: the share
// confirmed (spec: at least 95 %), the share of coupons labelled with a
// decision_id (at least 95 %), the agreement between the engine's action
// and accion_real, and the value of the engine's policy against the caller's
// rule. The caller's rule is measured (mean final reward of what was
// done); the engine's value is the reward model's estimate of its policy on
// the same customers (direct method: the caller's rule has no logged
// propensities, so importance weighting is not possible), with bootstrap-free
// normal intervals over customers.
func (e *Evaluator) Shadow(tenant string) (*ShadowReport, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	pm := ts.model.Load()
	q, err := e.loadQuality(tenant)
	if err != nil {
		return nil, err
	}
	rep := &ShadowReport{Tenant: tenant, CouponsReceived: q.CuponesRecibidos, CouponsLabelled: q.CuponesRecibidos - q.CuponesSinDecision, Reasons: []string{}}
	var caller, engineV welford
	agree := 0
	lo, hi := store.DecisionSpan(tenant)
	err = e.db.Scan(lo, hi, func(_, v []byte) error {
		var r DecisionRecord
		if err := unmarshalRecord(v, &r); err != nil {
			rep.Damaged++ // skipped; the learner quarantines it when it meets it
			return nil
		}
		if !r.EnSombra || r.EnRespaldo {
			return nil
		}
		rep.Decisions++
		if r.Estado == EstadoPendiente {
			return nil
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
			agree++
		}
		if r.Recompensa == nil || r.EnControl || len(r.X) != VectorDim || len(r.Priors) != len(r.Candidates) {
			return nil
		}
		rep.RewardsFinal++
		caller.add(float64(*r.Recompensa) / 100)
		sc := pm.scoreRecord(&r)
		probs, _ := pm.distribution(sc)
		val := 0.0
		for i, c := range sc.cands {
			val += probs[i] * c.mu / 100
		}
		engineV.add(val)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rep.Decisions > 0 {
		rep.ConfirmedShare = float64(rep.Confirmed) / float64(rep.Decisions)
	}
	if rep.CouponsReceived > 0 {
		rep.LabelledShare = float64(rep.CouponsLabelled) / float64(rep.CouponsReceived)
	}
	if rep.Compared > 0 {
		rep.Agreement = float64(agree) / float64(rep.Compared)
	}
	rep.CallerRule, rep.Engine = caller.value(), engineV.value()
	rep.Ready = true
	fail := func(format string, args ...any) {
		rep.Ready = false
		rep.Reasons = append(rep.Reasons, fmt.Sprintf(format, args...))
	}
	if rep.Decisions == 0 {
		fail("no shadow decisions yet")
	}
	if rep.ConfirmedShare < 0.95 {
		fail("only %.1f%% of decisions confirmed (needs at least 95%%)", 100*rep.ConfirmedShare)
	}
	if rep.CouponsReceived == 0 || rep.LabelledShare < 0.95 {
		fail("only %.1f%% of coupons carry a decision_id (needs at least 95%%)", 100*rep.LabelledShare)
	}
	if rep.RewardsFinal < MinShadowRewards {
		fail("%d final rewards (needs at least %d for a comparison)", rep.RewardsFinal, MinShadowRewards)
	} else if !(rep.Engine.Mean > rep.CallerRule.Mean) {
		fail("the engine's estimated value %.2f MXN does not beat the caller's rule %.2f MXN", rep.Engine.Mean, rep.CallerRule.Mean)
	}
	if rep.Ready {
		rep.Verdict = fmt.Sprintf("ready to leave shadow mode: the engine is estimated at %.2f MXN per decision against %.2f MXN for the current rule", rep.Engine.Mean, rep.CallerRule.Mean)
	} else {
		rep.Verdict = "not ready to leave shadow mode"
	}
	sort.Strings(rep.Reasons)
	return rep, nil
}

// chunkStats is what a chunk of the log adds besides evaluator records.
type chunkStats struct {
	excl            map[string]int
	logged, control []float64
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
