package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/coupond/coupond/engine"
)

// historyWeeks of past behaviour precede a many-worlds run.
const (
	historyWeeks     = 26
	historyCouponPct = 0.3
)

// eventWriter turns a customer's sampled windows into the events a
// retailer would publish, and queues them for the Target.
type eventWriter struct {
	w   *mworld
	seq int
	buf []engine.IngestEvent
}

func (ew *eventWriter) add(c *wCustomer, e engine.Event) {
	ew.seq++
	e.ID = fmt.Sprintf("mw-ev-%09d", ew.seq)
	e.ClienteRef = c.ref
	ew.buf = append(ew.buf, engine.IngestEvent{Event: e, Canonical: []byte(e.ID)})
}

// window writes one window from now: CUPON_RECIBIDO (with decisionID when
// the engine decided), BAJA comunicaciones on an opt-out, and, on a
// purchase, one COMPRA_CAT per category the customer buys (margin net of
// the discount on the coupon's lines) and CUPON_REDIMIDO; else
// CUPON_CADUCADO at the coupon's expiry.
func (ew *eventWriter) window(c *wCustomer, k int, o purchase, decisionID string, now time.Time, rng *rand.Rand) {
	cupon := ""
	if k >= 0 {
		ew.seq++
		cupon = fmt.Sprintf("mw-cup-%09d", ew.seq)
		ew.add(c, engine.Event{TS: now.Add(time.Minute), Tipo: engine.CuponRecibido, Clave: ew.w.coupons[k].Name,
			DecisionID: decisionID, CuponEmitidoID: cupon, Caducidad: now.Add(window)})
		if o.optout {
			ew.add(c, engine.Event{TS: now.Add(2 * time.Hour), Tipo: engine.Baja, Clave: engine.BajaComunicaciones})
		}
	}
	if !o.bought {
		if k >= 0 {
			ew.add(c, engine.Event{TS: now.Add(window - time.Minute), Tipo: engine.CuponCaducado, Clave: ew.w.coupons[k].Name, CuponEmitidoID: cupon})
		}
		return
	}
	at := now.Add(3*time.Hour + time.Duration(rng.Float64()*float64(window-4*time.Hour)))
	ew.seq++
	ticket := fmt.Sprintf("mw-t-%09d", ew.seq)
	if o.discount > 0 {
		ew.add(c, engine.Event{TS: at, Tipo: engine.CuponRedimido, Clave: ew.w.coupons[k].Name,
			ValorCents: cents(o.discount), CuponEmitidoID: cupon, TicketID: ticket})
	}
	cat := -1
	if k >= 0 {
		cat = ew.w.catIndex(k)
	}
	for j, s := range c.shares {
		if s == 0 {
			continue
		}
		v := o.amount * s
		m := v * ew.w.fam.MarginRate
		switch {
		case cat == j && o.discount > 0:
			m -= o.discount
		case cat < 0 && o.discount > 0:
			m -= o.discount * s
		}
		ew.add(c, engine.Event{TS: at, Tipo: engine.CompraCat, Clave: ew.w.fam.Categories[j], ValorCents: cents(v),
			TicketID: ticket, MargenCents: cents(m)})
	}
}

func cents(mxn float64) int64 { return int64(mxn*100 + 0.5*sign(mxn)) }

func sign(x float64) float64 {
	if x < 0 {
		return -1
	}
	return 1
}

// windowEvents returns the events of one window (as window writes them)
// without queueing them for ingestion.
func (ew *eventWriter) windowEvents(c *wCustomer, k int, o purchase, now time.Time, rng *rand.Rand) []engine.IngestEvent {
	queued := ew.buf
	ew.buf = nil
	ew.window(c, k, o, "", now, rng)
	evs := ew.buf
	ew.buf = queued
	return evs
}

// take returns the queued events and empties the queue.
func (ew *eventWriter) take() []engine.IngestEvent {
	evs := ew.buf
	ew.buf = nil
	return evs
}

// history publishes through t historyWeeks of past windows before start:
// purchases at each customer's own rate, old campaigns' coupons to
// historyCouponPct of customers each week (redeemed as each customer does,
// moving nobody: the history does not show who responds), no opt-outs. It
// sets redeemSeen.
func (ew *eventWriter) history(ctx context.Context, t Target, start time.Time, rng *rand.Rand) error {
	w := ew.w
	for _, c := range w.custs {
		seen, buyWeek := 0, 0 // buyWeek: the week given a purchase (Family.PastBuyers)
		if w.fam.PastBuyers {
			buyWeek = 1 + rng.IntN(historyWeeks)
		}
		for wk := historyWeeks; wk >= 1; wk-- {
			k := -1
			if rng.Float64() < historyCouponPct {
				k = rng.IntN(len(w.fam.Coupons))
			}
			o := w.sample(rng, c, k, false, false)
			if wk == buyWeek && !o.bought {
				o = w.purchase(rng, c)
			}
			if o.bought {
				c.histTickets++
			}
			if k >= 0 && o.bought && w.applies(c, k) {
				seen++
			}
			ew.window(c, k, o, "", start.Add(-time.Duration(wk)*window), rng)
		}
		c.redeemSeen = seen >= 2
		if len(ew.buf) >= 20000 {
			if err := t.Publish(ctx, ew.take()); err != nil {
				return err
			}
		}
	}
	return t.Publish(ctx, ew.take())
}

// engineAction is coupon k as a catalog action.
func (w *mworld) engineAction(k int) engine.Action {
	cp := &w.coupons[k]
	a := engine.Action{ID: cp.ID, Nombre: cp.Name, TipoCupon: cp.Name, CostoEnvioCents: cents(cp.CostMXN), Activa: true,
		DescuentoMaxCents: cents(cp.MaxMXN), DescuentoPct: 100 * cp.Pct}
	if cp.Category != "" && w.fam.CatalogCategorias {
		setCategorias(&a, []string{cp.Category})
	}
	return a
}

// setCategorias sets a.Categorias (contract §4) when engine.Action has
// that field, and reports whether it did. Through reflection so that the
// lab sends categorias as soon as the engine accepts them, with no edit
// here: on an engine without the field the catalog goes without them.
func setCategorias(a *engine.Action, cats []string) bool {
	f := reflect.ValueOf(a).Elem().FieldByName("Categorias")
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeOf(cats) {
		return false
	}
	f.Set(reflect.ValueOf(cats))
	return true
}

// installCatalog replaces t's catalog with the active coupons.
func (w *mworld) installCatalog(ctx context.Context, t Target) error {
	acts := make([]engine.Action, w.active)
	for k := range acts {
		acts[k] = w.engineAction(k)
	}
	return t.ReplaceCatalog(ctx, acts)
}
