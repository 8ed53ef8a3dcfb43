package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

// TestTenantDeleteStopsItsWebhookDelivery: a tenant deleted while one of
// its webhook deliveries is in flight (a receiver slow to answer) leaves
// no /metrics series naming it (serve --metrics-tenant-label), as the
// README says of a deleted tenant. The deletion stopped the tenant's batch
// job but not its delivery pass: the attempt ended after the deletion had
// dropped the tenant's series and put
// coupond_webhook_deliveries_total{tenant="acme"} back, until a restart.
func TestTenantDeleteStopsItsWebhookDelivery(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC))
	e, err := openEnv(context.Background(), t.TempDir(), zerolog.Nop(),
		serviceOptions{now: clk.Now, metricsTenantLabel: true, webhookAllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if err := e.db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: clk.Now(), Sandbox: true, ClockNow: clk.Now(),
		Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server sees the client go once the body is read
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rc.Close()
	hooks := e.svc.webhooks
	if _, err := hooks.Register("acme", rc.URL, []string{batch.EventLoteCompletado}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	done := clk.Now()
	if err := hooks.Enqueue(&batch.Job{ID: "lote_a", Tenant: "acme", CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
		t.Fatal(err)
	}
	passed := make(chan int, 1)
	go func() { passed <- hooks.DeliverDue(context.Background()) }()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.svc.privacy.DeleteTenant(ctx, "acme", "uid 1", deletionHooks(e.svc, false)); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-passed
	api := httptest.NewServer(e.svc.api)
	defer api.Close()
	resp, err := http.Get(api.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for line := range strings.Lines(string(body)) {
		if strings.Contains(line, `tenant="acme"`) {
			t.Errorf("/metrics after acme's deletion: %s", strings.TrimSpace(line))
		}
	}
}
