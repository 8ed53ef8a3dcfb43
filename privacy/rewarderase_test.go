package privacy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestCustomerErasedMidWindowTeachesNothing: a customer deleted while a
// decision's reward window is open leaves no reward behind: the decision
// is gone, the learner folds nothing for it when its window closes, and
// another customer's reward is untouched. Each customer made a purchase of
// 25 MXN margin on day 1 and the coupon decided was confirmed sent.
func TestCustomerErasedMidWindowTeachesNothing(t *testing.T) {
	e, s, db, _ := newTest(t, 1)
	ids := map[string]string{}
	for i := 0; len(ids) < 2; i++ {
		if i == 2000 {
			t.Fatal("fewer than two sends in 2000 customers")
		}
		ref := fmt.Sprintf("erase-w-%05d", i)
		d, err := e.Decide("acme", engine.Request{ClienteRef: ref, Canal: "push"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion == 0 {
			continue
		}
		if _, err := e.Confirm("acme", d.DecisionID, engine.Confirmation{Ejecutada: true}); err != nil {
			t.Fatal(err)
		}
		ev := engine.Event{ID: "p-" + ref, ClienteRef: ref, TS: t0.Add(24 * time.Hour), Tipo: engine.CompraCat, Clave: "a",
			ValorCents: 10000, TicketID: "t-" + ref, MargenCents: 2500}
		if len(ids) == 0 {
			ids["erased"] = d.DecisionID
		} else {
			ids["kept"] = d.DecisionID
		}
		if res, err := e.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
			t.Fatalf("ingest: %+v %v", res, err)
		}
	}
	advanceTenant(t, db, 3*24*time.Hour)
	r, err := e.DecisionByID("acme", ids["erased"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.eraseCustomer("acme", r.ClienteRef, s.CustomerHash("acme", r.ClienteRef), nil); err != nil {
		t.Fatal(err)
	}
	advanceTenant(t, db, 40*24*time.Hour)
	for {
		st, err := e.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Worked() {
			break
		}
	}
	if _, err := e.DecisionByID("acme", ids["erased"]); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("erased customer's decision: %v, want ErrNotFound", err)
	}
	kept, err := e.DecisionByID("acme", ids["kept"])
	if err != nil {
		t.Fatal(err)
	}
	want := int64(2500 - 50)
	if diff := cmp.Diff(&want, kept.Recompensa); diff != "" {
		t.Errorf("other customer's reward (-want +got):\n%s", diff)
	}
	st, err := e.Learner.Status("acme")
	if err != nil {
		t.Fatal(err)
	}
	if st.RewardsLearned != 1 {
		t.Errorf("rewards learned %d, want 1 (the erased customer's none)", st.RewardsLearned)
	}
}

// advanceTenant moves the sandbox clock of "acme" by d.
func advanceTenant(tb testing.TB, db *store.DB, d time.Duration) {
	tb.Helper()
	if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil }); err != nil {
		tb.Fatal(err)
	}
}
