package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	policypkg "github.com/coupond/coupond/policy"
)

// Family is the hidden design of one world of the many-worlds lab: what
// the engine never sees. DrawFamily draws one from a seed; tests build
// their own. See LAB.md for the response model.
type Family struct {
	Seed      uint64
	Customers int
	Weeks     int
	// Categories are the tenant's COMPRA_CAT claves; every customer buys
	// 1 to 4 of them.
	Categories []string
	// Coupons are the catalog at week 1; NewCoupon, if not nil, joins the
	// catalog at week NewCouponWeek.
	Coupons       []CouponSpec
	NewCoupon     *CouponSpec
	NewCouponWeek int
	// CatalogCategorias: the catalog carries each coupon's categorias
	// (when engine.Action has the field; see setCategorias).
	CatalogCategorias bool
	// Conversion is the mean weekly purchase probability without a coupon;
	// a customer's own rate is lognormal around it. TicketMXN is the median
	// customer's mean ticket, TicketSigma the lognormal spread of one
	// purchase around the customer's mean (heavy tail).
	Conversion  float64
	TicketMXN   float64
	TicketSigma float64
	MarginRate  float64
	// Response: a responder's purchase probability rises by
	// Lift·(p₀+Conversion)/2·shape·affinity·trend (LAB.md). Responders is
	// the share of responders; ResponseTie says how being one relates to
	// what the history shows: "hidden" (independent of the profile: a
	// coupon-hungry customer and a sure thing share a history),
	// "frequent" or "rare" (exactly the customers above or below the
	// median rate), "category" (exactly those whose top category is
	// among the first half of Categories).
	Lift        float64
	Responders  float64
	ResponseTie string
	// Affinity ties the effect of a category coupon to the customer's
	// share of spend in that category. Trend is "flat", "rising" or
	// "falling": effects grow or shrink with the purchase rate.
	Affinity bool
	Trend    string
	// RareNeverRespond: customers below the 40th percentile of the rate
	// (with RareRate, the rare group itself) never respond, whatever the
	// rest says (the prior is wrong for them).
	RareNeverRespond bool
	// RareRate, if > 0, makes the purchase rate bimodal: 40 % of the
	// customers buy at about RareRate a week, the rest at about Conversion
	// (both lognormal, σ 0.3), so the rare buyers are a group their
	// history shows (scenario tests; drawn worlds leave it 0).
	RareRate float64
	// PastBuyers gives every customer at least one purchase in the history
	// before week 1 (one drawn week's window holds a purchase if it had
	// none), as in a file of past buyers: the replayed e-mail experiment's
	// customers all bought within the last year. Without it a customer's
	// history is what their rate draws, none at all for most at 1 %
	// conversion (scenario tests; drawn worlds leave it false).
	PastBuyers bool
	// NeverRedeem is the share who never redeem a coupon (they may still
	// buy); SleepingDogs the share who opt out (BAJA comunicaciones) with
	// probability OptoutProb when contacted.
	NeverRedeem  float64
	SleepingDogs float64
	OptoutProb   float64
	// DriftWeek, if > 0, multiplies each coupon's lift by DriftFactor[i]
	// (by catalog order, new coupon last) from that week on.
	DriftWeek   int
	DriftFactor []float64
	// ControlShare is the tenant's control_share setting; RejectShare the
	// share of sends the retailer reports as not executed.
	ControlShare float64
	RejectShare  float64

	// Outcomes picks the stream of the world's outcome draws (purchases,
	// their amounts, redemptions, opt-outs) for the engine and for the
	// compared policies: 0 is the world's own; any other value draws the
	// same customers, history, catalog and engine seed with other luck,
	// to tell a loss the draws made from one the mechanism makes.
	Outcomes uint64 `json:"Outcomes,omitempty"`

	// engineOnly skips every policy but the engine (scenario tests that
	// only look at what the engine sends).
	engineOnly bool
	// policy, if not nil, is the engine's policy configuration (coupond
	// lab --model zrule); nil is policy.DefaultConfig().
	policy *policypkg.Config
}

// CouponSpec is one coupon of a world. Category "" applies to the whole
// basket. Boost multiplies its lift (1: as the family says).
type CouponSpec struct {
	ID       int
	Name     string
	Pct      float64 // share of the base, 0 for a fixed amount
	MaxMXN   float64 // cap of a percentage coupon; amount of a fixed one
	CostMXN  float64
	Category string
	Boost    float64
	// Message: a message without discount (an e-mail; Pct and MaxMXN 0):
	// its lift does not grow with a discount (shape 1, LAB.md).
	Message bool
}

var categoryNames = []string{"abarrotes", "bebidas", "limpieza", "cuidado_personal", "mascotas", "electronica", "ropa", "farmacia"}

