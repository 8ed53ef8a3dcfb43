package batch

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/atomicfile/faultfs"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestRecoverAfterRestartInPlace: a job running when a write fails
// inside the store for want of space can save neither its failure nor its
// wait (the store refuses every write from then on), so it is found
// en_curso with no reason at the next start. After serve's restart in
// place (ResumedAfterFullDisk) that job met the full disk: it waits for
// space and completes, each customer decided once. It ended fallido
// "interrumpido por un reinicio", against the promise that a job meeting a
// full disk is not lost. Any other start still ends it so (errRestart).
func TestRecoverAfterRestartInPlace(t *testing.T) {
	const customers = 1500 // one chunk of decisions committed before the disk fills
	tests := []struct {
		name    string
		resumed bool
		want    jobView // after Recover
	}{
		{"restart in place", true, waiting},
		{"other start", false, jobView{Estado: api.EstadoFallido, Error: errRestart, Iniciado: true, Completado: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := storefs.CrashableMem()
			fs, full := storefs.WithWriteFaults(mem, func(path string) error { return fmt.Errorf("%s: %w", path, syscall.ENOSPC) })
			e := newJobEnv(t, fs, "db", 3, 5000)
			j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", customers)})
			if err != nil {
				t.Fatal(err)
			}
			e.r.OnProgress(100, func(p Job) {
				if p.Procesados == 1100 { // the disk fills in the middle of the run
					full.On()
				}
			})
			e.r.RunPending(context.Background())
			e.r.RunPending(context.Background()) // endStuck, on the failed store
			if got := jobState(t, e.r, j.ID); got.Estado != api.EstadoEnCurso || got.Waits || got.Error != "" {
				t.Fatalf("job after the store failed: %+v, want en_curso with nothing recorded", got)
			}

			after := e.restartedOn(t, mem)
			r := NewRunner(RunnerConfig{DB: after.db, Engine: after.eng, Log: zerolog.Nop(), Dir: after.dir, Now: after.clock.Now,
				Signer: e.r.Signer, ResumedAfterFullDisk: tt.resumed})
			if err := r.Recover(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, jobState(t, r, j.ID)); diff != "" {
				t.Errorf("job after the start (-want +got):\n%s", diff)
			}
			if b := sendsReserved(t, after.db); b != 0 {
				t.Errorf("sends reserved after the start: %d, want 0 (voided)", b)
			}
			if tt.resumed {
				checkCompletesOnce(t, after, r, j.ID, customers)
			}
		})
	}
}

