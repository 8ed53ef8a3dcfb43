package batch

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store/storefs"
)

// resultState is what a job's result looks like from outside: its record's
// error and result, and whether its result file is on disk.
type resultState struct {
	Error, Result string
	OnDisk        bool
}

// completedJob runs a job of three customers to completion and returns it
// as stored, with its result file.
func completedJob(t *testing.T, e *jobEnv) *Job {
	t.Helper()
	j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("retenido", 3)})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.r.RunPending(context.Background()); n != 1 {
		t.Fatalf("RunPending ran %d jobs, want 1", n)
	}
	if j, err = e.r.Job("acme", j.ID); err != nil {
		t.Fatal(err)
	}
	if j.Estado != api.EstadoCompletado || j.Result == "" {
		t.Fatalf("job %s %q, result %q: want completado with a result", j.Estado, j.Error, j.Result)
	}
	return j
}

// stateOf reads job id's record and looks for the file it had (rel).
func stateOf(t *testing.T, e *jobEnv, id, rel string) resultState {
	t.Helper()
	j, err := e.r.Job("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(e.r.resultPath(rel))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return resultState{Error: j.Error, Result: j.Result, OnDisk: err == nil}
}

// TestRetentionKeepsDropResultSavedAfterItsRead: the deletion worker drops
// a job's result (DropResult, its reason in the job's error) between
// retention's read of the job and retention's save. Retention must not
// write back the job it read, which would lose the reason DropResult saved.
func TestRetentionKeepsDropResultSavedAfterItsRead(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	j := completedJob(t, e)
	const reason = "archivo de resultados dañado"
	e.r.cleanupRead = func(read *Job) {
		e.r.cleanupRead = nil
		stored := *read
		if err := e.r.DropResult(&stored, reason); err != nil {
			t.Errorf("DropResult: %v", err)
		}
	}
	e.clock.Advance(ResultRetention + time.Hour)
	e.r.RunPending(context.Background())
	if e.r.cleanupRead != nil {
		t.Fatal("retention did not read the job")
	}
	want := resultState{Error: reason}
	if diff := cmp.Diff(want, stateOf(t, e, j.ID, j.Result)); diff != "" {
		t.Errorf("job after DropResult within retention's pass (-want +got):\n%s", diff)
	}
}

// TestRewriteResultDoesNotPutBackARemovedFile: retention removes a job's
// result file while the deletion worker rewrites it without a customer
// (after the new file is written, before its rename). The rename must not
// put the file back: the job would show no result while the file, with
// every other customer's lines, stayed on disk.
func TestRewriteResultDoesNotPutBackARemovedFile(t *testing.T) {
	tests := []struct {
		name      string
		expire    bool // retention's pass comes between the write and the rename
		wantErr   error
		wantState resultState
		wantLines int // of the job's result, when it keeps one
	}{
		{name: "no retention meanwhile", wantState: resultState{OnDisk: true}, wantLines: 2},
		{name: "retention meanwhile", expire: true, wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
			j := completedJob(t, e)
			e.r.rewriteWritten = func() {
				if tt.expire {
					e.clock.Advance(ResultRetention + time.Hour)
					e.r.RunPending(context.Background())
				}
			}
			needle := []byte(`"cliente_ref":"retenido-000001"`)
			_, err := e.r.RewriteResult(j, func(line []byte) bool { return !bytes.Contains(line, needle) })
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("RewriteResult: %v, want %v", err, tt.wantErr)
			}
			want := tt.wantState
			if want.OnDisk {
				want.Result = j.Result
			}
			if diff := cmp.Diff(want, stateOf(t, e, j.ID, j.Result)); diff != "" {
				t.Errorf("job after the rewrite (-want +got):\n%s", diff)
			}
			if tt.wantLines > 0 {
				if got := len(readLines(t, e.r, j)); got != tt.wantLines {
					t.Errorf("result holds %d lines, want %d", got, tt.wantLines)
				}
			}
			wantFiles := []string(nil)
			if want.OnDisk {
				wantFiles = []string{filepath.Base(j.Result)}
			}
			if diff := cmp.Diff(wantFiles, dirNames(t, filepath.Dir(e.r.resultPath(j.Result)))); diff != "" {
				t.Errorf("files of the tenant's results dir (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDropResultRereadsTheJob: DropResult is given the caller's read of a
// job (the deletion worker's); retention may expire the job's result
// between that read and the drop. The drop must then leave the expired
// job as retention saved it, not save the caller's stale copy with the
// reason of a drop that removed nothing.
func TestDropResultRereadsTheJob(t *testing.T) {
	const reason = "archivo de resultados dañado"
	tests := []struct {
		name   string
		expire bool // retention's pass comes between the read and the drop
		want   resultState
	}{
		{name: "result still there", want: resultState{Error: reason}},
		{name: "expired since the read", expire: true, want: resultState{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
			read := completedJob(t, e)
			id, rel := read.ID, read.Result
			if tt.expire {
				e.clock.Advance(ResultRetention + time.Hour)
				e.r.RunPending(context.Background())
			}
			if err := e.r.DropResult(read, reason); err != nil {
				t.Fatalf("DropResult: %v", err)
			}
			if diff := cmp.Diff(tt.want, stateOf(t, e, id, rel)); diff != "" {
				t.Errorf("job after the drop (-want +got):\n%s", diff)
			}
		})
	}
}
