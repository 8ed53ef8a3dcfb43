// Package ope estimates, from logged decisions, the value a target policy
// would have earned (off-policy evaluation): inverse propensity scoring
// (IPS), self-normalised IPS (SNIPS) and doubly robust (DR) estimates, each
// with a bootstrap confidence interval, plus the diagnostics that say how
// far to trust them (effective sample size, largest weight).
//
// For a logged record with reward r, logging propensity p of the logged
// action a and target probability π(a|x), the importance weight is
// w = π(a|x)/p and
//
//	IPS   = (1/n) Σ w r
//	SNIPS = Σ w r / Σ w
//	DR    = (1/n) Σ [ Σ_b π(b|x) q̂(x,b) + w (r − q̂(x,a)) ]
//
// (Horvitz & Thompson 1952; Swaminathan & Joachims 2015; Dudík, Langford &
// Li 2011). IPS and DR are unbiased when every logged propensity is exact
// and positive wherever π is; SNIPS trades a small bias for less variance;
// DR has the lowest variance when q̂ is good and stays unbiased when it is
// not.
//
// Intervals are studentized bootstrap (bootstrap-t; Efron & Tibshirani
// 1993, ch. 12) intervals of a moderated t statistic, never narrower than
// its Student interval on either side. The standard error is moderated
// (Smyth 2004): a target that takes few logged actions (a coupon sent a
// handful of times) reads a few heavy-tailed rewards whose own spread is
// usually too small (the rare large purchase has not come yet), so its
// variance leans on the spread of the whole log, as much as d₀ = 20
// records, and on its own as much as its effective sample size; a target
// the log covers well keeps its own. The log's spread can widen an
// interval, never narrow it. intervals.md derives it and gives the figures
// that chose it. The bootstrap is a Poisson bootstrap computed in the same
// single pass (each record enters each replicate k ~ Poisson(1) times;
// Hanley & MacGibbon 2006, Chamandy et al. 2012), so records can be
// streamed from the store without being held in memory. Everything is
// deterministic given the seed and the order of the records.
package ope

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Errors returned by the package, wrapped with detail; test with errors.Is.
var (
	// ErrInvalidRecord: a record with a non-finite value, a logged
	// propensity outside (0, 1], a target probability outside [0, 1] or an
	// importance weight too large for float64 (Record.Check). Add's error
	// names the record's index.
	ErrInvalidRecord = errors.New("ope: invalid record")
	// ErrOptions: Options out of range.
	ErrOptions = errors.New("ope: invalid options")
)

// Record is one logged decision, as seen by the target policy.
type Record struct {
	// Reward observed for the logged action.
	Reward float64
	// Logged is the propensity p with which the logging policy chose the
	// logged action (in (0, 1]; 1 for control-group and fallback records).
	Logged float64
	// Target is π(a|x), the probability the evaluated policy gives the
	// logged action in the logged context (in [0, 1]).
	Target float64
	// QHat is the reward model's prediction q̂(x, a) for the logged action
	// and QPi the model's value of the target policy in this context,
	// Σ_b π(b|x) q̂(x, b) over the eligible actions. Used by DR only; leave
	// both 0 to make DR equal IPS.
	QHat, QPi float64
}

// Options tune Evaluate and Evaluator.
type Options struct {
	// Replicates is the number of bootstrap replicates; default 200 (0).
	// The cost of an evaluation is proportional to it.
	Replicates int
	// Level is the coverage of the intervals; default 0.95 (0).
	Level float64
	// Seed fixes the bootstrap draws.
	Seed uint64
}

func (o Options) withDefaults() (Options, error) {
	if o.Replicates == 0 {
		o.Replicates = 200
	}
	if o.Level == 0 {
		o.Level = 0.95
	}
	if o.Replicates < 2 || o.Replicates > 100000 {
		return o, fmt.Errorf("%w: Replicates %d not in 2..100000", ErrOptions, o.Replicates)
	}
	if !(o.Level > 0 && o.Level < 1) {
		return o, fmt.Errorf("%w: Level %v not in (0, 1)", ErrOptions, o.Level)
	}
	return o, nil
}

