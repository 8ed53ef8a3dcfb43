package policy

import (
	"math"
	"strconv"
)

// The send gate (Config.Gate) decides whether the model's choices are
// sent, by testing them against never-send as an experiment before
// trusting them (POLICY.md §7.7).
//
// Each decision's choice is never-send when no coupon's effect is above
// GateSendZ (0.25) widths (Score.Width; GateOpenSendZ, 0.1, where the
// customer's band is open), else the coupon of highest expected
// effect (gateChoice); with Config.TieTopTwo its strongest tied
// challenger shares its probability (evenTies). The decision's record logs
// the choice. Where it is a coupon it is sent with probability q and
// never-send gets 1 − q; where it is never-send nothing is sent.
// Every decision's outcome then feeds a test, per frequency band of the
// customer (bandOf) and over all customers: the inverse-propensity
// difference between the choice and never-send on the reward's residual
// against the model's never-send μ, each decision weighted by its
// choice's probability (observeGate). A band's q is:
//
//   - testing: GateQ0/(1 + (n/GateN0)^GatePow) after n rewards, n
//     reaching GateN0 between GateAgeMin and GateAgeMax windows of the
//     tenant's age whatever its size (testShare; half the choices early,
//     so the test has power; few late, so a choice that loses costs
//     little), but at least GatePromise·Φ(z − GateZ) while the band's test
//     is close to opening, and for a customer whose chosen coupon the
//     model is itself sure of, at least GatePromise·Φ(z − bar) with z its
//     effect over its standard error and bar the band's own opening bar
//     now, while the band's own mean is not below 0 (choiceShare,
//     Config.GateModelPromise, Config.GateModelPromiseAtBar); from
//     Config.GateLeanAge windows of the tenant's age, a band whose test
//     leans against its choices tests at the share times 2Φ(z)
//     (leanShare);
//   - open, once its choices beat never-send by GateZ standard errors, or
//     the choices over all customers do and the band's own mean is not
//     below 0 (Config.GatePooled; with Config.GatePooledOwn only once the
//     band's own test can be judged; such a band goes back to testing when
//     its own mean falls below 0): 1 − NeverShare (never-send's share
//     keeps the test going); with Config.GateLookAlpha the band's own
//     bar rises with the windows it has been looked at (openBar);
//   - closed, when its choices lose to never-send by GuardZ standard
//     errors, or for every band while the guard (the test over all
//     customers) finds them losing: the testing share over GateClosedDiv,
//     over GateClosedLateDiv from GateLeanAge windows (closedShare).
//
// Beyond the choice, coupons that might beat never-send are explored with
// a share that falls faster than the testing share (exploreGate), and
// every action keeps the floor.

// Gate states of a frequency band.
const (
	GateTesting = 0
	GateOpen    = 1
	GateClosed  = 2
)

// gateBand is one frequency band's gate: its state and its test.
type gateBand struct {
	State int      `json:"state,omitempty"`
	Test  guardSum `json:"test"`
	// Fast is the same test fading with the guard's half-life
	// (GuardHalfLife): harm is judged on recent evidence.
	Fast guardSum `json:"fast"`
	// Promise is the chance, on the test at the last update, that the
	// band's choices would clear the opening bar: Φ(z − GateZ), z the
	// test's mean over its standard error (0 without evidence).
	Promise float64 `json:"promise,omitempty"`
	// Pooled: the band opened on the test over all customers with its own
	// mean only not below 0 (GatePooled); it stays open while that mean is
	// not below 0.
	Pooled bool `json:"pooled,omitempty"`
	// Since is the tenant's age (Guard.Windows) when the band last went
	// back to testing, from which its looks at the opening bar are
	// counted (openBar); 0 while it has tested since the tenant began.
	// Kept only with Config.GateLookAlpha.
	Since float64 `json:"since,omitempty"`
	// Looked is the tenant's age (Guard.Windows) at the band's last look
	// at the opening bars (0: none yet): a band is looked at, and may
	// open, once a window (opensNow).
	Looked float64 `json:"looked,omitempty"`
}

// GateBands is the number of frequency bands the gate judges apart.
const GateBands = 4

