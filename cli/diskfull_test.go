package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// mountSmallFS mounts a tmpfs of size on a temporary dir, or skips the test
// saying why (mounting needs root or CAP_SYS_ADMIN).
func mountSmallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs for the real full-disk test (%v: %s); needs root or CAP_SYS_ADMIN", size, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

func availBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// fillTo writes the file filler in dir until the file system has about
// leave bytes free (less if it already has less).
func fillTo(t *testing.T, dir, filler string, leave uint64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, filler), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for a := availBytes(t, dir); a > leave; a = availBytes(t, dir) {
		n := min(uint64(len(chunk)), a-leave)
		if _, err := f.Write(chunk[:n]); err != nil {
			t.Fatalf("filling: %v", err)
		}
	}
}

// dbFiles lists the store's files with their sizes.
func dbFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			out[e.Name()] = info.Size()
		}
	}
	return out
}

// TestFullDisk runs the real binary on a small tmpfs: below the reserve,
// writes answer 503 almacenamiento_lleno while exports, deletions and
// /healthz go on; freeing space brings writes back with no restart; a
// restart on a full disk neither spins nor writes files, answers /healthz
// meanwhile and opens the store once space comes back.
func TestFullDisk(t *testing.T) {
	// The reserve is larger than what the store writes without asking (a
	// memtable flush's tables, up to 64 MB; smallReserve), as the
	// default's 1 GiB is: such a write that finds the disk full stops the
	// store.
	mnt := mountSmallFS(t, "400m")
	dataDir := filepath.Join(mnt, "data")
	const reserve = 200 << 20
	in := startServer(t, dataDir, "--disk-reserve", "200MiB")
	defer in.killIfRunning()
	_, tok := setupDataTenant(t, in, "acme")
	const ana = "ana-00000001"
	now := time.Now().UTC()
	post := func(id string) (int, http.Header, map[string]any) {
		return in.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchaseEvent(id, ana, now.Add(-time.Hour))}})
	}
	if st, _, b := post("e1"); st != 200 {
		t.Fatalf("event: %d %v", st, b)
	}

	fillTo(t, mnt, "filler", reserve/2)
	time.Sleep(400 * time.Millisecond)
	st, hdr, b := post("e2")
	if st != 503 || b["codigo"] != "almacenamiento_lleno" || hdr.Get("Retry-After") == "" {
		t.Fatalf("write below the reserve: %d %v %v", st, hdr, b)
	}
	if st, _, b := in.do("GET", "/readyz", "", nil); st != 503 || b["estado"] != "almacenamiento_lleno" {
		t.Errorf("/readyz below the reserve: %d %v", st, b)
	}
	if st, _, _ := in.do("GET", "/healthz", "", nil); st != 200 {
		t.Errorf("/healthz below the reserve: %d", st)
	}
	if st, _, x := in.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil); st != 200 || len(x["eventos"].([]any)) != 1 {
		t.Errorf("export below the reserve: %d %v", st, x)
	}
	if st, _, _ := in.do("DELETE", "/v1/clientes/"+ana, tok, nil); st != 202 {
		t.Errorf("deletion below the reserve: %d", st)
	}
	waitFor(t, 20*time.Second, "the deletion to complete below the reserve", func() bool {
		_, _, x := in.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
		d, _ := x["borrado"].(map[string]any)
		return d["estado"] == "completado"
	})

	// Space comes back: writes resume, same process.
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "writes to resume after space came back", func() bool {
		st, _, _ := post(fmt.Sprintf("e3-%d", time.Now().UnixNano()))
		return st == 200
	})
	time.Sleep(1500 * time.Millisecond) // serve notes the reserve every second
	in.stop()
	for _, line := range []string{"disk below the reserve: writes answer 503", "disk above the reserve again: writes resume"} {
		if !strings.Contains(in.logs.String(), line) { // read once the process has ended
			t.Errorf("not logged: %q", line)
		}
	}

	// Restart on a full disk: no spin, no files, /healthz answers.
	fillTo(t, mnt, "filler", reserve/2)
	before := dbFiles(t, filepath.Join(dataDir, "db"))
	args := []string{"serve", "--data-dir", dataDir, "--addr", in.addr, "--disk-reserve", "200MiB"}
	in.cmd = exec.Command(in.bin, args...)
	in.cmd.Stdout, in.cmd.Stderr = in.logs, in.logs
	in.logs.Reset()
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "/healthz while waiting for space", func() bool { return in.answers200("/healthz") })
	cpu0 := procCPU(t, in.cmd.Process.Pid)
	time.Sleep(3 * time.Second)
	if st, _, b := in.do("GET", "/readyz", "", nil); st != 503 || b["estado"] != "almacenamiento_lleno" {
		t.Errorf("/readyz while waiting for space: %d %v", st, b)
	}
	if st, _, b := post("e4"); st != 503 || b["codigo"] != "almacenamiento_lleno" {
		t.Errorf("write while waiting for space: %d %v", st, b)
	}
	after := dbFiles(t, filepath.Join(dataDir, "db"))
	if len(after) != len(before) {
		t.Errorf("the store's files changed while waiting for space: %d files before, %d after", len(before), len(after))
	}
	for name, size := range after {
		if before[name] != size {
			t.Errorf("file %s changed while waiting for space: %d → %d bytes", name, before[name], size)
		}
	}
	if cpu := procCPU(t, in.cmd.Process.Pid) - cpu0; cpu > 0.5 {
		t.Errorf("serve used %.2f s of CPU in 3 s of waiting: it spins", cpu)
	}
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	// While serve swaps its waiting listener for the real one the port is
	// briefly closed: a refused connection means "not yet".
	waitFor(t, 15*time.Second, "the store to open once space came back", func() bool { return in.answers200("/readyz") })
	if st, _, b := post("e5"); st != 200 {
		t.Errorf("write after space came back: %d %v", st, b)
	}
	in.stop()
}