// Estimate is one estimator's value with its bootstrap interval. Values
// that cannot be estimated are NaN; in JSON they are null.
type Estimate struct {
	// Value is the estimate over all records.
	Value float64 `json:"value"`
	// Lo and Hi bound the interval at Options.Level: the studentized
	// bootstrap interval of the moderated t statistic, widened where needed
	// to contain Value ± t·StdErr, t Student's quantile at the moderated
	// degrees of freedom (NaN with fewer than two records).
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	// StdErr is the moderated standard error of Value: the standard
	// deviation of the per-record terms over √N (delta method for SNIPS),
	// raised toward what it would be if the rewards the target reads were
	// as spread as the whole log's when its effective sample size is small
	// (package doc, intervals.md).
	StdErr float64 `json:"std_err"`
}

// MarshalJSON writes e with NaN and infinite values as null (encoding/json
// refuses them).
func (e Estimate) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Value  *float64 `json:"value"`
		Lo     *float64 `json:"lo"`
		Hi     *float64 `json:"hi"`
		StdErr *float64 `json:"std_err"`
	}{nullable(e.Value), nullable(e.Lo), nullable(e.Hi), nullable(e.StdErr)})
}

func nullable(v float64) *float64 {
	if !finite(v) {
		return nil
	}
	return &v
}

// Result is the evaluation of a target policy over a log. With no records
// every value is NaN except N, which is 0. When the target takes none of
// the logged actions (every weight is 0: a coupon never sent, say) the log
// says nothing of the target's rewards: IPS, SNIPS, DR and DRLift are NaN
// rather than IPS's 0 and DR's model-only mean, whose intervals would be
// a confident-looking artefact, and ESS is 0. When it takes the action of
// one record only, SNIPS is that record's reward and has no interval.
type Result struct {
	N int `json:"n"`
	// IPS, SNIPS and DR estimate the target policy's value per decision.
	IPS   Estimate `json:"ips"`
	SNIPS Estimate `json:"snips"`
	DR    Estimate `json:"dr"`
	// Logged is the logging policy's own value: the mean logged reward.
	Logged Estimate `json:"logged"`
	// DRLift is DR − Logged, with its interval from the same (paired)
	// records: a lift whose interval excludes 0 is significant.
	DRLift Estimate `json:"dr_lift"`
	// ESS is the effective sample size (Σw)²/Σw² of the importance weights:
	// how many on-policy records the log is worth for this target. Much
	// smaller than N means wide intervals and fragile estimates.
	ESS float64 `json:"effective_sample_size"`
	// MaxWeight is the largest importance weight π/p, and MeanWeight the
	// mean one (near 1 when propensities are right and π's support is
	// covered by the log).
	MaxWeight  float64 `json:"max_weight"`
	MeanWeight float64 `json:"mean_weight"`
}

// MarshalJSON writes r with NaN values as null.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result // without this method
	return json.Marshal(struct {
		plain
		ESS        *float64 `json:"effective_sample_size"`
		MaxWeight  *float64 `json:"max_weight"`
		MeanWeight *float64 `json:"mean_weight"`
	}{plain(r), nullable(r.ESS), nullable(r.MaxWeight), nullable(r.MeanWeight)})
}

// Evaluate evaluates recs with opt. It is Evaluator's Add over every record
// followed by Result.
func Evaluate(recs []Record, opt Options) (Result, error) {
	e, err := NewEvaluator(opt)
	if err != nil {
		return Result{}, err
	}
	for i := range recs {
		if err := e.Add(recs[i]); err != nil {
			return Result{}, err
		}
	}
	return e.Result(), nil
}

// Evaluator accumulates records in one pass. It is not safe for concurrent
// use.
type Evaluator struct {
	opt  Options
	key  uint64 // the bootstrap generator's state, from Options.Seed
	n    int    // records added
	took int    // records whose weight is above 0: the target takes their action
	maxW float64
	all  sums   // over every record once
	reps []sums // per bootstrap replicate, every record k ~ Poisson(1) times
	// block holds the terms of the last records added, not yet folded into
	// reps; block[0] is record n − len(block).
	block []terms
}