// bandTops are the upper bounds of the frequency bands on the scale of
// frecuencia_365d, log1p(n)/log1p(365), n the customer's tickets a year
// (annualRate): at most one, 2–7, 8–25 and more.
var bandTops = [GateBands - 1]float64{0.15, 0.36, 0.55}

// GateBand is the frequency band of a customer with vector x: the index
// of their band in GateStatus.Bands.
func GateBand(x []float64) int { return bandOf(&Customer{X: x}) }

// bandOf returns customer c's frequency band (bandTops) by their yearly
// purchase rate (annualRate).
func bandOf(c *Customer) int {
	f365 := annualRate(c.X)
	for b, t := range bandTops {
		if f365 < t {
			return b
		}
	}
	return GateBands - 1
}

// annualRate is frecuencia_365d with the tickets counted over the part of
// the year the customer's history covers (antiguedad, at least
// minRateDays): a customer whose history began four months ago and who
// bought 8 times has the rate of 24 a year. On the raw count a band's
// customers would change as young histories fill up, and a band judged on
// the customers it held then would hold others (POLICY.md §7.27).
func annualRate(x []float64) float64 {
	if len(x) <= xFreq365 {
		return 0
	}
	f := x[xFreq365]
	if len(x) <= xAntiguedad || !(x[xAntiguedad] > 0) || !(f > 0) {
		return f
	}
	// Undo the scaling of both (engine.VectorNames): log1p(n)/log1p(365)
	// and log1p(days)/log1p(1096).
	days := math.Expm1(x[xAntiguedad] * math.Log1p(1096))
	n := math.Expm1(f*math.Log1p(365)) * 365 / min(max(days, minRateDays), 365)
	return math.Log1p(min(n, 365)) / math.Log1p(365)
}

// minRateDays is the least history (days) a yearly rate is scaled from: a
// customer first seen last week counts as seen 90 days ago, since a week
// is too short to tell a rate.
const minRateDays = 90

// gateQ is the probability of sending the choice (a coupon) to a customer
// of frequency band b now.
func (m *Model) gateQ(b int) float64 {
	qt := m.testShare()
	if m.guard.Active {
		return m.closedShare(qt)
	}
	gb := m.guard.band(b)
	switch gb.State {
	case GateClosed:
		return m.closedShare(qt)
	case GateOpen:
		return 1 - m.cfg.NeverShare
	}
	return max(m.leanShare(qt, &gb), m.cfg.GatePromise*gb.Promise)
}

// closedShare is testing share qt for a closed band or any band while the
// guard is active: qt/GateClosedLateDiv once the closed share is late
// (closedLate), else qt/GateClosedDiv.
func (m *Model) closedShare(qt float64) float64 {
	if m.closedLate() {
		return qt / m.cfg.GateClosedLateDiv
	}
	return qt / m.cfg.GateClosedDiv
}

// closedLate reports whether the tenant is GateLeanAge windows old, both
// that age and GateClosedLateDiv being set: from then on a closed share is
// over GateClosedLateDiv.
func (m *Model) closedLate() bool {
	a := m.cfg.GateLeanAge
	return a > 0 && m.cfg.GateClosedLateDiv > 0 && m.guard.Windows >= a
}

// lateClosed reports whether band b is closed, or the guard holds
// never-send, once the closed share is late (closedLate).
func (m *Model) lateClosed(b int) bool {
	return m.closedLate() && (m.guard.Active || m.guard.band(b).State == GateClosed)
}

// leanShare is testing share qt for testing band gb: qt·2Φ(z) once the
// tenant is GateLeanAge windows old and the band's test leans against its
// choices (z, its mean over its standard error, below 0 on at least
// GuardMinN effective decisions), else qt.
func (m *Model) leanShare(qt float64, gb *gateBand) float64 {
	if a := m.cfg.GateLeanAge; a <= 0 || m.guard.Windows < a {
		return qt
	}
	mean, se, ok := m.testStat(&gb.Test)
	if !ok || mean >= 0 {
		return qt
	}
	return qt * math.Erfc(-mean/se/math.Sqrt2) // 2Φ(z), z < 0
}

