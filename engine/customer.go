package engine

import (
	"bytes"
	"errors"
	"math"
	"time"

	"github.com/coupond/coupond/store"
)

// customer is what the decider knows of one customer at decision time.
type customer struct {
	f      Features
	x      []float64 // policy vector (Features.Vector)
	closed bool
	sum    featSummary // f summarised at decision time (category shares, affinity)

	// Inputs of the economic prior, in cents over the reward window.
	baselineCents  float64 // expected purchase margin without a coupon
	avgTicketCents float64
	ticketMargin   float64 // expected margin of one ticket, cents
	redeemRate     float64 // smoothed probability of redeeming a coupon
	buyRate        float64 // probability of buying in the window without a coupon
	// optoutCents is a send's expected opt-out penalty: the tenant's
	// penalty times its opt-out rate per send (publishedModel.score).
	optoutCents float64
}

// loadFeatures reads a customer's features; a customer without history
// gets the zero Features. A damaged record is quarantined and the features
// are rebuilt from the customer's stored events (rebuildFeatures), so that
// her opt-outs and account closure hold.
func (e *core) loadFeatures(tenant, clienteRef string) (Features, error) {
	return e.readFeatures(tenant, clienteRef, false)
}

// readFeatures is loadFeatures; folding says the caller is an ingestion
// fold, which holds the tenant's fold stage (ingestTurn.mu).
func (e *core) readFeatures(tenant, clienteRef string, folding bool) (Features, error) {
	var f Features
	err := e.readFeaturesInto(&f, tenant, clienteRef, folding)
	return f, err
}

// readFeaturesInto is readFeatures into f, decoding in the memory of f's
// buckets (Features.Decode).
func (e *core) readFeaturesInto(f *Features, tenant, clienteRef string, folding bool) error {
	b, err := e.db.Get(store.FeaturesKey(tenant, clienteRef))
	if errors.Is(err, store.ErrNotFound) {
		*f = Features{}
		return nil
	}
	if err != nil {
		*f = Features{}
		return err
	}
	if f.Decode(b) {
		return nil
	}
	rebuilt, err := e.rebuildFeatures(tenant, clienteRef, b, folding)
	*f = rebuilt
	return err
}

// customer reads the customer's features (one point read) into c, whose
// memory it reuses (the features' buckets included; all of c is
// overwritten), and derives the policy vector and the prior's inputs at
// now. window is the tenant's reward window.
func (e *Engine) customer(c *customer, tenant, clienteRef string, now time.Time, window time.Duration) (*customer, error) {
	f := c.f
	if err := e.readFeaturesInto(&f, tenant, clienteRef, false); err != nil {
		return nil, err
	}
	*c = customer{f: f}
	c.derive(now, window)
	return c, nil
}

func newCustomer(f Features, now time.Time, window time.Duration) *customer {
	c := &customer{f: f}
	c.derive(now, window)
	return c
}

// derive sets what c knows at now from its features c.f, every field but
// optoutCents (publishedModel.score sets it).
func (c *customer) derive(now time.Time, window time.Duration) {
	c.closed = c.f.Closed()
	c.sum = c.f.summarize(now)
	c.x = c.f.vectorOf(&c.sum, make([]float64, 0, VectorDim))
	s := &c.sum
	days := window.Hours() / 24
	c.baselineCents = float64(s.margin[1]) * days / 90
	c.avgTicketCents = s.avgTicket() * 100
	rate := s.marginRate()
	if rate <= 0 || s.spend[2] == 0 {
		rate = defaultMarginRate
	}
	c.ticketMargin = c.avgTicketCents * rate
	c.redeemRate = (float64(s.redeem[1]) + priorRedeemHits) / (float64(s.recv[1]) + priorRedeemTrials)
	c.buyRate = min(1, float64(s.tickets[1])*days/90)
}

// Constants of the economic prior (see prior).
const (
	defaultMarginRate = 0.25 // margin rate assumed without purchase history
	priorRedeemHits   = 1.0  // Beta prior of the redemption probability: 1 in 5
	priorRedeemTrials = 5.0
	priorLift         = 0.3 // share of a redeemed coupon's ticket that is incremental
)

// downside is what a send of a is expected to lose for c if it moves no
// purchase (policy.Arm.Downside): the discount redeemed on the purchases c
// makes anyway, the sending cost and the expected opt-out penalty; at
// least a cent, since 0 reads as unknown.
func (c *customer) downside(a *Action) float64 {
	d := c.buyRate*c.redeemRate*c.discountCents(a) + float64(a.CostoEnvioCents) + c.optoutCents
	return math.Max(1, math.Round(d))
}

func (c *customer) optedOut(canal string) bool { return c.f.OptedOut(canal) }

// discountCents is what one redemption of a costs: its fixed maximum, or
// its percentage of the customer's average ticket, whichever binds.
func (c *customer) discountCents(a *Action) float64 {
	d := float64(a.DescuentoMaxCents)
	if a.DescuentoPct > 0 {
		pct := a.DescuentoPct / 100 * c.avgTicketCents
		if d == 0 || pct < d {
			d = pct
		}
	}
	return d
}

// prior is the expected reward (cents over the window) of action a before
// any data: the customer's baseline margin; for a coupon, if redeemed
// (probability redeemRate), a purchase it brings about (a share priorLift
// of the window's non-buying chance) earns a ticket's margin minus the
// discount, while a purchase that would have happened anyway only gives
// the discount away; minus the sending cost. A coupon looks good for the
// occasional buyer with a large ticket and bad for the one who buys anyway. It comes from the catalog's economics
// and the customer's own history, so a new tenant starts with a sensible
// ranking instead of a constant.
func (c *customer) prior(a *Action) float64 {
	if a == nil {
		return c.baselineCents
	}
	d := c.discountCents(a)
	incremental := priorLift * (1 - c.buyRate) * (c.ticketMargin - d)
	giveaway := c.buyRate * d
	return c.baselineCents + c.redeemRate*(incremental-giveaway) - float64(a.CostoEnvioCents)
}

// Customers calls fn with every customer of tenant who has history and
// matches seg at the tenant's clock, in cliente_ref order, by a bounded scan
// of the tenant's feature records. A record that does not decode is read
// as loadFeatures reads it: rebuilt from the customer's events.
func (e *Engine) Customers(tenant string, seg *Segment, fn func(clienteRef string) error) error {
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return err
	}
	lo, hi := store.FeaturesSpan(tenant)
	return e.db.Scan(lo, hi, func(k, v []byte) error {
		ref, ok := store.FeaturesRef(tenant, k)
		if !ok {
			return nil
		}
		f, ok := DecodeFeatures(v)
		if !ok {
			if f, err = e.rebuildFeatures(tenant, string(ref), bytes.Clone(v), false); err != nil {
				return err
			}
		}
		if _, has := f.LastEvent(); !has {
			return nil
		}
		if !seg.Todos() && !seg.Match(&f, now) {
			return nil
		}
		return fn(string(ref))
	})
}

// CustomerFeatures returns a customer's features (zero for an unknown one).
func (e *Engine) CustomerFeatures(tenant, clienteRef string) (Features, error) {
	return e.loadFeatures(tenant, clienteRef)
}
