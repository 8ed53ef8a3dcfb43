package privacy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

func TestLedgerReachesRegisteredBackups(t *testing.T) {
	dataDir := t.TempDir()
	fresh, old, gone := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "gone")
	now := time.Now().UTC()
	reg := &backupRegistry{Backups: []backupEntry{
		{Dir: fresh, TakenAt: now.Add(-time.Hour), Complete: true},
		{Dir: old, TakenAt: now.Add(-BackupRetention - time.Hour), Complete: true},
		{Dir: gone, TakenAt: now.Add(-time.Hour), Complete: true},
	}}
	bk := NewBackups(dataDir, func() time.Time { return now }, zerolog.Nop())
	if err := bk.saveRegistry(reg); err != nil {
		t.Fatal(err)
	}
	hook := bk.Ledger
	entry := LedgerEntry{Tenant: "acme", Hash: "abc123", RequestedAt: now, ClientID: "ci_1"}
	if err := hook(entry); err != nil {
		t.Fatal(err)
	}
	got, err := readLedger(filepath.Join(fresh, ledgerFile))
	if err != nil || len(got) != 1 || got[0].Hash != "abc123" || got[0].Tenant != "acme" {
		t.Errorf("fresh backup ledger: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(old, ledgerFile)); err == nil {
		t.Error("a backup past retention received a deletion")
	}
	after, _ := bk.loadRegistry()
	want := []backupEntry{reg.Backups[0], reg.Backups[2]}
	want[1].Missing = true
	if diff := cmp.Diff(want, after.Backups); diff != "" {
		t.Errorf("registry after the hook (-want +got): the backups within retention, the one not there marked missing:\n%s", diff)
	}
	// The deletion is owed to the missing backup, and reaches its ledger,
	// before the next one, once it is back (its disk mounted again).
	if owed, err := bk.owedTo(gone); err != nil || !cmp.Equal(owed, []LedgerEntry{entry}) {
		t.Errorf("owed to the missing backup: %+v %v", owed, err)
	}
	if err := os.Mkdir(gone, 0o700); err != nil {
		t.Fatal(err)
	}
	next := LedgerEntry{Tenant: "acme", Hash: "def456", RequestedAt: now, ClientID: "ci_1"}
	if err := hook(next); err != nil {
		t.Fatal(err)
	}
	got, err = readLedger(filepath.Join(gone, ledgerFile))
	if diff := cmp.Diff([]LedgerEntry{entry, next}, got); err != nil || diff != "" {
		t.Errorf("ledger of the backup back (-want +got): %v\n%s", err, diff)
	}
	if owed, err := bk.owedTo(gone); err != nil || len(owed) != 0 {
		t.Errorf("still owed once delivered: %+v %v", owed, err)
	}
	if after, _ := bk.loadRegistry(); after.Backups[1].Missing {
		t.Errorf("a backup back is still marked missing: %+v", after.Backups)
	}
}

