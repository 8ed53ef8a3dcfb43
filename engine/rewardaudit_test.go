package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/google/go-cmp/cmp"
)

// The reward audit: a decision's stored reward, against the figure
// contract §5 gives, for the upload patterns of a real CRM or POS. The
// tenant has a 7-day reward window, a 2-day grace and the default opt-out
// penalty (50 MXN); every coupon costs 0.50 MXN to send (newTestEngine).
// The decision is made at t0 (day 0); the learner runs after every step,
// as the server's does, and once more on day 40.

const auditDay = 24 * time.Hour

// auditStep is one thing that happens at day offset at of the tenant
// clock: an upload of events, or fn.
type auditStep struct {
	at  time.Duration
	evs []Event
	fn  func(t *testing.T, a *auditRun)
}

// auditRun is one case's engine and the decision under audit.
type auditRun struct {
	e   *Engine
	db  *store.DB
	ref string
	d   *Decision
}

// auditKind is how the decision under audit is made (auditDecide).
type auditKind int

const (
	kindOnline   auditKind = iota // POST /v1/decisiones, campaign c1, a coupon sent
	kindBatch                     // a line of a batch job for c1, a coupon sent
	kindControl                   // a control-group decision (accion 0)
	kindVoided                    // a batch decision of a job that failed (VoidJob)
	kindReplaced                  // an online decision a fallback record replaced
)

func auditCompra(id string, ts time.Duration, ticket string, margin int64) Event {
	return Event{ID: id, TS: t0.Add(ts), Tipo: CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: ticket, MargenCents: margin}
}

func auditBaja(id string, ts time.Duration, clave, canal string) Event {
	return Event{ID: id, TS: t0.Add(ts), Tipo: Baja, Clave: clave, Canal: canal}
}

