package engine

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestWindowOutcome: a window's margin, redemption discounts and distinct
// tickets, and a version 1 summary (written before tickets and discounts
// were kept) making the window incomplete.
func TestWindowOutcome(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	ref := "ana-00000001"
	ev := func(i int, tipo EventType, ticket string, margin, valor int64) IngestEvent {
		id := fmt.Sprintf("e%d", i)
		return IngestEvent{Index: i, Event: Event{ID: id, ClienteRef: ref, TS: t0.Add(time.Duration(i+1) * time.Hour), Tipo: tipo,
			Clave: "x", TicketID: ticket, MargenCents: margin, ValorCents: valor, CuponEmitidoID: "c" + id}, Canonical: []byte(id)}
	}
	evs := []IngestEvent{
		ev(0, CompraCat, "t1", 1000, 5000),
		ev(1, CompraCat, "t1", 300, 2000), // the same ticket, another category
		ev(2, CompraCat, "t2", -200, 1000),
		ev(3, CuponRedimido, "t2", 0, 150),
	}
	evs[3].Event.Clave = "T1"
	if res, err := e.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != 4 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	got, err := e.windowOutcome("acme", ref, t0, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := windowSums{MarginCents: 1100, DiscountCents: 150, Tickets: 2, Full: true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("window (-want +got):\n%s", d)
	}
	// A version 1 summary: its margin counts, the window is not complete.
	v1 := make([]byte, 11)
	v1[0], v1[1] = 1, CompraCat.index()
	v1[10] = 100
	b := db.NewBatch()
	b.Set(store.CustomerEventKey("acme", ref, t0.Add(10*time.Hour), "old"), v1)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err = e.windowOutcome("acme", ref, t0, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want = windowSums{MarginCents: 1200, DiscountCents: 150, Tickets: 3, Full: false}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("with a version 1 summary (-want +got):\n%s", d)
	}
}

// FuzzEventSummary: every summary decodes to what was encoded, and no
// input panics the decoder.
func FuzzEventSummary(f *testing.F) {
	f.Add(eventSummary{Tipo: CompraCat, Cents: 1234, Ticket: 99, Full: true}.encode())
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 210})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := decodeEventSummary(b)
		if !ok || !s.Full {
			return
		}
		back, ok := decodeEventSummary(s.encode())
		if !ok {
			t.Fatalf("%x: re-encoding does not decode", b)
		}
		if d := cmp.Diff(s, back); d != "" {
			t.Fatalf("%x: (-first +again):\n%s", b, d)
		}
	})
}

// TestTicketHistory: the margin per ticket and the tickets read back off
// a customer's policy vector.
func TestTicketHistory(t *testing.T) {
	var f Features
	for i, m := range []int64{3000, 1000, 2000} { // three tickets of 100 MXN
		f.Apply(&Event{ID: fmt.Sprintf("e%d", i), Tipo: CompraCat, Clave: "x", TS: t0.Add(time.Duration(i) * 24 * time.Hour),
			TicketID: fmt.Sprintf("t%d", i), ValorCents: 10000, MargenCents: m})
	}
	margin, tickets := ticketHistory(f.Vector(t0.Add(5*24*time.Hour), nil))
	approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(a)) })
	if d := cmp.Diff([]float64{2000, 3}, []float64{margin, tickets}, approx); d != "" {
		t.Errorf("ticketHistory (-want +got):\n%s", d)
	}
	if m, n := ticketHistory(new(Features).Vector(t0, nil)); m != 0 || n != 0 {
		t.Errorf("a customer without purchases: %v, %v; want 0, 0", m, n)
	}
	names := map[int]string{vecSinCompras: "sin_compras", vecFreq365: "frecuencia_365d", vecMarginRate: "tasa_margen_365d", vecTicket: "ticket_promedio"}
	for i, want := range names {
		if vectorNames[i] != want {
			t.Errorf("vector position %d is %q, ticketHistory reads it as %q", i, vectorNames[i], want)
		}
	}
}

// TestLearnerTalliesTickets: the learner reads each window's tickets and
// gross margin into the model (what Model.Target shrinks a customer's
// margin per ticket towards) once a window's discounts are known: the
// tenant has reported a redemption, or its catalog gives no discount (an
// e-mail without a coupon). Before, nothing is tallied and the model
// learns from the reward itself.
func TestLearnerTalliesTickets(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		redeemed, noDiscount bool
		wantOK               bool
	}{
		{"discount coupons, no redemption reported", false, false, false},
		{"discount coupons, a redemption reported", true, false, true},
		{"a catalog without discounts", false, true, true},
	} {
		e, db := newTestEngine(t, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
		if tc.noDiscount {
			acts := []Action{{ID: 1, Nombre: "email_a", TipoCupon: "EA", CostoEnvioCents: 10, Activa: true},
				{ID: 2, Nombre: "email_b", TipoCupon: "EB", CostoEnvioCents: 10, Activa: true}}
			if _, err := e.Campaigns.ReplaceCatalog("acme", acts, t0); err != nil {
				t.Fatal(err)
			}
		}
		if tc.redeemed {
			ev := IngestEvent{Event: Event{ID: "r0", ClienteRef: "otra-0000001", TS: t0.Add(-time.Hour), Tipo: CuponRedimido, Clave: "T1",
				ValorCents: 100, CuponEmitidoID: "c0", TicketID: "tr0"}, Canonical: []byte("r0")}
			if _, err := e.Ingester.Ingest("acme", []IngestEvent{ev}); err != nil {
				t.Fatal(err)
			}
		}
		const n = 200
		rewardBacklog(t, e, db, n) // one ticket each, margin 1000 + i cents
		if _, err := e.Learner.Learn("acme"); err != nil {
			t.Fatal(err)
		}
		pm, _, err := e.loadModel("acme")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := pm.m.TicketMean()
		want := 0.0
		if tc.wantOK {
			want = 1000 + float64(n-1)/2
		}
		if ok != tc.wantOK || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: TicketMean = %v, %v; want %v, %v", tc.name, got, ok, want, tc.wantOK)
		}
	}
}

// TestTicketSet: distinct tickets are counted alike below and above the
// list's size.
func TestTicketSet(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 500} {
		var s ticketSet
		for i := 0; i < n; i++ {
			s.add(uint64(i))
			s.add(uint64(i)) // a second category of the same ticket
		}
		if s.n() != n {
			t.Errorf("%d distinct tickets, each added twice: n() = %d", n, s.n())
		}
	}
}

// windowOutcome reads one customer's window [from, to) as the learner does
// (windowSpan, windowAcc), one Scan for the one window.
func (e *core) windowOutcome(tenant, clienteRef string, from, to time.Time) (windowSums, error) {
	span := windowSpan(tenant, clienteRef, from, to)
	var acc windowAcc
	err := e.db.Scan(span.Lower, span.Upper, func(_, v []byte) error {
		acc.add(v)
		return nil
	})
	return acc.sums(), err
}
