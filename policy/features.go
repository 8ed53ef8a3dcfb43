package policy

// VectorLen is the length of the customer vector the model reads
// (engine.VectorDim): position 0 is the constant 1, the others are the
// customer's history scaled to about 0..1 (see engine.VectorNames).
const VectorLen = 20

// NumCats is the number of the tenant's main categories whose spend
// shares every customer carries (Customer.Shares): the model's per-action
// weights over them let it learn coupon–category affinity without
// catalog categorias.
const NumCats = 8

// Positions in the customer vector used by the feature maps.
const (
	xRecencia   = 1
	xSinCompras = 2
	xFreq90     = 4
	xFreq365    = 5
	xTicket     = 12
	xRecibidos  = 16
	xRedencion  = 17
	xAntiguedad = 19
)

// Customer is what the model knows of one customer at decision time.
type Customer struct {
	// X is the customer vector (VectorLen values; a shorter one, from an
	// older record, is read as padded with zeros).
	X []float64
	// Shares are the customer's spend shares (0..1) in the model's main
	// categories (Model.Cats), in that order; missing ones count as 0.
	Shares []float64
	// Base is the economic prior of sending nothing: the margin the
	// customer is expected to bring over the reward window (cents).
	Base float64
}

// Arm is one candidate action for a customer: the (customer, action) pair.
type Arm struct {
	ID int // 0 is "send nothing"
	// Prior is the economic prior of the action for this customer (cents
	// over the window; for ID 0 it is ignored: Customer.Base).
	Prior float64
	// Affinity of the customer to the action's categorias (0 when the
	// action declares none): the share of the customer's spend in them, the
	// share of the last 13 months with a purchase in them, and how recent
	// the last such month is (1 this month, 0 never or 13 months ago).
	AffShare, AffFreq, AffRec float64
	// Downside is what a send of the action is expected to lose for this
	// customer if it moves no purchase (cents over the window, > 0): the
	// discount redeemed on what they would buy anyway, the sending cost and
	// the opt-out penalty at the tenant's rate (OptoutRate). 0 is unknown
	// (older records); the send bar then reads the width alone.
	Downside float64
}

// dimBase is the length of φ, the shared part of the regression: the
// customer vector, the category shares, the prior baseline (cents; its
// coefficient is the learned correction of the prior), four terms that let
// the baseline bend with purchase frequency, and nShared terms of the
// effect of sending any coupon (zero for never-send), which every coupon
// shares: an action's own δₐ is its deviation from them, so a coupon with
// little data of its own borrows what all coupons taught.
const dimBase = VectorLen + NumCats + 5 + nShared

// nShared is the number of pooled coupon-effect terms in φ (setShared).
const nShared = 8

// Positions in φ.
const (
	phiBase   = VectorLen + NumCats // Customer.Base, cents
	phiShared = phiBase + 5         // the pooled coupon effect's terms
)

// setShared writes into φ the pooled coupon-effect terms of the pair ψ:
// level, prior effect, category share, frequency, recency, redemption
// rate and the two frequency bins.
func setShared(x *[dimBase]float64, psi *[dimEffect]float64) {
	for k, j := range [nShared]int{0, psiPrior, 2, 7, 5, 10, 11, 12} {
		x[phiShared+k] = psi[j]
	}
}

// dimEffect is the length of ψ, an action's effect features.
const dimEffect = 13 + NumCats

// Positions in ψ.
const (
	psiPrior = 1 // the prior effect Prior − Base, cents: its coefficient is the prior's learned correction
)

// baseFeatures writes φ(c) into dst.
func baseFeatures(c *Customer, dst *[dimBase]float64) {
	*dst = [dimBase]float64{}
	n := copy(dst[:VectorLen], c.X)
	if n == 0 {
		dst[0] = 1
	}
	copy(dst[VectorLen:VectorLen+NumCats], c.Shares)
	dst[phiBase] = c.Base
	f := dst[xFreq90]
	ext := dst[phiBase+1:]
	ext[0] = f * f
	ext[1] = b2f(f < 0.25)
	ext[2] = b2f(f >= 0.25 && f < 0.5)
	ext[3] = b2f(f >= 0.5 && f < 0.75)
}

// effectFeatures writes ψ(c, a) into dst: the pair's features.
func effectFeatures(c *Customer, a *Arm, x *[dimBase]float64, dst *[dimEffect]float64) {
	effectCustomer(x, dst)
	effectArm(c, a, dst)
}

// effectArm writes the terms of ψ that depend on the arm (1 to 4); the
// others, the customer's (effectCustomer), are the same for every arm.
func effectArm(c *Customer, a *Arm, dst *[dimEffect]float64) {
	dst[psiPrior] = a.Prior - c.Base
	dst[2] = a.AffShare
	dst[3] = a.AffFreq
	dst[4] = a.AffRec
}

// effectCustomer writes the terms of ψ that are the customer's alone, from
// φ(c) in x: all but effectArm's.
func effectCustomer(x *[dimBase]float64, dst *[dimEffect]float64) {
	f := x[xFreq90]
	dst[0] = 1
	dst[5] = x[xRecencia]
	dst[6] = x[xSinCompras]
	dst[7] = f
	dst[8] = x[xTicket]
	dst[9] = x[xRecibidos]
	dst[10] = x[xRedencion]
	dst[11] = b2f(f < 0.25)
	dst[12] = b2f(f >= 0.75)
	copy(dst[13:], x[VectorLen:VectorLen+NumCats])
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
