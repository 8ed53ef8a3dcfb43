package batch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// hangingHooks is a webhook service for tenant acme whose receiver holds
// every request until the request's context ends while hold is set (it is
// at first; else it answers 204), with n messages queued and due now.
// arrived gets a value as each request arrives; reported counts the
// attempts reported to the observer.
func hangingHooks(t *testing.T, n int) (w *Webhooks, hold *atomic.Bool, arrived chan string, reported *atomic.Int32) {
	t.Helper()
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	arrived = make(chan string, n)
	hold = new(atomic.Bool)
	hold.Store(true)
	rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server sees the client go once the body is read
		arrived <- r.Header.Get("webhook-id")
		if hold.Load() {
			<-r.Context().Done()
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	w = NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true, Timeout: time.Minute}), zerolog.Nop(), e.clock.Now, 1)
	reported = new(atomic.Int32)
	w.Observe(Observer{WebhookAttempt: func(string, string) { reported.Add(1) }})
	if _, err := w.Register("acme", rc.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
		t.Fatal(err)
	}
	done := jobsStart
	for i := range n {
		j := &Job{ID: "lote_" + string(rune('a'+i)), Tenant: "acme", CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}
		if err := w.Enqueue(j); err != nil {
			t.Fatal(err)
		}
	}
	return w, hold, arrived, reported
}

// TestWebhookPassStopsWithItsContext: a delivery pass whose context ends
// (serve stopping) while an attempt is in flight makes no attempt of the
// messages it had still to go: they stay due as they were, and go at the
// next pass. The pass went on through its list with the context done,
// recording an attempt of each (moved back by the backoff, an attempt of
// the twelve used; the last one given up) that could not be sent.
func TestWebhookPassStopsWithItsContext(t *testing.T) {
	w, hold, arrived, _ := hangingHooks(t, 3)
	ctx, cancel := context.WithCancel(t.Context())
	made := make(chan int, 2)
	go func() { made <- w.DeliverDue(ctx) }()
	first := <-arrived
	cancel()
	hold.Store(false)
	if diff := cmp.Diff(1, <-made); diff != "" {
		t.Errorf("attempts of the pass stopped during its first (-want +got):\n%s", diff)
	}
	// The two not attempted are due now still; the interrupted one after
	// its backoff.
	go func() { made <- w.DeliverDue(t.Context()) }()
	var next []string
	for range 2 {
		select {
		case id := <-arrived:
			next = append(next, id)
		case <-time.After(5 * time.Second):
			t.Fatalf("the next pass sent %q; want the two messages the stopped pass left", next)
		}
	}
	if n := <-made; n != 2 {
		t.Errorf("the next pass made %d attempts, want 2", n)
	}
	if diff := cmp.Diff([]string{"msg_lote_b", "msg_lote_c"}, next); diff != "" || first != "msg_lote_a" {
		t.Errorf("first pass sent %q; the next one (-want +got):\n%s", first, diff)
	}
}

// TestWebhookCancelTenant: CancelTenant (a tenant's deletion) stops the
// tenant's delivery pass and returns once it has ended, so no attempt of
// it is made or reported after: the deletion drops the tenant's /metrics
// series next (server.ForgetTenant), and an attempt ending after that put
// coupond_webhook_deliveries_total{tenant=…} back for a deleted tenant.
func TestWebhookCancelTenant(t *testing.T) {
	w, _, arrived, reported := hangingHooks(t, 2)
	made := make(chan int, 1)
	go func() { made <- w.DeliverDue(t.Context()) }()
	<-arrived
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.CancelTenant(ctx, "acme"); err != nil {
		t.Fatalf("CancelTenant: %v", err)
	}
	after := reported.Load()
	select {
	case n := <-made:
		if n != 1 {
			t.Errorf("the cancelled pass made %d attempts, want 1 (the one in flight)", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the tenant's pass still runs 5 s after CancelTenant returned")
	}
	if got := reported.Load(); got != after || got != 1 {
		t.Errorf("attempts reported: %d when CancelTenant returned, %d after; want 1 and no more", after, got)
	}
	if err := w.CancelTenant(ctx, "acme"); err != nil {
		t.Errorf("CancelTenant with no pass running: %v", err)
	}
}

// TestWebhookCancelTenantWaitingForASlot: CancelTenant of a tenant whose
// pass waits for one of the webhookParallel slots (every one held by a
// tenant whose receiver hangs) returns at once. The waiting pass held its
// tenant's claim and heeded only serve's stop: the tenant's deletion waited
// for another tenant's attempts to end, up to the attempt timeout each.
func TestWebhookCancelTenantWaitingForASlot(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	arrived := make(chan struct{}, webhookParallel+1)
	rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(rc.Close)
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true, Timeout: time.Minute}), zerolog.Nop(), e.clock.Now, 1)
	done := jobsStart
	tenants := []string{"acme"} // and webhookParallel-1 more, whose passes take every slot
	for i := range webhookParallel - 1 {
		tenants = append(tenants, fmt.Sprintf("t%02d", i))
	}
	tenants = append(tenants, "zz") // listed last: its pass waits for a slot
	for _, id := range tenants {
		if id != "acme" {
			if err := e.db.CreateTenant(&store.Tenant{ID: id, CreatedAt: jobsStart, Sandbox: true, ClockNow: jobsStart, Settings: store.DefaultSettings()}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Register(id, rc.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
			t.Fatal(err)
		}
		if err := w.Enqueue(&Job{ID: "lote_" + id, Tenant: id, CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(t.Context())
	passed := make(chan int, 1)
	go func() { passed <- w.DeliverDue(ctx) }()
	defer func() { stop(); <-passed }()
	for range webhookParallel {
		<-arrived
	}
	for claimed := false; !claimed; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		claimed = w.inflight["zz"] != nil
		w.mu.Unlock()
	}
	cctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := w.CancelTenant(cctx, "zz"); err != nil {
		t.Errorf("CancelTenant of a pass waiting for a slot: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestPausedTenantWebhooksWait: a paused tenant's queued deliveries wait,
// with no attempt made or spent, and go at the first pass after the
// resume, as its batch jobs do. They went on being delivered while the
// rest of the tenant answered 503.
func TestPausedTenantWebhooksWait(t *testing.T) {
	w, hold, arrived, _ := hangingHooks(t, 2)
	hold.Store(false)
	pause := func(p bool) {
		t.Helper()
		if _, err := w.db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Paused = p; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	pause(true)
	var got []string
	got = append(got, fmt.Sprintf("paused: %d attempts, %d arrived", w.DeliverDue(t.Context()), len(arrived)))
	pause(false)
	got = append(got, fmt.Sprintf("resumed: %d attempts, %d arrived", w.DeliverDue(t.Context()), len(arrived)))
	want := []string{"paused: 0 attempts, 0 arrived", "resumed: 2 attempts, 2 arrived"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries of a paused, then resumed, tenant (-want +got):\n%s", diff)
	}
}