// restartedOn is e after its process died: its store reopened from what
// mem had synced, with a new engine.
func (e *jobEnv) restartedOn(t *testing.T, mem *storefs.MemFS) *jobEnv {
	t.Helper()
	db, err := store.Open("db", mem.CrashClone(storefs.CrashCloneCfg{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	eng := engine.New(engine.Config{DB: db, Secrets: e.secrets, Log: zerolog.Nop(), Now: e.clock.Now, Seed: 42})
	return &jobEnv{db: db, secrets: e.secrets, eng: eng, clock: e.clock, dir: e.dir, r: e.r}
}

// TestUnsavedFullDiskEndWaits: a job whose run met a full disk and whose
// end could not be saved (its wait for space, or its reason after a failed
// void) is ended by the next round for the full disk: it waits for space,
// and completes once there is some. The round recorded it fallido "error
// interno": its record kept no reason.
func TestUnsavedFullDiskEndWaits(t *testing.T) {
	const customers = 300
	tests := []struct {
		name      string
		voidFails bool
	}{
		{"wait for space not saved", false},
		{"reason of a failed void not saved", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
			fsys := faultfs.New(atomicfile.OS{}, faultfs.NoSpace)
			r := e.runnerOn(fsys)
			if tt.voidFails {
				r.voidJob = failOnce(r.voidJob)
			}
			saveFails := true
			r.saveFault = func(j *Job) error {
				if saveFails && (j.WaitsForSpace || j.Error != "") { // the failed run's end
					saveFails = false
					return fmt.Errorf("store: commit: %w", store.ErrFailed)
				}
				return nil
			}
			j, err := r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", customers)})
			if err != nil {
				t.Fatal(err)
			}
			r.RunPending(context.Background())
			if got := jobState(t, r, j.ID); got.Estado != api.EstadoEnCurso || got.Waits || got.Error != "" {
				t.Fatalf("job whose end was not saved: %+v, want en_curso with nothing recorded", got)
			}
			for round := range 2 { // the disk stays full
				r.RunPending(context.Background())
				if diff := cmp.Diff(waiting, jobState(t, r, j.ID)); diff != "" {
					t.Errorf("round %d after the unsaved end (-want +got):\n%s", round, diff)
				}
			}
			fsys.SetFault(nil) // space is back
			checkCompletesOnce(t, e, r, j.ID, customers)
		})
	}
}

// TestRecoverUnsavedEndWaits: after a restart in place, a job whose
// decisions cannot be voided at once, nor its reason saved, is ended by
// the next round for the full disk (it waits for space), not fallido
// "error interno".
func TestRecoverUnsavedEndWaits(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
	j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", 50)})
	if err != nil {
		t.Fatal(err)
	}
	started := jobsStart
	j.Estado, j.IniciadoEn = api.EstadoEnCurso, &started // running when the store failed
	if err := e.r.save(j); err != nil {
		t.Fatal(err)
	}
	fsys := faultfs.New(atomicfile.OS{}, faultfs.NoSpace)
	r := NewRunner(RunnerConfig{DB: e.db, Engine: e.eng, Log: zerolog.Nop(), Dir: e.dir, Now: e.clock.Now, Signer: e.r.Signer,
		FS: fsys, ResumedAfterFullDisk: true})
	r.voidJob = failOnce(r.voidJob)
	r.saveFault = func(*Job) error { return fmt.Errorf("store: commit: %w", store.ErrFailed) }
	if err := r.Recover(); err == nil {
		t.Fatal("Recover: no error, want the failed void's")
	}
	r.saveFault = nil
	r.RunPending(context.Background())
	if diff := cmp.Diff(waiting, jobState(t, r, j.ID)); diff != "" {
		t.Errorf("job after the next round (-want +got):\n%s", diff)
	}
	fsys.SetFault(nil)
	checkCompletesOnce(t, e, r, j.ID, 50)
}

// failOnce is void failing its first call, as a store read failing does.
func failOnce(void func(tenant, jobID string) (int, error)) func(tenant, jobID string) (int, error) {
	failed := false
	return func(tenant, jobID string) (int, error) {
		if !failed {
			failed = true
			return 0, errors.New("store read failed")
		}
		return void(tenant, jobID)
	}
}

// TestCompletedEndNotSaved: a job whose run completed but whose end could
// not be saved (the store failed at that commit) ends as a failed run:
// its decisions voided and fallido, or, when the disk was full, waiting for
// space and completed once there is some. It stayed en_curso until a
// restart, the tenant unable to create a job meanwhile.
func TestCompletedEndNotSaved(t *testing.T) {
	const customers = 200
	for _, tc := range []struct {
		name  string
		fault error
		want  jobView
	}{
		{"store failed", store.ErrFailed, jobView{Estado: api.EstadoFallido, Error: errInternal, Iniciado: true, Completado: true, Procesados: customers}},
		{"disk full", store.ErrFull, waiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
			r := e.runnerOn(atomicfile.OS{})
			fails := true
			r.saveFault = func(j *Job) error {
				if fails && j.Estado == api.EstadoCompletado {
					fails = false
					return fmt.Errorf("store: commit: %w", tc.fault)
				}
				return nil
			}
			j, err := r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("fin", customers)})
			if err != nil {
				t.Fatal(err)
			}
			r.RunPending(context.Background())
			if diff := cmp.Diff(tc.want, jobState(t, r, j.ID)); diff != "" {
				t.Fatalf("job whose completed end was not saved (-want +got):\n%s", diff)
			}
			if tc.fault == store.ErrFull {
				checkCompletesOnce(t, e, r, j.ID, customers)
				return
			}
			if n, err := e.eng.VoidJob("acme", j.ID); err != nil || n != 0 {
				t.Errorf("decisions still standing for the fallido job: %d %v, want 0 (voided)", n, err)
			}
		})
	}
}
