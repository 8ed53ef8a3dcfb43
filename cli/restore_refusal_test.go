package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
)

// backupWithEvents takes, into a new directory, a backup of a data dir
// holding n purchases ingested one synced batch each (so that the
// backup's write-ahead log holds them), and returns the backup's path.
func backupWithEvents(t *testing.T, n int) string {
	t.Helper()
	dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	e, now := sandboxEnv(t, dataDir)
	defer e.close()
	for i := range n {
		ev := engine.Event{ID: fmt.Sprintf("ev-%d", i), ClienteRef: fmt.Sprintf("cliente-%04d", i), TS: now.Add(-time.Hour),
			Tipo: engine.CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t-%d", i), MargenCents: 2500}
		if res, err := e.svc.engine.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
			t.Fatalf("ingest: %+v %v", res, err)
		}
	}
	if _, err := runBackup(context.Background(), e, bk, io.Discard); err != nil {
		t.Fatal(err)
	}
	return bk
}

// largestDBFile is the path of the largest file of the backup's db.
func largestDBFile(t *testing.T, bk string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(bk, "db"))
	if err != nil {
		t.Fatal(err)
	}
	var best string
	var size int64 = -1
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && info.Size() > size {
			best, size = filepath.Join(bk, "db", e.Name()), info.Size()
		}
	}
	return best
}

