package policy

import "math"

// Outcome is what a decision's reward window showed, beside its reward.
type Outcome struct {
	// Reward is the decision's reward (cents): the window's purchase
	// margin, net of discounts, minus the sending cost and the opt-out
	// penalty.
	Reward float64
	// MarginCents and DiscountCents are the window's purchase margin (net
	// of discounts) and redemption discounts; Tickets its tickets.
	MarginCents, DiscountCents float64
	Tickets                    int
	// TicketMargin is the customer's margin per ticket before the
	// decision (cents; 0 when unknown), over HistTickets tickets.
	TicketMargin, HistTickets float64
	// Full: the window's discounts and tickets are complete.
	Full bool
	// Sent: the decision sent a coupon; OptOut: the customer opted out of
	// communications in the window (TallyOptouts).
	Sent, OptOut bool
}

// Target is the reward the model learns from (Fold, Observe). With
// Config.TicketTarget, where the window's tickets and discounts are known
// and so is the customer's margin per ticket, the window's gross margin
// (margin plus discounts) is replaced by tickets × the customer's margin
// per ticket: a coupon changes whether and how often a customer buys,
// and the size of a basket is the heavy tail of the reward's noise, the
// same under every action. Its expectation is the reward's where a
// coupon does not change the basket's size; its variance, with lognormal
// baskets of log-scale σ and purchase probability p, is about
// (e^{σ²} − p)/(1 − p) times smaller in the purchase term (3.8 at σ 1.1,
// p 0.15). The customer's margin per ticket, from a handful of past
// tickets, is itself a draw from that tail: it is shrunk towards the
// tenant's margin per ticket over the windows folded so far (TicketMean)
// with TicketPseudo tickets' weight. Elsewhere the target is the reward.
func (m *Model) Target(o Outcome) float64 {
	if !m.cfg.TicketTarget || !o.Full || !(o.TicketMargin > 0) {
		return o.Reward
	}
	g := o.TicketMargin
	if mean, ok := m.TicketMean(); ok {
		t := math.Max(o.HistTickets, 0)
		g = (t*g + m.cfg.TicketPseudo*mean) / (t + m.cfg.TicketPseudo)
	}
	gross := o.MarginCents + o.DiscountCents
	return o.Reward - gross + float64(o.Tickets)*g
}

// TallyTickets adds a window's tickets and gross margin to the tenant's
// margin per ticket (TicketMean). Windows that are not Full add nothing.
// With Config.ResidualClip, once TicketMean is known a window's margin per
// ticket counts at most ResidualClip times it either way (a loss of more
// than that counts as that loss), so that one absurd amount, of either
// sign, cannot set every customer's margin per ticket: a negative one
// would turn TicketMean off, and the bound with it, for good.
func (m *Model) TallyTickets(o Outcome) {
	gross := o.MarginCents + o.DiscountCents
	if !o.Full || o.Tickets <= 0 || math.IsNaN(gross) || math.IsInf(gross, 0) {
		return
	}
	if mean, ok := m.TicketMean(); ok && m.cfg.ResidualClip > 0 {
		h := m.cfg.ResidualClip * mean * float64(o.Tickets)
		gross = math.Max(-h, math.Min(gross, h))
	}
	m.ticketGross += gross
	m.tickets += float64(o.Tickets)
}

// TicketMean is the tenant's gross margin per ticket (cents) over the
// windows tallied; false before minTallied tickets or where it is not
// positive.
func (m *Model) TicketMean() (float64, bool) {
	if m.tickets < minTallied {
		return 0, false
	}
	g := m.ticketGross / m.tickets
	return g, g > 0
}

// TallyOptouts counts a folded window of a send, and whether it brought
// an opt-out, towards the tenant's opt-out rate (OptoutRate).
func (m *Model) TallyOptouts(o Outcome) {
	if !o.Sent {
		return
	}
	m.sends++
	if o.OptOut {
		m.optouts++
	}
}

// OptoutRate is the tenant's share of sends followed by an opt-out within
// their window: the tallied windows with a Beta prior of optoutPriorHits
// in optoutPriorTrials (2 %), so a tenant without sends starts from it
// and one with a few hundred reads its own. It counts every opt-out after
// a send, the ones a send did not cause too, so it errs high: it sizes a
// send's downside, where erring high is the cautious side.
func (m *Model) OptoutRate() float64 {
	return (m.optouts + optoutPriorHits) / (m.sends + optoutPriorTrials)
}

// The Beta prior of OptoutRate.
const (
	optoutPriorHits   = 1.0
	optoutPriorTrials = 50.0
)

// minTallied is the least number of tallied tickets TicketMean answers on.
const minTallied = 30
