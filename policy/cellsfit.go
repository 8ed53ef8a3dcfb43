package policy

import (
	"maps"
	"math"
	"slices"
)

// cellFit are the cell model's hyperparameters, chosen by evidence at each
// Refit: κ, the calibration of the economic prior's effect (the prior of
// every action's effect is κ·pe), and the standard deviations of the true
// effects around their parents: an action around κ·pe (tauRoot), a band
// around its action (tauBand), a cell around its band (tauCell). All in
// cents.
type cellFit struct {
	kappa, tauRoot, tauBand, tauCell float64
}

func (f cellFit) priorVar() float64 {
	return f.tauRoot*f.tauRoot + f.tauBand*f.tauBand + f.tauCell*f.tauCell
}

// startCellFit is the fit before any data.
func startCellFit(cfg Config) cellFit {
	return cellFit{kappa: cfg.CellKappa0, tauRoot: cfg.CellTauRoot, tauBand: cfg.CellTauBand, tauCell: cfg.CellTauBand}
}

// estimate is a direct estimate of an effect: the difference of two
// sample means, its variance and the mean prior effect of its samples. ok
// is false when either side has no sample.
type estimate struct {
	est, vr, pe float64
	ok          bool
}

// diffEstimate estimates treated minus control, each side's variance
// mixing its own spread with the pooled variance v (pseudo rewards' worth).
func diffEstimate(t, c *moments, v, pseudo float64) estimate {
	n := t.N + c.N
	e := estimate{}
	if n > 0 {
		e.pe = (t.PE + c.PE) / n
	}
	nt, nc := t.neff(), c.neff()
	if nt < 1 || nc < 1 {
		return e
	}
	mt, mc := t.S/t.N, c.S/c.N
	vt := (math.Max(t.SS/t.N-mt*mt, 0)*nt + pseudo*v) / (nt + pseudo)
	vc := (math.Max(c.SS/c.N-mc*mc, 0)*nc + pseudo*v) / (nc + pseudo)
	e.est, e.vr, e.ok = mt-mc, vt/nt+vc/nc, true
	return e
}

// levels are one coupon's direct estimates: the whole, each band, each cell.
type levels struct {
	root estimate
	band [nBands]estimate
	cell [nCells]estimate
}

func (m *Model) levelsOf(a *cellArm, v float64) *levels {
	p := m.cfg.CellPseudo
	var l levels
	var rt, rc moments
	for b := 0; b < nBands; b++ {
		var bt, bc moments
		for g := 0; g < nGroups; g++ {
			k := b*nGroups + g
			l.cell[k] = diffEstimate(&a.T[k], &a.C[k], v, p)
			bt.merge(&a.T[k])
			bc.merge(&a.C[k])
		}
		l.band[b] = diffEstimate(&bt, &bc, v, p)
		rt.merge(&bt)
		rc.merge(&bc)
	}
	l.root = diffEstimate(&rt, &rc, v, p)
	return &l
}

// fitCells computes every coupon's posterior effect per cell.
func (m *Model) fitCells() {
	v := m.noise()
	ids := slices.Sorted(maps.Keys(m.cells))
	lv := make([]*levels, len(ids))
	for i, id := range ids {
		lv[i] = m.levelsOf(m.cells[id], v)
	}
	f := m.evidenceCells(lv)
	m.cellFit = f
	for i, id := range ids {
		m.posterior(m.cells[id], lv[i], f)
	}
}

// combine is the normal posterior of a prior (mean, variance) and a direct
// estimate.
func combine(pm, pv float64, e *estimate) (float64, float64) {
	if !e.ok || !(e.vr > 0) {
		return pm, pv
	}
	w := 1/pv + 1/e.vr
	return (pm/pv + e.est/e.vr) / w, 1 / w
}

// posterior fills a coupon's cell means and variances: the action's
// effect from its prior (κ times the prior effect of its samples) and its
// bands (each band an observation of the action's effect with variance
// its own plus tauBand²), then each band from the action, then each cell
// from its band. The economic prior enters at the action's level only: a
// band or a cell departs from its parent on its own data.
func (m *Model) posterior(a *cellArm, l *levels, f cellFit) {
	rm, rv := f.kappa*l.root.pe, f.tauRoot*f.tauRoot
	tb2, tc2 := f.tauBand*f.tauBand, f.tauCell*f.tauCell
	for b := range l.band {
		if e := l.band[b]; e.ok {
			obs := estimate{est: e.est, vr: e.vr + tb2, ok: true}
			rm, rv = combine(rm, rv, &obs)
		}
	}
	for b := range l.band {
		bm, bv := combine(rm, rv+tb2, &l.band[b])
		for g := 0; g < nGroups; g++ {
			k := b*nGroups + g
			a.mean[k], a.vari[k] = combine(bm, bv+tc2, &l.cell[k])
		}
	}
}

// evidenceCells chooses κ and the τs from the direct estimates: κ by a
// weighted regression of the actions' effects on their prior effects,
// with a normal prior N(CellKappa0, CellKappaSD²); each τ² by the method
// of moments, the mean over the units with data of (deviation² −
// variance), kept within [CellTauMin, CellTauMax].
func (m *Model) evidenceCells(lv []*levels) cellFit {
	f := startCellFit(m.cfg)
	k0, ksd := m.cfg.CellKappa0, m.cfg.CellKappaSD
	num, den := k0/(ksd*ksd), 1/(ksd*ksd)
	for _, l := range lv {
		if r := l.root; r.ok {
			num += r.est * r.pe / r.vr
			den += r.pe * r.pe / r.vr
		}
	}
	f.kappa = clamp(num/den, 0, 1)
	var root, band, cell tauSum
	for _, l := range lv {
		if !l.root.ok {
			continue
		}
		root.add(l.root.est-f.kappa*l.root.pe, l.root.vr)
		for b := range l.band {
			e := &l.band[b]
			if !e.ok {
				continue
			}
			band.add(e.est-l.root.est, e.vr)
			for g := 0; g < nGroups; g++ {
				if c := &l.cell[b*nGroups+g]; c.ok {
					cell.add(c.est-e.est, c.vr)
				}
			}
		}
	}
	lo, hi := m.cfg.CellTauMin, m.cfg.CellTauMax
	f.tauRoot = math.Max(root.tau(f.tauRoot, lo, 3*hi), m.cfg.CellTauRoot)
	f.tauBand = band.tau(f.tauBand, lo, hi)
	f.tauCell = cell.tau(f.tauCell, lo, hi)
	return f
}

// tauSum accumulates deviations and their sampling variances for a
// method-of-moments τ², each unit weighted by its precision.
type tauSum struct{ w, s, n float64 }

func (t *tauSum) add(dev, vr float64) {
	if !(vr > 0) {
		return
	}
	w := 1 / vr
	t.n++
	t.w += w
	t.s += w * (dev*dev - vr)
}

// tau is the method-of-moments τ, √(Σw(dev² − var)/Σw), pulled towards
// start by two units' worth of weight (a handful of units cannot collapse
// it), within [lo, hi].
func (t *tauSum) tau(start, lo, hi float64) float64 {
	if t.w == 0 || t.n == 0 {
		return clamp(start, lo, hi)
	}
	w0 := 2 * t.w / t.n
	return clamp(math.Sqrt(math.Max((t.s+w0*start*start)/(t.w+w0), 0)), lo, hi)
}
