package engine

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strings"
	"time"
)

// Features are one customer's aggregates, kept up to date event by event
// (Apply) and read relative to a "now" that the caller passes in: the
// tenant's clock, never the machine's. The store keeps them encoded
// (AppendEncode, DecodeFeatures) under TableFeatures, so that a decision
// reads one key and never rescans events.
//
// Time resolution. Windows are whole UTC calendar days: the window of N days
// at now holds the N days that end with now's UTC day (today included), so a
// purchase made 30 calendar days ago is out of the 30-day window and one made
// 29 days ago is in. Events dated after now (the API accepts ts up to 5
// minutes ahead of the clock) count as today. Day counts (recencia_dias, ...)
// are differences of UTC calendar days, consistent with the windows:
// recencia_dias <= 29 exactly when the customer bought inside the 30-day
// window.
//
// Storage of the windows. Purchases and coupon counts are kept in sparse
// daily buckets (only days with events, at most 367), and every ticket of
// those days (at most 64 a day, featMaxDayTickets) as a 32-bit hash of its
// ticket_id with the sum of its category amounts (to count distinct tickets
// and check VAT across a ticket's categories; two tickets of one day whose
// hashes collide, a chance of about n²/2³³ for n tickets that day, count as
// one). Buckets older than 366 days before the customer's newest event are
// dropped when a newer event arrives, so every window is exact at any now
// not earlier than 2 days before the customer's newest event.
// Category spend is kept per UTC calendar month instead, for at most 32
// categories per customer (further categories share one "other" bucket that
// counts in totals but has no name): the category features look at the
// current month and the 12 before it, which covers at least the last 365
// days (and at most 396). A customer with a weekly ticket of 3 categories
// and a monthly coupon holds about 70 buckets and 52 tickets, about 1.5 KB
// encoded; three tickets a day in 40 categories, far beyond retail, about
// 13.5 KB.
//
// Late events (ts older than the newest event seen) land in their own day
// and month, so order does not change the result, with four documented
// exceptions: events more than 366 days older than the newest one only
// update lifetime totals (FlagBeyondHorizon); such old tickets are
// deduplicated only against the last 8 old tickets seen; an event dated
// after an account closure but applied before the BAJA cuenta arrived stays
// counted; and of a day with more than featMaxDayTickets (64) tickets, the
// first 64 to arrive are the ones kept.
//
// Account closure (BAJA cuenta) closes the history: purchases and coupon
// events dated at or after the closure are ignored (FlagAfterClosure) until
// a later ALTA reopens the account; the history before it is kept. Opt-outs
// (BAJA comunicaciones) are permanent in v1: the contract has no event that
// subscribes again, and ALTA does not undo them.
//
// The zero Features is a customer without history. Features are not safe for
// concurrent use when one goroutine calls Apply; the read methods may run
// concurrently with each other.
type Features struct {
	set uint8 // featHas* bits: which optional fields below hold a value

	lastTS     int64 // newest event of any type, Unix ns
	firstTS    int64 // oldest event of any type (first seen), Unix ns
	lastBuy    int64 // newest COMPRA_CAT
	lastCoupon int64 // newest CUPON_RECIBIDO
	closedAt   int64 // newest BAJA cuenta
	altaAt     int64 // newest ALTA

	canalAlta string   // clave of the newest ALTA
	segmento  string   // extra.segmento of the newest ALTA that declared one
	perfil    string   // extra.perfil of the newest ALTA that declared one
	optOut    []string // channels opted out of, lower case, at most featMaxOptOut

	ticketsTotal int64 // distinct tickets ever
	spendTotal   int64 // COMPRA_CAT valor ever, cents

	days    []featDay    // ascending by day, unique
	tickets []featTicket // ascending by (day, hash), unique
	// cats are the categories bought in the retained months, each with its
	// spend per month relative to the month of lastTS. The name "" is the
	// overflow bucket for categories beyond featMaxCats.
	cats []featCat
	// oldTickets are the hashes of the last tickets seen beyond the horizon,
	// oldest first, at most featOldTickets.
	oldTickets []uint32
}

// Bits of Features.set.
const (
	featHasLast uint8 = 1 << iota
	featHasFirst
	featHasBuy
	featHasCoupon
	featHasClosed
	featHasAlta
	featOptOutAll
	featSetBits = 1<<iota - 1
)

// featDay is the bucket of one UTC day.
type featDay struct {
	day                   int32 // days since 1970-01-01 UTC
	recv, redeem, expired int32 // CUPON_RECIBIDO, CUPON_REDIMIDO, CUPON_CADUCADO events
	spend, margin         int64 // COMPRA_CAT valor and extra.margen, cents
}

// featTicket is one ticket of a day bucket.
type featTicket struct {
	day   int32
	hash  uint32 // FNV-1a of ticket_id
	valor int64  // sum of the ticket's category amounts, cents
}

// featCat is one category's spend by UTC calendar month: spend[k] is the
// spend in cents of the k-th month before the month of Features.lastTS.
type featCat struct {
	name  string
	spend [featCatMonths]int64
}

const (
	featNsPerDay      = int64(24 * time.Hour)
	featRetainDays    = 366 // buckets kept: days >= newest day - featRetainDays
	featCatMonths     = 14  // category months kept: the newest event's month and the 13 before
	featCatWindow     = 12  // category features: the current month and the 12 before
	featMaxCats       = 32  // named categories per customer
	featMaxOptOut     = 32  // channels opted out individually; one more means all
	featOldTickets    = 8   // remembered hashes of tickets beyond the horizon
	featVATToleranceC = 100 // VAT check tolerance: 1 MXN, or 0.5 % of ticket_total if larger
)

// featMaxDayTickets bounds the tickets kept for one day: a cliente_ref that
// a point of sale uses for every walk-in sale holds thousands a day, and
// kept whole they grew its record by about 14 KB a day (5 MB and 60-90 ms
// to encode at every write after a year of 2,000 a day). A ticket beyond it
// counts in ticketsTotal, not in the windows, and its lines are each a
// ticket of their own for the VAT check.
const featMaxDayTickets = 64

// DaysNever is the value of the day-count features (recencia_dias,
// dias_desde_ultimo_cupon) when the thing never happened, and their cap. It
// compares as "very long ago": {">":{"recencia_dias":90}} holds for a
// customer who never bought.
const DaysNever = 10000

// FeatureCategoryShare is the prefix of the per-category share features:
// "cuota_categoria:<clave>" is the share of category <clave> in the
// customer's category spend (see FeatureDocs). Any clave is accepted; a
// category the customer never bought has share 0.
const FeatureCategoryShare = "cuota_categoria:"

// DataFlags are the data-quality findings of one Apply, for the caller to
// count. They never stop an event from being stored.
type DataFlags uint8

