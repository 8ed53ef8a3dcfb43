package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestRestartInPlaceKeepsBatchJob runs the real binary on a data dir
// holding a batch job en_curso with no recorded reason, as a write failing
// for want of space leaves the job it stopped. Started by a restart in
// place (COUPOND_RESUMED, which the restart sets beside COUPOND_LISTEN_FD)
// serve runs the job again to completado; it ended fallido "interrumpido
// por un reinicio", although a job that meets a full disk is not lost. Any
// other start still ends it so.
func TestRestartInPlaceKeepsBatchJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resumed string // COUPOND_RESUMED; "" unset
		want    batchJobView
	}{
		{"restart in place", resumedNoSpace, batchJobView{Estado: api.EstadoCompletado, Total: 2, Procesados: 2}},
		{"restart in place after descriptors", resumedNoFiles, batchJobView{Estado: api.EstadoCompletado, Total: 2, Procesados: 2}},
		{"other start", "", batchJobView{Estado: api.EstadoFallido, Total: 2, Error: "interrumpido por un reinicio del servicio; envíe el lote de nuevo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			id := interruptedJob(t, dataDir)
			t.Setenv(resumedEnv, tc.resumed)
			if tc.resumed == "" {
				os.Unsetenv(resumedEnv) // t.Setenv restores it
			}
			in := startServer(t, dataDir)
			defer in.killIfRunning()
			out, err := runAdmin(in.bin, dataDir, "batch", "watch", "--tenant", "acme", id, "--progress", "off")
			if err != nil && !errors.As(err, new(*ExitError)) { // exit 1: the job failed
				t.Fatalf("batch watch: %v\n%s", err, out)
			}
			var got batchJobView
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("batch watch: %v\n%s", err, out)
			}
			got = batchJobView{Estado: got.Estado, Error: got.Error, Total: got.Total, Procesados: got.Procesados}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("job after the start (-want +got):\n%s", diff)
			}
			in.stop()
		})
	}
}