// flipByte flips one bit of the byte in the middle of the file at path.
func flipByte(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		t.Fatalf("read %s: %v (%d bytes)", path, err, len(data))
	}
	data[len(data)/2] ^= 0x20
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesChangedBackup: a restore of a backup that is not as
// it was taken refuses, with an error naming the problem, before it
// touches the data dir: a missing data dir is not even created (files
// missing or cut short: TestRestoreRefusesDamagedBackup). A flipped byte
// keeps every size: the store read its log back only up to the damage and
// the restore served without the writes after it.
func TestRestoreRefusesChangedBackup(t *testing.T) {
	pristine := backupWithEvents(t, 200)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, bk string) string // the backup to restore
		want   string
	}{
		{"a byte flipped in the store's largest file", func(t *testing.T, bk string) string {
			flipByte(t, largestDBFile(t, bk))
			return bk
		}, "is damaged: db/"},
		{"a byte flipped in the store's OPTIONS", func(t *testing.T, bk string) string {
			paths, _ := filepath.Glob(filepath.Join(bk, "db", "OPTIONS-*"))
			if len(paths) != 1 {
				t.Fatalf("OPTIONS files: %v", paths)
			}
			flipByte(t, paths[0])
			return bk
		}, "is damaged: db/OPTIONS-"},
		// Still decodes: restored, it gave the installation other keys
		// (tokens, decision ids and customer hashes void).
		{"a letter of keys.json changed", func(t *testing.T, bk string) string {
			path := filepath.Join(bk, "keys.json")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			i := strings.Index(string(data), `"hash":"`) + len(`"hash":"`) + 4
			data[i] = map[bool]byte{true: 'B', false: 'A'}[data[i] == 'A']
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "is damaged: keys.json does not match the checksum its manifest lists"},
		{"a file added", func(t *testing.T, bk string) string {
			if err := os.WriteFile(filepath.Join(bk, "db", "000999.log"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "is damaged"},
		{"a backup from a newer coupond", func(t *testing.T, bk string) string {
			path := filepath.Join(bk, "manifest.json")
			data, _ := os.ReadFile(path)
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), `"format": 1`, `"format": 2`, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "made by a newer coupond (backup format 2; this one reads format 1)"},
		{"no manifest", func(t *testing.T, bk string) string {
			if err := os.Remove(filepath.Join(bk, "manifest.json")); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "is not a complete backup: it has no manifest.json"},
		{"--from does not exist", func(t *testing.T, bk string) string {
			return filepath.Join(bk, "typo")
		}, "/typo does not exist: give --from a backup directory made by admin backup (admin backups lists them)"},
		{"--from is a file", func(t *testing.T, bk string) string {
			return filepath.Join(bk, "keys.json")
		}, "is not a complete backup: it has no manifest.json"},
		// Refused after the data dir was made and locked: it is removed
		// again (it was left holding only its lock file).
		{"a garbled deletion ledger", func(t *testing.T, bk string) string {
			if err := os.WriteFile(filepath.Join(bk, "deletions.jsonl"), []byte("{garbled\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "deletions.jsonl"},
		{"no keys", func(t *testing.T, bk string) string {
			if err := os.Remove(filepath.Join(bk, "keys.json")); err != nil {
				t.Fatal(err)
			}
			return bk
		}, "keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.damage(t, copyDataDir(t, pristine))
			dataDir := filepath.Join(t.TempDir(), "restored")
			_, err := runRestore(context.Background(), dataDir, src, time.Now, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v; want an error holding %q", err, tc.want)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused restore left the data dir it was given (%v); want it not created", err)
			}
		})
	}
	// The pristine backup restores: the refusals are the damage's.
	if _, err := runRestore(context.Background(), filepath.Join(t.TempDir(), "restored"), pristine, time.Now, io.Discard); err != nil {
		t.Fatalf("restore of the undamaged backup: %v", err)
	}
}

// TestConcurrentBackupsIntoOneDir: of backups taken into one directory at
// once (two operators, a timer and a hand), one succeeds, complete and
// registered once, and the others fail without touching it. Before, one
// that failed discarded the directory it thought it had made: the other
// reported a backup that was gone and no longer registered.
func TestConcurrentBackupsIntoOneDir(t *testing.T) {
	dataDir := t.TempDir()
	e, _ := sandboxEnv(t, dataDir)
	defer e.close()
	for round := range 8 {
		dir := filepath.Join(t.TempDir(), "backups", fmt.Sprintf("b%d", round))
		errs := make(chan error, 4)
		for range cap(errs) {
			go func() {
				_, err := runBackup(context.Background(), e, dir, io.Discard)
				errs <- err
			}()
		}
		var ok int
		var failures []string
		for range cap(errs) {
			if err := <-errs; err == nil {
				ok++
			} else {
				failures = append(failures, err.Error())
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d backups succeeded (failures: %q); want exactly one", round, ok, failures)
		}
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
			t.Fatalf("round %d: the backup that succeeded has no manifest: %v", round, err)
		}
		var reg struct {
			Backups []struct {
				Dir      string `json:"dir"`
				Complete bool   `json:"complete"`
			} `json:"backups"`
		}
		data, err := os.ReadFile(filepath.Join(dataDir, "backups.json"))
		if err != nil || json.Unmarshal(data, &reg) != nil {
			t.Fatalf("backups.json: %v", err)
		}
		var entries []bool
		for _, b := range reg.Backups {
			if b.Dir == dir {
				entries = append(entries, b.Complete)
			}
		}
		if diff := cmp.Diff([]bool{true}, entries); diff != "" {
			t.Fatalf("round %d: registry entries of the backup (complete?) (-want +got):\n%s", round, diff)
		}
	}
}

// TestRestoreRefusesTarget: a restore refuses, changing nothing, a data
// dir that holds other files and no coupond data (a mistyped path: the
// restore wrote db, keys and registry beside them), and one that is the
// backup or lies inside it (the restore replaced the backup's own store),
// and one it cannot create names --data-dir (it said only "mkdir …: not a
// directory"). A data dir with coupond's files in it is replaced, others'
// files kept.
func TestRestoreRefusesTarget(t *testing.T) {
	pristine := backupWithEvents(t, 3)
	for _, tc := range []struct {
		name   string
		target func(t *testing.T, bk string) string
		want   string // "" for a restore that succeeds
	}{
		{"not empty, no coupond data", func(t *testing.T, _ string) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "is not empty and is not a coupond data dir"},
		{"the backup itself", func(t *testing.T, bk string) string { return bk }, "lie one inside the other"},
		{"one that cannot be made", func(t *testing.T, _ string) string {
			if _, err := os.Stat("/proc/self"); err != nil {
				t.Skip("no /proc: no directory that even root cannot make")
			}
			return "/proc/coupond-no-such-dir/data" // missing, and no mkdir succeeds in /proc
		}, "--data-dir /proc/coupond-no-such-dir/data: cannot create it"},
		{"inside the backup", func(t *testing.T, bk string) string { return filepath.Join(bk, "data") }, "lie one inside the other"},
		{"a data dir with the operator's log beside it", func(t *testing.T, _ string) string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "results"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "serve.log"), []byte("log"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bk := copyDataDir(t, pristine)
			dataDir := tc.target(t, bk)
			before := treeOf(t, filepath.Dir(bk))
			_, err := runRestore(context.Background(), dataDir, bk, time.Now, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("restore: %v; want it to go on", err)
				}
				if _, err := os.Stat(filepath.Join(dataDir, "serve.log")); err != nil {
					t.Errorf("the operator's file beside the data: %v; want it kept", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v; want an error holding %q", err, tc.want)
			}
			if diff := cmp.Diff(before, treeOf(t, filepath.Dir(bk))); diff != "" {
				t.Errorf("the refused restore changed the backup (-before +after):\n%s", diff)
			}
		})
	}
}

// treeOf lists the paths under dir with their sizes.
func treeOf(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	return pathsTo(t, dir, func(i fs.FileInfo) int64 { return i.Size() })
}

// TestBackupThroughSymlinkRegistersRealDir: a backup whose --out is a
// symbolic link to an empty directory is registered by the directory's
// real path, so listing, pruning and ledgers reach the backup itself; the
// link's own path was registered, and prune could only leave it.
func TestBackupThroughSymlinkRegistersRealDir(t *testing.T) {
	dataDir, root := t.TempDir(), t.TempDir()
	real, link := filepath.Join(root, "real"), filepath.Join(root, "latest")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	e, _ := sandboxEnv(t, dataDir)
	defer e.close()
	if _, err := runBackup(context.Background(), e, link, io.Discard); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dataDir, "backups.json"))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct{ Backups []struct{ Dir string } }
	if err := json.Unmarshal(data, &reg); err != nil {
		t.Fatal(err)
	}
	realResolved, _ := filepath.EvalSymlinks(real)
	if len(reg.Backups) != 1 || reg.Backups[0].Dir != realResolved {
		t.Errorf("registered %+v; want the real directory %s", reg.Backups, realResolved)
	}
}

// TestRestoreDataDirModes: admin restore holds a data dir that is already
// there to the rules serve and every admin command hold it to (contract
// section 8): one that group or others can write is refused before the
// customers' data is written into it, changing nothing, and a wider mode
// (0755) ends up owner-only. The restore wrote the store into a 0777 dir
// (that serve then refused) and left a 0755 one readable by others.
func TestRestoreDataDirModes(t *testing.T) {
	pristine := backupWithEvents(t, 3)
	for _, tc := range []struct {
		name string
		mode fs.FileMode
		want string // "" for a restore that succeeds
	}{
		{"0755", 0o755, ""},
		{"0700", 0o700, ""},
		{"0777", 0o777, "is writable by group or others (mode 0777): refusing to use it"},
		{"0770", 0o770, "is writable by group or others (mode 0770): refusing to use it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dataDir, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, _, err := runCLI(t, "admin", "restore", "--from", pristine, "--data-dir", dataDir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dataDir) {
					t.Fatalf("restore into a %04o dir: %v; want an error naming the dir and holding %q", tc.mode, err, tc.want)
				}
				if names, err := os.ReadDir(dataDir); err != nil || len(names) > 0 {
					t.Errorf("the refused restore wrote into the data dir: %v (%v)", names, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("restore into a %04o dir: %v", tc.mode, err)
			}
			wrong := map[string]fs.FileMode{}
			filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				info, _ := d.Info()
				want := fs.FileMode(0o600)
				if d.IsDir() {
					want = 0o700
				}
				if got := info.Mode().Perm(); got != want {
					wrong[path] = got
				}
				return nil
			})
			if diff := cmp.Diff(map[string]fs.FileMode{}, wrong); diff != "" {
				t.Errorf("paths not owner-only after the restore (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBackupHoldsTheDaysCounts: a backup holds the day's quota use and the
// console's counters as they are in memory when it is taken, not as last
// flushed (every 5 seconds): a restored tenant had its quota's use of
// those seconds back.
func TestBackupHoldsTheDaysCounts(t *testing.T) {
	dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	e, now := sandboxEnv(t, dataDir)
	diezCatalog(t, e.svc.engine, now)
	for i := range 3 {
		if _, err := e.svc.engine.Decide("acme", engine.Request{ClienteRef: fmt.Sprintf("cliente-%04d", i), Canal: "push"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runBackup(context.Background(), e, bk, io.Discard); err != nil {
		t.Fatal(err)
	}
	e.close()
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := runRestore(context.Background(), restored, bk, time.Now, io.Discard); err != nil {
		t.Fatal(err)
	}
	r, err := openEnv(context.Background(), restored, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	used, err := r.svc.engine.Quotas.Used("acme", engine.QuotaDecisions, now)
	if err != nil || used != 3 {
		t.Errorf("restored decisions quota use: %d, %v; want 3", used, err)
	}
}

// TestRestoreGarbledKeysOfOlderBackup: the keys.json of a backup made
// before manifests held its checksum, garbled, is reported as the backup's
// damage, restored into the installation's own data dir or a new one. It
// was "comes from another installation" beside the data dir's keys, and in
// a new one the store's advice to restore that very backup.
func TestRestoreGarbledKeysOfOlderBackup(t *testing.T) {
	dataDir, pristine := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	e, _ := sandboxEnv(t, dataDir)
	if _, err := runBackup(context.Background(), e, pristine, io.Discard); err != nil {
		t.Fatal(err)
	}
	e.close()
	for _, target := range []struct{ name, dir string }{{"its data dir", dataDir}, {"a new data dir", filepath.Join(t.TempDir(), "new")}} {
		t.Run(target.name, func(t *testing.T) {
			bk := copyDataDir(t, pristine)
			path := filepath.Join(bk, "manifest.json")
			var m map[string]any
			data, _ := os.ReadFile(path)
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "keys_sha256")
			data, _ = json.Marshal(m)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bk, "keys.json"), []byte(`{"token":"garbled`), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := runRestore(context.Background(), target.dir, bk, time.Now, io.Discard)
			if want := "is damaged: its keys.json does not decode (restore another backup)"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("restore: %v; want an error holding %q", err, want)
			}
		})
	}
}

// TestRestoreRefusesBackupOthersCouldChange: a backup that another user
// could have changed (its directory, or a file in it, another user's, or
// writable by group or others, or a directory above it that they can
// change) is refused before the data dir is made:
// whoever writes there plants keys.json (and then signs tokens for every
// credential) or a store with a credential of theirs, and rewrites the
// manifest's checksums to match. Readable by others is not refused (a copy
// made by rsync or cp without -p), only writable.
func TestRestoreRefusesBackupOthersCouldChange(t *testing.T) {
	pristine := backupWithEvents(t, 3)
	const nobody = 65534
	for _, tc := range []struct {
		name     string
		change   func(bk string) error
		rootOnly bool
		want     string // "" for restored
	}{
		{"--from writable by others", func(bk string) error { return os.Chmod(bk, 0o777) }, false, "is writable by group or others (mode 0777)"},
		{"keys.json writable by group", func(bk string) error { return os.Chmod(filepath.Join(bk, "keys.json"), 0o620) }, false, "keys.json is writable by group or others (mode 0620)"},
		{"db writable by others", func(bk string) error { return os.Chmod(filepath.Join(bk, "db"), 0o703) }, false, "db is writable by group or others"},
		{"keys.json another user's", func(bk string) error { return os.Chown(filepath.Join(bk, "keys.json"), nobody, nobody) }, true, "keys.json belongs to another user (uid 65534)"},
		{"--from another user's", func(bk string) error { return os.Chown(bk, nobody, nobody) }, true, "belongs to another user (uid 65534)"},
		// Its owner could swap it between the checks and the copy.
		{"in a directory writable by others", func(bk string) error { return os.Chmod(filepath.Dir(bk), 0o777) }, false, "is writable by group or others (mode 0777), who could swap the backup"},
		{"readable by others", func(bk string) error { return os.Chmod(filepath.Join(bk, "keys.json"), 0o644) }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && os.Getuid() != 0 {
				t.Skip("needs root to give a file to another user")
			}
			src := copyDataDir(t, pristine)
			if err := tc.change(src); err != nil {
				t.Fatal(err)
			}
			dataDir := filepath.Join(t.TempDir(), "restored")
			_, err := runRestore(context.Background(), dataDir, src, time.Now, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("restore: %v; want it restored", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v; want an error holding %q", err, tc.want)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused restore left the data dir it was given (%v); want it not created", err)
			}
		})
	}
}