// procCPU is the CPU time (user + system, seconds) process pid used so far.
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// Fields after the command name (in parentheses): state is field 3,
	// utime 14 and stime 15, in clock ticks (100 per second on Linux).
	i := len(data) - 1
	for i > 0 && data[i] != ')' {
		i--
	}
	var state string
	var f [12]int64
	var utime, stime int64
	fmt.Sscan(string(data[i+2:]), &state, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9], &utime, &stime)
	return float64(utime+stime) / 100
}

// TestFullDiskResumesInPlace runs the real binary with no reserve
// (--disk-reserve 0) on a small tmpfs filled to its last byte, so a write
// fails inside the store: it answers 503 almacenamiento_lleno and /readyz
// 503. Once space comes back, serve restarts itself in place: /readyz and
// writes answer 200 again from the same process (same pid; it used to
// refuse writes until an operator restarted it), and every event
// acknowledged before is exported.
func TestFullDiskResumesInPlace(t *testing.T) {
	// 128 MiB: small, as the disks on which a release that preallocated
	// its write-ahead logs (about 70 MB each) left less than the 64 MiB
	// serve once waited for in vain.
	mnt := mountSmallFS(t, "128m")
	dataDir := filepath.Join(mnt, "data")
	in := startServer(t, dataDir, "--disk-reserve", "0")
	defer in.killIfRunning()
	pid := in.cmd.Process.Pid
	_, tok := setupDataTenant(t, in, "acme")
	now := time.Now().UTC()
	post := func(ref string, ids ...string) (int, map[string]any) {
		evs := []any{}
		for _, id := range ids {
			evs = append(evs, purchaseEvent(id, ref, now.Add(-time.Hour)))
		}
		st, _, b := in.do("POST", "/v1/eventos", tok, map[string]any{"eventos": evs})
		return st, b
	}
	const ana, beto = "ana-00000001", "beto-0000001"
	acked := map[string]bool{}
	for i := range 5 {
		id := fmt.Sprintf("e%d", i)
		if st, b := post(ana, id); st != 200 || b["aceptados"] != 1.0 {
			t.Fatalf("event %s: %d %v", id, st, b)
		}
		acked[id] = true
	}

	fillTo(t, mnt, "filler", 0)
	refused := writeUntilRefused(t, func(i int) (int, map[string]any) {
		ids := []string{}
		for j := range 50 {
			ids = append(ids, fmt.Sprintf("f%d-%d", i, j))
		}
		return post(beto, ids...)
	})
	if refused["codigo"] != "almacenamiento_lleno" {
		t.Fatalf("write on a full disk: %v", refused)
	}
	if st, _, b := in.do("GET", "/readyz", "", nil); st != 503 || b["estado"] != "almacenamiento_lleno" {
		t.Errorf("/readyz after a failed write: %d %v", st, b)
	}
	time.Sleep(5500 * time.Millisecond) // a counters' flush tick while the store refuses writes: not logged

	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "/readyz 200 once space came back", func() bool { return in.answers200("/readyz") })
	if st, b := post(ana, "e-after"); st != 200 || b["aceptados"] != 1.0 {
		t.Errorf("write after space came back: %d %v", st, b)
	}
	acked["e-after"] = true
	if in.cmd.ProcessState != nil || in.cmd.Process.Pid != pid || syscall.Kill(pid, 0) != nil {
		t.Errorf("serve is no longer process %d: %v", pid, in.cmd.ProcessState)
	}
	st, _, x := in.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	exported := map[string]bool{}
	for _, e := range x["eventos"].([]any) {
		exported[e.(map[string]any)["event_id"].(string)] = true
	}
	if diff := cmp.Diff(acked, exported); st != 200 || diff != "" {
		t.Errorf("export after the restart in place: %d (-acknowledged +exported):\n%s", st, diff)
	}
	in.stop()
	if !strings.Contains(in.logs.String(), "restarting in place") { // read once the process has ended
		t.Errorf("no restart in place logged:\n%s", in.logs)
	}
	if strings.Contains(in.logs.String(), "flush counters") {
		t.Errorf("counters' flushes logged as errors while the store refused every write:\n%s", in.logs)
	}
}