// TestLedgerOwesUnwritableBackup: a backup whose ledger cannot be written
// (a read-only file system, no permission) while a customer is erased is
// owed the deletion, like a missing one, and the erasure of live data and
// of the other backups goes on; it is delivered once the backup can be
// written. The first such backup failed the hook, so the deletion worker
// left the customer's data in place, and the backups after it unledgered,
// until the operator fixed the disk.
func TestLedgerOwesUnwritableBackup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errno error // injected for the middle backup; nil: a real read-only directory
	}{
		{"read-only file system", syscall.EROFS},
		{"no permission", syscall.EACCES},
		{"read-only directory", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.errno == nil && os.Geteuid() == 0 {
				t.Skip("running as root: directory permissions are not enforced (the injected cases cover it)")
			}
			e, p, db, clk := newTest(t, 1)
			ingestFor(t, e, "dora-00000001", "d", 3)
			dataDir := t.TempDir()
			dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
			bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
			reg := &backupRegistry{}
			for _, dir := range dirs {
				if err := claimLedger(filepath.Join(dir, ledgerFile)); err != nil {
					t.Fatal(err)
				}
				reg.Backups = append(reg.Backups, backupEntry{Dir: dir, TakenAt: t0.Add(-time.Hour), Complete: true})
			}
			if err := bk.saveRegistry(reg); err != nil {
				t.Fatal(err)
			}
			unwritable := dirs[1]
			readOnly := func(on bool) {
				if tc.errno == nil {
					mode := os.FileMode(0o700)
					if on {
						mode = 0o500
					}
					os.Chmod(filepath.Join(unwritable, ledgerFile), mode&0o600)
					os.Chmod(unwritable, mode)
					return
				}
				bk.appendBackup = appendToLedger
				if on {
					bk.appendBackup = func(dir string, lines []byte) error {
						if dir == unwritable {
							return &fs.PathError{Op: "open", Path: filepath.Join(dir, ledgerFile), Err: tc.errno}
						}
						return appendToLedger(dir, lines)
					}
				}
			}
			readOnly(true)
			defer readOnly(false)
			hash := eraseWithLedger(t, p, db, bk.Ledger, "dora-00000001", "with an unwritable backup")
			for _, dir := range []string{dirs[0], dirs[2]} {
				if diff := cmp.Diff([]string{hash}, ledgerHashes(t, dir)); diff != "" {
					t.Errorf("ledger of a writable backup (-want +got):\n%s", diff)
				}
			}
			owed, err := bk.owedTo(unwritable)
			if err != nil || len(owed) == 0 || owed[0].Hash != hash {
				t.Errorf("owed to the unwritable backup: %+v %v; want the deletion", owed, err)
			}
			// A later deletion, the backup still unwritable: the owed one
			// cannot be delivered yet, which holds back neither.
			later := LedgerEntry{Tenant: "acme", Hash: "h-later", RequestedAt: t0.Add(time.Minute), ClientID: "ci_1"}
			if err := bk.Ledger(later); err != nil {
				t.Fatalf("later deletion with owed deletions undeliverable: %v", err)
			}
			if diff := cmp.Diff([]string{hash, "h-later"}, ledgerHashes(t, dirs[2])); diff != "" {
				t.Errorf("ledger of a writable backup after the later deletion (-want +got):\n%s", diff)
			}
			// Writable again: the next delivery brings the deletions to it.
			readOnly(false)
			clk.Advance(time.Minute)
			if err := bk.DeliverOwedDue(time.Minute); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{hash, "h-later"}, ledgerHashes(t, unwritable)); diff != "" {
				t.Errorf("ledger of the backup writable again (-want +got):\n%s", diff)
			}
			if owed, err := bk.owedTo(unwritable); err != nil || len(owed) != 0 {
				t.Errorf("still owed once delivered: %+v %v", owed, err)
			}
		})
	}
}

// TestLedgerAfterTornAppend: an append cut short (disk full, crash) leaves
// part of a line the deletion worker never counted as written; it retries,
// and the backup's ledger must still read back whole, with the retried
// entry, or the backup could never be restored.
func TestLedgerAfterTornAppend(t *testing.T) {
	now := time.Now().UTC()
	first := LedgerEntry{Tenant: "acme", Hash: "h-first", RequestedAt: now.Add(-time.Minute), ClientID: "ci_1"}
	retried := LedgerEntry{Tenant: "acme", Hash: "h-retried", RequestedAt: now, ClientID: "ci_1"}
	for _, torn := range []string{`{"tenant":"acme","clie`, `{`} {
		dataDir, backup := t.TempDir(), t.TempDir()
		bk := NewBackups(dataDir, func() time.Time { return now }, zerolog.Nop())
		if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: backup, TakenAt: now.Add(-time.Hour), Complete: true}}}); err != nil {
			t.Fatal(err)
		}
		if err := bk.Ledger(first); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(backup, ledgerFile), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(torn)
		f.Close()
		if err := bk.Ledger(retried); err != nil {
			t.Fatal(err)
		}
		got, err := readLedger(filepath.Join(backup, ledgerFile))
		if err != nil {
			t.Fatalf("torn %q: ledger unreadable after the retry: %v", torn, err)
		}
		if diff := cmp.Diff([]LedgerEntry{first, retried}, got); diff != "" {
			t.Errorf("torn %q: ledger (-want +got):\n%s", torn, diff)
		}
	}
}