// band returns band b's gate (a zero one before any evidence).
func (g *Guard) band(b int) gateBand {
	if b < 0 || b >= len(g.Bands) {
		return gateBand{}
	}
	return g.Bands[b]
}

// testShare is the testing share q after the model's rewards: GateQ0
// until about GateN0 rewards, then falling fast (GatePow). The rewards
// count as much as the tenant's age allows: they reach GateN0 no sooner
// than GateAgeMin windows (a large tenant brings GateN0 rewards in its
// first window, and would stop testing before its tests had the power its
// size gives them) and no later than GateAgeMax windows (a small one would
// test, and explore, at the first share for months, on tests with too
// little power to conclude). So every tenant tests on the schedule of one
// of GateN0/GateAgeMax to GateN0/GateAgeMin decisions a window.
func (m *Model) testShare() float64 {
	x, w := m.n/m.cfg.GateN0, m.guard.Windows
	if a := m.cfg.GateAgeMin; a > 0 {
		x = min(x, w/a)
	}
	if a := m.cfg.GateAgeMax; a > 0 {
		x = max(x, w/a)
	}
	return m.cfg.GateQ0 / (1 + math.Pow(x, m.cfg.GatePow))
}

// exploreGate moves a share of the mass, GateExplore·(testShare/GateQ0)²
// (falling faster than the test; late in a closed band or under the guard,
// the closed share's: Config.GateExploreClosedLate), evenly to the coupons
// outside the choice (and its challenger) that could still beat never-send
// (Effect + Z·Width > 0) and to the coupons the data cannot tell apart
// from one of them (tied: two equal coupons are explored alike), so
// coupons the prior undervalues are tried while the tenant is young.
func (m *Model) exploreGate(sc []Score, probs []float64, floor float64) {
	plausible := func(i int) bool {
		s := &sc[i]
		return probs[i] == 0 && s.ID != 0 && s.Effect+m.cfg.Z*s.Width > 0
	}
	var ex [16]bool
	explore := ex[:0]
	if len(sc) > len(ex) {
		explore = make([]bool, 0, len(sc))
	}
	for i := range sc {
		explore = append(explore, plausible(i))
	}
	for i := range sc { // a coupon tied with a plausible one is explored too
		if explore[i] || probs[i] != 0 || sc[i].ID == 0 {
			continue
		}
		for j := range sc {
			if plausible(j) && m.tied(&sc[i], &sc[j]) {
				explore[i] = true
				break
			}
		}
	}
	var cand int
	for _, x := range explore {
		if x {
			cand++
		}
	}
	if cand == 0 {
		return
	}
	qt := m.testShare()
	if m.cfg.GateExploreClosedLate && m.lateClosed(int(sc[0].band)) { // cand > 0: sc is not empty
		qt = m.closedShare(qt)
	}
	r := qt / m.cfg.GateQ0
	e := m.cfg.GateExplore * r * r
	mass := 1 - floor
	for i := range sc {
		if explore[i] {
			probs[i] = e * mass / float64(cand)
		} else {
			probs[i] *= 1 - e
		}
	}
}

// gateChoice is the gate's choice among sc: never-send when no coupon's
// effect is above sendZ's widths (greedyZ), else the coupon of
// highest expected effect, safe or not. Which coupon is the estimate's
// call: a per-coupon bound would favour the coupon with more data (its
// smaller error makes it "safe" first, so it gets the sends and the data)
// and split two equal coupons unevenly.
func (m *Model) gateChoice(sc []Score) int {
	safe := m.greedyZ(sc, m.sendZ(sc))
	if safe < 0 || sc[safe].ID == 0 {
		return safe
	}
	top := safe
	for i := range sc {
		if sc[i].ID != 0 && sc[i].Effect > sc[top].Effect {
			top = i
		}
	}
	return top
}

// sendZ is the choice's bar for the customer scored in sc: GateOpenSendZ
// where their band is open (and the guard is not holding never-send),
// else GateSendZ.
func (m *Model) sendZ(sc []Score) float64 {
	if len(sc) > 0 && m.bandOpen(sc[0].band) {
		return m.cfg.GateOpenSendZ
	}
	return m.cfg.GateSendZ
}