// writeUntilRefused calls write(0), write(1), ... until it answers 503 and
// returns that body; it fails the test on any other status or if none is
// refused within 400 calls.
func writeUntilRefused(t *testing.T, write func(i int) (int, map[string]any)) map[string]any {
	t.Helper()
	for i := range 400 {
		st, b := write(i)
		if st == 503 {
			return b
		}
		if st != 200 {
			t.Fatalf("write %d on a full disk: %d %v", i, st, b)
		}
	}
	t.Fatal("no write refused on a full disk")
	return nil
}

// TestFullDiskStartWaitsForAdminCommand: serve started below the reserve
// waits for space without its admin socket, so an admin command run
// meanwhile opens the data dir itself and holds its lock (the test holds
// it, as such a command does). Space coming back while the command runs
// must not stop serve ("data dir in use": it used to exit): it keeps
// answering /healthz, /readyz says why, and it opens the store once the
// command ends.
func TestFullDiskStartWaitsForAdminCommand(t *testing.T) {
	mnt := mountSmallFS(t, "400m")
	dataDir := filepath.Join(mnt, "data")
	const reserve = 200 << 20
	in := startServer(t, dataDir, "--disk-reserve", "200MiB")
	defer in.killIfRunning()
	_, tok := setupDataTenant(t, in, "acme")
	in.stop()

	fillTo(t, mnt, "filler", reserve/2)
	in.cmd = exec.Command(in.bin, "serve", "--data-dir", dataDir, "--addr", in.addr, "--console-addr", "", "--disk-reserve", "200MiB")
	in.cmd.Stdout, in.cmd.Stderr = in.logs, in.logs
	in.logs.Reset()
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "/healthz while waiting for space", func() bool { return in.answers200("/healthz") })
	lock, err := store.LockFile(filepath.Join(dataDir, "coupond.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	// serve reads the free space every second; it must then wait on the
	// lock, saying so, not exit (an exited serve answers nothing).
	var st int
	var b map[string]any
	waitFor(t, 15*time.Second, "/readyz naming the data dir in use once space is back", func() bool {
		st, _, b = in.do("GET", "/readyz", "", nil)
		return strings.Contains(fmt.Sprint(b["motivo"]), "en uso")
	})
	got := []any{in.answers200("/healthz"), st, strings.Contains(fmt.Sprint(b["motivo"]), "en uso")}
	if diff := cmp.Diff([]any{true, 503, true}, got); diff != "" {
		t.Errorf("space back while an admin command holds the data dir: /healthz 200, /readyz 503 naming the use (-want +got):\n%s\n%v", diff, b)
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the store to open once the admin command ended", func() bool { return in.answers200("/readyz") })
	ev := map[string]any{"eventos": []any{purchaseEvent("e1", "ana-00000001", time.Now().UTC().Add(-time.Hour))}}
	if st, _, b := in.do("POST", "/v1/eventos", tok, ev); st != 200 {
		t.Errorf("write once the store opened: %d %v", st, b)
	}
	in.stop()
}
