package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

// TestLearnRoundTakesTurns: a learner round gives every tenant a pass in
// turn, so a quiet tenant whose rewards came due waits for one pass of a
// busy tenant's backlog, not for all of it. The round used to drain each
// tenant before the next: "beta" (after "acme" in the list) had its first
// pass only after acme's three.
func TestLearnRoundTakesTurns(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	storetest.Sandbox(t, db, "beta", t0, store.DefaultSettings())
	if _, err := e.Campaigns.ReplaceCatalog("beta", []Action{{ID: 1, Nombre: "c", TipoCupon: "T1", CostoEnvioCents: 50, DescuentoMaxCents: 1000, Activa: true}}, t0); err != nil {
		t.Fatal(err)
	}
	decide := func(tenant string, n int) {
		for i := range n {
			if _, err := e.Decide(tenant, Request{ClienteRef: fmt.Sprintf("cust-%05d", i), Canal: "push", CapExempt: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	decide("acme", 2*learnBatchOnline+1) // three passes while decisions are online
	decide("beta", 3)
	for _, id := range []string{"acme", "beta"} {
		if _, err := db.UpdateTenant(id, func(tn *store.Tenant) error { tn.ClockNow = tn.ClockNow.Add(31 * 24 * time.Hour); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var passes []string
	e.Learner.ObserveLearn(func(tenant string, st LearnStats) {
		if st.Worked() {
			passes = append(passes, tenant)
		}
	})
	e.Learner.learnRound(t.Context(), map[string]bool{})
	want := []string{"acme", "beta", "acme", "acme"}
	if diff := cmp.Diff(want, passes); diff != "" {
		t.Errorf("passes that did work, in order (-want +got):\n%s", diff)
	}
}