// bandOpen reports whether frequency band b's gate is open and the guard
// holds no one back: where the band's choices are sent.
func (m *Model) bandOpen(b int8) bool {
	return !m.guard.Active && m.guard.band(int(b)).State == GateOpen
}

// choiceShare is the probability of sending sc[top], a coupon chosen for
// the customer scored in sc, rather than never-send: their band's share
// (gateQ), but at least GatePromise·Φ(z − bar) with
// Config.GateModelPromise while the band tests (the guard holding no one
// back) and its own test's mean is not below 0 (none yet counts as 0), z
// the choice's effect over its standard error and bar the band's own
// opening bar now (openBar) with Config.GateModelPromiseAtBar, else GateZ
// (POLICY.md §7.158). A test at its late share has no power left; where
// the model is itself sure the choice pays, the decisions it is sure about
// keep testing it, and the band's test (observeGate, which weighs each
// decision by this share) still decides whether the band opens.
func (m *Model) choiceShare(sc []Score, top int) float64 {
	b := int(sc[top].band)
	q := m.gateQ(b)
	gb := m.guard.band(b)
	if !m.cfg.GateModelPromise || m.guard.Active || gb.State != GateTesting || gb.Test.D < 0 {
		return q
	}
	se := m.Sigma(&sc[top])
	if !(se > 0) {
		return q
	}
	bar := m.cfg.GateZ
	if m.cfg.GateModelPromiseAtBar {
		bar = m.openBar(gb.Since)
	}
	return max(q, m.cfg.GatePromise*m.promise(sc[top].Effect/se, bar))
}

// promise is the chance that evidence z standard errors above 0 would
// clear bar: Φ(z − bar). A band's test (Promise, against GateZ) and the
// model's own estimate for a customer (choiceShare) are read alike.
func (m *Model) promise(z, bar float64) float64 {
	return 0.5 * math.Erfc(-(z-bar)/math.Sqrt2)
}

// floor is the probability spread over every action of a decision:
// Config.Floor, and with Config.FloorCost at most FloorCost times the
// customer's never-send μ over the coupons' mean downside (Arm.Downside),
// so the floor's sends cost at most about FloorCost of what the customer
// brings without a coupon; never below Floor/10, so every action keeps
// some support. Floor where no coupon's downside is known (records
// before it), never-send is not offered, or μ or a downside is not a
// number.
func (m *Model) floor(sc []Score, zero int) float64 {
	f := m.cfg.Floor
	if m.cfg.FloorCost <= 0 || zero < 0 {
		return f
	}
	var d float64
	n := 0
	for i := range sc {
		if sc[i].ID != 0 && sc[i].down > 0 {
			d += sc[i].down
			n++
		}
	}
	if n == 0 {
		return f
	}
	r := m.cfg.FloorCost * sc[zero].Mu * float64(n) / d
	if !(r < f) { // NaN (an unknown μ or downside) too
		return f
	}
	return max(f/10, r)
}

// distributionGate is Distribution under the gate.
func (m *Model) distributionGate(sc []Score, probs []float64) int {
	k := len(sc)
	top := m.gateChoice(sc)
	zero := indexOf(sc, 0)
	floor := m.floor(sc, zero)
	if zero < 0 || sc[top].ID == 0 {
		probs[top] = 1 - floor
	} else {
		q := m.choiceShare(sc, top)
		probs[top] = q * (1 - floor)
		probs[zero] = (1 - q) * (1 - floor)
		if w := m.evenTies(sc, probs); w >= 0 {
			top = w // the duel's winner: the choice the record logs
		}
	}
	m.exploreGate(sc, probs, floor)
	for i := range probs {
		probs[i] += floor / float64(k)
	}
	return top
}