// interruptedJob makes in dir a sandbox tenant acme with a catalog, a
// campaign and a batch job of two customers stored en_curso with no
// reason, as a process stopped while running it leaves it, and returns
// the job's id. The store is closed again.
func interruptedJob(t *testing.T, dir string) string {
	t.Helper()
	e, now := sandboxEnv(t, dir)
	defer e.close()
	diezCatalog(t, e.svc.engine, now)
	if _, err := e.svc.engine.Campaigns.PutCampaign("acme", engine.Campaign{ID: "camp1", Canal: "push", Descripcion: "d"}, now); err != nil {
		t.Fatal(err)
	}
	j, err := e.svc.batch.Submit("acme", batch.Submission{CampanaID: "camp1", Clientes: []string{"ana-00000001", "beto-0000002"}})
	if err != nil {
		t.Fatal(err)
	}
	started := now.Add(time.Second)
	j.Estado, j.IniciadoEn, j.RealIniciadoEn = api.EstadoEnCurso, &started, started
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.JobKey("acme", j.ID), j); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// TestResumedEnv: the image a restart in place execs is told it restarts
// after a full disk (COUPOND_RESUMED once, whatever serve inherited), and
// reads it once: the variable is removed, and another value is ignored.
func TestResumedEnv(t *testing.T) {
	t.Setenv(resumedEnv, "viejo")
	var set []string
	for _, kv := range execEnv(7, "127.0.0.1:1", resumedNoFiles) {
		if strings.HasPrefix(kv, resumedEnv+"=") || strings.HasPrefix(kv, listenFDEnv+"=") {
			set = append(set, kv)
		}
	}
	if diff := cmp.Diff([]string{listenFDEnv + "=7@127.0.0.1:1", resumedEnv + "=" + resumedNoFiles}, set); diff != "" {
		t.Errorf("exec environment (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		value string // "" unset
		want  bool
	}{{resumedNoSpace, true}, {resumedNoFiles, true}, {"viejo", false}, {"", false}} {
		t.Setenv(resumedEnv, tc.value)
		if tc.value == "" {
			os.Unsetenv(resumedEnv)
		}
		got := resumedAfterFullDisk(zerolog.Nop())
		_, left := os.LookupEnv(resumedEnv)
		if got != tc.want || left {
			t.Errorf("%s=%q: resumed %v, variable left %v; want %v, removed", resumedEnv, tc.value, got, left, tc.want)
		}
	}
}

// TestResumeNeed: the free space an in-place restart waits for counts the
// length of the store's write-ahead logs and MANIFESTs, and no other
// file. A flat 64 MiB could not be met on a small disk whose free space
// the store's own preallocated logs keep lower: serve never resumed.
func TestResumeNeed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]int64 // name → length
		want  uint64
	}{
		{"empty", nil, resumeMargin},
		{"logs and manifest", map[string]int64{"000004.log": 3 << 20, "000007.log": 1 << 20, "MANIFEST-000005": 1 << 10},
			resumeMargin + 4<<20 + 1<<10},
		{"tables and others left out", map[string]int64{"000009.sst": 8 << 20, "OPTIONS-000003": 4 << 10, "LOCK": 0, "marker.manifest.000001.MANIFEST-000005": 0},
			resumeMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, n := range tc.files {
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(n); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			if got := resumeNeed(dir); got != tc.want {
				t.Errorf("resumeNeed = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestResumeExecUnlessStopped: serve that stopped to restart in place
// execs its binary again, unless a stop signal came meanwhile: then it
// stops, its listener closed, instead of starting an image that never
// learns it was asked to stop.
func TestResumeExecUnlessStopped(t *testing.T) {
	errExec := errors.New("exec failed")
	for _, tc := range []struct {
		name     string
		stopped  bool
		want     error
		wantExec bool
	}{
		{"running", false, errExec, true},
		{"stop signal meanwhile", true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			file, err := listenerFile(ln)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.stopped {
				cancel()
			}
			execed := false
			got := (&resumeInPlace{listener: file, addr: "127.0.0.1:1", reason: resumedNoFiles}).exec(ctx, func(f *os.File, addr, reason string) error {
				execed = f == file && addr == "127.0.0.1:1" && reason == resumedNoFiles
				return errExec
			})
			closed := errors.Is(file.Close(), os.ErrClosed)
			if got != tc.want || execed != tc.wantExec || closed != tc.stopped {
				t.Errorf("exec: %v, execed %v, listener closed %v; want %v, %v, %v", got, execed, closed, tc.want, tc.wantExec, tc.stopped)
			}
		})
	}
}

// TestRunnableAs: a restart in place runs its binary again only when the
// path it started from still names that very file: not once it was
// removed, made not executable, or replaced by another (an upgrade, whose
// image must not start as this one). running stands for /proc/self/exe:
// a second link to the file that runs.
func TestRunnableAs(t *testing.T) {
	write := func(path string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte("#!/bin/true\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(exe string)
		want   bool
	}{
		{"unchanged", func(string) {}, true},
		{"replaced", func(exe string) {
			write(exe+".new", 0o700)
			if err := os.Rename(exe+".new", exe); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"removed", func(exe string) { os.Remove(exe) }, false},
		{"not executable", func(exe string) { os.Chmod(exe, 0o600) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			exe, running := filepath.Join(dir, "coupond"), filepath.Join(dir, "running")
			write(exe, 0o700)
			if err := os.Link(exe, running); err != nil {
				t.Fatal(err)
			}
			tc.change(exe)
			got, err := runnableAs(exe, running)
			if (err == nil) != tc.want || (err == nil && got != exe) {
				t.Errorf("runnableAs: %q, %v; want runnable %v", got, err, tc.want)
			}
		})
	}
}

// TestNoteReserve: the log says when the free space crosses the reserve,
// once each way (writes refused, writes resume), not at every reading, and
// not for a failed store, whose writes do not resume with the space: that
// one's failure is an error line, once. Only 503 lines without a reason
// said it before, and nothing the failure of a store by an admin command's
// write.
func TestNoteReserve(t *testing.T) {
	low := store.SpaceStatus{Reserve: 100, Avail: 40, Known: true, Low: true}
	ok := store.SpaceStatus{Reserve: 100, Avail: 400, Known: true}
	failed := store.SpaceStatus{Reserve: 100, Avail: 0, Known: true, Low: true, Failed: true, NoSpace: true, Resumes: true}
	failedIO := store.SpaceStatus{Reserve: 100, Avail: 400, Known: true, Low: true, Failed: true, Resumes: true}
	failedLine := `{"level":"error","no_space":true,"message":"a write failed inside the store for want of space: every write is refused (503 almacenamiento_lleno); serve restarts itself in place once the disk has the reserve free again: free space"}`
	failedIOLine := `{"level":"error","no_space":false,"message":"a write failed inside the store: every write is refused (503 almacenamiento_lleno) until coupond is restarted"}`
	below := `{"level":"warn","available_bytes":40,"reserve_bytes":100,"message":"disk below the reserve: writes answer 503 almacenamiento_lleno until space comes back; reads, exports, deletions and admin commands go on"}`
	above := `{"level":"info","available_bytes":400,"reserve_bytes":100,"message":"disk above the reserve again: writes resume"}`
	for _, tc := range []struct {
		name     string
		readings []store.SpaceStatus
		want     []string
	}{
		{"above all along", []store.SpaceStatus{ok, ok}, nil},
		{"below, then back", []store.SpaceStatus{ok, low, low, low, ok, ok}, []string{below, above}},
		{"below at the first reading", []store.SpaceStatus{low, ok}, []string{below, above}},
		{"twice", []store.SpaceStatus{low, ok, low, ok}, []string{below, above, below, above}},
		{"failed store", []store.SpaceStatus{failed, failed}, []string{failedLine}},
		{"below, then failed", []store.SpaceStatus{low, failed, failed}, []string{below, failedLine}},
		{"failed by an I/O error", []store.SpaceStatus{ok, failedIO, failedIO}, []string{failedIOLine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			w := &resumeWatch{log: zerolog.New(&buf)}
			for _, sp := range tc.readings {
				w.noteReserve(sp)
			}
			got := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if buf.Len() == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResumeWaitsForInodes: an in-place restart waits for free inodes as
// well as free bytes. A write that fails with ENOSPC may have met a disk
// out of inodes with its bytes free: restarting then, the new image's open
// fails too (exit 1), and systemd's restarts closed the port every 2 s
// until inodes were freed. A file system that counts no inodes is judged
// by its bytes alone.
func TestResumeWaitsForInodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		free    uint64
		counted bool
		want    bool
	}{
		{"no inode free", 0, true, false},
		{"a few", resumeInodes - 1, true, false},
		{"enough", resumeInodes, true, true},
		{"not counted", 0, false, true},
	} {
		w := &resumeWatch{dataDir: t.TempDir(), log: zerolog.Nop(),
			inodes: func(string) (uint64, bool) { return tc.free, tc.counted }}
		if _, got := w.room(); got != tc.want {
			t.Errorf("%s: room %v, want %v", tc.name, got, tc.want)
		}
	}
	if free, counted := freeInodes(t.TempDir()); counted && free == 0 {
		t.Errorf("freeInodes of the test's directory: 0 of a counted file system")
	}
}

// TestResumeAfterDescriptorsBack: a store failed for want of file
// descriptors (EMFILE, the process's; ENFILE, the system's) has serve
// restart in place once it can open files again (its reason told to the
// new image), as a full disk's does once space is back; it waited for the
// operator's restart. Other I/O errors still need it, and so does a serve
// that cannot restart itself.
func TestResumeAfterDescriptorsBack(t *testing.T) {
	if !resumeSupported {
		t.Skip("serve restarts in place only on Linux")
	}
	type outcome struct {
		Due           bool
		Reason        string
		RestartNeeded bool
	}
	for _, tc := range []struct {
		errno     syscall.Errno
		resumes   bool
		filesBack bool
		want      outcome
	}{
		{syscall.EMFILE, true, true, outcome{true, resumedNoFiles, false}},
		{syscall.EMFILE, true, false, outcome{false, "", false}},
		{syscall.ENFILE, true, true, outcome{true, resumedNoFiles, false}},
		{syscall.EMFILE, false, true, outcome{false, "", true}},
		{syscall.EACCES, true, true, outcome{false, "", true}},
		{syscall.EROFS, true, true, outcome{false, "", true}},
	} {
		name := fmt.Sprintf("%s resumes=%v files=%v", tc.errno, tc.resumes, tc.filesBack)
		t.Run(name, func(t *testing.T) {
			db := failedStore(t, tc.errno)
			db.SetResumes(tc.resumes)
			w := &resumeWatch{db: db, dataDir: t.TempDir(), log: zerolog.Nop(),
				files: func(string) bool { return tc.filesBack }}
			got := outcome{Due: w.due(), Reason: w.reason, RestartNeeded: db.Space().RestartNeeded()}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("restart in place (-want +got):\n%s", diff)
			}
		})
	}
	if dir := t.TempDir(); !canOpenFiles(dir) || canOpenFiles(filepath.Join(dir, "absent")) {
		t.Errorf("canOpenFiles: %v on a directory, %v on none; want true, false", canOpenFiles(dir), canOpenFiles(filepath.Join(dir, "absent")))
	}
}

// failedStore returns a store failed, its flush parked, by a new
// write-ahead log that could not be made for errno.
func failedStore(t *testing.T, errno syscall.Errno) *store.DB {
	t.Helper()
	fs, faults := storefs.WithCreateFaults(storefs.Mem(), func(path string) error {
		if strings.HasSuffix(path, ".log") {
			return fmt.Errorf("%s: %w", path, errno)
		}
		return nil
	})
	db, err := store.Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	faults.On()
	if err := db.Flush(); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("flush that cannot make its log: %v, want ErrFailed", err)
	}
	return db
}
