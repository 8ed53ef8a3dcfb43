package engine

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/coupond/coupond/policy"
)

// candidate is one eligible action of a decision with its scores.
type candidate struct {
	id     int
	action *Action    // nil for 0
	arm    policy.Arm // the (customer, action) pair as the model sees it
	prior  float64    // economic prior, cents
	mu     float64    // expected reward, cents over the window
}

// scored are the candidates of one decision, scored.
type scored struct {
	cust   policy.Customer
	cands  []candidate
	scores []policy.Score // aligned with cands
	m      *policy.Model  // the model that scored them
}

// scoreBuf is the memory of one decision's scores: a policy.Score per
// candidate is a few hundred bytes, several KB a decision.
type scoreBuf struct {
	scores []policy.Score
	arms   []policy.Arm
	sc     scored // what scoreInto returns
}

// size makes b hold n scores and arms.
func (b *scoreBuf) size(n int) {
	if cap(b.scores) < n {
		b.scores, b.arms = make([]policy.Score, n), make([]policy.Arm, n)
	}
	b.scores, b.arms = b.scores[:n], b.arms[:n]
}

// decideScratch is the memory an online decision borrows (scratchPool)
// until its answer is built and its record encoded (decideInto): the
// customer, the candidates, their scores and the record's stored form.
// Nothing the decision returns or keeps points into it.
type decideScratch struct {
	cust   customer
	cands  []candidate
	scores scoreBuf
	enc    []byte
}

// scratchPool recycles the decideScratch of online decisions; safe for
// concurrent use.
type scratchPool struct{ pool sync.Pool }

func (p *scratchPool) get() *decideScratch {
	if s, ok := p.pool.Get().(*decideScratch); ok {
		return s
	}
	return new(decideScratch)
}

func (p *scratchPool) put(s *decideScratch) { p.pool.Put(s) }

// sigma is the standard error of candidate i's effect against never-send
// (cents; policy.Model.Sigma): only an explained decision shows it.
func (sc *scored) sigma(i int) float64 { return sc.m.Sigma(&sc.scores[i]) }

// publishedModel is a tenant's model as decisions read it: immutable once
// published (Learn clones, updates and swaps).
type publishedModel struct {
	version string
	m       *policy.Model
	// restarted says why this tenant's stored model was not used when it
	// loaded (an earlier format, or damage: quarantined), so that learning
	// started again from the prior; "" otherwise. clone drops it: the
	// first model the learner publishes is of the current format.
	restarted string
	// fallback says that the newest stored model did not decode when the
	// tenant loaded and names this one, the last good model before it
	// (loadModel); "" otherwise. clone drops it, as restarted.
	fallback string
}

func newPublishedModel(cfg policy.Config) *publishedModel {
	return &publishedModel{version: "v0-prior", m: policy.New(cfg)}
}

func (pm *publishedModel) clone() *publishedModel {
	return &publishedModel{version: pm.version, m: pm.m.Clone()}
}

// publishVersion labels the model after an update: the number of rewards
// folded and the tenant time of publication.
func (pm *publishedModel) publishVersion(now time.Time) {
	pm.version = versionLabel(pm.m.N(), now)
}

func (pm *publishedModel) marshal() ([]byte, error) { return pm.m.Marshal(pm.version) }