// observeGate adds one logged decision to the gate's test: where the
// decision's choice was a coupon (choiceGroup; two when tied), the
// difference between sending the choice (the logged shares of the chosen
// coupons) and never-send, inverse-propensity weighted with the
// decision's exact propensities, on the reward's residual against the
// model's never-send μ at decision time (an adjustment that removes what
// the customer would buy anyway without biasing the difference: both arms
// share it). The test is the mean of these differences weighted by the
// choice's probability (POLICY.md §7.13); under Config.GateControlWeight
// the benefit tests weigh the smaller of it and never-send's (§7.62).
func (m *Model) observeGate(s *GuardSample, zero int) {
	in := m.choiceGroup(s, zero)
	var mass float64
	for i := range s.Arms {
		if in(i) {
			mass += s.Probs[i]
		}
	}
	if mass <= 0 {
		return
	}
	res := s.Reward - s.QHat[zero]
	// The decision weighs its choice's probability (mass): a decision
	// tested at share q carries about q of a sure one's information, so this
	// is the inverse-variance combination of decisions tested at different
	// shares; with equal weights the 1/q of the late, rarely tested
	// decisions would swamp the test while the share falls. Under
	// GateControlWeight the benefit tests weigh the rarer arm's probability
	// instead (a decision that could not have logged never-send tells
	// nothing of the difference); the harm tests (Fast) keep mass, so an
	// open band's recent losses are seen as soon as before.
	w := mass
	if m.cfg.GateControlWeight {
		w = min(mass, s.Probs[zero])
	}
	add := func(t *guardSum, w float64) {
		if w <= 0 {
			return
		}
		switch l := s.Logged; {
		case l == zero:
			t.addArm(res, s.Probs[zero], -1, w)
		case in(l):
			t.addArm(res, mass, 1, w)
		default:
			t.addWeighted(0, w)
		}
	}
	g := &m.guard
	add(&g.Test, w)
	add(&g.Fast, mass)
	if len(g.Bands) != GateBands {
		g.Bands = make([]gateBand, GateBands)
	}
	if m.cfg.DuelZ > 0 {
		m.observeDuel(s, in, res)
	}
	gb := &g.Bands[bandOf(&s.Customer)]
	add(&gb.Test, w)
	add(&gb.Fast, mass)
}

// choiceGroup returns which arms of a logged decision were its choice (a
// coupon and the coupon tied with it, drawn with its probability; none
// when the choice was never-send): the choice the record logged
// (GuardSample.ChoiceKnown). Records from before it was logged are read
// as choosing the coupon of highest μ when that μ is above never-send's
// (the choice with GateSendZ 0), tied with the coupons drawn with the
// same probability (exploration draws the others with less).
func (m *Model) choiceGroup(s *GuardSample, zero int) func(int) bool {
	fl := m.cfg.Floor/float64(len(s.Arms)) + 1e-9
	if s.ChoiceKnown {
		c := s.Choice
		if c < 0 || c == zero || s.Probs[c] <= fl {
			return func(int) bool { return false }
		}
		p := s.Probs[c]
		return func(i int) bool { return i != zero && math.Abs(s.Probs[i]-p) <= 1e-9*p }
	}
	top := -1
	for i := range s.Arms {
		if i != zero && (top < 0 || s.QHat[i] > s.QHat[top]) {
			top = i
		}
	}
	if top < 0 || s.QHat[top] <= s.QHat[zero] || s.Probs[top] <= fl {
		return func(int) bool { return false }
	}
	p := s.Probs[top]
	return func(i int) bool { return i != zero && math.Abs(s.Probs[i]-p) <= 1e-9*p }
}

