package lab

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// The proof: coupond's claims (admin evaluate's off-policy estimates,
// admin shadow report's engine-versus-rule verdict) checked against a
// world whose every action's true expected reward is known. RunProof runs
// the engine alone on a world's customers, live or in shadow mode with a
// caller's rule, until every reward is final, then sets each estimate
// beside the true value of the same policy on the same decisions'
// customers (mworld.trueValue at the decision's time).

// ProofEstimate is one estimate of a policy's value beside the truth
// (MXN per decision over the reward window).
type ProofEstimate struct {
	Policy string  `json:"policy"`
	Truth  float64 `json:"truth"`
	Value  float64 `json:"value"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	SE     float64 `json:"std_err"`
	// ESS is the effective sample size Evaluate reports (0 for the shadow
	// report's values).
	ESS float64 `json:"effective_sample_size"`
}

// Covers reports whether the interval holds the truth.
func (p ProofEstimate) Covers() bool { return p.Lo <= p.Truth && p.Truth <= p.Hi }

// ProofReport is one world's proof.
type ProofReport struct {
	Seed    uint64 `json:"seed"`
	Summary string `json:"summary"`
	// Records is how many decisions the estimates read (the lab's count
	// of them; RecordsEngine the engine's).
	Records       int `json:"records"`
	RecordsEngine int `json:"records_engine"`
	// Evaluate's DR estimates (live), with the logged behaviour's
	// measured mean beside the truth of the actions done: a check of the
	// reward attribution itself.
	DR     []ProofEstimate `json:"dr,omitempty"`
	IPS    []ProofEstimate `json:"ips,omitempty"`
	Logged ProofEstimate   `json:"logged"`
	// Control is Evaluate's control group (measured, with its interval)
	// beside the truth it is read against: never-send over the decisions
	// the estimates read (the other customers); ControlOwn is the same
	// measurement beside the truth of its own decisions (never-send, the
	// control kind nada). Without a control group, N is 0 (ESS).
	Control, ControlOwn ProofEstimate
	// Sent is, per action done, the measured mean reward of the
	// decisions that did it beside their truth: the reward attribution
	// checked action by action (Value the measured mean, SE its error).
	Sent []ProofEstimate `json:"sent,omitempty"`
	// Misattributed counts the decisions whose final reward differs from
	// the window the lab drew by more than 5 cents; Examples shows some.
	Misattributed int           `json:"misattributed"`
	SendDiff      ProofEstimate `json:"sends_measured_minus_truth"`
	Examples      []string      `json:"examples,omitempty"`
	// The shadow report's values (shadow mode): the caller's rule, the
	// engine and the lift, and whether the verdict said ready.
	Rule        string         `json:"rule,omitempty"`
	CallerRule  *ProofEstimate `json:"caller_rule,omitempty"`
	EngineValue *ProofEstimate `json:"engine,omitempty"`
	Lift        *ProofEstimate `json:"lift,omitempty"`
	Agreement   float64        `json:"agreement,omitempty"`
	Ready       bool           `json:"ready"`
	Reasons     []string       `json:"reasons,omitempty"`
}

// ProofRule is a caller's rule for shadow mode: send the coupon at
// catalog position Coupon to the customers who bought category
// Category (an index of the family's categories) in their history.
type ProofRule struct {
	Coupon, Category int
}

func (r ProofRule) String() string {
	return fmt.Sprintf("coupon #%d to buyers of category #%d", r.Coupon, r.Category)
}

// proofRun is a world run for the proof: the engine alone, its decisions'
// truths kept by decision id.
type proofRun struct {
	*run
	rule   *ProofRule
	truths map[string]proofTruth
	ids    []string // decision ids in decision order
}

// proofTruth is a decision's customer's true value of every action that
// was in the catalog when it was made (by action id; 0 is never-send),
// and what the caller did.
type proofTruth struct {
	vals map[int]float64
	done int // action id done
	// sampled is the reward the lab drew for the decision's window
	// (mworld.reward), which the engine's attribution should find.
	sampled float64
}

// RunProof runs fam (Family.Weeks weeks of fam.Customers customers) with
// the engine alone, live when rule is nil, else in shadow mode with the
// caller applying rule and confirming it with accion_real, and returns
// the estimates beside the truth.
func RunProof(ctx context.Context, fam Family, rule *ProofRule) (*ProofReport, error) {
	fam.engineOnly = true
	if err := fam.validate(); err != nil {
		return nil, err
	}
	b, err := InProcess(ctx, BenchSetup{Tenant: labTenantSetup(fam.ControlShare), Seed: fam.Seed + 1, Policy: fam.policy})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	r, err := newRun(ctx, &fam, b)
	if err != nil {
		return nil, err
	}
	if rule != nil {
		if _, err := r.db.UpdateTenant(labTenant, func(t *store.Tenant) error { t.Settings.Shadow, t.Settings.ShadowSince = true, t.ClockNow; return nil }); err != nil {
			return nil, err
		}
	}
	p := &proofRun{run: r, rule: rule, truths: map[string]proofTruth{}}
	if err := eachWeek(ctx, fam.Weeks, p.week); err != nil {
		return nil, err
	}
	rep := &ProofReport{Seed: fam.Seed, Summary: fam.Summary()}
	if rule != nil {
		rep.Rule = rule.String()
		return rep, p.shadow(rep)
	}
	return rep, p.evaluate(rep)
}

// week decides every customer once, applies the engine's action (live)
// or the caller's rule (shadow), writes the window's events, and moves
// the clock a window with the learner run to the end.
func (p *proofRun) week(week int) error {
	_, now, err := tenantNow(p.db)
	if err != nil {
		return err
	}
	p.weekNo = week
	if err := p.startWeek(week, now); err != nil {
		return err
	}
	for i := range p.w.custs {
		if err := p.decide(i, now); err != nil {
			return err
		}
	}
	return p.target.CloseWindow(p.ctx, p.ew.take(), window)
}

// decide decides customer i, confirms what was done and draws its window.
func (p *proofRun) decide(i int, now time.Time) error {
	w, c := p.w, p.w.custs[i]
	d, err := p.target.Decide(p.ctx, c.ref)
	if err != nil {
		return err
	}
	t := proofTruth{vals: map[int]float64{0: w.trueValue(c, -1)}}
	for k := range p.acts {
		t.vals[p.acts[k].ID] = w.trueValue(c, k)
	}
	k, conf := p.actIndex(d.Accion), engine.Confirmation{Ejecutada: true}
	rng, reject := p.outcomes(i)
	switch {
	case p.rule != nil:
		k = -1
		if j := p.rule.Category; !p.out[i] && p.rule.Coupon < len(p.acts) && j < len(c.shares) && c.shares[j] > 0 {
			k = p.rule.Coupon
		}
		id := 0
		if k >= 0 {
			id = p.acts[k].ID
		}
		conf.AccionReal = &id
	case k >= 0 && reject < p.fam.RejectShare:
		conf, k = engine.Confirmation{Ejecutada: false, MotivoRechazo: "envío fallido"}, -1
	}
	if err := p.target.Confirm(p.ctx, d.DecisionID, conf); err != nil {
		return err
	}
	if k >= 0 {
		t.done = p.acts[k].ID
	}
	p.truths[d.DecisionID] = t
	p.ids = append(p.ids, d.DecisionID)
	o := w.sample(rng, c, k, true, true)
	if o.optout {
		p.out[i] = true
	}
	t.sampled = w.reward(o, k)
	p.truths[d.DecisionID] = t
	p.ew.window(c, k, o, d.DecisionID, now, rng)
	return nil
}

// policyTruth is the true value of the current policy on a logged
// decision: its distribution (Evaluator.PolicyProbs) over the actions'
// true values.
func (p *proofRun) policyTruth(rec *engine.DecisionRecord, t proofTruth) (float64, error) {
	cands, probs, err := p.eng.Evaluator.PolicyProbs(labTenant, rec)
	if err != nil {
		return 0, err
	}
	v := 0.0
	for j, id := range cands {
		v += probs[j] * t.vals[id]
	}
	return v, nil
}

// evaluate runs Evaluate and sets each target's DR and IPS estimates
// beside the truth over the records it reads: executed as drawn, outside
// the control group, reward final.
func (p *proofRun) evaluate(rep *ProofReport) error {
	ev, err := p.eng.Evaluator.Evaluate(p.ctx, labTenant, engine.EvalOptions{Replicates: 200, Seed: p.fam.Seed})
	if err != nil {
		return err
	}
	targets, err := p.targets(ev)
	if err != nil {
		return err
	}
	truth := make([]float64, len(targets))
	a := newAttribution()
	var control welfordTruth
	for _, id := range p.ids {
		rec, err := p.eng.DecisionByID(labTenant, id)
		if err != nil {
			return err
		}
		t := p.truths[id]
		if rec.EnControl && rec.Recompensa != nil && !rec.Anulada {
			control.add(float64(*rec.Recompensa)/100, t.vals[0])
		}
		if rec.Estado != engine.EstadoEjecutada || rec.EnControl || rec.Recompensa == nil {
			continue
		}
		rep.Records++
		a.add(rec, t)
		for j, f := range targets {
			v, err := f(rec, t)
			if err != nil {
				return err
			}
			truth[j] += v
		}
	}
	n := float64(rep.Records)
	rep.RecordsEngine = ev.Records
	rep.Logged = ProofEstimate{Policy: "logged_behaviour", Truth: a.logged.truth / n, Value: ev.Logged.Mean, Lo: ev.Logged.Lo, Hi: ev.Logged.Hi,
		SE: (ev.Logged.Hi - ev.Logged.Lo) / (2 * 1.96)}
	a.report(rep)
	c := ev.Control
	rep.ControlOwn = ProofEstimate{Policy: "control_group", Truth: control.truth / control.n, Value: c.Mean, Lo: c.Lo, Hi: c.Hi, SE: (c.Hi - c.Lo) / (2 * 1.96), ESS: float64(c.N)}
	rep.Control = rep.ControlOwn
	for j, pv := range ev.Policies {
		if pv.Policy == "never_send" {
			rep.Control.Truth = truth[j] / n
		}
	}
	for j, pv := range ev.Policies {
		rep.DR = append(rep.DR, ProofEstimate{Policy: pv.Policy, Truth: truth[j] / n, Value: pv.DR.Value, Lo: pv.DR.Lo, Hi: pv.DR.Hi, SE: pv.DR.StdErr, ESS: pv.ESS})
		rep.IPS = append(rep.IPS, ProofEstimate{Policy: pv.Policy, Truth: truth[j] / n, Value: pv.IPS.Value, Lo: pv.IPS.Lo, Hi: pv.IPS.Hi, SE: pv.IPS.StdErr, ESS: pv.ESS})
	}
	return nil
}

// targetTruth is a target policy's true value on one logged decision.
type targetTruth func(rec *engine.DecisionRecord, t proofTruth) (float64, error)

// targets returns the truth of each of ev's target policies, in order:
// the current policy (Evaluator.PolicyProbs), never-send, and "always id"
// (nothing where id is not a candidate, as Evaluate reads it).
func (p *proofRun) targets(ev *engine.Evaluation) ([]targetTruth, error) {
	targets := make([]targetTruth, len(ev.Policies))
	for j, pv := range ev.Policies {
		switch pv.Policy {
		case "current_policy":
			targets[j] = p.policyTruth
		case "never_send":
			targets[j] = func(_ *engine.DecisionRecord, t proofTruth) (float64, error) { return t.vals[0], nil }
		default: // always_<id>_<name>
			id, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(pv.Policy, "always_"), "_", 2)[0])
			if err != nil {
				return nil, fmt.Errorf("lab: target %q: %w", pv.Policy, err)
			}
			targets[j] = func(rec *engine.DecisionRecord, t proofTruth) (float64, error) {
				if slices.Contains(rec.Candidates, id) {
					return t.vals[id], nil
				}
				return t.vals[0], nil
			}
		}
	}
	return targets, nil
}

// attribution checks the engine's final rewards against the lab: each
// against the window the lab drew for the decision (exact up to 5
// cents), and their means per action done against the truth.
type attribution struct {
	logged, sends welfordTruth
	sent          map[int]*welfordTruth
	wrong         int
	examples      []string
}

func newAttribution() *attribution { return &attribution{sent: map[int]*welfordTruth{}} }

func (a *attribution) add(rec *engine.DecisionRecord, t proofTruth) {
	got := float64(*rec.Recompensa) / 100
	a.logged.add(got, t.vals[t.done])
	if a.sent[t.done] == nil {
		a.sent[t.done] = &welfordTruth{}
	}
	a.sent[t.done].add(got, t.vals[t.done])
	if t.done != 0 {
		a.sends.add(got-t.vals[t.done], 0)
	}
	if math.Abs(got-t.sampled) > 0.05 {
		a.wrong++
		if len(a.examples) < 5 {
			a.examples = append(a.examples, fmt.Sprintf("%s: action %d, engine reward %.2f, lab's window %.2f", rec.ClienteRef, t.done, got, t.sampled))
		}
	}
}

// report sets rep's attribution figures.
func (a *attribution) report(rep *ProofReport) {
	rep.Misattributed, rep.Examples = a.wrong, a.examples
	rep.SendDiff = a.sends.estimate("sends_measured_minus_truth")
	ids := slices.Sorted(maps.Keys(a.sent))
	for _, id := range ids {
		rep.Sent = append(rep.Sent, a.sent[id].estimate(fmt.Sprintf("sent_%d", id)))
	}
}

// shadow runs the shadow report and sets its caller-rule, engine and lift
// values beside the truth over the decisions it compares: confirmed,
// reward final, outside the control group.
func (p *proofRun) shadow(rep *ProofReport) error {
	sr, err := p.eng.Evaluator.Shadow(p.ctx, labTenant)
	if err != nil {
		return err
	}
	var caller, eng float64
	a := newAttribution()
	for _, id := range p.ids {
		rec, err := p.eng.DecisionByID(labTenant, id)
		if err != nil {
			return err
		}
		if rec.Estado == engine.EstadoPendiente || rec.EnControl || rec.Recompensa == nil {
			continue
		}
		t := p.truths[id]
		v, err := p.policyTruth(rec, t)
		if err != nil {
			return err
		}
		a.add(rec, t)
		rep.Records++
		caller += t.vals[t.done]
		eng += v
	}
	n := float64(rep.Records)
	rep.RecordsEngine = sr.RewardsFinal
	a.report(rep)
	est := func(name string, truth float64, m engine.MeasuredValue) *ProofEstimate {
		return &ProofEstimate{Policy: name, Truth: truth, Value: m.Mean, Lo: m.Lo, Hi: m.Hi, SE: (m.Hi - m.Lo) / (2 * 1.96)}
	}
	rep.CallerRule = est("caller_rule", caller/n, sr.CallerRule)
	rep.EngineValue = est("engine", eng/n, sr.Engine)
	rep.Lift = est("engine_minus_caller", (eng-caller)/n, sr.Lift)
	rep.Agreement, rep.Ready, rep.Reasons = sr.Agreement, sr.Ready, sr.Reasons
	if math.IsNaN(rep.Agreement) {
		rep.Agreement = 0
	}
	return nil
}

// welfordTruth is a running mean and variance of measured rewards beside
// the mean of their truths.
type welfordTruth struct {
	n, mean, m2, truth float64
}

func (w *welfordTruth) add(x, truth float64) {
	w.n++
	d := x - w.mean
	w.mean += d / w.n
	w.m2 += d * (x - w.mean)
	w.truth += truth
}

func (w *welfordTruth) estimate(name string) ProofEstimate {
	se := math.NaN()
	if w.n >= 2 {
		se = math.Sqrt(w.m2 / (w.n - 1) / w.n)
	}
	return ProofEstimate{Policy: name, Truth: w.truth / w.n, Value: w.mean, Lo: w.mean - 1.96*se, Hi: w.mean + 1.96*se, SE: se, ESS: w.n}
}
