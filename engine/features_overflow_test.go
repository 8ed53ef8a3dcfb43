package engine

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestFeatureSumsSaturate: the money sums of a customer's features stop
// at the int64 range instead of wrapping. A walk-in cliente_ref that takes
// purchases at the contract's largest valor and margen (1,000,000,000 MXN)
// reaches it after about 92 million events, a day's work for a client at
// its rate limit; wrapped, a huge spender read as one with a negative
// spend (in segments, the vector, the prior and the export). The state is
// set here as those events leave it.
func TestFeatureSumsSaturate(t *testing.T) {
	const top = 100_000_000_000 // cents: the contract's largest valor and margen
	buy := func(i int, margen int64) *Event {
		return &Event{ID: fmt.Sprint("e", i), ClienteRef: "walkin-01", TS: t0.Add(-time.Hour), Tipo: CompraCat, Clave: "abarrotes",
			ValorCents: top, TicketID: "t1", MargenCents: margen}
	}
	for _, sign := range []int64{1, -1} {
		t.Run(fmt.Sprint("margin sign ", sign), func(t *testing.T) {
			var f Features
			f.Apply(buy(0, sign*top))
			// The state after ~92 million such events: every sum close to its bound.
			near := int64(math.MaxInt64 - top/2)
			f.spendTotal, f.days[0].spend, f.days[0].margin, f.tickets[0].valor = near, near, sign*near, near
			f.cats[0].spend[0] = near
			for i := 1; i <= 3; i++ {
				f.Apply(buy(i, sign*top))
			}
			got := map[string]float64{}
			for _, name := range []string{"gasto_total_mxn", "gasto_30d_mxn", "gasto_365d_mxn", "margen_30d_mxn", "margen_365d_mxn", "cuota_categoria_top"} {
				got[name], _ = f.Get(name, t0)
			}
			mx := float64(math.MaxInt64) / 100
			want := map[string]float64{"gasto_total_mxn": mx, "gasto_30d_mxn": mx, "gasto_365d_mxn": mx,
				"margen_30d_mxn": float64(sign) * mx, "margen_365d_mxn": float64(sign) * mx, "cuota_categoria_top": 1}
			if sign < 0 {
				want["margen_30d_mxn"], want["margen_365d_mxn"] = float64(math.MinInt64)/100, float64(math.MinInt64)/100
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("features (-want +got):\n%s", diff)
			}
			g, ok := DecodeFeatures(f.AppendEncode(nil))
			if !ok || !cmp.Equal(f.Export(t0), g.Export(t0)) {
				t.Errorf("saturated features do not round-trip: %v", ok)
			}
		})
	}
}

// TestRewardWindowSumsSaturate: a reward window's margin and discount
// sums stop at the int64 range too, so that a huge window is not learned
// as a loss.
func TestRewardWindowSumsSaturate(t *testing.T) {
	var a windowAcc
	for i := range 3 {
		a.add(eventSummary{Tipo: CompraCat, Cents: math.MaxInt64 / 2, Ticket: uint64(i), Full: true}.encode())
		a.add(eventSummary{Tipo: CuponRedimido, Cents: math.MaxInt64 / 2, Full: true}.encode())
	}
	got := a.sums()
	if got.MarginCents != math.MaxInt64 || got.DiscountCents != math.MaxInt64 {
		t.Errorf("window sums %d, %d; want both %d", got.MarginCents, got.DiscountCents, int64(math.MaxInt64))
	}
}

// TestCouponDayCountsSaturate: a day's counts of CUPON_RECIBIDO,
// CUPON_REDIMIDO and CUPON_CADUCADO events (int32) stop at their bound
// instead of wrapping. One cliente_ref's 2,147,483,648th coupon event
// dated the same day (about a day and a half of one client at the events
// rate limit with no quota set) wrapped the count negative: in memory the
// customer read as having received about -2 billion coupons (their
// redemption rate, the vector, the prior, the export), and the stored
// features no longer decoded, so the customer's whole history went to
// quarantine.
func TestCouponDayCountsSaturate(t *testing.T) {
	const top = math.MaxInt32
	for _, tc := range []struct {
		tipo    EventType
		feature string
		set     func(d *featDay)
	}{
		{CuponRecibido, "cupones_recibidos_365d", func(d *featDay) { d.recv = top - 1 }},
		{CuponRedimido, "cupones_redimidos_365d", func(d *featDay) { d.redeem = top - 1 }},
		{CuponCaducado, "cupones_caducados_365d", func(d *featDay) { d.expired = top - 1 }},
	} {
		t.Run(string(tc.tipo), func(t *testing.T) {
			ev := func(i int) *Event {
				return &Event{ID: fmt.Sprint("e", i), ClienteRef: "walkin-01", TS: t0.Add(-time.Hour), Tipo: tc.tipo, Clave: "TA",
					CuponEmitidoID: fmt.Sprint("c", i)}
			}
			var f Features
			f.Apply(ev(0))
			tc.set(&f.days[len(f.days)-1]) // the state after that many events of the day
			for i := 1; i <= 3; i++ {
				f.Apply(ev(i))
			}
			got, _ := f.Get(tc.feature, t0)
			g, ok := DecodeFeatures(f.AppendEncode(nil))
			var back float64
			if ok {
				back, _ = g.Get(tc.feature, t0)
			}
			if diff := cmp.Diff([]any{float64(top), true, float64(top)}, []any{got, ok, back}); diff != "" {
				t.Errorf("%s, decodes, decoded (-want +got):\n%s", tc.feature, diff)
			}
		})
	}
}

// TestSaturatedTicketInVector: the policy vector's ticket_promedio of a
// customer whose spend reached the top of the int64 range on one ticket
// (ticket lines of one ticket_id add up) is the vector's top, +1.5. The
// average ticket in cents was converted back from a float to int64, and
// float64(MaxInt64) is 2^63, out of range: the conversion gave the int64
// minimum, and the biggest ticket read as the most negative, -1.5.
func TestSaturatedTicketInVector(t *testing.T) {
	var f Features
	f.Apply(&Event{ID: "e0", ClienteRef: "walkin-01", TS: t0.Add(-time.Hour), Tipo: CompraCat, Clave: "abarrotes",
		ValorCents: 100_000_000_000, TicketID: "t1", MargenCents: 1})
	f.spendTotal = math.MaxInt64 // ~92 million lines of 1,000,000,000 MXN on ticket t1
	got := f.Vector(t0, nil)[vecTicket]
	if got != 1.5 {
		t.Errorf("ticket_promedio in the vector = %v, want 1.5", got)
	}
}