// updateGate applies the guard and the gate to their tests (each with at
// least GuardMinN effective decisions). Benefit is judged on the tests
// (GateHalfLife), harm on their fast copies (GuardHalfLife), so a choice
// that stops paying is caught within a few windows however long it paid.
// The guard, on all customers: active (the closed share for every band)
// when the choices lose to never-send by GuardZ standard errors, released
// when they no longer lose by GuardReleaseZ. Each frequency band: testing
// → open when its choices beat never-send by GateZ standard errors, or
// those over all customers do and its own mean is not below 0
// (GatePooled; with GatePooledOwn only once its own test can be judged;
// with GateLookAlpha the band's own bar is openBar's); open → testing
// when recent evidence says they lose (mean +
// (−GateReleaseZ) standard errors below 0) or, for a band opened on the
// pooled test, when its own mean falls below 0; testing or open → closed when
// they lose by GuardZ; closed → testing when they no longer lose by
// GuardReleaseZ. With hold no testing band is looked at (UpdateGuard's
// backlog).
func (m *Model) updateGate(hold bool) {
	g := &m.guard
	if mean, se, ok := m.testStat(&g.Fast); ok {
		switch {
		case !g.Active && mean+m.cfg.GuardZ*se < 0:
			g.Active, g.Baseline = true, 0
			g.Switches++
		case g.Active && mean+m.cfg.GuardReleaseZ*se >= 0:
			g.Active = false
			g.Switches++
		}
	}
	pooled := false
	if mean, se, ok := m.testStat(&g.Test); ok && m.cfg.GatePooled && !g.Active {
		pooled = mean-m.cfg.GateZ*se > 0
	}
	for b := range g.Bands {
		gb := &g.Bands[b]
		was := gb.State
		if mean, se, ok := m.testStat(&gb.Fast); ok {
			switch {
			case gb.State != GateClosed && mean+m.cfg.GuardZ*se < 0:
				gb.State = GateClosed
			case gb.State == GateClosed && mean+m.cfg.GuardReleaseZ*se >= 0:
				gb.State = GateTesting
			case gb.State == GateOpen && mean-m.cfg.GateReleaseZ*se < 0:
				gb.State = GateTesting
			}
		}
		// mean is the band's own mean even without enough evidence (0
		// without any): a band too small to prove itself follows the
		// pooled test unless its own mean says its choices lose.
		mean, se, ok := m.testStat(&gb.Test)
		if ok {
			gb.Promise = m.promise(mean/se, m.cfg.GateZ)
		}
		if gb.State == GateOpen && gb.Pooled && (mean < 0 || m.cfg.GatePooledOwn && !ok) {
			// The condition it opened on no longer holds; under GatePooledOwn
			// that includes its own test being judged (a band opened without
			// it by an older release, or whose evidence faded).
			gb.State = GateTesting
		}
		// Only a test that could open the band makes a look (opensNow):
		// under GatePooledOwn the pooled test needs the band's own.
		canOpen := ok || pooled && !m.cfg.GatePooledOwn
		look := gb.State == GateTesting && was == GateTesting && canOpen && !hold && m.opensNow(gb)
		own := ok && mean-m.openBar(gb.Since)*se > 0
		if look && (own || pooled && mean >= 0) {
			gb.State = GateOpen
			gb.Pooled = !own
		}
		if gb.State != GateOpen {
			gb.Pooled = false
		}
		if gb.State == GateTesting && was != GateTesting && m.cfg.GateLookAlpha > 0 {
			gb.Since = g.Windows
		}
	}
}

// opensNow reports whether a testing band is looked at in this update,
// and records the look: once a window of the tenant's age (Guard.Windows),
// at the first update a whole window after the last look. The learner
// updates the gate at every pass that folds rewards: in process a window's
// rewards fold in one pass, but a live tenant's come due a few at a time,
// a pass a second, and a sandbox tenant's whole window folds in passes of
// learnBatchOnline while decisions are answered. Each such pass looked at
// growing evidence against the same bar, so a test of no effect crossed
// it more often than the bar's error allows (openBar counts looks by
// windows); once a window, it is the bar's own count. Only opening waits
// for the look: harm is judged at every update. An update with no test
// that could open the band (its own without GuardMinN effective
// decisions, the pooled one not passed) is no look and spends none, so
// evidence enough later in the window is looked at then.
func (m *Model) opensNow(gb *gateBand) bool {
	if w := m.guard.Windows; gb.Looked == 0 || w-gb.Looked >= 1-1e-9 {
		gb.Looked = w
		return true
	}
	return false
}