const (
	// FlagOutOfOrder: the event's ts is older than the newest event already
	// applied for the customer (a late event; it still lands in its own day).
	FlagOutOfOrder DataFlags = 1 << iota
	// FlagNegativeMargin: a COMPRA_CAT with extra.margen < 0.
	FlagNegativeMargin
	// FlagVATSuspect: a COMPRA_CAT whose ticket looks like it carries VAT:
	// the sum of the category amounts applied so far for its ticket_id
	// crossed extra.ticket_total plus a tolerance (1 MXN or 0.5 %, whichever
	// is larger). Raised once per ticket, by the event that crosses (beyond
	// the horizon, where tickets are not kept, each event alone). It
	// catches amounts with VAT against a total without it (an amount of
	// about 1.16 times its share); a ticket_total that includes VAT while
	// the amounts do not cannot be told from a ticket whose other categories
	// have not arrived, so it is not flagged.
	FlagVATSuspect
	// FlagAfterClosure: a purchase or coupon event dated at or after an
	// account closure; it was ignored.
	FlagAfterClosure
	// FlagBeyondHorizon: a purchase or coupon event more than 366 days older
	// than the customer's newest event; only lifetime totals and the
	// "last/first" dates took it.
	FlagBeyondHorizon
)

var dataFlagNames = [...]string{"out_of_order", "negative_margin", "vat_suspect", "after_closure", "beyond_horizon"}