// DrawFamily draws world seed's hidden design. Everything about the world
// follows from the seed.
func DrawFamily(seed uint64) Family {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+7))
	logU := func(lo, hi float64) float64 { return lo * math.Exp(r.Float64()*math.Log(hi/lo)) }
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	f := Family{Seed: seed, Customers: 2000 + 500*r.IntN(3), Weeks: 12}
	f.Categories = append([]string(nil), categoryNames[:3+r.IntN(4)]...)
	f.Conversion = logU(0.01, 0.30)
	f.TicketMXN = logU(150, 1200)
	f.TicketSigma = 0.4 + 0.8*r.Float64()
	f.MarginRate = 0.2 + 0.25*r.Float64()
	f.Lift = logU(0.1, 4)
	f.Responders = 0.1 + 0.6*r.Float64()
	f.ResponseTie = pick("hidden", "hidden", "frequent", "rare", "category")
	f.Affinity = r.Float64() < 0.5
	f.Trend = pick("flat", "rising", "falling")
	f.RareNeverRespond = r.Float64() < 0.25
	if r.Float64() < 0.5 {
		f.NeverRedeem = 0.1 + 0.3*r.Float64()
	}
	if r.Float64() < 0.5 {
		f.SleepingDogs, f.OptoutProb = 0.05+0.15*r.Float64(), 0.2+0.3*r.Float64()
	}
	f.CatalogCategorias = r.Float64() < 0.5
	k := 2 + r.IntN(7)
	for i := 1; i <= k; i++ {
		f.Coupons = append(f.Coupons, drawCoupon(r, i, f.Categories))
	}
	if r.Float64() < 0.4 && k < 8 {
		c := drawCoupon(r, k+1, f.Categories)
		f.NewCoupon, f.NewCouponWeek = &c, f.Weeks/2+1
	}
	if r.Float64() < 0.4 {
		f.DriftWeek = f.Weeks/2 + 1
		for range k + 1 {
			f.DriftFactor = append(f.DriftFactor, logU(0.25, 4))
		}
	}
	f.ControlShare = []float64{0, 0, 0.05, 0.1}[r.IntN(4)]
	f.RejectShare = 0.03
	return f
}

// drawCoupon draws coupon id: a percentage (5–30 %, capped) or a fixed
// amount, on one category or the whole basket.
func drawCoupon(r *rand.Rand, id int, cats []string) CouponSpec {
	c := CouponSpec{ID: id, CostMXN: []float64{0.1, 0.5, 1, 2}[r.IntN(4)], Boost: 1}
	if r.Float64() < 0.6 {
		c.Category = cats[r.IntN(len(cats))]
	}
	if r.Float64() < 0.65 {
		c.Pct = []float64{0.05, 0.10, 0.15, 0.20, 0.30}[r.IntN(5)]
		c.MaxMXN = []float64{30, 50, 100, 200}[r.IntN(4)]
		c.Name = fmt.Sprintf("c%d_%.0fpct_max%.0f", id, 100*c.Pct, c.MaxMXN)
	} else {
		c.MaxMXN = []float64{20, 50, 100, 150}[r.IntN(4)]
		c.Name = fmt.Sprintf("c%d_%.0fmxn", id, c.MaxMXN)
	}
	if c.Category != "" {
		c.Name += "_" + c.Category
	}
	return c
}

// Resize sets the number of customers and weeks (0: keep), moving a new
// coupon and a drift to the new middle.
func (f *Family) Resize(customers, weeks int) {
	if customers > 0 {
		f.Customers = customers
	}
	if weeks > 0 {
		f.Weeks = weeks
		if f.NewCoupon != nil {
			f.NewCouponWeek = weeks/2 + 1
		}
		if f.DriftWeek > 0 {
			f.DriftWeek = weeks/2 + 1
		}
	}
}

// Summary is a one-line account of the family for the report table.
func (f *Family) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "n=%d conv=%.1f%% σ=%.1f K=%d C=%d lift=%.2f resp=%.0f%%/%s", f.Customers, 100*f.Conversion,
		f.TicketSigma, len(f.Coupons), len(f.Categories), f.Lift, 100*f.Responders, f.ResponseTie)
	if f.Affinity {
		b.WriteString(" aff")
	}
	if f.Trend != "flat" {
		b.WriteString(" " + f.Trend)
	}
	if f.RareNeverRespond {
		b.WriteString(" rare-never")
	}
	if f.NeverRedeem > 0 {
		fmt.Fprintf(&b, " noredeem=%.0f%%", 100*f.NeverRedeem)
	}
	if f.SleepingDogs > 0 {
		fmt.Fprintf(&b, " optout=%.0f%%", 100*f.SleepingDogs)
	}
	if f.CatalogCategorias {
		b.WriteString(" cats")
	}
	if f.NewCoupon != nil {
		b.WriteString(" new")
	}
	if f.DriftWeek > 0 {
		b.WriteString(" drift")
	}
	if f.ControlShare > 0 {
		fmt.Fprintf(&b, " ctl=%.0f%%", 100*f.ControlShare)
	}
	return b.String()
}

// validate reports the first thing wrong with a family built by hand.
func (f *Family) validate() error {
	switch {
	case f.Customers <= 0 || f.Weeks <= 0:
		return fmt.Errorf("lab: family needs customers and weeks")
	case len(f.Categories) == 0 || len(f.Coupons) == 0:
		return fmt.Errorf("lab: family needs categories and coupons")
	case f.Conversion <= 0 || f.Conversion >= 1 || f.TicketMXN <= 0 || f.MarginRate <= 0:
		return fmt.Errorf("lab: family needs conversion in (0, 1), a ticket and a margin rate")
	}
	switch f.ResponseTie {
	case "hidden", "frequent", "rare", "category":
	default:
		return fmt.Errorf("lab: unknown response tie %q", f.ResponseTie)
	}
	switch f.Trend {
	case "flat", "rising", "falling":
	default:
		return fmt.Errorf("lab: unknown trend %q", f.Trend)
	}
	return nil
}