// blockSize is how many records are folded into the replicates at a time:
// each replicate's sums then stay in registers over a whole block.
const blockSize = 256

// sums are the weighted sums every estimate and its standard error come
// from: c = Σk, w = Σk·w, wr = Σk·w·r, and so on (k the record's count).
type sums struct {
	c, w, wr, dr, r  float64
	wr2, dr2, r2, l2 float64 // squares of w·r, the DR term, r, and DR term − r
	w2, w2r          float64 // Σk·w², Σk·w²·r (SNIPS's linearised variance)
	e2, w2e2         float64 // Σk·e², Σk·w²·e² of the residual e = r − q̂ (the log's spread: moderate)
}

// terms are one record's contributions to each of the sums (c's is 1),
// squares and products computed once rather than once per replicate: l is
// the DR term − r, e2 the squared residual (r − q̂)² and w2e2 that times w².
type terms struct{ w, wr, dr, r, l, wr2, dr2, r2, l2, w2, w2r, e2, w2e2 float64 }

// NewEvaluator returns an empty evaluator.
func NewEvaluator(opt Options) (*Evaluator, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Evaluator{opt: opt, key: mix64(opt.Seed), reps: make([]sums, opt.Replicates), block: make([]terms, 0, blockSize)}, nil
}

// Check reports whether Add takes r: its values finite, the logged
// propensity in (0, 1], the target probability in [0, 1], and its
// importance-weighted terms and their squares within float64 (a logged
// propensity so small that they are not would make every estimate
// infinite or NaN). An error wraps ErrInvalidRecord.
func (r Record) Check() error {
	if !finite(r.Reward) || !finite(r.QHat) || !finite(r.QPi) ||
		!(r.Logged > 0 && r.Logged <= 1) || !(r.Target >= 0 && r.Target <= 1) {
		return fmt.Errorf("%w: %+v", ErrInvalidRecord, r)
	}
	if t := r.terms(); !finite(t.w2) || !finite(t.wr2) || !finite(t.dr2) || !finite(t.l2) || !finite(t.w2r) || !finite(t.w2e2) {
		return fmt.Errorf("%w: importance weight %v beyond float64: %+v", ErrInvalidRecord, t.w, r)
	}
	return nil
}

// terms are r's contributions to the sums.
func (r Record) terms() terms {
	w := r.Target / r.Logged
	e := r.Reward - r.QHat
	t := terms{w: w, wr: w * r.Reward, dr: r.QPi + w*e, r: r.Reward, e2: e * e}
	t.l = t.dr - t.r
	t.wr2, t.dr2, t.r2, t.l2 = t.wr*t.wr, t.dr*t.dr, t.r*t.r, t.l*t.l
	t.w2, t.w2r, t.w2e2 = w*w, w*t.wr, w*w*t.e2
	return t
}

// Add folds one record in. An invalid record (Check) returns an error
// wrapping ErrInvalidRecord and naming the record's index, and is left out.
func (e *Evaluator) Add(r Record) error {
	if err := r.Check(); err != nil {
		return fmt.Errorf("record %d: %w", e.n, err)
	}
	t := r.terms()
	w := t.w
	e.n++
	e.maxW = max(e.maxW, w)
	if w > 0 {
		e.took++
	}
	a := &e.all
	a.c++
	a.w += t.w
	a.wr += t.wr
	a.dr += t.dr
	a.r += t.r
	a.wr2 += t.wr2
	a.dr2 += t.dr2
	a.r2 += t.r2
	a.l2 += t.l2
	a.w2 += t.w2
	a.w2r += t.w2r
	a.e2 += t.e2
	a.w2e2 += t.w2e2
	e.block = append(e.block, t)
	if len(e.block) == blockSize {
		e.flush()
	}
	return nil
}