// openBar is the bar, in standard errors, that a band's own test must
// clear to open it when looked at now, the band testing since the
// tenant's age since (0: since the tenant began): GateZ, or with
// Config.GateLookAlpha the always-valid bar max(GateZ, lookZ(GateLookAlpha,
// k)), k = 1 + the whole windows from since (at least 1) to the tenant's
// age. Looks are windows, not learner passes (opensNow takes one a
// window): the tests fade by windows (GateHalfLife), so a window is the
// unit in which a test gathers new evidence. The count
// restarts when a band goes back to testing (gateBand.Since). The test
// over all customers keeps GateZ: a band it opens goes back to testing as
// soon as its own mean falls below 0 (GatePooled), so a lucky crossing
// there does not hold a losing band open, where one of the band's own test
// did (POLICY.md §7.51).
func (m *Model) openBar(since float64) float64 {
	a := m.cfg.GateLookAlpha
	if a <= 0 {
		return m.cfg.GateZ
	}
	k := 1 + math.Floor(max(m.guard.Windows-max(since, 1), 0))
	return max(m.cfg.GateZ, lookZ(a, k))
}

// lookZ is the one-sided normal bar of the k-th look (k ≥ 1) when an error
// alpha is spent over every look as alpha·6/(π²k²) (these sum to alpha):
// the z whose upper tail is that share. A test of a zero mean crosses some
// look's bar with probability at most alpha, however many looks it gets;
// the bar grows like √(4·ln k).
func lookZ(alpha, k float64) float64 {
	p := alpha * 6 / (math.Pi * math.Pi * k * k)
	return math.Sqrt2 * math.Erfcinv(2*min(p, 0.5))
}

// testStat returns a test's mean and standard error, and ok when they can
// be judged (at least GuardMinN effective decisions). The mean is the
// test's plain mean either way (0 without evidence).
func (m *Model) testStat(s *guardSum) (mean, se float64, ok bool) {
	mean, se = s.testDiff()
	return mean, se, !math.IsInf(se, 0) && se > 0 && s.neff() >= m.cfg.GuardMinN
}

// The gate's states as GateStatus shows them.
const (
	GateTestingState = "probando"
	GateOpenState    = "abierta"
	GateClosedState  = "cerrada"
)

// GateStatus is the gate's state and its test: the mean inverse-propensity
// difference (MXN per decision whose choice was a coupon) between sending
// the choice and never-send, its standard error and the effective number
// of decisions behind it, over all customers and per frequency band (at
// most one ticket in the last 365 days, 2–7, 8–25, more) with each band's
// state and the share of the choice's decisions it sends. SE is nil (null
// in JSON) while the test cannot estimate it yet.
type GateStatus struct {
	State string           `json:"state"`
	Diff  float64          `json:"diff_mxn"`
	SE    *float64         `json:"standard_error_mxn"`
	N     float64          `json:"effective_decisions"`
	Bands []GateBandStatus `json:"bands"`
}

// GateBandStatus is one frequency band's gate (SE as in GateStatus).
type GateBandStatus struct {
	// Tickets names the band by tickets a year (annualRate).
	Tickets string   `json:"tickets_per_year"`
	State   string   `json:"state"`
	Diff    float64  `json:"diff_mxn"`
	SE      *float64 `json:"standard_error_mxn"`
	N       float64  `json:"effective_decisions"`
	// Sending is the band's share of its choices sent (gateQ); while it
	// tests, a customer whose choice the model is sure of gets more
	// (choiceShare).
	Sending float64 `json:"sending_share"`
	// Bar is, while the band tests, how many standard errors above 0 its
	// own test's mean must be to open it if looked at now (openBar: GateZ
	// at the first look, rising with the windows it has tested); nil (absent
	// in JSON) while it is open or closed.
	Bar *float64 `json:"opening_bar_z,omitempty"`
}

// Open reports whether the gate is open for some band (false for a nil
// status).
func (g *GateStatus) Open() bool { return g != nil && g.State == GateOpenState }

// GateState is the gate's state as GateStatus shows it ("" without
// Config.Gate): closed while the guard holds never-send, else open when
// some band is open, else testing.
func (m *Model) GateState() string {
	switch {
	case !m.cfg.Gate:
		return ""
	case m.guard.Active:
		return GateClosedState
	}
	for _, gb := range m.guard.Bands {
		if gb.State == GateOpen {
			return GateOpenState
		}
	}
	return GateTestingState
}

