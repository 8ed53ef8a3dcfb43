package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/privacy"
)

// ageBackup makes the registered backup dir look taken at takenAt: its
// manifest and its entry in backups.json and its copy. With manifest
// false it removes the manifest (a backup that stopped).
func ageBackup(t *testing.T, data, dir string, takenAt time.Time, manifest bool) {
	t.Helper()
	path := filepath.Join(dir, privacy.ManifestFile)
	if !manifest {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	} else {
		editJSON(t, path, func(m map[string]any) { m["taken_at"] = takenAt })
	}
	for _, name := range []string{privacy.RegistryFile, privacy.RegistryCopyFile} {
		editJSON(t, filepath.Join(data, name), func(m map[string]any) {
			for _, b := range m["backups"].([]any) {
				if b := b.(map[string]any); b["dir"] == dir {
					b["taken_at"], b["complete"] = takenAt, manifest
				}
			}
		})
	}
}

// editJSON rewrites the JSON object in the file at path with edit.
func editJSON(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveInProcess runs "coupond serve" on data until the test ends, and
// waits for its admin socket. extra flags override the defaults (no
// console, any port).
func serveInProcess(t *testing.T, data string, extra ...string) {
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	args := append([]string{"serve", "--data-dir", data, "--addr", "127.0.0.1:0", "--console-addr", "", "--disk-reserve", "0"}, extra...)
	go func() {
		served <- Run(ctx, args, nil, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	waitFor(t, 20*time.Second, "the admin socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(data, adminSocket))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// exitCode is the exit status of a command's error.
func exitCode(err error) int {
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestAdminBackupsListAndPrune: "admin backups" lists each registered
// backup with its state, and "admin backups prune" removes the one past
// retention (--dry-run only says so), leaves alone, exit 1, the one past
// retention without a manifest, and never touches the one within
// retention; with the server stopped and through its admin socket. There
// was no command: the operator read backups.json and removed directories
// by their age on disk.
func TestAdminBackupsListAndPrune(t *testing.T) {
	type row struct{ Dir, State, Outcome string }
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "server stopped", true: "server running"}[running], func(t *testing.T) {
			dir, data, fresh := backedUpTenant(t)
			old, stopped := filepath.Join(dir, "old"), filepath.Join(dir, "stopped")
			runIn(t, data, "admin", "backup", "--out", old)
			runIn(t, data, "admin", "backup", "--out", stopped)
			now := time.Now().UTC()
			ageBackup(t, data, old, now.Add(-privacy.BackupRetention-time.Hour), true)
			ageBackup(t, data, stopped, now.Add(-privacy.BackupRetention-2*time.Hour), false)
			if running {
				serveInProcess(t, data)
			}
			list := func() []row {
				out, _, err := runCLI(t, "admin", "backups", "--json", "--data-dir", data)
				var got struct{ Backups []privacy.BackupInfo }
				if exitCode(err) != 1 || json.Unmarshal([]byte(out), &got) != nil {
					t.Fatalf("admin backups --json: %v\n%s; want exit 1 (an incomplete backup listed)", err, out)
				}
				var rows []row
				for _, b := range got.Backups {
					rows = append(rows, row{Dir: filepath.Base(b.Dir), State: b.State})
				}
				return rows
			}
			want := []row{{"stopped", privacy.BackupIncomplete, ""}, {"old", privacy.BackupPastRetention, ""}, {"backup", privacy.BackupComplete, ""}}
			if diff := cmp.Diff(want, list()); diff != "" {
				t.Errorf("admin backups (-want +got):\n%s", diff)
			}
			prune := func(args ...string) []row {
				out, _, err := runCLI(t, append([]string{"admin", "backups", "prune", "--json", "--data-dir", data}, args...)...)
				var got struct{ Backups []privacy.Pruned }
				if exitCode(err) != 1 || json.Unmarshal([]byte(out), &got) != nil {
					t.Fatalf("admin backups prune %v: %v\n%s; want exit 1 (a backup left)", args, err, out)
				}
				var rows []row
				for _, p := range got.Backups {
					rows = append(rows, row{Dir: filepath.Base(p.Dir), Outcome: p.Outcome})
				}
				return rows
			}
			wantPruned := []row{{"stopped", "", privacy.PruneLeft}, {"old", "", privacy.PruneRemoved}}
			if diff := cmp.Diff(wantPruned, prune("--dry-run")); diff != "" {
				t.Errorf("admin backups prune --dry-run (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(old); err != nil {
				t.Errorf("--dry-run removed %s: %v", old, err)
			}
			if diff := cmp.Diff(wantPruned, prune()); diff != "" {
				t.Errorf("admin backups prune (-want +got):\n%s", diff)
			}
			for path, there := range map[string]bool{old: false, stopped: true, fresh: true} {
				if _, err := os.Stat(path); (err == nil) != there {
					t.Errorf("%s after prune: %v; want it there = %v", filepath.Base(path), err, there)
				}
			}
			want = []row{{"stopped", privacy.BackupIncomplete, ""}, {"backup", privacy.BackupComplete, ""}}
			if diff := cmp.Diff(want, list()); diff != "" {
				t.Errorf("admin backups after prune (-want +got):\n%s", diff)
			}
			out, _, err := runCLI(t, "admin", "backups", "prune", "--data-dir", data)
			wantLine := "left             " + stopped
			if exitCode(err) != 1 || !strings.Contains(out, wantLine) || !strings.Contains(out, "removed 0 backups past retention") {
				t.Errorf("admin backups prune again: %v\n%s\nwant exit 1, %q and none removed", err, out, wantLine)
			}
		})
	}
}

// TestAdminBackupsReportsUnusableRegistry: "admin backups" reports a
// registry it cannot use as "admin check" does (a line, damaged_registry
// with --json, exit 1), lists its copy's backups, and changes nothing.
func TestAdminBackupsReportsUnusableRegistry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		damage   func(t *testing.T, data string)
		code     int
		from     string
		registry string // grepped line of the text output; "" none
	}{
		{"readable", func(*testing.T, string) {}, 0, "backups.json", ""},
		{"cut short", func(t *testing.T, data string) {
			if err := os.WriteFile(filepath.Join(data, "backups.json"), []byte(`{"backups": [{"dir": "`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, 1, "backups.copy.json",
			"  damaged      backups.json (backup registry): backups.json does not decode: unexpected end of JSON input; the next backup or customer deletion sets it aside and rebuilds it"},
		{"unreadable", func(t *testing.T, data string) { // a directory: unreadable even as root
			path := filepath.Join(data, "backups.json")
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, 1, "backups.copy.json",
			"  unreadable   backups.json (backup registry): backups.json cannot be read: is a directory; fix its permissions or disk: until then deletions are owed to every backup (backups-owed.jsonl) and no backup can be taken or restored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, data, backup := backedUpTenant(t)
			tc.damage(t, data)
			before := dataDirSnapshot(t, data)
			out, _, err := runCLI(t, "admin", "backups", "--json", "--data-dir", data)
			var got struct {
				Backups    []privacy.BackupInfo `json:"backups"`
				From       string               `json:"listed_from"`
				HasDamaged map[string]string    `json:"damaged_registry"`
			}
			if exitCode(err) != tc.code || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("admin backups --json: %v\n%s; want exit %d", err, out, tc.code)
			}
			var dirs []string
			for _, b := range got.Backups {
				dirs = append(dirs, b.Dir)
			}
			if diff := cmp.Diff([]string{backup}, dirs); diff != "" || got.From != tc.from || (got.HasDamaged != nil) != (tc.code != 0) {
				t.Errorf("admin backups --json: from %q, damaged_registry %v, dirs (-want +got):\n%s", got.From, got.HasDamaged, diff)
			}
			text, _, _ := runCLI(t, "admin", "backups", "--data-dir", data)
			if got := grepLines(text, "backup registry)"); got != tc.registry {
				t.Errorf("admin backups: registry line %q, want %q\n%s", got, tc.registry, text)
			}
			if diff := cmp.Diff(before, dataDirSnapshot(t, data)); diff != "" {
				t.Errorf("admin backups changed the data dir (-before +after):\n%s", diff)
			}
		})
	}
}

// TestAdminBackupsDamagedExitsOne: a backup whose store file had a byte
// flipped is complete by size and damaged with --verify, which exits 1,
// so that a scheduled check can alert; one cut short is damaged, exit 1,
// without it. The command exited 0 whatever it found. One without its
// manifest (a backup that stopped) is incomplete, exit 1 with or without
// --verify, as "admin backups prune" exits 1 leaving one: it exited 0.
func TestAdminBackupsDamagedExitsOne(t *testing.T) {
	_, data, backup := backedUpTenant(t)
	var biggest string
	filepath.WalkDir(filepath.Join(backup, "db"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (biggest == "" || fileSize(t, path) > fileSize(t, biggest)) {
			biggest = path
		}
		return err
	})
	b, err := os.ReadFile(biggest)
	if err != nil || len(b) == 0 {
		t.Fatalf("read %s: %v", biggest, err)
	}
	state := func(args ...string) (string, int) {
		out, _, err := runCLI(t, append([]string{"admin", "backups", "--json", "--data-dir", data}, args...)...)
		var got struct{ Backups []privacy.BackupInfo }
		if json.Unmarshal([]byte(out), &got) != nil || len(got.Backups) != 1 {
			t.Fatalf("admin backups %v: %v\n%s", args, err, out)
		}
		return got.Backups[0].State, exitCode(err)
	}
	b[len(b)/2] ^= 0xff
	writeBytes(t, biggest, b)
	got := [][]any{}
	for _, args := range [][]string{nil, {"--verify"}} {
		s, code := state(args...)
		got = append(got, []any{s, code})
	}
	writeBytes(t, biggest, b[:len(b)/2])
	s, code := state()
	got = append(got, []any{s, code})
	ageBackup(t, data, backup, time.Now().UTC(), false)
	for _, args := range [][]string{nil, {"--verify"}} {
		s, code := state(args...)
		got = append(got, []any{s, code})
	}
	want := [][]any{{privacy.BackupComplete, 0}, {privacy.BackupDamaged, 1}, {privacy.BackupDamaged, 1},
		{privacy.BackupIncomplete, 1}, {privacy.BackupIncomplete, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flipped byte, then with --verify, then cut short, then no manifest, then with --verify: state, exit (-want +got):\n%s", diff)
	}
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSameOutDir: serve, running "admin backup" for a client through the
// admin socket, refuses an --out it sees elsewhere than the client does
// (the shipped unit's private /tmp: the backup went out of the operator's
// sight and was removed when the service stopped), and takes one both see
// alike, or one it cannot compare. The client's view is a directory
// standing for its /proc/PID/root.
func TestSameOutDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "srv"), 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(base, "srv", "bk")
	other := t.TempDir() // a view with its own directory at base/srv
	if err := os.MkdirAll(filepath.Join(other, base, "srv"), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root string
		refused    bool
	}{
		{"no client known", "", false},
		{"the same view", "/", false},
		{"a view with another directory there", other, true},
		{"a view without the directory", t.TempDir(), true},
		{"a view that cannot be read", filepath.Join(base, "gone"), false},
	}
	for _, tc := range tests {
		err := sameOutDir(out, tc.root)
		if refused := err != nil && strings.Contains(err.Error(), "--out "+out); refused != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}