// unmarshalModel reads a stored model. A model of an earlier format (the
// engine's own model class until 2026-11-25) is not converted: the tenant
// starts afresh from the economic prior, and old reports that with the
// model's label.
func unmarshalModel(b []byte, cfg policy.Config) (pm *publishedModel, old bool, err error) {
	m, version, err := policy.Unmarshal(b, cfg)
	if errors.Is(err, policy.ErrOldFormat) {
		return newPublishedModel(cfg), true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &publishedModel{version: version, m: m}, false, nil
}

// score fills arm, prior and mu of every candidate for the customer, whose
// sends risk the tenant's opt-out penalty (cents) at the model's opt-out
// rate. buf, if not nil, lends the scores' memory (scoreBufs).
func (pm *publishedModel) score(cust *customer, cands []candidate, penaltyCents int64, buf *scoreBuf) *scored {
	cust.optoutCents = float64(penaltyCents) * pm.m.OptoutRate()
	for i := range cands {
		c := &cands[i]
		c.arm = cust.arm(c.action)
		c.prior = c.arm.Prior
	}
	return pm.scoreInto(cust.policyCustomer(pm.m.Cats), cands, buf)
}

// scoreInto scores candidates whose arms are set for the customer pc,
// in buf's memory when buf is not nil.
func (pm *publishedModel) scoreInto(pc policy.Customer, cands []candidate, buf *scoreBuf) *scored {
	if buf == nil {
		buf = new(scoreBuf)
	}
	buf.size(len(cands))
	buf.sc = scored{cust: pc, cands: cands, scores: buf.scores, m: pm.m}
	sc := &buf.sc
	for i := range cands {
		buf.arms[i] = cands[i].arm
	}
	pm.m.Score(&pc, buf.arms, sc.scores)
	for i := range cands {
		cands[i].mu = sc.scores[i].Mu
	}
	return sc
}

// scoreRecord scores a logged decision's candidates again with this
// model, from the inputs the decision recorded.
func (pm *publishedModel) scoreRecord(r *DecisionRecord) *scored {
	pc, cands := r.policyInputs()
	return pm.scoreInto(pc, cands, nil)
}

// keep drops the candidates for which fn is false (a budget cut), before
// the distribution is computed.
func (sc *scored) keep(fn func(c *candidate) bool) {
	kept, ks := sc.cands[:0], sc.scores[:0]
	for i := range sc.cands {
		if fn(&sc.cands[i]) {
			kept, ks = append(kept, sc.cands[i]), append(ks, sc.scores[i])
		}
	}
	sc.cands, sc.scores = kept, ks
}

// n is the number of rewards the model has folded.
func (pm *publishedModel) n() int64 { return pm.m.N() }

// distribution returns the exploration distribution over sc.cands and the
// index of the action the policy chooses (policy.Model.Distribution).
func (pm *publishedModel) distribution(sc *scored) ([]float64, int) {
	probs := make([]float64, len(sc.cands))
	top := pm.m.Distribution(sc.scores, probs)
	return probs, top
}

// versionLabel names a published model: the rewards folded and the tenant
// time of publication, e.g. "v1250-20261122T230000".
func versionLabel(n int64, now time.Time) string {
	return "v" + strconv.FormatInt(n, 10) + "-" + now.UTC().Format("20060102T150405")
}

// policyInputs rebuilds what a logged decision showed the model: the
// customer (vector, category shares, never-send's prior) and the
// candidates with their model keys, priors, affinities and downsides.
// Records from before affinities or downsides were kept read as without
// them, and those without keys with their ids as keys.
func (r *DecisionRecord) policyInputs() (policy.Customer, []candidate) {
	pc := policy.Customer{X: r.X, Shares: r.Shares}
	cands := make([]candidate, len(r.Candidates))
	for i, id := range r.Candidates {
		c := &cands[i]
		c.id = id
		if i < len(r.Priors) {
			c.prior = r.Priors[i]
		}
		c.arm = policy.Arm{ID: id, Prior: c.prior}
		if len(r.Arms) == len(r.Candidates) {
			c.arm.ID = r.Arms[i]
		}
		if len(r.Downs) == len(r.Candidates) {
			c.arm.Downside = r.Downs[i]
		}
		if len(r.Aff) == affPerAction*len(r.Candidates) {
			a := r.Aff[affPerAction*i:]
			c.arm.AffShare, c.arm.AffFreq, c.arm.AffRec = a[0], a[1], a[2]
		}
		if id == 0 {
			pc.Base = c.prior
		}
	}
	return pc, cands
}