func TestRewardAudit(t *testing.T) {
	one, zero := 1, 0
	ejecutada := &Confirmation{Ejecutada: true}
	tests := []struct {
		name     string
		settings func(*store.Settings)
		kind     auditKind
		confirm  *Confirmation // nil: never confirmed
		steps    []auditStep
		// want: the window's margin, whether the sending cost and the
		// opt-out penalty are taken off, whether the reward is learned.
		margin        int64
		cost, penalty bool
		learned       bool
	}{
		{name: "purchase at the decision's instant", confirm: ejecutada,
			steps:  []auditStep{{at: 0, evs: []Event{auditCompra("p1", 0, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "purchase a second before the decision", confirm: ejecutada,
			steps:  []auditStep{{at: 0, evs: []Event{auditCompra("p1", -time.Second, "t1", 2500)}}},
			margin: 0, cost: true, learned: true},
		{name: "purchase a nanosecond before the window's end", confirm: ejecutada,
			steps:  []auditStep{{at: 7 * auditDay, evs: []Event{auditCompra("p1", 7*auditDay-1, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "purchase at the window's end", confirm: ejecutada,
			steps:  []auditStep{{at: 7 * auditDay, evs: []Event{auditCompra("p1", 7*auditDay, "t1", 2500)}}},
			margin: 0, cost: true, learned: true},
		{name: "nightly upload during the grace", confirm: ejecutada,
			steps:  []auditStep{{at: 8 * auditDay, evs: []Event{auditCompra("p1", 6*auditDay+20*time.Hour, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "upload a second before the grace ends", confirm: ejecutada,
			steps:  []auditStep{{at: 9*auditDay - time.Second, evs: []Event{auditCompra("p1", 6*auditDay, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "upload after the grace", confirm: ejecutada,
			steps: []auditStep{
				{at: 5 * auditDay, evs: []Event{auditCompra("p1", 5*auditDay, "t1", 1000)}},
				{at: 9*auditDay + time.Hour, evs: []Event{auditCompra("p2", 6*auditDay, "t2", 2500)}}},
			margin: 1000, cost: true, learned: true},
		{name: "one ticket in two categories, a second ticket, a return, a zero margin", confirm: ejecutada,
			steps: []auditStep{{at: 3 * auditDay, evs: []Event{
				auditCompra("p1", auditDay, "t1", 2500),
				{ID: "p2", TS: t0.Add(auditDay), Tipo: CompraCat, Clave: "bebidas", ValorCents: 4000, TicketID: "t1", MargenCents: 1000},
				auditCompra("p3", 2*auditDay, "t2", -800),
				auditCompra("p4", 2*auditDay, "t3", 0)}}},
			margin: 2700, cost: true, learned: true},
		{name: "the same upload sent twice", confirm: ejecutada,
			steps: []auditStep{
				{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}},
				{at: 2 * auditDay, fn: func(t *testing.T, a *auditRun) {
					ev := auditCompra("p1", auditDay, "t1", 2500)
					ev.ClienteRef = a.ref
					res, err := a.e.Ingester.Ingest("acme", []IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}})
					if err != nil || res.Duplicados != 1 {
						t.Fatalf("resend: %+v %v, want one duplicate", res, err)
					}
				}}},
			margin: 2500, cost: true, learned: true},
		{name: "BAJA comunicaciones in the window", confirm: ejecutada,
			steps:   []auditStep{{at: 2 * auditDay, evs: []Event{auditBaja("b1", 2*auditDay, BajaComunicaciones, "")}}},
			penalty: true, cost: true, learned: true},
		{name: "BAJA comunicaciones of one channel", confirm: ejecutada,
			steps:   []auditStep{{at: 2 * auditDay, evs: []Event{auditBaja("b1", 2*auditDay, BajaComunicaciones, "sms")}}},
			penalty: true, cost: true, learned: true},
		{name: "BAJA comunicaciones uploaded during the grace", confirm: ejecutada,
			steps:   []auditStep{{at: 8 * auditDay, evs: []Event{auditBaja("b1", 6*auditDay, BajaComunicaciones, "")}}},
			penalty: true, cost: true, learned: true},
		{name: "BAJA comunicaciones at the window's end", confirm: ejecutada,
			steps: []auditStep{{at: 7 * auditDay, evs: []Event{auditBaja("b1", 7*auditDay, BajaComunicaciones, "")}}},
			cost:  true, learned: true},
		{name: "BAJA comunicaciones before the decision", confirm: ejecutada,
			steps: []auditStep{{at: 0, evs: []Event{auditBaja("b1", -time.Hour, BajaComunicaciones, "")}}},
			cost:  true, learned: true},
		{name: "BAJA cuenta", confirm: ejecutada,
			steps: []auditStep{{at: 2 * auditDay, evs: []Event{auditBaja("b1", 2*auditDay, BajaCuenta, "")}}},
			cost:  true, learned: true},
		{name: "ALTA after BAJA, two BAJAs", confirm: ejecutada,
			steps: []auditStep{{at: 4 * auditDay, evs: []Event{
				auditBaja("b1", auditDay, BajaComunicaciones, ""),
				{ID: "a1", TS: t0.Add(2 * auditDay), Tipo: Alta, Clave: "web"},
				auditBaja("b2", 3*auditDay, BajaComunicaciones, "email"),
				auditCompra("p1", 3*auditDay, "t1", 900)}}},
			margin: 900, penalty: true, cost: true, learned: true},
		{name: "coupons received, redeemed with and without decision_id, another's, expired", confirm: ejecutada,
			steps: []auditStep{{at: 3 * auditDay, fn: func(t *testing.T, a *auditRun) {
				ref := a.ref
				evs := []Event{
					{ID: "r1", ClienteRef: ref, TS: t0.Add(time.Hour), Tipo: CuponRecibido, Clave: "T1", DecisionID: a.d.DecisionID, CuponEmitidoID: "cup1", Caducidad: t0.Add(30 * auditDay)},
					{ID: "x1", ClienteRef: ref, TS: t0.Add(auditDay), Tipo: CuponRedimido, Clave: "T1", ValorCents: 700, DecisionID: a.d.DecisionID, CuponEmitidoID: "cup1", TicketID: "t1"},
					{ID: "x2", ClienteRef: ref, TS: t0.Add(auditDay), Tipo: CuponRedimido, Clave: "T1", ValorCents: 300, CuponEmitidoID: "cup-otra", TicketID: "t1"},
					{ID: "c1", ClienteRef: ref, TS: t0.Add(2 * auditDay), Tipo: CuponCaducado, Clave: "T2", CuponEmitidoID: "cup-otra2"},
					{ID: "p1", ClienteRef: ref, TS: t0.Add(auditDay), Tipo: CompraCat, Clave: "abarrotes", ValorCents: 9000, TicketID: "t1", MargenCents: 1800},
				}
				in := make([]IngestEvent, len(evs))
				for i, ev := range evs {
					in[i] = IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)}
				}
				ingestAll(t, a.e, in...)
			}}},
			margin: 1800, cost: true, learned: true},
		{name: "rechazada: nothing sent", confirm: &Confirmation{MotivoRechazo: "sin saldo"},
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500, learned: true},
		{name: "modificada to nothing", confirm: &Confirmation{Ejecutada: true, AccionReal: &zero},
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500},
		{name: "shadow mode, modificada to another coupon", settings: func(s *store.Settings) { s.Shadow = true },
			confirm: &Confirmation{Ejecutada: true, AccionReal: &one}, // the decided coupon is 2 (auditDecide)
			steps:   []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin:  2500, cost: true},
		{name: "never confirmed",
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500, cost: true},
		{name: "control group", kind: kindControl, settings: func(s *store.Settings) { s.ControlShare = 1 }, confirm: ejecutada,
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500},
		{name: "batch decision", kind: kindBatch, confirm: ejecutada,
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "second request answered by the open window", confirm: ejecutada,
			steps: []auditStep{
				{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}},
				{at: 2 * auditDay, fn: func(t *testing.T, a *auditRun) {
					again, err := a.e.Decide("acme", Request{ClienteRef: a.ref, Canal: "push", CampanaID: "c1"})
					if err != nil || again.DecisionID != a.d.DecisionID || again.Accion != 0 {
						t.Fatalf("second request: %+v %v, want the open decision with accion 0", again, err)
					}
				}},
				{at: 3 * auditDay, evs: []Event{auditCompra("p2", 3*auditDay, "t2", 400)}}},
			margin: 2900, cost: true, learned: true},
		{name: "next decision exactly at the window's end", confirm: ejecutada,
			steps: []auditStep{{at: 7 * auditDay, fn: func(t *testing.T, a *auditRun) {
				next, err := a.e.Decide("acme", Request{ClienteRef: a.ref, Canal: "push", CampanaID: "c1"})
				if err != nil || next.DecisionID == a.d.DecisionID {
					t.Fatalf("request 7 days after: %+v %v, want a new decision", next, err)
				}
				ev := auditCompra("p1", 7*auditDay, "t1", 2500) // the next decision's, not this one's
				ev.ClienteRef = a.ref
				ev2 := auditCompra("p2", 7*auditDay-time.Second, "t2", 300)
				ev2.ClienteRef = a.ref
				ingestAll(t, a.e, IngestEvent{Event: ev, Canonical: []byte(ev.ID)}, IngestEvent{Index: 1, Event: ev2, Canonical: []byte(ev2.ID)})
			}}},
			margin: 300, cost: true, learned: true},
		{name: "window shortened mid-way", confirm: ejecutada,
			steps: []auditStep{
				{at: auditDay, fn: setWindow(3*auditDay, 2*auditDay)},
				{at: 5 * auditDay, evs: []Event{auditCompra("p1", 2*auditDay, "t1", 2500), auditCompra("p2", 4*auditDay, "t2", 1000)}}},
			margin: 2500, cost: true, learned: true},
		{name: "window widened mid-way", confirm: ejecutada,
			steps: []auditStep{
				{at: auditDay, fn: setWindow(14*auditDay, 2*auditDay)},
				{at: 12 * auditDay, evs: []Event{auditCompra("p1", 10*auditDay, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "grace widened mid-way", confirm: ejecutada,
			steps: []auditStep{
				{at: auditDay, fn: setWindow(7*auditDay, 5*auditDay)},
				{at: 11 * auditDay, evs: []Event{auditCompra("p1", 6*auditDay, "t1", 2500)}}},
			margin: 2500, cost: true, learned: true},
		{name: "confirmed after a short window's reward was final", settings: func(s *store.Settings) { s.RewardWindow, s.RewardGrace = 2*auditDay, 0 },
			steps: []auditStep{
				{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}},
				{at: 3 * auditDay, fn: func(t *testing.T, a *auditRun) {
					if _, err := a.e.Confirm("acme", a.d.DecisionID, Confirmation{Ejecutada: true}); err != nil {
						t.Fatal(err)
					}
				}}},
			margin: 2500, cost: true, learned: true},
		{name: "rejected after a short window's reward was final", settings: func(s *store.Settings) { s.RewardWindow, s.RewardGrace = 2*auditDay, 0 },
			steps: []auditStep{
				{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}},
				{at: 3 * auditDay, fn: func(t *testing.T, a *auditRun) {
					if _, err := a.e.Confirm("acme", a.d.DecisionID, Confirmation{MotivoRechazo: "no"}); err != nil {
						t.Fatal(err)
					}
				}}},
			margin: 2500, learned: true},
		{name: "control group, regla_actual sent a coupon", kind: kindControl,
			settings: func(s *store.Settings) { s.ControlShare, s.ControlKind = 1, "regla_actual" },
			confirm:  &Confirmation{Ejecutada: true, AccionReal: &one},
			steps:    []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin:   2500, cost: true},
		{name: "batch decision of a job that failed", kind: kindVoided,
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500},
		{name: "decision replaced by a fallback record", kind: kindReplaced,
			steps:  []auditStep{{at: auditDay, evs: []Event{auditCompra("p1", auditDay, "t1", 2500)}}},
			margin: 2500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, func(s *store.Settings) {
				s.RewardWindow, s.RewardGrace = 7*auditDay, 2*auditDay
				if tc.settings != nil {
					tc.settings(s)
				}
			})
			a := &auditRun{e: e, db: db}
			a.ref, a.d = auditDecide(t, e, tc.kind)
			if tc.confirm != nil {
				if _, err := e.Confirm("acme", a.d.DecisionID, *tc.confirm); err != nil {
					t.Fatal(err)
				}
			}
			var now time.Duration
			for _, s := range append(tc.steps, auditStep{at: 40 * auditDay}) {
				advance(t, db, s.at-now)
				now = s.at
				learnAll(t, e)
				for i, ev := range s.evs {
					ev.ClienteRef = a.ref
					ingestAll(t, e, IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)})
				}
				if s.fn != nil {
					s.fn(t, a)
				}
				learnAll(t, e)
			}
			r, err := e.DecisionByID("acme", a.d.DecisionID)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.margin
			if tc.cost {
				want -= 50
			}
			if tc.penalty {
				want -= store.DefaultSettings().OptoutPenaltyCents
			}
			if diff := cmp.Diff(&want, r.Recompensa); diff != "" {
				t.Errorf("reward in cents (-want +got):\n%s", diff)
			}
			if r.Aprendida != tc.learned {
				t.Errorf("learned %v (estado %s), want %v", r.Aprendida, r.Estado, tc.learned)
			}
		})
	}
}

// setWindow is a step in which the operator sets the reward window and
// grace.
func setWindow(window, grace time.Duration) func(*testing.T, *auditRun) {
	return func(t *testing.T, a *auditRun) {
		if _, err := a.db.UpdateTenant("acme", func(tn *store.Tenant) error {
			tn.Settings.RewardWindow, tn.Settings.RewardGrace = window, grace
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// auditDecide makes the decision under audit, of kind k, at the tenant
// clock, for campaign c1: one that sends coupon 2 (but a control-group
// decision, which sends nothing). It returns its customer and decision.
func auditDecide(t *testing.T, e *Engine, k auditKind) (string, *Decision) {
	t.Helper()
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	var bd *BatchDecider
	if k == kindBatch || k == kindVoided {
		var err error
		if bd, err = e.NewBatchDecider("acme", "job1", "c1"); err != nil {
			t.Fatal(err)
		}
		defer bd.Close()
	}
	for i := range 2000 {
		ref, key := fmt.Sprintf("audit-%06d", i), fmt.Sprintf("k-%06d", i)
		var d *Decision
		var err error
		if bd != nil {
			d, err = bd.Decide(ref, false)
		} else {
			d, err = e.Decide("acme", Request{ClienteRef: ref, Canal: "push", CampanaID: "c1",
				Idempotency: Idempotency{Key: key, BodyHash: HashBody([]byte(ref))}})
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion != 2 && k != kindControl {
			continue
		}
		switch k {
		case kindBatch, kindVoided:
			if err := bd.Flush(); err != nil {
				t.Fatal(err)
			}
			if k == kindVoided {
				if _, err := e.VoidJob("acme", "job1"); err != nil {
					t.Fatal(err)
				}
			}
		case kindReplaced:
			if err := e.Fallback("acme", FallbackInput{Accion: 0, Canal: "push", ClienteRef: ref, CampanaID: "c1", Replaces: key}); err != nil {
				t.Fatal(err)
			}
		}
		return ref, d
	}
	t.Fatal("no decision sent coupon 2 in 2000 customers")
	return "", nil
}
