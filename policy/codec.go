package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Format is the stored model's format number. Formats before it (the
// engine's models until 2026-11-25, a different model class, and format 4,
// this model without the pooled coupon effect) are not read by Unmarshal;
// the engine starts such tenants afresh from the prior.
const Format = 5

// Algorithm names the policy for "coupond version", with the stored
// model's Format: a release whose Format differs does not read the models
// of this one (POLICY.md §1, §2, §4, §5).
func Algorithm() string {
	return fmt.Sprintf("joint ridge regression of coupon effects on the customer's history and category affinity, "+
		"economic prior as learned offsets; choices sent behind a send gate that tests them against never-send per "+
		"frequency band, a guard back to never-send or one coupon, logged propensities with a floor (model format %d)", Format)
}

// ErrOldFormat reports a stored model of an earlier format.
var ErrOldFormat = errors.New("policy: stored model of an earlier format")

type modelFile struct {
	Format  int              `json:"format"`
	Version string           `json:"politica_version"`
	Cats    []string         `json:"cats,omitempty"`
	N       float64          `json:"n"`
	Phi     []float64        `json:"phi"`
	BPhi    []float64        `json:"b_phi"`
	MPhi    []float64        `json:"m_phi"`
	ResN    float64          `json:"res_n"`
	ResSS   float64          `json:"res_ss"`
	TauE    float64          `json:"tau_e"`
	TauP    float64          `json:"tau_p"`
	Arms    map[int]*armFile `json:"arms"`
	Guard   Guard            `json:"guard"`
	// TicketGross and Tickets: TallyTickets' sums (absent before them).
	TicketGross float64 `json:"ticket_gross,omitempty"`
	Tickets     float64 `json:"tickets,omitempty"`
	// Sends and Optouts: TallyOptouts' counts (absent before them).
	Sends   float64 `json:"sends,omitempty"`
	Optouts float64 `json:"optouts,omitempty"`
}

type armFile struct {
	N    float64   `json:"n"`
	C    []float64 `json:"c"`
	Psi  []float64 `json:"psi"`
	B    []float64 `json:"b"`
	MC   []float64 `json:"m_c"`
	MPsi []float64 `json:"m_psi"`
}

// Marshal returns the stored form of the model (its statistics; the fit is
// recomputed on load) labelled with version.
func (m *Model) Marshal(version string) ([]byte, error) {
	f := modelFile{Format: Format, Version: version, Cats: m.Cats, N: m.n, Phi: m.phi, BPhi: m.bPhi, MPhi: m.mPhi,
		ResN: m.resN, ResSS: m.resSS, TauE: m.tauE, TauP: m.tauP, Arms: map[int]*armFile{}, Guard: m.guard,
		TicketGross: m.ticketGross, Tickets: m.tickets, Sends: m.sends, Optouts: m.optouts}
	for id, a := range m.arms {
		f.Arms[id] = &armFile{N: a.n, C: a.c, Psi: a.psi, B: a.b, MC: a.mC, MPsi: a.mPsi}
	}
	return json.Marshal(f)
}