// String returns the flags' labels (for metrics and logs) joined by "|",
// e.g. "out_of_order|negative_margin"; "" for none.
func (f DataFlags) String() string {
	var b strings.Builder
	for i, n := range dataFlagNames {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// Apply folds one validated event into the aggregates, whatever the order in
// which events arrive, and returns what the caller should count as data
// quality findings. Each event must be applied once (the caller
// deduplicates by event_id). Events of an unknown Tipo are ignored.
func (f *Features) Apply(e *Event) DataFlags {
	if !e.Tipo.Valid() {
		return 0
	}
	ts := featNanos(e.TS)
	var fl DataFlags
	if f.set&featHasLast != 0 && ts < f.lastTS {
		fl |= FlagOutOfOrder
	}
	if e.Tipo != Alta && e.Tipo != Baja && f.closedBy(ts) {
		return fl | FlagAfterClosure
	}
	if f.set&featHasFirst == 0 || ts < f.firstTS {
		f.firstTS = ts
		f.set |= featHasFirst
	}
	if f.set&featHasLast == 0 || ts > f.lastTS {
		prevDay, had := featDayOf(f.lastTS), f.set&featHasLast != 0
		f.lastTS = ts
		f.set |= featHasLast
		if had && featDayOf(ts) > prevDay {
			f.advance(prevDay)
		}
	}
	day := featDayOf(ts)
	in := day >= featDayOf(f.lastTS)-featRetainDays

	switch e.Tipo {
	case CompraCat:
		fl |= f.applyPurchase(e, ts, day, in)
	case CuponRecibido:
		featSetMax(&f.lastCoupon, &f.set, featHasCoupon, ts)
		if in {
			featInc(&f.dayAt(day).recv)
		}
	case CuponRedimido:
		if in {
			featInc(&f.dayAt(day).redeem)
		}
	case CuponCaducado:
		if in {
			featInc(&f.dayAt(day).expired)
		}
	case Baja:
		switch e.Clave {
		case BajaCuenta:
			featSetMax(&f.closedAt, &f.set, featHasClosed, ts)
		case BajaComunicaciones:
			f.optOutChannel(e.Canal)
		}
	case Alta:
		newest := f.set&featHasAlta == 0 || ts >= f.altaAt
		featSetMax(&f.altaAt, &f.set, featHasAlta, ts)
		if newest || f.canalAlta == "" {
			f.canalAlta = e.Clave
		}
		if e.Segmento != "" && (newest || f.segmento == "") {
			f.segmento = e.Segmento
		}
		if e.Perfil != "" && (newest || f.perfil == "") {
			f.perfil = e.Perfil
		}
	}
	if !in && e.Tipo != Alta && e.Tipo != Baja {
		fl |= FlagBeyondHorizon
	}
	return fl
}

// closedBy reports whether the account was closed at ts: a closure at or
// before ts that no later ALTA (at or before ts) reopened.
func (f *Features) closedBy(ts int64) bool {
	if f.set&featHasClosed == 0 || ts < f.closedAt {
		return false
	}
	reopened := f.set&featHasAlta != 0 && f.altaAt > f.closedAt && f.altaAt <= ts
	return !reopened
}

func featSetMax(dst *int64, set *uint8, bit uint8, ts int64) {
	if *set&bit == 0 || ts > *dst {
		*dst = ts
		*set |= bit
	}
}

func (f *Features) applyPurchase(e *Event, ts int64, day int32, in bool) DataFlags {
	var fl DataFlags
	if e.MargenCents < 0 {
		fl |= FlagNegativeMargin
	}
	featSetMax(&f.lastBuy, &f.set, featHasBuy, ts)
	f.spendTotal = featAdd(f.spendTotal, e.ValorCents)
	h := featTicketHash(e.TicketID)
	limit := int64(math.MaxInt64)
	if e.HasTicketTotal {
		limit = e.TicketTotalCents + max(featVATToleranceC, e.TicketTotalCents/200)
	}
	if !in {
		if !featContains(f.oldTickets, h) {
			f.ticketsTotal++
			if len(f.oldTickets) >= featOldTickets {
				f.oldTickets = append(f.oldTickets[:0], f.oldTickets[1:]...)
			}
			f.oldTickets = append(f.oldTickets, h)
		}
		if e.ValorCents > limit {
			fl |= FlagVATSuspect
		}
		return fl
	}
	d := f.dayAt(day)
	d.spend = featAdd(d.spend, e.ValorCents)
	d.margin = featAdd(d.margin, e.MargenCents)

	// The ticket: find (day, h) from the end, where recent tickets live.
	i := len(f.tickets)
	for i > 0 && (f.tickets[i-1].day > day || f.tickets[i-1].day == day && f.tickets[i-1].hash > h) {
		i--
	}
	var prev int64
	if i > 0 && f.tickets[i-1].day == day && f.tickets[i-1].hash == h {
		prev = f.tickets[i-1].valor
		f.tickets[i-1].valor = featAdd(prev, e.ValorCents)
	} else {
		if f.dayTickets(i, day) < featMaxDayTickets {
			f.tickets = featInsert(f.tickets, i, featTicket{day: day, hash: h, valor: e.ValorCents})
		}
		f.ticketsTotal++
	}
	if prev <= limit && featAdd(prev, e.ValorCents) > limit {
		fl |= FlagVATSuspect
	}

	if k := featMonthOf(featDayOf(f.lastTS)) - featMonthOf(day); e.ValorCents > 0 && k >= 0 && k < featCatMonths {
		f.addCategory(e.Clave, int(k), e.ValorCents)
	}
	return fl
}

// dayTickets counts the kept tickets of day, which lie around index i of
// f.tickets (sorted by day).
func (f *Features) dayTickets(i int, day int32) int {
	lo, hi := i, i
	for lo > 0 && f.tickets[lo-1].day == day {
		lo--
	}
	for hi < len(f.tickets) && f.tickets[hi].day == day {
		hi++
	}
	return hi - lo
}

// dayAt returns the bucket of day, inserting an empty one if needed. The
// pointer is valid until the next insertion.
func (f *Features) dayAt(day int32) *featDay {
	i := len(f.days)
	for i > 0 && f.days[i-1].day > day {
		i--
	}
	if i > 0 && f.days[i-1].day == day {
		return &f.days[i-1]
	}
	f.days = featInsert(f.days, i, featDay{day: day})
	return &f.days[i]
}

// addCategory adds spend to the k-th month before the newest event's month
// of category name.
func (f *Features) addCategory(name string, k int, spend int64) {
	c := -1
	for i := range f.cats {
		if f.cats[i].name == name {
			c = i
			break
		}
	}
	if c < 0 {
		named, other := len(f.cats), -1
		for i := range f.cats {
			if f.cats[i].name == "" {
				named--
				other = i
			}
		}
		switch {
		case name != "" && named < featMaxCats && len(f.cats) <= featMaxCats:
			f.cats = append(f.cats, featCat{name: name})
			c = len(f.cats) - 1
		case other >= 0:
			c = other
		case len(f.cats) <= featMaxCats:
			f.cats = append(f.cats, featCat{})
			c = len(f.cats) - 1
		default: // only from a hand-made encoding: share the last bucket
			c = len(f.cats) - 1
		}
	}
	f.cats[c].spend[k] = featAdd(f.cats[c].spend[k], spend)
}

// optOutChannel records a BAJA comunicaciones: for canal, or for every
// channel when canal is "" (or when featMaxOptOut channels are already
// recorded: being conservative with consent beats losing the opt-out).
func (f *Features) optOutChannel(canal string) {
	if f.set&featOptOutAll != 0 {
		return
	}
	if canal == "" || len(f.optOut) >= featMaxOptOut {
		f.set |= featOptOutAll
		f.optOut = nil
		return
	}
	canal = strings.ToLower(canal)
	for _, c := range f.optOut {
		if c == canal {
			return
		}
	}
	f.optOut = append(f.optOut, canal)
}

// advance is called when the newest event moved from day prevDay to a
// later day: it drops the buckets and tickets no window can reach any more,
// and shifts the category months to the new newest month, dropping the
// months (and then the categories) that fall out.
func (f *Features) advance(prevDay int32) {
	newest := featDayOf(f.lastTS)
	cut := newest - featRetainDays
	if n := featCountPrefix(f.days, func(d featDay) bool { return d.day < cut }); n > 0 {
		f.days = append(f.days[:0], f.days[n:]...)
	}
	if n := featCountPrefix(f.tickets, func(t featTicket) bool { return t.day < cut }); n > 0 {
		f.tickets = append(f.tickets[:0], f.tickets[n:]...)
	}
	shift := int(min(featMonthOf(newest)-featMonthOf(prevDay), featCatMonths))
	if shift <= 0 || len(f.cats) == 0 {
		return
	}
	kept := f.cats[:0]
	for _, c := range f.cats {
		copy(c.spend[shift:], c.spend[:featCatMonths-shift])
		clear(c.spend[:shift])
		if c.spend != ([featCatMonths]int64{}) {
			kept = append(kept, c)
		}
	}
	clear(f.cats[len(kept):])
	f.cats = kept
}

// OptedOut reports whether the customer opted out of communications on
// canal (compared without case), or on every channel. OptedOut("") reports
// the opt-out from every channel only.
func (f *Features) OptedOut(canal string) bool {
	if f.set&featOptOutAll != 0 {
		return true
	}
	for _, c := range f.optOut {
		if strings.EqualFold(c, canal) {
			return true
		}
	}
	return false
}

// OptOutChannels returns the channels opted out of one by one, in lower
// case, in the order they arrived; a fresh slice the caller owns. An opt-out
// from every channel is reported by OptedOut(""), not here.
func (f *Features) OptOutChannels() []string {
	return append([]string(nil), f.optOut...)
}

// Closed reports whether the account is closed: a BAJA cuenta with no later
// ALTA.
func (f *Features) Closed() bool {
	return f.set&featHasClosed != 0 && !(f.set&featHasAlta != 0 && f.altaAt > f.closedAt)
}

// CanalAlta returns the sign-up channel (clave of the newest ALTA), "" if
// the customer never signed up.
func (f *Features) CanalAlta() string { return f.canalAlta }

// SegmentoDeclarado returns the segment the tenant declared in the newest
// ALTA that carried extra.segmento, or "".
func (f *Features) SegmentoDeclarado() string { return f.segmento }

// Perfil returns extra.perfil of the newest ALTA that carried one, or "".
func (f *Features) Perfil() string { return f.perfil }

// LastEvent returns the ts of the customer's newest event of any type, and
// false for a customer without events.
func (f *Features) LastEvent() (time.Time, bool) {
	if f.set&featHasLast == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, f.lastTS).UTC(), true
}

// featSummary holds everything the read functions need at one now,
// computed in one pass over the buckets.
type featSummary struct {
	f        *Features
	today    int32
	spend    [3]int64 // windows of 30, 90 and 365 days, cents
	margin   [3]int64
	tickets  [3]int64
	recv     [2]int64 // windows of 90 and 365 days
	redeem   [2]int64
	expired  int64                  // 365 days
	catSpend [featMaxCats + 1]int64 // by index in Features.cats
	catTotal int64                  // sum of catSpend
	catN     int                    // categories with spend
	catTop   int64
}

func (f *Features) summarize(now time.Time) featSummary {
	s := featSummary{f: f, today: featDayOf(featNanos(now))}
	for i := len(f.days) - 1; i >= 0; i-- {
		d := &f.days[i]
		age := s.today - d.day
		if age >= 365 {
			break
		}
		s.spend[2] = featAdd(s.spend[2], d.spend)
		s.margin[2] = featAdd(s.margin[2], d.margin)
		if age < 90 {
			s.spend[1] = featAdd(s.spend[1], d.spend)
			s.margin[1] = featAdd(s.margin[1], d.margin)
			s.recv[0] += int64(d.recv)
			s.redeem[0] += int64(d.redeem)
			if age < 30 {
				s.spend[0] = featAdd(s.spend[0], d.spend)
				s.margin[0] = featAdd(s.margin[0], d.margin)
			}
		}
		s.recv[1] += int64(d.recv)
		s.redeem[1] += int64(d.redeem)
		s.expired += int64(d.expired)
	}
	for i := len(f.tickets) - 1; i >= 0; i-- {
		age := s.today - f.tickets[i].day
		if age >= 365 {
			break
		}
		s.tickets[2]++
		if age < 90 {
			s.tickets[1]++
		}
		if age < 30 {
			s.tickets[0]++
		}
	}
	// Category months k <= last are in the current month or the 12 before.
	if f.set&featHasLast != 0 {
		last := int(featMonthOf(featDayOf(f.lastTS)) - featMonthOf(s.today) + featCatWindow)
		last = min(last, featCatMonths-1)
		for i := range f.cats {
			if i == len(s.catSpend) {
				break
			}
			var sum int64
			for _, v := range f.cats[i].spend[:max(last+1, 0)] {
				sum = featAdd(sum, v)
			}
			s.catSpend[i] = sum
		}
	}
	for i, v := range s.catSpend {
		if v <= 0 {
			continue
		}
		s.catTotal = featAdd(s.catTotal, v)
		s.catN++
		if v > s.catTop && f.cats[i].name != "" {
			s.catTop = v
		}
	}
	return s
}

// daysSince returns the calendar days from ts to today, clamped to
// [0, DaysNever]; DaysNever when the bit is not set.
func (s *featSummary) daysSince(bit uint8, ts int64) float64 {
	if s.f.set&bit == 0 {
		return DaysNever
	}
	return float64(min(max(s.today-featDayOf(ts), 0), DaysNever))
}

func (s *featSummary) topShare() float64 {
	if s.catTotal <= 0 {
		return 0
	}
	return float64(s.catTop) / float64(s.catTotal)
}

// evenness is Pielou's evenness: the Shannon entropy of the category shares
// over its maximum ln(n); 0 with fewer than 2 categories.
func (s *featSummary) evenness() float64 {
	if s.catN < 2 {
		return 0
	}
	var h float64
	for _, v := range s.catSpend {
		if v > 0 {
			p := float64(v) / float64(s.catTotal)
			h -= p * math.Log(p)
		}
	}
	return featClamp(h/math.Log(float64(s.catN)), 0, 1)
}

func (s *featSummary) categoryShare(name string) float64 {
	if s.catTotal <= 0 || name == "" {
		return 0
	}
	for i := range s.f.cats {
		if s.f.cats[i].name == name && i < len(s.catSpend) {
			return float64(s.catSpend[i]) / float64(s.catTotal)
		}
	}
	return 0
}

func (s *featSummary) redemptionRate() float64 {
	if s.recv[1] <= 0 {
		return 0
	}
	return min(float64(s.redeem[1])/float64(s.recv[1]), 1)
}

func (s *featSummary) marginRate() float64 {
	if s.spend[2] <= 0 {
		return 0
	}
	return featClamp(float64(s.margin[2])/float64(s.spend[2]), -1, 1)
}

func (s *featSummary) avgTicket() float64 {
	if s.f.ticketsTotal <= 0 {
		return 0
	}
	return centsToMXN(s.f.spendTotal) / float64(s.f.ticketsTotal)
}

// ticketHistory reads off a policy vector x the customer's margin per
// ticket (cents: ticket_promedio times tasa_margen_365d) and tickets in
// 365 days (frecuencia_365d); margin 0 when the customer never bought,
// the margin rate is not positive or x is short.
func ticketHistory(x []float64) (marginCents, tickets float64) {
	if len(x) < VectorDim || x[vecSinCompras] != 0 || x[vecMarginRate] <= 0 {
		return 0, 0
	}
	return math.Expm1(x[vecTicket]/featLogMoneyInv) * 100 * x[vecMarginRate], math.Expm1(x[vecFreq365] / featScale365.inv)
}

func centsToMXN(cents int64) float64 { return float64(cents) / 100 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// featID identifies a numeric feature; featureDefs lists them in
// documentation order.
type featID uint8

const (
	featRecenciaDias featID = iota
	featFrecuencia30d
	featFrecuencia90d
	featFrecuencia365d
	featGasto30dMxn
	featGasto90dMxn
	featGasto365dMxn
	featMargen30dMxn
	featMargen90dMxn
	featMargen365dMxn
	featTasaMargen365d
	featTicketPromedioMxn
	featTicketsTotal
	featGastoTotalMxn
	featCategorias365d
	featCuotaCategoriaTop
	featEntropiaCategorias
	featCuponesRecibidos90d
	featCuponesRecibidos365d
	featCuponesRedimidos90d
	featCuponesRedimidos365d
	featCuponesCaducados365d
	featTasaRedencion365d
	featDiasDesdeUltimoCupon
	featAntiguedadDias
	featBajaComunicaciones
	featCanalesConBaja
	featCuentaCerrada
)

// featureDef is one numeric feature: its public name and its one-line
// documentation.
type featureDef struct {
	id        featID
	name, doc string
}

// featureDefs is the table of numeric features. The names are public API
// (batch segment filters, README, OpenAPI, export): add, never rename.
var featureDefs = [...]featureDef{
	{featRecenciaDias, "recencia_dias", "UTC calendar days since the last purchase (0 = bought today); 10000 if the customer never bought"},
	{featFrecuencia30d, "frecuencia_30d", "distinct tickets in the last 30 days (UTC calendar days, today included)"},
	{featFrecuencia90d, "frecuencia_90d", "distinct tickets in the last 90 days"},
	{featFrecuencia365d, "frecuencia_365d", "distinct tickets in the last 365 days"},
	{featGasto30dMxn, "gasto_30d_mxn", "purchase amount (sum of COMPRA_CAT valor, MXN without VAT) in the last 30 days"},
	{featGasto90dMxn, "gasto_90d_mxn", "purchase amount in MXN in the last 90 days"},
	{featGasto365dMxn, "gasto_365d_mxn", "purchase amount in MXN in the last 365 days"},
	{featMargen30dMxn, "margen_30d_mxn", "margin (sum of COMPRA_CAT extra.margen, MXN) in the last 30 days; may be negative"},
	{featMargen90dMxn, "margen_90d_mxn", "margin in MXN in the last 90 days"},
	{featMargen365dMxn, "margen_365d_mxn", "margin in MXN in the last 365 days"},
	{featTasaMargen365d, "tasa_margen_365d", "margen_365d_mxn / gasto_365d_mxn, clamped to -1..1; 0 without purchases"},
	{featTicketPromedioMxn, "ticket_promedio_mxn", "average ticket over the whole history: gasto_total_mxn / tickets_total; 0 without tickets"},
	{featTicketsTotal, "tickets_total", "distinct tickets over the whole history"},
	{featGastoTotalMxn, "gasto_total_mxn", "purchase amount in MXN over the whole history"},
	{featCategorias365d, "categorias_365d", "distinct categories bought in the current UTC calendar month and the 12 before it (at least the last 365 days); beyond 32 categories the rest count as one"},
	{featCuotaCategoriaTop, "cuota_categoria_top", "share (0..1) of the customer's top category in the category spend of that period"},
	{featEntropiaCategorias, "entropia_categorias", "evenness (0..1) of the category spend of that period: Shannon entropy over its maximum; 0 with fewer than 2 categories"},
	{featCuponesRecibidos90d, "cupones_recibidos_90d", "CUPON_RECIBIDO events in the last 90 days"},
	{featCuponesRecibidos365d, "cupones_recibidos_365d", "CUPON_RECIBIDO events in the last 365 days"},
	{featCuponesRedimidos90d, "cupones_redimidos_90d", "CUPON_REDIMIDO events in the last 90 days"},
	{featCuponesRedimidos365d, "cupones_redimidos_365d", "CUPON_REDIMIDO events in the last 365 days"},
	{featCuponesCaducados365d, "cupones_caducados_365d", "CUPON_CADUCADO events in the last 365 days"},
	{featTasaRedencion365d, "tasa_redencion_365d", "cupones_redimidos_365d / cupones_recibidos_365d, at most 1; 0 if none received"},
	{featDiasDesdeUltimoCupon, "dias_desde_ultimo_cupon", "UTC calendar days since the last CUPON_RECIBIDO; 10000 if none"},
	{featAntiguedadDias, "antiguedad_dias", "UTC calendar days since the customer was first seen (oldest event of any type, ALTA included); 0 without events"},
	{featBajaComunicaciones, "baja_comunicaciones", "1 if the customer opted out of communications on every channel (BAJA comunicaciones without extra.canal), else 0"},
	{featCanalesConBaja, "canales_con_baja", "number of channels the customer opted out of one by one (BAJA comunicaciones with extra.canal)"},
	{featCuentaCerrada, "cuenta_cerrada", "1 if the account is closed (BAJA cuenta not followed by an ALTA), else 0"},
}

// value returns feature id. (A switch, not a table of funcs, so that the
// summary stays on the stack.)
func (s *featSummary) value(id featID) float64 {
	switch id {
	case featRecenciaDias:
		return s.daysSince(featHasBuy, s.f.lastBuy)
	case featFrecuencia30d:
		return float64(s.tickets[0])
	case featFrecuencia90d:
		return float64(s.tickets[1])
	case featFrecuencia365d:
		return float64(s.tickets[2])
	case featGasto30dMxn:
		return centsToMXN(s.spend[0])
	case featGasto90dMxn:
		return centsToMXN(s.spend[1])
	case featGasto365dMxn:
		return centsToMXN(s.spend[2])
	case featMargen30dMxn:
		return centsToMXN(s.margin[0])
	case featMargen90dMxn:
		return centsToMXN(s.margin[1])
	case featMargen365dMxn:
		return centsToMXN(s.margin[2])
	case featTasaMargen365d:
		return s.marginRate()
	case featTicketPromedioMxn:
		return s.avgTicket()
	case featTicketsTotal:
		return float64(s.f.ticketsTotal)
	case featGastoTotalMxn:
		return centsToMXN(s.f.spendTotal)
	case featCategorias365d:
		return float64(s.catN)
	case featCuotaCategoriaTop:
		return s.topShare()
	case featEntropiaCategorias:
		return s.evenness()
	case featCuponesRecibidos90d:
		return float64(s.recv[0])
	case featCuponesRecibidos365d:
		return float64(s.recv[1])
	case featCuponesRedimidos90d:
		return float64(s.redeem[0])
	case featCuponesRedimidos365d:
		return float64(s.redeem[1])
	case featCuponesCaducados365d:
		return float64(s.expired)
	case featTasaRedencion365d:
		return s.redemptionRate()
	case featDiasDesdeUltimoCupon:
		return s.daysSince(featHasCoupon, s.f.lastCoupon)
	case featAntiguedadDias:
		if s.f.set&featHasFirst == 0 {
			return 0
		}
		return s.daysSince(featHasFirst, s.f.firstTS)
	case featBajaComunicaciones:
		return b2f(s.f.set&featOptOutAll != 0)
	case featCanalesConBaja:
		return float64(len(s.f.optOut))
	case featCuentaCerrada:
		return b2f(s.f.Closed())
	}
	return 0
}

// featureIndex returns the position of name in featureDefs, or -1.
func featureIndex(name string) int {
	for i := range featureDefs {
		if featureDefs[i].name == name {
			return i
		}
	}
	return -1
}

// validFeature reports whether name is a numeric feature that Get knows.
func validFeature(name string) bool {
	if featureIndex(name) >= 0 {
		return true
	}
	c, ok := strings.CutPrefix(name, FeatureCategoryShare)
	return ok && c != "" && len(c) <= 1024
}

// FeatureDoc documents one customer feature.
type FeatureDoc struct {
	Name string // as used in segments, e.g. "recencia_dias"
	Doc  string // one line
}

// FeatureDocs returns the documentation of every numeric feature, in a
// stable order, followed by the pattern entry of the per-category shares
// ("cuota_categoria:<clave>"). The slice is the caller's.
func FeatureDocs() []FeatureDoc {
	docs := make([]FeatureDoc, 0, len(featureDefs)+1)
	for _, d := range featureDefs {
		docs = append(docs, FeatureDoc{Name: d.name, Doc: d.doc})
	}
	return append(docs, FeatureDoc{
		Name: FeatureCategoryShare + "<clave>",
		Doc:  "share (0..1) of category <clave> in the category spend of the current UTC calendar month and the 12 before it; 0 if never bought",
	})
}

// FeatureNames returns the names of the fixed numeric features in
// FeatureDocs order (the "cuota_categoria:<clave>" family is not listed).
// The slice is the caller's.
func FeatureNames() []string {
	names := make([]string, len(featureDefs))
	for i, d := range featureDefs {
		names[i] = d.name
	}
	return names
}

// Get returns the numeric feature name at now, and false if no feature has
// that name. Money is in MXN; see FeatureDocs for each feature.
func (f *Features) Get(name string, now time.Time) (float64, bool) {
	if !validFeature(name) {
		return 0, false
	}
	s := f.summarize(now)
	return s.get(name), true
}

// get returns a feature validFeature accepted.
func (s *featSummary) get(name string) float64 {
	if i := featureIndex(name); i >= 0 {
		return s.value(featureDefs[i].id)
	}
	c, _ := strings.CutPrefix(name, FeatureCategoryShare)
	return s.categoryShare(c)
}

// Export returns every feature at now, for the customer export: the numeric
// features by name, the per-category shares under "cuotas_categoria"
// (category → share), and "canal_alta", "segmento_declarado", "perfil",
// "canales_baja" (strings; the last a list). Values are JSON-encodable. The
// map is the caller's.
func (f *Features) Export(now time.Time) map[string]any {
	s := f.summarize(now)
	m := make(map[string]any, len(featureDefs)+5)
	for i := range featureDefs {
		m[featureDefs[i].name] = s.value(featureDefs[i].id)
	}
	shares := map[string]float64{}
	for i := range f.cats {
		if n := f.cats[i].name; n != "" && i < len(s.catSpend) && s.catSpend[i] > 0 {
			shares[n] = float64(s.catSpend[i]) / float64(s.catTotal)
		}
	}
	m["cuotas_categoria"] = shares
	m["canal_alta"] = f.canalAlta
	m["segmento_declarado"] = f.segmento
	m["perfil"] = f.perfil
	canales := f.OptOutChannels()
	if canales == nil {
		canales = []string{}
	}
	m["canales_baja"] = canales
	return m
}

// VectorDim is the length of the policy feature vector (Features.Vector).
// Changing it, or the meaning of any position, invalidates learned models.
const VectorDim = 20

// Positions in the policy vector that the learner reads back
// (ticketHistory); vectorNames names every position.
const (
	vecSinCompras = 2  // sin_compras
	vecFreq365    = 5  // frecuencia_365d
	vecMarginRate = 11 // tasa_margen_365d
	vecTicket     = 12 // ticket_promedio
)

// vectorNames documents the positions of the vector.
var vectorNames = [VectorDim]string{
	"sesgo",                   // 1
	"recencia",                // log1p(recencia_dias capped at 1096) / log1p(1096); 1 if never bought
	"sin_compras",             // 1 if the customer never bought
	"frecuencia_30d",          // log1p(n capped at 30) / log1p(30)
	"frecuencia_90d",          // log1p(n capped at 90) / log1p(90)
	"frecuencia_365d",         // log1p(n capped at 365) / log1p(365)
	"gasto_30d",               // log1p(MXN) / log1p(100000), at most 1.5
	"gasto_90d",               // same
	"gasto_365d",              // same
	"margen_90d",              // sign * log1p(|MXN|) / log1p(100000), within -1.5..1.5
	"margen_365d",             // same
	"tasa_margen_365d",        // -1..1
	"ticket_promedio",         // log1p(MXN) / log1p(100000), at most 1.5
	"categorias_365d",         // log1p(n capped at 32) / log1p(32)
	"cuota_categoria_top",     // 0..1
	"entropia_categorias",     // 0..1
	"cupones_recibidos_90d",   // log1p(n capped at 50) / log1p(50)
	"tasa_redencion_365d",     // 0..1
	"dias_desde_ultimo_cupon", // log1p(days capped at 365) / log1p(365); 1 if none
	"antiguedad",              // log1p(days capped at 1096) / log1p(1096)
}

// VectorNames returns the name of each position of the policy vector, for
// documentation and explanations. The slice is the caller's.
func VectorNames() []string { return append([]string(nil), vectorNames[:]...) }

// Vector appends the customer's policy feature vector at now to dst and
// returns the extended slice (VectorDim values; pass dst[:0] to reuse a
// buffer). Position 0 is the constant 1 (bias); every other value is
// finite and within -1.5..1.5: counts and day counts are capped and
// log-scaled to 0..1, money is log1p-scaled MXN, shares and rates are 0..1.
// A customer without history gets bias 1, recencia 1, sin_compras 1,
// dias_desde_ultimo_cupon 1 and zeros elsewhere.
func (f *Features) Vector(now time.Time, dst []float64) []float64 {
	s := f.summarize(now)
	return f.vectorOf(&s, dst)
}

// vectorOf is Vector from the summary at now.
func (f *Features) vectorOf(s *featSummary, dst []float64) []float64 {
	rec := s.daysSince(featHasBuy, f.lastBuy)
	sinceCoupon := s.daysSince(featHasCoupon, f.lastCoupon)
	tenure := 0.0
	if f.set&featHasFirst != 0 {
		tenure = s.daysSince(featHasFirst, f.firstTS)
	}
	return append(dst,
		1,
		featLogCap(rec, featScale1096),
		b2f(f.set&featHasBuy == 0),
		featLogCap(float64(s.tickets[0]), featScale30),
		featLogCap(float64(s.tickets[1]), featScale90),
		featLogCap(float64(s.tickets[2]), featScale365),
		featLogMoney(s.spend[0]),
		featLogMoney(s.spend[1]),
		featLogMoney(s.spend[2]),
		featLogMoney(s.margin[1]),
		featLogMoney(s.margin[2]),
		s.marginRate(),
		featLogMXN(math.Trunc(s.avgTicket()*100)/100), // whole cents, as featLogMoney reads
		featLogCap(float64(s.catN), featScaleCats),
		s.topShare(),
		s.evenness(),
		featLogCap(float64(s.recv[0]), featScale50),
		s.redemptionRate(),
		featLogCap(sinceCoupon, featScale365),
		featLogCap(tenure, featScale1096),
	)
}

// featLogCap maps x >= 0 to log1p(min(x, c)) / log1p(c), in 0..1.
func featLogCap(x float64, c featLogScale) float64 {
	return math.Log1p(featClamp(x, 0, c.cap)) * c.inv
}

// featLogScale is a cap of featLogCap with its 1/log1p(cap) computed once.
type featLogScale struct{ cap, inv float64 }

func newFeatLogScale(c float64) featLogScale { return featLogScale{c, 1 / math.Log1p(c)} }

// The caps of the vector's log-scaled counts and day counts.
var (
	featScale30   = newFeatLogScale(30)
	featScale50   = newFeatLogScale(50)
	featScale90   = newFeatLogScale(90)
	featScale365  = newFeatLogScale(365)
	featScale1096 = newFeatLogScale(1096)
	featScaleCats = newFeatLogScale(featMaxCats)
)

var featLogMoneyInv = 1 / math.Log1p(100000)

// featLogMoney maps cents to sign * log1p(|MXN|) / log1p(100000), within -1.5..1.5.
func featLogMoney(cents int64) float64 { return featLogMXN(centsToMXN(cents)) }

// featLogMXN is featLogMoney of an amount in MXN: an average needs no
// conversion back to int64 cents, out of range at the int64 bound
// (float64(math.MaxInt64) is 2^63).
func featLogMXN(mxn float64) float64 {
	v := math.Log1p(math.Abs(mxn)) * featLogMoneyInv
	if mxn < 0 {
		v = -v
	}
	return featClamp(v, -1.5, 1.5)
}

func featClamp(x, lo, hi float64) float64 {
	if x < lo || math.IsNaN(x) {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

// featuresVersion is the first byte of encoded Features.
const featuresVersion = 1

// AppendEncode appends the storage encoding of f to buf and returns the
// extended buffer. The format is persistent (change it only with a new
// version byte and a decoder for the old one). Header integers are varints
// (signed ones zigzag); the bulky per-day, per-ticket and per-month numbers
// are stored as columns, which decode several times faster than varints: a
// column is one byte w (0 to 8) and then each value in w bytes,
// little-endian, w being the fewest bytes that hold the column's largest
// value (signed values zigzag-encoded first).
//
//	byte     version (1)
//	byte     set bits (featHas*, featOptOutAll)
//	varint   lastTS, firstTS, lastBuy, lastCoupon, closedAt, altaAt (Unix ns),
//	         each only when its bit is set
//	uvarint  ticketsTotal;  varint spendTotal
//	uvarint  len(optOut), len(cats)
//	strings  canalAlta, segmento, perfil, optOut..., category names...
//	         (uvarint length + bytes)
//	uvarint  len(days); when not 0: varint first day, then columns: day
//	         deltas (len-1 values, >= 1), spend, margin, recv, redeem, expired
//	uvarint  len(tickets); when not 0: varint first day, then columns: day
//	         deltas (len-1 values), hash, valor
//	uvarint  per category: bitmap of the months k (0..13) with spend
//	column   those spends, category by category, k ascending
//	byte     len(oldTickets); 4 bytes big-endian each
func (f *Features) AppendEncode(buf []byte) []byte {
	buf = f.appendHeader(buf)
	var stack [featColumnStack]uint64
	col := stack[:0]
	buf, col = f.appendDays(buf, col)
	buf, col = f.appendTickets(buf, col)
	buf, _ = f.appendCatSpends(buf, col)
	buf = append(buf, byte(len(f.oldTickets)))
	for _, h := range f.oldTickets {
		buf = binary.BigEndian.AppendUint32(buf, h)
	}
	return buf
}

// appendHeader appends the version, the set bits, the times, the totals and
// the strings.
func (f *Features) appendHeader(buf []byte) []byte {
	buf = append(buf, featuresVersion, f.set)
	for i, t := range f.times() {
		if f.set&(1<<i) != 0 {
			buf = binary.AppendVarint(buf, *t)
		}
	}
	buf = binary.AppendUvarint(buf, uint64(f.ticketsTotal))
	buf = binary.AppendVarint(buf, f.spendTotal)
	buf = binary.AppendUvarint(buf, uint64(len(f.optOut)))
	buf = binary.AppendUvarint(buf, uint64(len(f.cats)))
	buf = binAppendString(buf, f.canalAlta)
	buf = binAppendString(buf, f.segmento)
	buf = binAppendString(buf, f.perfil)
	for _, s := range f.optOut {
		buf = binAppendString(buf, s)
	}
	for i := range f.cats {
		buf = binAppendString(buf, f.cats[i].name)
	}
	return buf
}

// appendDays appends the per-day columns; col is scratch, returned for
// reuse.
func (f *Features) appendDays(buf []byte, col []uint64) ([]byte, []uint64) {
	days := f.days
	col = binColumnOf(col, len(days), func(i int) uint64 { return uint64(days[i].day) })
	buf = featAppendDayDeltas(buf, col)
	if len(days) == 0 {
		return buf, col
	}
	col = binColumnOf(col, len(days), func(i int) uint64 { return binZigzag(days[i].spend) })
	buf = binAppendColumn(buf, col)
	col = binColumnOf(col, len(days), func(i int) uint64 { return binZigzag(days[i].margin) })
	buf = binAppendColumn(buf, col)
	col = binColumnOf(col, len(days), func(i int) uint64 { return uint64(days[i].recv) })
	buf = binAppendColumn(buf, col)
	col = binColumnOf(col, len(days), func(i int) uint64 { return uint64(days[i].redeem) })
	buf = binAppendColumn(buf, col)
	col = binColumnOf(col, len(days), func(i int) uint64 { return uint64(days[i].expired) })
	return binAppendColumn(buf, col), col
}

// appendTickets appends the per-ticket columns; col is scratch, returned
// for reuse.
func (f *Features) appendTickets(buf []byte, col []uint64) ([]byte, []uint64) {
	ts := f.tickets
	col = binColumnOf(col, len(ts), func(i int) uint64 { return uint64(ts[i].day) })
	buf = featAppendDayDeltas(buf, col)
	if len(ts) == 0 {
		return buf, col
	}
	col = binColumnOf(col, len(ts), func(i int) uint64 { return uint64(ts[i].hash) })
	buf = binAppendColumn(buf, col)
	col = binColumnOf(col, len(ts), func(i int) uint64 { return binZigzag(ts[i].valor) })
	return binAppendColumn(buf, col), col
}

// featAppendDayDeltas appends what featDayDeltas reads: the count
// len(days), then, when it is not 0, the first day and the column of the
// len(days)-1 deltas between consecutive days (ascending days give deltas
// ≥ 0). days holds each int32 day as uint64(day); it is overwritten with
// the deltas (it is the caller's column scratch).
func featAppendDayDeltas(buf []byte, days []uint64) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(days)))
	if len(days) == 0 {
		return buf
	}
	buf = binary.AppendVarint(buf, int64(int32(days[0])))
	for i := len(days) - 1; i > 0; i-- { // backwards: days[i-1] is still a day
		days[i] = uint64(int32(days[i]) - int32(days[i-1]))
	}
	return binAppendColumn(buf, days[1:])
}

// binColumnOf gathers at(0) .. at(n-1) into col (scratch, returned for
// reuse), for binAppendColumn. Small enough to inline, so at is called
// directly.
func binColumnOf(col []uint64, n int, at func(i int) uint64) []uint64 {
	col = col[:0]
	for i := 0; i < n; i++ {
		col = append(col, at(i))
	}
	return col
}

// appendCatSpends appends each category's bitmap of months with spend, then
// those spends as one column; col is scratch, returned for reuse.
func (f *Features) appendCatSpends(buf []byte, col []uint64) ([]byte, []uint64) {
	col = col[:0]
	for i := range f.cats {
		var mask uint64
		for k, v := range f.cats[i].spend {
			if v != 0 {
				mask |= 1 << k
				col = append(col, binZigzag(v))
			}
		}
		buf = binary.AppendUvarint(buf, mask)
	}
	return binAppendColumn(buf, col), col
}

// binAppendColumn appends vals as a column: the width byte, then each value in
// that many bytes, little-endian.
func binAppendColumn(buf []byte, vals []uint64) []byte {
	var all uint64
	for _, v := range vals {
		all |= v
	}
	w := (bits.Len64(all) + 7) / 8
	buf = append(buf, byte(w))
	switch w {
	case 0:
	case 1:
		for _, v := range vals {
			buf = append(buf, byte(v))
		}
	case 2:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint16(buf, uint16(v))
		}
	case 3:
		for _, v := range vals {
			buf = append(buf, byte(v), byte(v>>8), byte(v>>16))
		}
	case 4:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(v))
		}
	case 8:
		for _, v := range vals {
			buf = binary.LittleEndian.AppendUint64(buf, v)
		}
	default:
		for _, v := range vals {
			for j := 0; j < w; j++ {
				buf = append(buf, byte(v>>(8*j)))
			}
		}
	}
	return buf
}