// TestBackupRefusedInsideDataDir: a backup inside the data dir would keep
// there the data of every customer deleted later (the contract's deletion
// reaches everything in the data dir), so --out must lie outside it,
// whatever its name; directories beside the data dir are fine.
func TestBackupRefusedInsideDataDir(t *testing.T) {
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	bk := NewBackups(dataDir, time.Now, zerolog.Nop())
	if err := os.MkdirAll(filepath.Join(dataDir, "vacio"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dataDir, "vacio"), filepath.Join(root, "link-in")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dataDir, filepath.Join(root, "link-data")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir    string
		inside bool
	}{
		{filepath.Join(dataDir, "backup"), true},
		{filepath.Join(dataDir, "..backup"), true},
		{dataDir, true},
		{filepath.Join(root, "data-backup"), false},
		{filepath.Join(root, "backup"), false},
		// Through symbolic links: a link into the data dir, and a new
		// directory under a link to it, are inside it.
		{filepath.Join(root, "link-in"), true},
		{filepath.Join(root, "link-data", "nuevo"), true},
	} {
		_, err := bk.prepareDir(tc.dir)
		if refused := err != nil && strings.Contains(err.Error(), "inside the data dir"); refused != tc.inside {
			t.Errorf("--out %s: %v; want refused as inside the data dir = %v", tc.dir, err, tc.inside)
		}
	}
}

