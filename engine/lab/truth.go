package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// wCustomer is one customer of a many-worlds run: a profile that the
// history shows (rate, ticket, category shares, and whether they redeem,
// when the history has enough coupon weeks to show it) and a hidden type
// (responder, sleeping dog) that it never shows.
type wCustomer struct {
	ref    string
	p0     float64   // weekly purchase probability without a coupon
	ticket float64   // mean ticket, MXN without VAT
	shares []float64 // share of spend per category (sums to 1)
	top    int       // index of the top category
	redeem float64   // probability of redeeming an applicable coupon when buying; 0: never redeems
	// rare: the rate is below the world's 40th percentile or, in a
	// bimodal world (Family.RareRate), the customer was drawn into its
	// rare group.
	rare bool
	// histTickets is the number of purchases in the history the engine
	// ingested (eventWriter.history).
	histTickets int

	responder bool // hidden
	dog       bool // hidden: opts out when contacted

	// redeemSeen: the history holds at least two weeks with a received
	// applicable coupon and a purchase, so it shows whether they redeem.
	redeemSeen bool
	// pResp is P(responder | profile): 0 or 1 when the response is tied
	// to the profile, the responder share when it is hidden.
	pResp float64
	// disc is the expected discount (MXN) of each coupon of the world on
	// one purchase when redeemed, over the lognormal purchase amount.
	disc []float64
}

// mworld is a drawn world's truth.
type mworld struct {
	fam     *Family
	coupons []CouponSpec // the initial catalog, then the new coupon
	active  int          // coupons in the catalog now
	drift   bool
	custs   []*wCustomer
	// meanRedeem is the mean redeem probability: what the observable
	// oracle assumes for customers whose history does not show it.
	meanRedeem float64
	// rareCut and median are the 40th and 50th percentiles of the
	// purchase rate; half the top categories whose buyers respond when the
	// response is tied to the category (respProb).
	rareCut, median float64
	half            map[int]bool
}

const (
	quadPoints = 16
	maxBuyProb = 0.95
)

// quadZ are standard normal quantiles at (i+½)/quadPoints: expectations
// over a lognormal purchase amount are means over these points.
var quadZ = func() (z [quadPoints]float64) {
	for i := range z {
		z[i] = math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/quadPoints-1)
	}
	return z
}()

// newWorld draws fam's customers from rng.
func newWorld(fam *Family, rng *rand.Rand) *mworld {
	w := &mworld{fam: fam, coupons: slices.Clone(fam.Coupons), active: len(fam.Coupons)}
	if fam.NewCoupon != nil {
		w.coupons = append(w.coupons, *fam.NewCoupon)
	}
	rates := make([]float64, fam.Customers)
	for i := range fam.Customers {
		c := drawCustomer(fam, rng, i)
		w.custs = append(w.custs, c)
		rates[i] = c.p0
		w.meanRedeem += c.redeem / float64(fam.Customers)
	}
	slices.Sort(rates)
	w.rareCut, w.median = rates[len(rates)*2/5], rates[len(rates)/2]
	w.half = map[int]bool{}
	for j := range (len(fam.Categories) + 1) / 2 {
		w.half[j] = true
	}
	for _, c := range w.custs {
		if fam.RareRate == 0 {
			c.rare = c.p0 < w.rareCut
		}
		c.pResp = w.respProb(c.p0, c.top, c.rare)
		if fam.ResponseTie == "hidden" {
			c.responder = rng.Float64() < fam.Responders
		} else {
			c.responder = c.pResp == 1
		}
		if fam.RareNeverRespond && c.rare {
			c.responder = false
		}
		c.disc = make([]float64, len(w.coupons))
		for k := range w.coupons {
			c.disc[k] = w.expectedDiscount(c, k)
		}
	}
	return w
}

// respProb is P(responder) of a customer with purchase rate p0, top
// category top and rare as given: the responder share when the response
// is hidden, else 0 or 1 by the rate or the category it is tied to; 0
// for a rare buyer where rare buyers never respond.
func (w *mworld) respProb(p0 float64, top int, rare bool) float64 {
	fam := w.fam
	if fam.RareNeverRespond && rare {
		return 0
	}
	switch fam.ResponseTie {
	case "frequent":
		return b2f(p0 >= w.median)
	case "rare":
		return b2f(p0 < w.median)
	case "category":
		return b2f(w.half[top])
	}
	return fam.Responders
}