// column reads a column of len(dst) values into dst.
func (d *binReader) column(dst []uint64) {
	w := int(d.byte())
	if w > 8 {
		d.fail()
		return
	}
	src := d.next(uint64(w) * uint64(len(dst)))
	if d.bad {
		return
	}
	switch w {
	case 0:
		clear(dst)
	case 1:
		for i := range dst {
			dst[i] = uint64(src[i])
		}
	case 2:
		for i := range dst {
			dst[i] = uint64(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case 3: // money in cents up to 83 886 MXN, zigzagged
		for i := range dst {
			b := src[3*i : 3*i+3]
			dst[i] = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16
		}
	case 4:
		for i := range dst {
			dst[i] = uint64(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case 8:
		for i := range dst {
			dst[i] = binary.LittleEndian.Uint64(src[8*i:])
		}
	default:
		for i := range dst {
			var v uint64
			for j := w - 1; j >= 0; j-- {
				v = v<<8 | uint64(src[w*i+j])
			}
			dst[i] = v
		}
	}
}

// times lists the time fields in the order of their featHas* bits.
func (f *Features) times() [6]*int64 {
	return [6]*int64{&f.lastTS, &f.firstTS, &f.lastBuy, &f.lastCoupon, &f.closedAt, &f.altaAt}
}

// featColumnStack is the size of the on-stack scratch of the column coders:
// enough for a year of daily buckets and for every category month.
const featColumnStack = 512

// featMaxDay bounds decoded day numbers: far beyond any real date, small
// enough that no arithmetic on them overflows int32.
const featMaxDay = 1 << 20 // about year 4840

// DecodeFeatures decodes what Features.AppendEncode wrote. It reports false
// for anything else (another version, truncated or trailing bytes, entries
// out of order or duplicated, out-of-range numbers, too many channels or
// categories), so that every Features it returns keeps the invariants Apply
// and the read methods rely on. The returned value does not alias b; its
// strings share one allocation.
func DecodeFeatures(b []byte) (Features, bool) {
	var f Features
	if !f.Decode(b) {
		return Features{}, false
	}
	return f, true
}

// Decode is DecodeFeatures into f, reusing the memory of f's buckets: a
// loop over many customers (a batch) that decodes into one Features
// allocates little. f is the zero Features when Decode reports false. Any
// Features (or slice of one) obtained from f before is invalid afterwards.
func (f *Features) Decode(b []byte) bool {
	days, tickets, cats, optOut, old := f.days[:0], f.tickets[:0], f.cats[:0], f.optOut[:0], f.oldTickets[:0]
	*f = Features{}
	if !f.decode(b, days, tickets, cats, optOut, old) {
		*f = Features{}
		return false
	}
	return true
}

// decode decodes b into the zero f, reusing the given slices' memory.
func (f *Features) decode(b []byte, days []featDay, tickets []featTicket, cats []featCat, optOut []string, old []uint32) bool {
	if len(b) < 2 || b[0] != featuresVersion || b[1]&^featSetBits != 0 {
		return false
	}
	f.set = b[1]
	d := binReader{b: b, pos: 2}
	if !f.decodeHeader(&d, cats, optOut) {
		return false
	}
	var stack [featColumnStack]uint64
	if !f.decodeDays(&d, days, &stack) || !f.decodeTickets(&d, tickets, &stack) || !f.decodeCatSpends(&d, &stack) {
		return false
	}
	k := d.byte()
	if k > featOldTickets {
		return false
	}
	if k > 0 {
		f.oldTickets = featResize(old, int(k), 0)
		for i := range f.oldTickets {
			f.oldTickets[i] = d.uint32()
		}
	}
	return d.done()
}

// decodeHeader reads the times, the totals and the strings (into optOut
// and cats, reused).
func (f *Features) decodeHeader(d *binReader, cats []featCat, optOut []string) bool {
	for i, t := range f.times() {
		if f.set&(1<<i) != 0 {
			*t = d.varint()
		}
	}
	tt := d.uvarint()
	if tt > math.MaxInt64 {
		return false
	}
	f.ticketsTotal = int64(tt)
	f.spendTotal = d.varint()
	nOpt, nCat := d.uvarint(), d.uvarint()
	if nOpt > featMaxOptOut || nCat > featMaxCats+1 || nCat > 0 && f.set&featHasLast == 0 || d.bad {
		return false
	}
	var strs [3 + featMaxOptOut + featMaxCats + 1]string
	d.strs(strs[:3+nOpt+nCat])
	f.canalAlta, f.segmento, f.perfil = strs[0], strs[1], strs[2]
	if nOpt > 0 {
		f.optOut = append(optOut, strs[3:3+nOpt]...)
	}
	if nCat > 0 {
		f.cats = featResize(cats, int(nCat), 0)
		for i := range f.cats {
			f.cats[i] = featCat{name: strs[3+nOpt+uint64(i)]}
		}
	}
	return true
}

// decodeDays reads the per-day columns into days (reused); stack is
// column scratch.
func (f *Features) decodeDays(d *binReader, days []featDay, stack *[featColumnStack]uint64) bool {
	n := d.uvarint()
	if n > uint64(d.left()) {
		return false
	}
	if n == 0 {
		return true
	}
	f.days = featResize(days, int(n), 2) // room for what Apply adds
	col, day, ok := featDayDeltas(d, stack, n)
	if !ok {
		return false
	}
	f.days[0].day = int32(day)
	for i, delta := range col[:n-1] {
		// A valid gap is at most 2·featMaxDay (first ≥ −featMaxDay, last ≤
		// featMaxDay); a larger one would wrap negative as int64.
		if day += int64(delta); delta < 1 || delta > 2*featMaxDay || day > featMaxDay {
			return false
		}
		f.days[i+1].day = int32(day)
	}
	d.column(col)
	for i, v := range col {
		f.days[i].spend = binUnzigzag(v)
	}
	d.column(col)
	for i, v := range col {
		f.days[i].margin = binUnzigzag(v)
	}
	var all uint64
	d.column(col)
	for i, v := range col {
		f.days[i].recv = int32(v)
		all |= v
	}
	d.column(col)
	for i, v := range col {
		f.days[i].redeem = int32(v)
		all |= v
	}
	d.column(col)
	for i, v := range col {
		f.days[i].expired = int32(v)
		all |= v
	}
	return all <= math.MaxInt32 && !d.bad
}

// featDayDeltas reads what featAppendDayDeltas writes after the count n
// (> 0): the first day, then the column of n-1 day deltas, into
// the first n-1 values of column scratch (stack when it is large enough).
// It returns that scratch, n values long, for the following columns.
func featDayDeltas(d *binReader, stack *[featColumnStack]uint64, n uint64) (col []uint64, first int64, ok bool) {
	col = stack[:0]
	if n > uint64(len(stack)) {
		col = make([]uint64, 0, n)
	}
	col = col[:n]
	first = d.varint()
	if first < -featMaxDay || first > featMaxDay {
		return nil, 0, false
	}
	d.column(col[:n-1])
	return col, first, true
}

// decodeTickets reads the per-ticket columns into tickets (reused); stack
// is column scratch.
func (f *Features) decodeTickets(d *binReader, tickets []featTicket, stack *[featColumnStack]uint64) bool {
	n := d.uvarint()
	if n > uint64(d.left()) {
		return false
	}
	if n == 0 {
		return true
	}
	f.tickets = featResize(tickets, int(n), 4)
	col, day, ok := featDayDeltas(d, stack, n)
	if !ok {
		return false
	}
	f.tickets[0].day = int32(day)
	for i, delta := range col[:n-1] {
		if day += int64(delta); delta > featMaxDay || day > featMaxDay {
			return false
		}
		f.tickets[i+1].day = int32(day)
	}
	d.column(col)
	for i, v := range col {
		if v > math.MaxUint32 {
			return false
		}
		f.tickets[i].hash = uint32(v)
		if i > 0 && f.tickets[i].day == f.tickets[i-1].day && f.tickets[i].hash <= f.tickets[i-1].hash {
			return false
		}
	}
	d.column(col)
	for i, v := range col {
		f.tickets[i].valor = binUnzigzag(v)
	}
	return true
}

// decodeCatSpends reads each category's bitmap of months with spend, then
// those spends; stack is column scratch.
func (f *Features) decodeCatSpends(d *binReader, stack *[featColumnStack]uint64) bool {
	var months [featMaxCats + 1]uint64
	total := 0
	for i := range f.cats {
		months[i] = d.uvarint()
		if months[i] >= 1<<featCatMonths {
			return false
		}
		total += bits.OnesCount64(months[i])
	}
	if d.bad {
		return false
	}
	col := stack[:total]
	d.column(col)
	for i := range f.cats {
		for k := range f.cats[i].spend {
			if months[i]&(1<<k) != 0 {
				f.cats[i].spend[k] = binUnzigzag(col[0])
				col = col[1:]
			}
		}
	}
	return true
}

// featNanos is t's Unix time in nanoseconds, saturated to the int64 range.
func featNanos(t time.Time) int64 {
	const limit = math.MaxInt64 / int64(time.Second)
	s := t.Unix()
	switch {
	case s >= limit:
		return math.MaxInt64
	case s <= -limit:
		return math.MinInt64
	}
	return t.UnixNano()
}

// featDayOf is the UTC day (days since 1970-01-01) of a Unix time in ns.
func featDayOf(ns int64) int32 {
	d := ns / featNsPerDay
	if ns%featNsPerDay < 0 {
		d--
	}
	return int32(d)
}

// featMonthOf is year*12 + month-1 of a UTC day, by the civil-from-days
// algorithm (proleptic Gregorian calendar).
func featMonthOf(day int32) int32 {
	z := int64(day) + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return int32(y*12 + m - 1)
}

// featAdd is a + b saturated to the int64 range: the money sums of
// Features (cents) stop at their bound instead of wrapping, which a
// cliente_ref taking the contract's largest amounts reaches after about 92
// million events.
func featAdd(a, b int64) int64 {
	c := a + b
	switch {
	case b > 0 && c < a:
		return math.MaxInt64
	case b < 0 && c > a:
		return math.MinInt64
	}
	return c
}

// featInc adds one to a day's count of coupon events, saturated at the
// int32 range: wrapped, the count read as negative and the stored
// features no longer decoded.
func featInc(n *int32) {
	if *n < math.MaxInt32 {
		*n++
	}
}

// featTicketHash is the 32-bit FNV-1a hash of a ticket_id. Persistent.
func featTicketHash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func featContains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// featInsert inserts v at position i of s.
func featInsert[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// featResize returns s resized to n elements when its capacity allows, or a
// new slice with room for extra more. The elements' values are stale: the
// caller sets every one.
func featResize[T any](s []T, n, extra int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+extra)
}

// featCountPrefix counts the leading elements of s for which drop holds.
func featCountPrefix[T any](s []T, drop func(T) bool) int {
	n := 0
	for n < len(s) && drop(s[n]) {
		n++
	}
	return n
}