// flush folds the block into every replicate. Record i's count in
// replicate j is a Poisson(1) draw from the 32-bit half j%2 of SplitMix64's
// output number i·⌈R/2⌉ + j/2 from the seed's state, so the counts do not
// depend on how records were grouped into blocks.
//
// The sums are written out field by field here and in Add on purpose: a
// shared (*sums).add(k, *terms) is past the inliner's budget and keeps the
// block's sums in memory, not registers, and made BenchmarkEvaluate1M 16 %
// slower (1.19 s → 1.38 s a run). Adding a sum means adding it to terms,
// sums, Record.terms, Add and both lists below.
func (e *Evaluator) flush() {
	if len(e.block) == 0 {
		return
	}
	half := uint64(len(e.reps)+1) / 2
	first := uint64(e.n-len(e.block)) * half
	for j := range e.reps {
		shift := uint(32 * (j & 1))
		pos := first + uint64(j/2)
		var c, sw, swr, sdr, sr, swr2, sdr2, sr2, sl2, sw2, sw2r, se2, sw2e2 float64
		for i := range e.block {
			k := poisson1(uint32(splitmixAt(e.key, pos) >> shift))
			pos += half
			t := &e.block[i] // k = 0 adds nothing; not branching on it is faster
			c += k
			sw += k * t.w
			swr += k * t.wr
			sdr += k * t.dr
			sr += k * t.r
			swr2 += k * t.wr2
			sdr2 += k * t.dr2
			sr2 += k * t.r2
			sl2 += k * t.l2
			sw2 += k * t.w2
			sw2r += k * t.w2r
			se2 += k * t.e2
			sw2e2 += k * t.w2e2
		}
		p := &e.reps[j]
		p.c += c
		p.w += sw
		p.wr += swr
		p.dr += sdr
		p.r += sr
		p.wr2 += swr2
		p.dr2 += sdr2
		p.r2 += sr2
		p.l2 += sl2
		p.w2 += sw2
		p.w2r += sw2r
		p.e2 += se2
		p.w2e2 += sw2e2
	}
	e.block = e.block[:0]
}

// priorRecords is d₀, how many records' worth of evidence the log-wide
// spread carries in a moderated variance (moderate; intervals.md). Tuned
// on the lab's proof seeds 48001–48020: at 5 or 10 the intervals of
// coupons with an effective sample size of 30 to 100 still missed their
// truth one time in five to eight; from 30 on, the current policy's lost
// coverage as the prior trimmed its bootstrap-t side.
const priorRecords = 20

// stat computes one estimator from a set of sums: its value (ok false when
// undefined), its moderated standard error (NaN when it cannot be
// estimated) and the degrees of freedom of that error.
type stat func(s *sums) (value, se, df float64, ok bool)

// moderate returns the moderated variance of an estimate whose sample
// variance vs rests on d degrees of freedom and whose variance under the
// log-wide spread is vp: (d₀·vp + d·vs)/(d₀ + d) (Smyth 2004's moderated
// variance, with the log as the prior), never below vs, and its degrees
// of freedom d₀ + d. The log can widen an interval whose few records have
// not shown the tail of the rewards, never narrow one whose records have.
func moderate(vs, vp, d float64) (v, df float64) {
	vs, d = max(vs, 0), max(d, 0)
	return max(vs, (priorRecords*max(vp, 0)+d*vs)/(priorRecords+d)), priorRecords + d
}

// essDF is the degrees of freedom of a weighted sample's variance: its
// effective sample size (Σw)²/Σw² less one.
func essDF(s *sums) float64 {
	if !(s.w2 > 0) {
		return 0
	}
	return s.w*s.w/s.w2 - 1
}

// weightedStat is the mean of a per-record term t = a + w·e whose weighted
// part e is read from the records the target takes (e = r for IPS, the
// residual r − q̂ for DR and the DR lift), given how to read Σt, Σt², Σw²e²
// and Σe² (over every record) from the sums. Its variance is moderated
// (moderate) between the sample variance of t and the variance t would
// have if each record's w²e² were w² times the log's mean e²
// (intervals.md). A bootstrap replicate's comes from its own sums, prior
// included, as the bootstrap redoes the whole estimate.
func weightedStat(sum, sum2, w2e2, e2 func(s *sums) float64) stat {
	return func(s *sums) (float64, float64, float64, bool) {
		if s.c == 0 {
			return math.NaN(), math.NaN(), 0, false
		}
		m := sum(s) / s.c
		if s.c < 2 {
			return m, math.NaN(), 0, true
		}
		vs := (sum2(s) - s.c*m*m) / (s.c - 1)
		vp := vs + (s.w2*e2(s)/s.c-w2e2(s))/(s.c-1)
		v, df := moderate(vs, vp, essDF(s))
		return m, math.Sqrt(v / s.c), df, true
	}
}