// TestBackupRefusesAnotherUsersOut: an --out that exists and belongs to
// another user, directly or behind a symbolic link, is refused: its owner
// could swap the backup's deletion ledger or keys before a restore. One of
// this user's, or a new one, is taken. (Root only: it chowns to nobody.)
func TestBackupRefusesAnotherUsersOut(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	const nobody = 65534
	root := t.TempDir()
	bk := NewBackups(filepath.Join(root, "data"), time.Now, zerolog.Nop())
	theirs := filepath.Join(root, "theirs")
	for _, d := range []string{theirs, filepath.Join(root, "mine")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(theirs, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		refused bool
	}{{"theirs", true}, {"link", true}, {"mine", false}, {"new", false}} {
		_, err := bk.prepareDir(filepath.Join(root, tc.name))
		if refused := err != nil && strings.Contains(err.Error(), "belongs to another user"); refused != tc.refused {
			t.Errorf("--out %s: %v; want refused = %v", tc.name, err, tc.refused)
		}
	}
}

// TestLedgerPastDamagedRegistry: a backups.json that does not decode (cut
// short, zeroed, overwritten) never stops a deletion (contract §8): it is
// set aside, owner-only, and the backups it named, and those beside them
// (same installation), are registered again, so the deletion still
// reaches each one's ledger.
func TestLedgerPastDamagedRegistry(t *testing.T) {
	now := time.Now().UTC()
	entry := LedgerEntry{Tenant: "acme", Hash: "abc123", RequestedAt: now, ClientID: "ci_1"}
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
		noCopy bool // its copy is lost too
	}{
		{"cut short", func(data []byte) []byte { return data[:len(data)/2] }, false},
		{"zeroed", func(data []byte) []byte { return make([]byte, len(data)) }, false},
		{"overwritten", func([]byte) []byte { return []byte("not json") }, false},
		// Those it still names, and those beside them: b2, cut off.
		{"cut short, copy lost", func(data []byte) []byte { return data[:len(data)/2] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, root := t.TempDir(), t.TempDir()
			keys := []byte(`{"token":"k"}`)
			if err := os.WriteFile(filepath.Join(dataDir, "keys.json"), keys, 0o600); err != nil {
				t.Fatal(err)
			}
			bk := NewBackups(dataDir, func() time.Time { return now }, zerolog.Nop())
			var dirs []string
			reg := &backupRegistry{}
			for i := 0; i < 3; i++ {
				dir := filepath.Join(root, fmt.Sprintf("b%d", i))
				taken := now.Add(-time.Duration(3-i) * time.Hour).Truncate(time.Second)
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				for name, data := range map[string][]byte{ledgerFile: nil, "keys.json": keys,
					ManifestFile: fmt.Appendf(nil, `{"format":1,"taken_at":%q}`, taken.Format(time.RFC3339))} {
					if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				dirs = append(dirs, dir)
				reg.Backups = append(reg.Backups, backupEntry{Dir: dir, TakenAt: taken, Complete: true})
				if err := bk.saveRegistry(reg); err != nil {
					t.Fatal(err)
				}
			}
			// A backup of another installation beside them is not this
			// one's to feed.
			other := filepath.Join(root, "other")
			os.Mkdir(other, 0o700)
			for name, data := range map[string][]byte{ledgerFile: nil, "keys.json": []byte(`{"token":"other"}`)} {
				if err := os.WriteFile(filepath.Join(other, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.noCopy {
				os.Remove(filepath.Join(dataDir, registryCopy))
			}
			path := filepath.Join(dataDir, backupsFile)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			damaged := tc.damage(data)
			if err := os.WriteFile(path, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := bk.Ledger(entry); err != nil {
				t.Fatalf("deletion past a damaged backup registry: %v", err)
			}
			for _, dir := range dirs {
				got, err := readLedger(filepath.Join(dir, ledgerFile))
				if diff := cmp.Diff([]LedgerEntry{entry}, got); err != nil || diff != "" {
					t.Errorf("ledger of %s (-want +got): %v\n%s", dir, err, diff)
				}
			}
			aside, _ := filepath.Glob(path + ".damaged-*")
			if len(aside) != 1 {
				t.Fatalf("damaged registry set aside as %v, want one file", aside)
			}
			if info, err := os.Stat(aside[0]); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("set-aside registry: %v %v, want mode 0600", info, err)
			}
			if kept, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(kept, damaged) {
				t.Errorf("set-aside registry does not hold the damaged bytes: %v", err)
			}
			after, err := bk.loadRegistry()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(other, ledgerFile)); len(got) > 0 {
				t.Errorf("another installation's backup received the deletion: %s", got)
			}
			if diff := cmp.Diff(reg.Backups, after.Backups); diff != "" {
				t.Errorf("registry rebuilt (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailedTakeRemovesOnlyWhatItMade: a backup that fails (here the data
// dir has no keys.json to copy) removes what it made and no more: an --out
// directory it created goes, with the parents it created for it; one the
// operator made beforehand stays, empty, for the next attempt. Neither is
// left registered.
func TestFailedTakeRemovesOnlyWhatItMade(t *testing.T) {
	for _, tc := range []struct {
		name     string
		premade  bool // the operator made --out beforehand
		wantKept bool
	}{
		{"--out made by the operator", true, true},
		{"--out made by the backup", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, db, clk := newTest(t, 1)
			dataDir, root := t.TempDir(), t.TempDir()
			parent := filepath.Join(root, "backups")
			out := filepath.Join(parent, "b1")
			if tc.premade {
				if err := os.MkdirAll(out, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
			if _, err := bk.Take(t.Context(), db, out, "test", io.Discard); err == nil {
				t.Fatal("backup without keys.json succeeded; want it to fail")
			}
			entries, err := os.ReadDir(out)
			switch {
			case tc.wantKept && err != nil:
				t.Errorf("--out made by the operator is gone after a failed backup: %v", err)
			case tc.wantKept && len(entries) != 0:
				t.Errorf("--out made by the operator holds %v after a failed backup; want it empty", entries)
			case !tc.wantKept && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("--out the backup created is still there (%v, %v)", entries, err)
			}
			if _, err := os.Stat(parent); tc.wantKept != (err == nil) {
				t.Errorf("parent of --out: %v; want it there = %v", err, tc.wantKept)
			}
			reg, err := bk.loadRegistry()
			if err != nil || len(reg.Backups) != 0 {
				t.Errorf("registry after a failed backup: %+v %v; want none registered", reg, err)
			}
		})
	}
}

// TestTakeRefusesChangedKeys: a keys.json changed on disk after the
// server read it (a byte flipped in a key, still valid base64) is not
// copied into a backup, which its manifest would then vouch for although
// its keys no longer match its store; the backup fails, leaving nothing
// registered, and takes the file once it holds the store's keys again.
func TestTakeRefusesChangedKeys(t *testing.T) {
	_, _, _, clk := newTest(t, 1)
	dataDir := t.TempDir()
	db, err := store.Open(filepath.Join(dataDir, "db"), nil) // on disk: a checkpoint is written by the store's file system
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keysPath := filepath.Join(dataDir, store.SecretsFile)
	if err := db.CheckSecrets(store.TestSecrets(), keysPath); err != nil {
		t.Fatal(err)
	}
	changed := store.TestSecrets()
	changed.Hash[3] ^= 0x08
	for _, tc := range []struct {
		name       string
		keys       *store.Secrets
		ok         bool
		registered int // backups registered after it
	}{
		{"a key changed on disk", changed, false, 0},
		{"the store's keys", store.TestSecrets(), true, 1},
	} {
		data, err := json.Marshal(tc.keys)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keysPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
		out := filepath.Join(t.TempDir(), "b1")
		_, err = bk.Take(t.Context(), db, out, "test", io.Discard)
		if tc.ok != (err == nil) {
			t.Fatalf("%s: backup = %v, want success %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "does not hold the keys this store was written with") {
			t.Errorf("%s: %v, want it to say the keys are not the store's", tc.name, err)
		}
		if l := listed(t, bk, false); len(l.Backups) != tc.registered {
			t.Errorf("%s: backups listed %+v", tc.name, l.Backups)
		}
		if copied, err := os.ReadFile(filepath.Join(out, store.SecretsFile)); tc.ok && !bytes.Equal(copied, data) {
			t.Errorf("%s: backup's keys.json %q %v, want the data dir's", tc.name, copied, err)
		}
	}
}

// TestOwedDeletionsDeliveredOnTheirOwn: a deletion owed to a backup whose
// directory was missing reaches its ledger without waiting for another
// deletion, backup or restore: DeliverOwedDue, which serve runs, tries at
// its first call, then again every period by the injected clock; a
// failure (here the path is a file, not the backup's directory, yet) is
// retried at the next period.
func TestOwedDeletionsDeliveredOnTheirOwn(t *testing.T) {
	const every = 5 * time.Minute
	clk := clock.NewFake(t0)
	dataDir, gone := t.TempDir(), filepath.Join(t.TempDir(), "gone")
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: gone, TakenAt: t0.Add(-time.Hour), Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	entry := LedgerEntry{Tenant: "acme", Hash: "abc123", RequestedAt: t0, ClientID: "ci_1"}
	if err := bk.Ledger(entry); err != nil {
		t.Fatal(err)
	}
	owed := func() []LedgerEntry {
		t.Helper()
		o, err := bk.owedTo(gone)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if err := os.WriteFile(gone, nil, 0o600); err != nil { // not the backup's directory yet
		t.Fatal(err)
	}
	for _, step := range []struct {
		name     string
		advance  time.Duration
		before   func()
		wantErr  bool
		wantOwed []LedgerEntry
	}{
		{"first call, the path is not a directory: fails", 0, nil, true, []LedgerEntry{entry}},
		{"the backup is back, before the period: not tried", every - time.Second, func() {
			os.Remove(gone)
			if err := os.Mkdir(gone, 0o700); err != nil {
				t.Fatal(err)
			}
		}, false, []LedgerEntry{entry}},
		{"the period is over: delivered", time.Second, nil, false, nil},
	} {
		if step.before != nil {
			step.before()
		}
		clk.Advance(step.advance)
		if err := bk.DeliverOwedDue(every); (err != nil) != step.wantErr {
			t.Errorf("%s: DeliverOwedDue: %v, want an error = %v", step.name, err, step.wantErr)
		}
		if diff := cmp.Diff(step.wantOwed, owed()); diff != "" {
			t.Errorf("%s: owed (-want +got):\n%s", step.name, diff)
		}
	}
	got, err := readLedger(filepath.Join(gone, ledgerFile))
	if diff := cmp.Diff([]LedgerEntry{entry}, got); err != nil || diff != "" {
		t.Errorf("ledger of the backup back (-want +got): %v\n%s", err, diff)
	}
}

// TestDamagedRegistryKeepsMissingBackup: a backup whose directory is
// missing (its disk unmounted) when the registry and its copy are found
// damaged is still registered from the deletions owed to it: they were
// dropped as owed to no registered backup, the next ones were never owed
// to it, and once back its ledger lacked them, so restoring it brought
// those customers back.
func TestDamagedRegistryKeepsMissingBackup(t *testing.T) {
	dataDir, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "keys.json"), []byte(`{"token":"k"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	dir := filepath.Join(root, "b1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ledgerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: dir, TakenAt: t0.Add(-time.Hour), Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".away"); err != nil { // its disk is unmounted
		t.Fatal(err)
	}
	first := LedgerEntry{Tenant: "acme", Hash: "h-first", RequestedAt: t0, ClientID: "ci_1"}
	if err := bk.Ledger(first); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{backupsFile, registryCopy} {
		if err := os.WriteFile(filepath.Join(dataDir, name), []byte("\x00\x00\x00"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	second := LedgerEntry{Tenant: "acme", Hash: "h-second", RequestedAt: t0.Add(time.Minute), ClientID: "ci_1"}
	if err := bk.Ledger(second); err != nil {
		t.Fatalf("deletion past the damaged registry: %v", err)
	}
	if err := os.Rename(dir+".away", dir); err != nil { // and back
		t.Fatal(err)
	}
	if err := bk.DeliverOwedDue(time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := readLedger(filepath.Join(dir, ledgerFile))
	if diff := cmp.Diff([]LedgerEntry{first, second}, got); err != nil || diff != "" {
		t.Errorf("ledger of the backup back (-want +got): %v\n%s", err, diff)
	}
}

// TestLedgerPastLostRegistry: a backups.json that is gone while its copy
// is there (removed by hand, lost to the file system) is damage too, not
// an installation without backups: the registry is rebuilt from its copy
// and the deletion reaches the backup's ledger; it reached none.
func TestLedgerPastLostRegistry(t *testing.T) {
	dataDir, backup := t.TempDir(), t.TempDir()
	bk := NewBackups(dataDir, clock.NewFake(t0).Now, zerolog.Nop())
	if err := os.WriteFile(filepath.Join(backup, ledgerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := &backupRegistry{Backups: []backupEntry{{Dir: backup, TakenAt: t0.Add(-time.Hour), Complete: true}}}
	if err := bk.saveRegistry(reg); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dataDir, backupsFile)); err != nil {
		t.Fatal(err)
	}
	entry := LedgerEntry{Tenant: "acme", Hash: "abc123", RequestedAt: t0, ClientID: "ci_1"}
	if err := bk.Ledger(entry); err != nil {
		t.Fatal(err)
	}
	got, err := readLedger(filepath.Join(backup, ledgerFile))
	if diff := cmp.Diff([]LedgerEntry{entry}, got); err != nil || diff != "" {
		t.Errorf("ledger of the registered backup (-want +got): %v\n%s", err, diff)
	}
	after, err := bk.loadRegistry()
	if diff := cmp.Diff(reg.Backups, after.Backups); err != nil || diff != "" {
		t.Errorf("registry rebuilt (-want +got): %v\n%s", err, diff)
	}
}

// TestOwedLedgerPastDamagedLines: a line of backups-owed.jsonl that does
// not decode (a torn write, bad JSON, zeroed bytes) never stops a deletion
// nor serve's start (DeliverOwedDue): the lines that decode are kept and
// delivered, the damaged bytes are set aside owner-only (listed by
// SetAside, for admin check and /metrics) and a warning is logged without
// them. They were dropped silently, and with them the deletions they held.
func TestOwedLedgerPastDamagedLines(t *testing.T) {
	first := LedgerEntry{Tenant: "acme", Hash: "h-first", RequestedAt: t0, ClientID: "ci_1"}
	second := LedgerEntry{Tenant: "acme", Hash: "h-second", RequestedAt: t0.Add(time.Minute), ClientID: "ci_1"}
	third := LedgerEntry{Tenant: "acme", Hash: "h-third", RequestedAt: t0.Add(2 * time.Minute), ClientID: "ci_1"}
	for _, tc := range []struct {
		name    string
		damaged string // put between the two owed lines, or after them when torn
		torn    bool   // at the end, without its newline
		start   bool   // first read at serve's start, not at a deletion
	}{
		{"bad JSON", `{"dir":"/b","tenant":"acme","hash":"h-secret"` + "\n", false, false},
		{"zeroed", "\x00\x00\x00\x00\n", false, false},
		{"no backup named", `{"tenant":"acme","hash":"h-secret"}` + "\n", false, false},
		{"torn write", `{"dir":"/b","tenant":"acme","hash":"h-sec`, true, false},
		{"bad JSON, read at start", `not json h-secret` + "\n", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			dataDir, gone := t.TempDir(), filepath.Join(t.TempDir(), "gone")
			var logs bytes.Buffer
			bk := NewBackups(dataDir, clk.Now, zerolog.New(&logs))
			if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: gone, TakenAt: t0.Add(-time.Hour), Complete: true}}}); err != nil {
				t.Fatal(err)
			}
			for _, l := range []LedgerEntry{first, second} {
				if err := bk.Ledger(l); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dataDir, owedFile)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cut := bytes.IndexByte(data, '\n') + 1
			if tc.torn {
				cut = len(data)
			}
			damaged := slices.Concat(data[:cut], []byte(tc.damaged), data[cut:])
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			want := []LedgerEntry{first, second}
			if tc.start {
				if err := bk.DeliverOwedDue(time.Minute); err != nil {
					t.Fatalf("start past a damaged owed ledger: %v", err)
				}
			} else {
				if err := bk.Ledger(third); err != nil {
					t.Fatalf("deletion past a damaged owed ledger: %v", err)
				}
				want = append(want, third)
			}
			if got, err := bk.owedTo(gone); err != nil || !cmp.Equal(want, got) {
				t.Errorf("owed after the damage: %v\n%s", err, cmp.Diff(want, got))
			}
			aside, _ := filepath.Glob(path + ".damaged-*")
			if len(aside) != 1 {
				t.Fatalf("damaged lines set aside as %v, want one file", aside)
			}
			if info, err := os.Stat(aside[0]); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("set-aside file: %v %v, want mode 0600", info, err)
			}
			if kept, err := os.ReadFile(aside[0]); err != nil || string(kept) != tc.damaged {
				t.Errorf("set-aside file holds %q (%v), want the damaged bytes %q", kept, err, tc.damaged)
			}
			if diff := cmp.Diff([]string{filepath.Base(aside[0])}, bk.SetAside()); diff != "" {
				t.Errorf("SetAside (-want +got):\n%s", diff)
			}
			if !strings.Contains(logs.String(), "damaged lines set aside") || strings.Contains(logs.String(), "h-sec") {
				t.Errorf("log: %s\nwant the warning, without the damaged bytes", logs.String())
			}
			// The backup is back: every deletion salvaged reaches its ledger.
			if err := os.Mkdir(gone, 0o700); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute)
			if err := bk.DeliverOwedDue(time.Minute); err != nil {
				t.Fatal(err)
			}
			got, err := readLedger(filepath.Join(gone, ledgerFile))
			if diff := cmp.Diff(want, got); err != nil || diff != "" {
				t.Errorf("ledger of the backup back (-want +got): %v\n%s", err, diff)
			}
		})
	}
}

// progressFunc is a progress writer that calls fn at its first write.
type progressFunc struct {
	fn   func()
	done bool
}

func (p *progressFunc) Write(b []byte) (int, error) {
	if !p.done {
		p.done = true
		p.fn()
	}
	return len(b), nil
}

// TestTakeStopsWithItsContext: a backup whose ctx ends (the admin client
// interrupted, serve stopping) before its manifest is written stops with
// ctx's error and removes what it made, as a failed one does: nothing is
// left registered or listed, and --out is gone. It went on to its end
// inside serve, and an interrupted "admin backups --verify" read every
// backup whole; List stops too.
func TestTakeStopsWithItsContext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel func(cancel func()) io.Writer // the progress writer; it may end ctx
	}{
		{"ended before", func(cancel func()) io.Writer { cancel(); return io.Discard }},
		{"ended during the checkpoint", func(cancel func()) io.Writer { return &progressFunc{fn: cancel} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, clk := newTest(t, 1)
			dataDir := t.TempDir()
			// On disk: a checkpoint is written by the store's file system.
			db, err := store.Open(filepath.Join(dataDir, "db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := os.WriteFile(filepath.Join(dataDir, store.SecretsFile), []byte(`{"keys":1}`), 0o600); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "b1")
			bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if _, err := bk.Take(ctx, db, out, "test", tc.cancel(cancel)); !errors.Is(err, context.Canceled) {
				t.Errorf("backup with its ctx ended: %v, want context.Canceled", err)
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("--out after an interrupted backup: %v, want it gone", err)
			}
			if l := listed(t, bk, false); len(l.Backups) != 0 {
				t.Errorf("backups after an interrupted one: %+v, want none", l.Backups)
			}
			if _, err := bk.Take(t.Context(), db, out, "test", io.Discard); err != nil {
				t.Fatalf("backup: %v", err)
			}
			if _, err := bk.List(ctx, true, nil); !errors.Is(err, context.Canceled) {
				t.Errorf("list --verify with its ctx ended: %v, want context.Canceled", err)
			}
			if l := listed(t, bk, true); len(l.Backups) != 1 || l.Backups[0].State != BackupComplete {
				t.Errorf("backups: %+v, want the one complete", l.Backups)
			}
		})
	}
}

// TestLedgerRefusesSwappableBackup: a registered backup in a directory
// another user can write (here one writable by others, without the sticky
// bit) may have been swapped since it was taken, for a directory whose
// ledger links to any file: the deletion is owed to the backup, and the
// linked file neither cut nor appended to. Before, root appended the ledger
// line through the link (and cut the file after its last newline first).
// In a sticky directory (/tmp's mode) or one only this user writes, the
// ledger (a plain file there) is written.
func TestLedgerRefusesSwappableBackup(t *testing.T) {
	now := time.Now().UTC()
	entry := LedgerEntry{Tenant: "acme", Hash: "abc123", RequestedAt: now, ClientID: "ci_1"}
	for _, tc := range []struct {
		name       string
		parentMode fs.FileMode
		wantOwed   bool
	}{
		{"parent writable by others", 0o777, true},
		{"parent writable by group", 0o770, true},
		{"sticky parent writable by others", 0o777 | fs.ModeSticky, false},
		{"parent only this user writes", 0o700, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			parent, victim := filepath.Join(root, "shared"), filepath.Join(root, "victim")
			dir := filepath.Join(parent, "bk")
			for _, d := range []string{dir, filepath.Join(root, "data")} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(victim, []byte("line 1\nno newline"), 0o600); err != nil {
				t.Fatal(err)
			}
			// What the other user can do where the parent lets them: the
			// ledger now links to the victim.
			if tc.wantOwed {
				if err := os.Symlink(victim, filepath.Join(dir, ledgerFile)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(parent, tc.parentMode); err != nil {
				t.Fatal(err)
			}
			bk := NewBackups(filepath.Join(root, "data"), func() time.Time { return now }, zerolog.Nop())
			if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: dir, TakenAt: now.Add(-time.Hour), Complete: true}}}); err != nil {
				t.Fatal(err)
			}
			if err := bk.Ledger(entry); err != nil {
				t.Fatal(err)
			}
			owed, err := bk.owedTo(dir)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := os.ReadFile(victim)
			ledger, _ := readLedger(filepath.Join(dir, ledgerFile))
			list, err := bk.List(context.Background(), false, nil)
			if err != nil || len(list.Backups) != 1 {
				t.Fatalf("List: %+v %v", list, err)
			}
			type state struct {
				Owed, Ledgered, VictimIntact, Listed bool
			}
			got := state{Owed: len(owed) == 1, Ledgered: cmp.Equal(ledger, []LedgerEntry{entry}), VictimIntact: string(v) == "line 1\nno newline",
				Listed: strings.Contains(list.Backups[0].Note, "who could swap the backup")}
			want := state{Owed: tc.wantOwed, Ledgered: !tc.wantOwed, VictimIntact: true, Listed: tc.wantOwed}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("after a deletion (-want +got):\n%s", d)
			}
		})
	}
}

// TestBackupRefusesSwappablePlace: admin backup refuses an --out inside a
// directory another user can write without the sticky bit (they could
// swap the backup later), and takes one in a sticky directory (/tmp's
// mode) or one only this user writes.
func TestBackupRefusesSwappablePlace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		parentMode fs.FileMode
		refused    bool
	}{
		{"parent writable by others", 0o777, true},
		{"parent writable by group", 0o775, true},
		{"sticky parent writable by others", 0o777 | fs.ModeSticky, false},
		{"parent only this user writes", 0o755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			parent := filepath.Join(root, "shared")
			if err := os.Mkdir(parent, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(parent, tc.parentMode); err != nil {
				t.Fatal(err)
			}
			bk := NewBackups(filepath.Join(root, "data"), time.Now, zerolog.Nop())
			_, err := bk.prepareDir(filepath.Join(parent, "new", "bk"))
			if refused := err != nil && strings.Contains(err.Error(), "who could swap the backup"); refused != tc.refused {
				t.Errorf("--out under a %s: %v; want refused = %v", tc.name, err, tc.refused)
			}
		})
	}
}

// TestProgressBar: the bar never reads more copied than its total (the
// store's size at the start is an estimate the copy may pass).
func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		n, total int64
		want     string
	}{
		{0, 0, "[..............................]   0% 0.0/0.0 MB"},
		{500_000, 1_000_000, "[###############...............]  50% 0.5/1.0 MB"},
		{140_000, 20_000, "[##############################] 100% 0.1/0.1 MB"},
	} {
		if got := progressBar(tc.n, tc.total); got != tc.want {
			t.Errorf("progressBar(%d, %d) = %q, want %q", tc.n, tc.total, got, tc.want)
		}
	}
}
