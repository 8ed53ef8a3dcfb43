package batch

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestIdleRunnerReadsNoJobs: the runner looks for work every minute and
// at every job creation, and job records are kept for good; it reads the
// jobs of a tenant that created one since it last looked, and every
// tenant's only when a result may be past its retention. It read every
// tenant's jobs twice each time (the queue, then the retention), so an
// idle runner's minute grew with every job ever run (1.5 s for a year of
// a daily job of 300 tenants).
func TestIdleRunnerReadsNoJobs(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	for i := range 9 {
		if err := e.db.CreateTenant(&store.Tenant{ID: fmt.Sprintf("quiet%d", i), CreatedAt: jobsStart, Sandbox: true, ClockNow: jobsStart, Settings: store.DefaultSettings()}); err != nil {
			t.Fatal(err)
		}
	}
	reads := map[string]int{}
	e.r.listed = func(tenant string) { reads[tenant]++ }
	submit := func() *Job {
		j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("c", 3)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	run := func() map[string]int {
		clear(reads)
		e.r.RunPending(context.Background())
		return maps.Clone(reads)
	}
	first := submit()
	run() // the first look reads every tenant
	idle := run()
	if _, err := e.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	clear(reads)
	second := submit() // Submit reads acme's jobs (one job at a time)
	created := run()
	e.clock.Advance(ResultRetention + time.Minute)
	expired := run()
	every := map[string]int{"acme": 1}
	for i := range 9 {
		every[fmt.Sprintf("quiet%d", i)] = 1
	}
	got := []map[string]int{idle, created, expired}
	want := []map[string]int{{}, {"acme": 2}, every}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tenants whose jobs RunPending read: idle, after a creation, past the retention (-want +got):\n%s", diff)
	}
	for _, j := range []*Job{first, second} {
		got, err := e.r.Job("acme", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := e.r.ResultFile(got); got.Estado != api.EstadoCompletado || ok {
			t.Errorf("job %s: %s, result kept %v; want completado, its result removed", j.ID, got.Estado, ok)
		}
	}
}
