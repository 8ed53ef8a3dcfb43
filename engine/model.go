package engine

import (
	"time"
)

// candidate is one eligible action of a decision with its scores.
type candidate struct {
	id     int
	action *Action // nil for 0
	prior  float64 // economic prior, cents
	mu     float64 // expected reward, cents over the window
	sigma  float64 // uncertainty of mu, cents
}

// scored are the candidates of one decision, scored.
type scored struct {
	cands []candidate
	n     float64 // rewards the model has seen (drives exploration's gamma)
	s     float64 // the model's scale (cents) when scored
}

// publishedModel is a tenant's model as decisions read it: immutable once
// published (Learn clones, updates and swaps).
type publishedModel struct {
	version string
	m       *policyModel
}

func newPublishedModel() *publishedModel {
	return &publishedModel{version: "v0-prior", m: newPolicyModel()}
}

func (pm *publishedModel) clone() *publishedModel {
	return &publishedModel{version: pm.version, m: pm.m.clone()}
}

func (pm *publishedModel) update(x []float64, action int, rewardCents, prior, w float64) {
	pm.m.update(x, action, rewardCents, prior, w)
}

// publishVersion labels the model after an update: the number of rewards
// folded and the tenant time of publication.
func (pm *publishedModel) publishVersion(now time.Time) {
	pm.version = versionLabel(pm.m.n, now)
}

func (pm *publishedModel) marshal() ([]byte, error) { return pm.m.marshal(pm.version) }

func unmarshalModel(b []byte) (*publishedModel, error) {
	m, version, err := unmarshalPolicyModel(b)
	if err != nil {
		return nil, err
	}
	return &publishedModel{version: version, m: m}, nil
}

// score fills mu and sigma of every candidate for the customer.
func (pm *publishedModel) score(cust *customer, cands []candidate, _ time.Duration) *scored {
	for i := range cands {
		cands[i].prior = cust.prior(cands[i].action)
	}
	return pm.scoreX(cust.x, cands)
}

// scoreX scores candidates whose priors are set, at customer vector x:
// what depends on the customer only (basis, baseline, scale, noise) once,
// then each action's own part.
func (pm *publishedModel) scoreX(x []float64, cands []candidate) *scored {
	var cs custScore
	pm.m.customerScore(x, &cs)
	sc := &scored{cands: cands, n: float64(pm.m.n), s: cs.s}
	for i := range sc.cands {
		c := &sc.cands[i]
		c.mu, c.sigma = pm.m.predictArm(&cs, c.id, c.prior)
	}
	return sc
}

// keep drops the candidates for which fn is false (a budget cut), before
// the distribution is computed.
func (sc *scored) keep(fn func(c *candidate) bool) {
	kept := sc.cands[:0]
	for i := range sc.cands {
		if fn(&sc.cands[i]) {
			kept = append(kept, sc.cands[i])
		}
	}
	sc.cands = kept
}

// n is the number of rewards the model has folded.
func (pm *publishedModel) n() int64 { return pm.m.n }

// distribution returns the exploration distribution over sc.cands and the
// index of the action the policy ranks first.
func (pm *publishedModel) distribution(sc *scored) ([]float64, int) {
	return pm.m.distribution(sc)
}
