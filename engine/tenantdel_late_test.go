package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
)

// TestDecisionHeldPastTenantSweepKeepsNothing: a decision that passed its
// tenant's checks before the tenant's deletion was marked (its request
// authenticated before) and is held past the grace, until after the
// sweep and the final step, commits nothing of the deleted tenant: the
// store refuses a write into the span of a tenant erased. Without that, its
// decision records stayed in the store for good after the deletion was
// done (and in the span of the id created again).
func TestDecisionHeldPastTenantSweepKeepsNothing(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	if _, err := e.Decide("acme", Request{ClienteRef: "before-mark", Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	now := e.now
	e.now = func() time.Time {
		// The decision's second reading of the clock is its tenant's
		// (tenantNow), after its state and tenant record are taken.
		if calls.Add(1) == 2 {
			close(held)
			<-release
		}
		return now()
	}
	errc := make(chan error, 1)
	go func() {
		_, err := e.Decide("acme", Request{ClienteRef: "held-past-sweep", Canal: "push"})
		errc <- err
	}()
	<-held
	if _, err := db.MarkTenantDeleting("acme", "test", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", t0); err != nil {
		t.Fatal(err)
	}
	e.Records().ForgetTenant("acme")
	if _, err := db.CompleteTenantDeletion(context.Background(), "acme", t0); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-errc; !errors.Is(err, store.ErrTenantErased) {
		t.Errorf("the decision held past the deletion: %v, want store.ErrTenantErased (answered 401)", err)
	}
	if n, err := db.Count(store.TenantSpan("acme")); err != nil || n != 0 {
		t.Errorf("records of acme after its deletion was done: %d %v, want 0", n, err)
	}
}
