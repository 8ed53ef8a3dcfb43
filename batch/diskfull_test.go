package batch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/atomicfile/faultfs"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestResultFileOnFullDisk: a job whose result file meets a full disk,
// at whichever call, is not lost: its decisions are voided (their sends
// back in the budget) and it waits en_curso, no error shown, no partial
// file anywhere, however many rounds the disk stays full, across a
// restart too; once space is
// back it completes with one line per customer, each decided once.
// Another disk error fails it with an error that says so.
func TestResultFileOnFullDisk(t *testing.T) {
	const customers = 1200 // more than one committed chunk of decisions
	quota := func(op faultfs.Op) error { return &fs.PathError{Op: "write", Path: op.Path, Err: syscall.EDQUOT} }
	eio := func(op faultfs.Op) error { return &fs.PathError{Op: "write", Path: op.Path, Err: syscall.EIO} }
	tests := []struct {
		name  string
		kind  faultfs.Kind
		fault func(faultfs.Op) error
		want  jobView // the job after the round that met the fault
	}{
		{"results dir", faultfs.Mkdir, faultfs.NoSpace, waiting},
		{"temporary file", faultfs.Open, faultfs.NoSpace, waiting},
		{"write", faultfs.Write, faultfs.NoSpace, waiting},
		{"file sync", faultfs.Sync, faultfs.NoSpace, waiting},
		{"rename", faultfs.Rename, faultfs.NoSpace, waiting},
		{"write, EIO", faultfs.Write, eio, jobView{Estado: api.EstadoFallido, Error: errResultIO, Iniciado: true, Completado: true}},
		{"write, quota", faultfs.Write, quota, waiting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
			fsys := faultfs.New(atomicfile.OS{}, func(op faultfs.Op) error {
				if op.Kind == tt.kind { // the disk stays full until SetFault(nil)
					return tt.fault(op)
				}
				return nil
			})
			r := e.runnerOn(fsys)
			j, err := r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", customers)})
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 { // the disk stays full for two rounds
				if n := r.RunPending(context.Background()); n != 0 && tt.want == waiting {
					t.Errorf("round %d: RunPending counted %d jobs run, want 0: the job waits", round, n)
				}
				if diff := cmp.Diff(tt.want, jobState(t, r, j.ID)); diff != "" {
					t.Errorf("round %d: job after the disk filled (-want +got):\n%s", round, diff)
				}
			}
			if b := sendsReserved(t, e.db); b != 0 {
				t.Errorf("sends reserved after the failed run: %d, want 0 (voided)", b)
			}
			if files := resultFiles(t, e.dir); len(files) != 0 {
				t.Errorf("files left in the results dir: %v", files)
			}
			if tt.want == waiting {
				r = e.runnerOn(fsys) // a restart while the disk is full
				if err := r.Recover(); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(waiting, jobState(t, r, j.ID)); diff != "" {
					t.Errorf("job after a restart (-want +got):\n%s", diff)
				}
				fsys.SetFault(nil) // space is back
				checkCompletesOnce(t, e, r, j.ID, customers)
			}
		})
	}
}

// TestFullDiskJobWaitsForItsVoid: a job whose run met a full disk and
// whose decisions could not be voided then waits en_curso; a restart
// voids them and the job waits for space as before (the restart did not
// interrupt it), and it completes once space is back.
func TestFullDiskJobWaitsForItsVoid(t *testing.T) {
	const customers = 300
	e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
	fsys := faultfs.New(atomicfile.OS{}, faultfs.NoSpace)
	r := e.runnerOn(fsys)
	r.voidJob = func(string, string) (int, error) { return 0, errors.New("store read failed") }
	j, err := r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", customers)})
	if err != nil {
		t.Fatal(err)
	}
	r.RunPending(context.Background())
	if got := jobState(t, r, j.ID); got.Estado != api.EstadoEnCurso || got.Waits {
		t.Fatalf("job whose decisions could not be voided: %+v, want en_curso, not yet waiting for space", got)
	}

	fsys.SetFault(nil)
	r = e.runnerOn(fsys) // a restart
	if err := r.Recover(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(waiting, jobState(t, r, j.ID)); diff != "" {
		t.Errorf("job after a restart (-want +got):\n%s", diff)
	}
	if b := sendsReserved(t, e.db); b != 0 {
		t.Errorf("sends reserved after the restart: %d, want 0 (voided)", b)
	}
	checkCompletesOnce(t, e, r, j.ID, customers)
}

// runnerOn is e's runner writing its result files on fsys.
func (e *jobEnv) runnerOn(fsys atomicfile.FS) *Runner {
	return NewRunner(RunnerConfig{DB: e.db, Engine: e.eng, Log: e.r.log, Dir: e.dir, Now: e.clock.Now, Signer: e.r.Signer, FS: fsys})
}

// checkCompletesOnce runs the job id of e, waiting for space, on r and checks that it
// completes with one line per customer and one standing decision each.
func checkCompletesOnce(t *testing.T, e *jobEnv, r *Runner, id string, customers int) {
	t.Helper()
	if n := r.RunPending(context.Background()); n != 1 {
		t.Fatalf("RunPending ran %d jobs once space is back, want 1", n)
	}
	done, err := r.Job("acme", id)
	if err != nil || done.Estado != api.EstadoCompletado || done.Error != "" {
		t.Fatalf("job once space is back: %+v %v, want completado", done, err)
	}
	refs := map[string]int{}
	for _, l := range readLines(t, r, done) {
		ref, _, _ := strings.Cut(strings.TrimPrefix(string(l), `{"cliente_ref":"`), `"`)
		refs[ref]++
	}
	dup := 0
	for _, n := range refs {
		dup += n - 1
	}
	if len(refs) != customers || dup != 0 || done.Procesados != customers {
		t.Errorf("result: %d customers, %d repeated lines, procesados %d; want %d once each", len(refs), dup, done.Procesados, customers)
	}
	if b := sendsReserved(t, e.db); b != int64(done.Envios) {
		t.Errorf("sends reserved %d, want the completed run's %d", b, done.Envios)
	}
	// The decisions standing for the job are the completed run's alone:
	// voiding them now finds exactly one per customer.
	if n, err := e.eng.VoidJob("acme", id); err != nil || n != customers {
		t.Errorf("the job's standing decisions: %d %v, want %d", n, err, customers)
	}
}

// jobView is what the tests of a full disk check of a job's record.
type jobView struct {
	Estado, Error        string
	Iniciado, Completado bool // iniciado_en, completado_en set
	Procesados           int
	Result               string
	Waits                bool // WaitsForSpace
}

// waiting is a job that met a full disk, its decisions voided, waiting
// for space.
var waiting = jobView{Estado: api.EstadoEnCurso, Iniciado: true, Waits: true}

func jobState(t *testing.T, r *Runner, id string) jobView {
	t.Helper()
	j, err := r.Job("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return jobView{Estado: j.Estado, Error: j.Error, Iniciado: j.IniciadoEn != nil, Completado: j.CompletadoEn != nil,
		Procesados: j.Procesados, Result: j.Result, Waits: j.WaitsForSpace}
}

// sendsReserved is the campaign's count of sends in its budget.
func sendsReserved(t *testing.T, db *store.DB) int64 {
	t.Helper()
	var b struct {
		Envios int64 `json:"envios"`
	}
	if err := db.GetJSON(store.BudgetKey("acme", "camp"), &b); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return b.Envios
}

// resultFiles lists the files under the results dir.
func resultFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}