// drawCustomer draws customer i's profile and sleeping-dog flag.
func drawCustomer(fam *Family, rng *rand.Rand, i int) *wCustomer {
	c := &wCustomer{ref: fmt.Sprintf("mw-cliente-%06d", i)}
	c.p0 = math.Min(0.9, fam.Conversion*math.Exp(0.9*rng.NormFloat64()-0.405))
	if fam.RareRate > 0 {
		c.p0 = math.Min(0.9, fam.Conversion*math.Exp(0.3*rng.NormFloat64()-0.045))
		if rng.Float64() < 0.4 {
			c.p0 = fam.RareRate * math.Exp(0.3*rng.NormFloat64()-0.045)
			c.rare = true
		}
	}
	c.ticket = fam.TicketMXN * math.Exp(0.5*rng.NormFloat64())
	nc := len(fam.Categories)
	c.shares = make([]float64, nc)
	perm := rng.Perm(nc)
	var sum float64
	for _, j := range perm[:1+rng.IntN(min(4, nc))] {
		c.shares[j] = rng.ExpFloat64()
		sum += c.shares[j]
	}
	for j := range c.shares {
		c.shares[j] /= sum
		if c.shares[j] > c.shares[c.top] {
			c.top = j
		}
	}
	if rng.Float64() >= fam.NeverRedeem {
		c.redeem = 0.5 + 0.45*rng.Float64()
	}
	c.dog = rng.Float64() < fam.SleepingDogs
	return c
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// catIndex returns the index of coupon k's category, or -1 for the whole
// basket.
func (w *mworld) catIndex(k int) int {
	return slices.Index(w.fam.Categories, w.coupons[k].Category)
}

// base is the amount a coupon's discount applies to in a purchase of
// amount (MXN): the purchase's part in the coupon's category.
func (w *mworld) base(c *wCustomer, k int, amount float64) float64 {
	if j := w.catIndex(k); j >= 0 {
		return amount * c.shares[j]
	}
	return amount
}

// discount is coupon k's discount (MXN) on a purchase of amount.
func (w *mworld) discount(c *wCustomer, k int, amount float64) float64 {
	cp, b := &w.coupons[k], w.base(c, k, amount)
	if cp.Pct > 0 {
		return math.Min(cp.Pct*b, cp.MaxMXN)
	}
	return math.Min(cp.MaxMXN, b)
}

// expectedDiscount is E[discount] over the purchase amount's lognormal.
func (w *mworld) expectedDiscount(c *wCustomer, k int) float64 {
	s := w.fam.TicketSigma
	var sum float64
	for _, z := range quadZ {
		sum += w.discount(c, k, c.ticket*math.Exp(s*z-s*s/2))
	}
	return sum / quadPoints
}

// applies reports whether coupon k can be redeemed by c (they buy its
// category).
func (w *mworld) applies(c *wCustomer, k int) bool {
	j := w.catIndex(k)
	return j < 0 || c.shares[j] > 0
}

// lift is the rise in purchase probability coupon k brings a responder.
func (w *mworld) lift(c *wCustomer, k int) float64 {
	f := w.fam
	shape := math.Min(2, math.Sqrt(c.disc[k]/(0.1*c.ticket)))
	if w.coupons[k].Message {
		shape = 1
	}
	aff := 1.0
	if f.Affinity {
		if j := w.catIndex(k); j >= 0 {
			aff = c.shares[j] / c.shares[c.top]
		} else {
			aff = 0.6
		}
	}
	trend := 1.0
	switch f.Trend {
	case "rising":
		trend = math.Sqrt(c.p0 / f.Conversion)
	case "falling":
		trend = math.Sqrt(f.Conversion / c.p0)
	}
	trend = math.Max(0.3, math.Min(3, trend))
	l := f.Lift * (c.p0 + f.Conversion) / 2 * shape * aff * trend * w.coupons[k].Boost
	if w.drift && k < len(f.DriftFactor) {
		l *= f.DriftFactor[k]
	}
	return l
}

// value is the true expected reward (MXN over the window) of coupon k
// (-1: nothing) for c while c has not opted out, following contract §5:
// margin minus discount given, minus the sending cost, minus the opt-out
// penalty times its probability. pResp, redeem and dog are c's hidden
// parts or, for the observable oracle, their expectations given the
// profile.
func (w *mworld) value(c *wCustomer, k int, pResp, redeem, dog float64) float64 {
	p := c.p0
	margin := c.ticket * w.fam.MarginRate
	if k < 0 {
		return p * margin
	}
	p = math.Min(maxBuyProb, p+pResp*w.lift(c, k))
	if !w.applies(c, k) {
		redeem = 0
	}
	cp := &w.coupons[k]
	return p*(margin-redeem*c.disc[k]) - cp.CostMXN - dog*w.fam.OptoutProb*penaltyMXN
}

// trueValue is value with c's hidden type.
func (w *mworld) trueValue(c *wCustomer, k int) float64 {
	return w.value(c, k, b2f(c.responder), c.redeem, b2f(c.dog))
}

// observableValue is value averaged over what c's history cannot show:
// being a responder (pResp), a sleeping dog and, when the history does not
// show it, the redeem probability. survived is the number of coupons c
// received without opting out: a sleeping dog's probability is the
// world's share updated by them (dogPosterior).
func (w *mworld) observableValue(c *wCustomer, k, survived int) float64 {
	redeem := w.meanRedeem
	if c.redeemSeen {
		redeem = c.redeem
	}
	return w.value(c, k, c.pResp, redeem, w.dogPosterior(survived))
}

// dogPosterior is P(sleeping dog | n coupons received without opting out).
func (w *mworld) dogPosterior(n int) float64 {
	pi, q := w.fam.SleepingDogs, w.fam.OptoutProb
	if pi == 0 {
		return 0
	}
	d := pi * math.Pow(1-q, float64(n))
	return d / (d + 1 - pi)
}

// purchase is one sampled window of a customer under a coupon.
type purchase struct {
	bought   bool
	amount   float64 // MXN
	discount float64 // MXN, 0 if not redeemed
	optout   bool
}

// sample draws c's window under coupon k (-1: nothing) from rng. lifted
// false draws as if the coupon moved nobody (the history's old
// campaigns); optouts false draws no opt-out. Whether c buys is the same
// draw of rng under every k (with optouts, the opt-out's draw is taken
// even for nothing), so two policies' windows drawn from equal sources
// differ only by what the actions change.
func (w *mworld) sample(rng *rand.Rand, c *wCustomer, k int, lifted, optouts bool) purchase {
	var o purchase
	p := c.p0
	if k >= 0 && lifted && c.responder {
		p = math.Min(maxBuyProb, p+w.lift(c, k))
	}
	if optouts { // drawn whatever k, so the purchase draw below stands at the same place
		if u := rng.Float64(); k >= 0 && c.dog && u < w.fam.OptoutProb {
			o.optout = true
		}
	}
	if rng.Float64() < p {
		o.bought, o.amount = true, w.purchase(rng, c).amount
		if k >= 0 && w.applies(c, k) && rng.Float64() < c.redeem {
			o.discount = w.discount(c, k, o.amount)
		}
	}
	return o
}

// purchase is one purchase of c at full price: an amount lognormal
// around c's mean ticket (TicketSigma).
func (w *mworld) purchase(rng *rand.Rand, c *wCustomer) purchase {
	s := w.fam.TicketSigma
	return purchase{bought: true, amount: c.ticket * math.Exp(s*rng.NormFloat64()-s*s/2)}
}

// reward is contract §5's reward (MXN) of a sampled window.
func (w *mworld) reward(o purchase, k int) float64 {
	r := 0.0
	if o.bought {
		r = o.amount*w.fam.MarginRate - o.discount
	}
	if k >= 0 {
		r -= w.coupons[k].CostMXN
		if o.optout {
			r -= penaltyMXN
		}
	}
	return r
}
