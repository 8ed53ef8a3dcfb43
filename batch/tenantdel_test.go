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

// TestStoppable: stop cancels the work's context and returns nil only once
// the work has ended; with ctx done first it returns ctx's error, the
// work's context cancelled all the same.
func TestStoppable(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		ends    bool // the work returns once its context is cancelled
		wantErr error
	}{
		{"the work ends", context.Background(), true, nil},
		{"ctx done first", expired, false, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, wctx := newStoppable(context.Background())
			returned := make(chan struct{})
			go func() {
				<-wctx.Done()
				if tc.ends {
					close(returned)
					s.ended()
				}
			}()
			stopped := make(chan error, 1)
			go func() { stopped <- s.stop(tc.ctx) }()
			var err error
			select {
			case err = <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("stop did not return")
			}
			if err != tc.wantErr {
				t.Fatalf("stop: %v; want %v", err, tc.wantErr)
			}
			select {
			case <-wctx.Done():
			default:
				t.Error("stop returned with the work's context not cancelled")
			}
			if tc.ends {
				select {
				case <-returned:
				default:
					t.Error("stop returned before the work ended")
				}
			}
		})
	}
}