// loggedStat is the mean logged reward. Every record weighs 1: the sample
// is the log, and moderation only sets the degrees of freedom.
func loggedStat(s *sums) (float64, float64, float64, bool) {
	if s.c == 0 {
		return math.NaN(), math.NaN(), 0, false
	}
	m := s.r / s.c
	if s.c < 2 {
		return m, math.NaN(), 0, true
	}
	vs := (s.r2 - s.c*m*m) / (s.c - 1)
	v, df := moderate(vs, vs, s.c-1)
	return m, math.Sqrt(v / s.c), df, true
}

var (
	ipsStat = weightedStat(func(s *sums) float64 { return s.wr }, func(s *sums) float64 { return s.wr2 },
		func(s *sums) float64 { return s.wr2 }, func(s *sums) float64 { return s.r2 })
	drStat = weightedStat(func(s *sums) float64 { return s.dr }, func(s *sums) float64 { return s.dr2 },
		func(s *sums) float64 { return s.w2e2 }, func(s *sums) float64 { return s.e2 })
	liftStat = weightedStat(func(s *sums) float64 { return s.dr - s.r }, func(s *sums) float64 { return s.l2 },
		func(s *sums) float64 { return s.w2e2 }, func(s *sums) float64 { return s.e2 })
)

// snipsStat is θ = Σwr/Σw with its linearised (delta-method) variance
// Σw²(r − θ)²/(Σw)², moderated with Σw²·m/(Σw)², m the log-wide mean of
// (r − θ)².
func snipsStat(s *sums) (float64, float64, float64, bool) {
	if !(s.w > 0) {
		return math.NaN(), math.NaN(), 0, false
	}
	th := s.wr / s.w
	vs := s.wr2 - 2*th*s.w2r + th*th*s.w2
	vp := s.w2 * (s.r2 - 2*th*s.r + th*th*s.c) / s.c
	v, df := moderate(vs, vp, essDF(s))
	return th, math.Sqrt(v) / s.w, df, true
}

// Result returns the estimates over the records added so far. The
// evaluator can keep accumulating afterwards.
func (e *Evaluator) Result() Result {
	e.flush()
	nan := math.NaN()
	res := Result{N: e.n, ESS: nan, MaxWeight: nan, MeanWeight: nan}
	t := make([]float64, 0, len(e.reps))
	res.Logged = e.estimate(loggedStat, t)
	none := Estimate{Value: nan, Lo: nan, Hi: nan, StdErr: nan}
	res.IPS, res.SNIPS, res.DR, res.DRLift = none, none, none, none
	if e.n == 0 {
		return res
	}
	res.MaxWeight, res.MeanWeight = e.maxW, e.all.w/float64(e.n)
	if !(e.all.w > 0) { // no support: nothing to estimate from
		res.ESS = 0
		return res
	}
	res.ESS = e.all.w * e.all.w / e.all.w2
	res.IPS = e.estimate(ipsStat, t)
	res.SNIPS = e.estimate(snipsStat, t)
	if e.took < 2 { // one record's reward, whose spread cannot be known
		res.SNIPS.Lo, res.SNIPS.Hi, res.SNIPS.StdErr = nan, nan, nan
	}
	res.DR = e.estimate(drStat, t)
	res.DRLift = e.estimate(liftStat, t)
	return res
}

