package batch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store/storefs"
)

// TestCancelTenantStopsItsJob: a tenant's deletion cancels its running job,
// which stops at its next line and writes nothing back (no completado, no
// fallido, no result file: the deletion erases the job), and
// RemoveTenantResults removes its results dir.
func TestCancelTenantStopsItsJob(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("borrado", 50)})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan error, 1)
	e.r.OnProgress(1, func(j Job) {
		if j.Procesados != 3 {
			return
		}
		if _, err := e.db.MarkTenantDeleting("acme", "test", jobsStart); err != nil {
			t.Error(err)
		}
		go func() { cancelled <- e.r.CancelTenant(context.Background(), "acme") }()
		e.r.mu.Lock()
		rj := e.r.running
		e.r.mu.Unlock()
		select { // cancelled: the job stops at its next line
		case <-rj.ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("the job's context was not cancelled")
		}
	})
	e.r.RunPending(context.Background())
	if err := <-cancelled; err != nil {
		t.Fatalf("CancelTenant: %v", err)
	}
	var got Job
	if err := e.db.GetJSON(jobKey("acme", j.ID), &got); err != nil {
		t.Fatal(err)
	}
	if got.Estado == api.EstadoCompletado || got.Estado == api.EstadoFallido || got.Procesados == 50 {
		t.Errorf("the cancelled job: %s, %d lines; want it stopped, nothing written back", got.Estado, got.Procesados)
	}
	if err := e.r.RemoveTenantResults("acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "acme")); !os.IsNotExist(err) {
		t.Errorf("results dir of acme: %v; want it gone", err)
	}
}