// GateStatus reports the gate (nil without Config.Gate): its state
// (GateState), its test and each band's.
func (m *Model) GateStatus() *GateStatus {
	if !m.cfg.Gate {
		return nil
	}
	g := &m.guard
	st := &GateStatus{State: m.GateState(), Bands: make([]GateBandStatus, GateBands)}
	st.Diff, st.SE, st.N = testFigures(&g.Test)
	for b := range st.Bands {
		gb := g.band(b)
		bs := &st.Bands[b]
		bs.Tickets = bandTickets(b)
		bs.State = gateStateName(gb.State)
		bs.Diff, bs.SE, bs.N = testFigures(&gb.Test)
		bs.Sending = m.gateQ(b)
		if gb.State == GateTesting {
			bar := m.openBar(gb.Since)
			bs.Bar = &bar
		}
	}
	return st
}

// bandTickets names band b by its tickets a year (bandTops).
func bandTickets(b int) string {
	switch b {
	case 0:
		return "0-1"
	case 1:
		return "2-7"
	case 2:
		return "8-25"
	}
	return "26+"
}

func gateStateName(s int) string {
	switch s {
	case GateOpen:
		return GateOpenState
	case GateClosed:
		return GateClosedState
	}
	return GateTestingState
}

// testFigures returns a test's mean and standard error in MXN (nil: not
// yet estimable) and its effective number of decisions.
func testFigures(s *guardSum) (mean float64, se *float64, n float64) {
	mean, sd := s.testDiff()
	return mean / 100, seMXN(sd), s.neff()
}

// seMXN returns a standard error in cents as MXN, or nil when it is not
// yet estimable (infinite).
func seMXN(cents float64) *float64 {
	if math.IsInf(cents, 0) {
		return nil
	}
	return new(cents / 100)
}

// observeDuel adds a decision whose choice was a top-two tie (two coupons
// drawn with the same probability) and that sent one of them to the
// pair's duel: +2·res when it sent the higher id, −2·res the lower, res
// the reward's residual against never-send's expectation. Given that one
// of the two was sent, each was equally likely, so the mean is the
// difference of their effects, with an honest error.
func (m *Model) observeDuel(s *GuardSample, in func(int) bool, res float64) {
	a, b := -1, -1
	for i := range s.Arms {
		if !in(i) {
			continue
		}
		switch {
		case a < 0:
			a = i
		case b < 0:
			b = i
		default:
			return // more than two
		}
	}
	if b < 0 || (s.Logged != a && s.Logged != b) {
		return
	}
	if s.Arms[a].ID > s.Arms[b].ID {
		a, b = b, a
	}
	d := 2 * res
	if s.Logged == a {
		d = -d
	}
	g := &m.guard
	if g.Duels == nil {
		g.Duels = map[string]*guardSum{}
	}
	k := string(appendDuelKey(nil, s.Arms[a].ID, s.Arms[b].ID))
	if g.Duels[k] == nil {
		g.Duels[k] = &guardSum{}
	}
	g.Duels[k].addWeighted(d, 1)
}

// appendDuelKey appends the name of the duel of coupons a < b ("a-b",
// Guard.Duels' key) to dst.
func appendDuelKey(dst []byte, a, b int) []byte {
	dst = strconv.AppendInt(dst, int64(a), 10)
	return strconv.AppendInt(append(dst, '-'), int64(b), 10)
}

// duelWinner returns the winner of coupons a and b's duel, and false while
// it has not told them apart: its mean DuelZ standard errors from 0 with
// at least GuardMinN effective decisions.
func (m *Model) duelWinner(a, b int) (int, bool) {
	if m.cfg.DuelZ <= 0 || a == b {
		return 0, false
	}
	if len(m.guard.Duels) == 0 {
		return 0, false
	}
	lo, hi := min(a, b), max(a, b)
	var buf [48]byte // the key without an allocation: this runs on every decision with a tie
	d := m.guard.Duels[string(appendDuelKey(buf[:0], lo, hi))]
	if d == nil || d.neff() < m.cfg.GuardMinN {
		return 0, false
	}
	mean, se := d.diff()
	switch {
	case se > 0 && mean > m.cfg.DuelZ*se:
		return hi, true
	case se > 0 && mean < -m.cfg.DuelZ*se:
		return lo, true
	}
	return 0, false
}