// estimate returns st over every record with its interval: the studentized
// bootstrap (bootstrap-t) interval of the moderated t statistic, widened
// where needed to contain θ̂ ± t_df·se, the Student interval of the
// moderated standard error. With t* = (θ* − θ̂)/se* over the replicates
// (se* each replicate's own moderated error), the bootstrap-t interval is
// [θ̂ − t*₍₁₋α/₂₎·se, θ̂ − t*₍α/₂₎·se]; it corrects for the right skew of
// importance-weighted rewards (where the percentile and normal intervals
// miss high), but when rare large weights push the estimate both ways (DR)
// it can come out narrower than the Student interval, so neither side is
// allowed inside it. t is scratch space.
func (e *Evaluator) estimate(st stat, t []float64) Estimate {
	nan := math.NaN()
	v, se, df, ok := st(&e.all)
	est := Estimate{Value: v, Lo: nan, Hi: nan, StdErr: se}
	switch {
	case !ok:
		est.Value = nan
		return est
	case math.IsNaN(se):
		return est
	}
	alpha := (1 - e.opt.Level) / 2
	z := tQuantile(1-alpha, df)
	est.Lo, est.Hi = v-z*se, v+z*se
	if se == 0 { // every term equal: nothing varies
		return est
	}
	for i := range e.reps {
		vr, ser, _, ok := st(&e.reps[i])
		if ok && ser > 0 {
			t = append(t, (vr-v)/ser)
		}
	}
	if len(t) < 2 {
		return est
	}
	slices.Sort(t)
	est.Lo = min(est.Lo, v-quantile(t, 1-alpha)*se)
	est.Hi = max(est.Hi, v-quantile(t, alpha)*se)
	return est
}

// tQuantile is the p quantile of Student's t with df degrees of freedom,
// by the Cornish–Fisher expansion about the normal quantile (Abramowitz &
// Stegun 26.7.5, four terms): within 10⁻⁵ of the exact value for p from
// 0.005 to 0.995 and df ≥ priorRecords, the least moderate gives
// (TestTQuantile).
func tQuantile(p, df float64) float64 {
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	z2 := z * z
	g1 := (z2 + 1) * z / 4
	g2 := ((5*z2+16)*z2 + 3) * z / 96
	g3 := (((3*z2+19)*z2+17)*z2 - 15) * z / 384
	g4 := ((((79*z2+776)*z2+1482)*z2-1920)*z2 - 945) * z / 92160
	return z + (g1+(g2+(g3+g4/df)/df)/df)/df
}

// quantile interpolates linearly between order statistics of sorted
// (Hyndman & Fan type 7, as R and NumPy default to).
func quantile(sorted []float64, q float64) float64 {
	h := q * float64(len(sorted)-1)
	i := int(h)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (h-float64(i))*(sorted[i+1]-sorted[i])
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// poissonCDF holds ⌊2³² · P(K <= k)⌋ for K ~ Poisson(1), k = 0, 1, ...;
// poisson1 maps a uniform 32-bit number to K by inversion. Counts above 12
// (probability below 10⁻¹⁰) count as 12.
var poissonCDF = func() [12]uint32 {
	var t [12]uint32
	p, c := math.Exp(-1), 0.0
	for k := range t {
		c += p
		t[k] = uint32(math.Min(c*(1<<32), math.MaxUint32))
		p /= float64(k + 1)
	}
	return t
}()

// poissonTop maps the top 8 bits of u to K when all 2²⁴ numbers with those
// bits give the same K, and to 0xff otherwise (6 of the 256 cells).
var poissonTop = func() [256]uint8 {
	var t [256]uint8
	for i := range t {
		lo, hi := poissonSlow(uint32(i)<<24), poissonSlow(uint32(i)<<24|0xffffff)
		t[i] = 0xff
		if lo == hi {
			t[i] = uint8(lo)
		}
	}
	return t
}()

func poisson1(u uint32) float64 {
	if k := poissonTop[u>>24]; k != 0xff {
		return float64(k)
	}
	return float64(poissonSlow(u))
}

func poissonSlow(u uint32) int {
	k := 0
	for k < len(poissonCDF) && u >= poissonCDF[k] {
		k++
	}
	return k
}

// splitmixAt returns output number i of SplitMix64 (Steele, Lea & Flood
// 2014) started at state key: fast, counter-based, and good enough for
// bootstrap counts.
func splitmixAt(key, i uint64) uint64 {
	return mix64(key + (i+1)*0x9e3779b97f4a7c15)
}

// mix64 is SplitMix64's output function. Applied to the seed it makes the
// generator's starting state, so that nearby seeds (0, 1, 2, ...) give
// unrelated streams rather than shifted copies of one another.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