// Unmarshal reads a stored model and its version label. A model of an
// earlier format gives ErrOldFormat (wrapped); damaged input an error,
// never a panic.
func Unmarshal(b []byte, cfg Config) (*Model, string, error) {
	var f modelFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, "", fmt.Errorf("decode model: %w", err)
	}
	// Every release stored its format (1 the first): none, 0 or below is
	// damage, not an earlier format.
	if f.Format >= 1 && f.Format < Format {
		return nil, f.Version, fmt.Errorf("%w (%d)", ErrOldFormat, f.Format)
	}
	ok := f.Format == Format && len(f.Phi) == dimBase*dimBase && len(f.BPhi) == dimBase && len(f.MPhi) == dimBase*dimBase &&
		len(f.Cats) <= NumCats && finite(f.Phi, f.BPhi, f.MPhi) && f.TauE > 0 && f.TauP > 0 && f.N >= 0 && f.ResN >= 0 && f.ResSS >= 0 &&
		f.Tickets >= 0 && finite([]float64{f.TicketGross, f.Tickets}) && f.Guard.valid() &&
		f.Sends >= 0 && f.Optouts >= 0 && f.Optouts <= f.Sends && finite([]float64{f.Sends, f.Optouts})
	for _, a := range f.Arms {
		ok = ok && a != nil && a.N >= 0 && len(a.C) == dimBase*dimEffect && len(a.Psi) == dimEffect*dimEffect && len(a.B) == dimEffect &&
			len(a.MC) == dimBase*dimEffect && len(a.MPsi) == dimEffect*dimEffect && finite(a.C, a.Psi, a.B, a.MC, a.MPsi)
	}
	if !ok {
		return nil, "", fmt.Errorf("decode model: damaged or unknown format %d", f.Format)
	}
	m := &Model{cfg: cfg, Cats: f.Cats, n: f.N, phi: f.Phi, bPhi: f.BPhi, mPhi: f.MPhi, resN: f.ResN, resSS: f.ResSS,
		tauE: f.TauE, tauP: f.TauP, arms: map[int]*armStats{}, guard: f.Guard, ticketGross: f.TicketGross, tickets: f.Tickets,
		sends: f.Sends, optouts: f.Optouts}
	for id, a := range f.Arms {
		m.arms[id] = &armStats{n: a.N, c: a.C, psi: a.Psi, b: a.B, mC: a.MC, mPsi: a.MPsi}
	}
	for k, o := range m.guard.Options {
		if o == nil {
			delete(m.guard.Options, k)
		}
	}
	for k, d := range m.guard.Duels {
		if d == nil {
			delete(m.guard.Duels, k)
		}
	}
	if g := &m.guard; g.Windows == 0 && !g.Decayed.IsZero() && cfg.GateAgeMin > 0 {
		// Stored before the tenant's age was kept: the age at which the
		// testing share is the one the rewards gave it.
		g.Windows = max(1, cfg.GateAgeMin*m.n/cfg.GateN0)
	}
	m.fit()
	if !m.fitFinite() {
		return nil, "", errors.New("decode model: statistics whose fit is not finite")
	}
	return m, f.Version, nil
}

// fitFinite reports whether the fit (coefficients, covariances, noise)
// is finite: finite statistics can still overflow it (a residual sum of
// squares of 1e308 made every coupon's standard error NaN, and an
// explained decision's answer could not be written).
func (m *Model) fitFinite() bool {
	ok := finite(m.beta, m.sharedCov, []float64{m.noise()})
	for _, a := range m.arms {
		ok = ok && finite(a.delta, a.cov, a.shX)
	}
	for _, c := range m.cross {
		ok = ok && finite(c)
	}
	return ok
}

// valid reports whether the stored guard holds what a guard can: its
// sums of weights and squares not below 0, its gate bands (at most
// GateBands) in a known state with a promise, a probability, in [0, 1].
// A promise of 5 made never-send's probability negative; a negative sum of
// squares made the status NaN.
func (g *Guard) valid() bool {
	ok := g.Windows >= 0 && len(g.Bands) <= GateBands && g.Policy.valid() && g.Test.valid() && g.Fast.valid()
	for _, s := range g.Options {
		ok = ok && (s == nil || s.valid())
	}
	for _, s := range g.Duels {
		ok = ok && (s == nil || s.valid())
	}
	for _, b := range g.Bands {
		ok = ok && b.State >= GateTesting && b.State <= GateClosed && b.Promise >= 0 && b.Promise <= 1 && b.Since >= 0 && b.Looked >= 0 && b.Looked <= g.Windows && b.Test.valid() && b.Fast.valid()
	}
	return ok
}

// valid reports whether the sums are finite and those that add weights or
// squares are not below 0.
func (s *guardSum) valid() bool {
	return finite([]float64{s.V, s.D, s.E}) && s.W >= 0 && s.W2 >= 0 && s.D2 >= 0 && s.E2 >= 0 && s.Q >= 0 && s.S >= 0 && s.K >= 0 &&
		finite([]float64{s.W, s.W2, s.D2, s.E2, s.Q, s.S, s.K})
}

func finite(vs ...[]float64) bool {
	for _, v := range vs {
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
	}
	return true
}

// Stale is the number of rewards folded since the last Refit.
func (m *Model) Stale() int { return m.sinceFit }
