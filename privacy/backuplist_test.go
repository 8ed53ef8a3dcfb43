package privacy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
)

// plantBackup makes the backup dir as Take leaves it: a ledger of ledger
// distinct deletions and, with manifest, a manifest taken at takenAt
// (without it, a backup that stopped). It returns the bytes of its files.
func plantBackup(t *testing.T, dir string, takenAt time.Time, manifest bool, ledger int) int64 {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var lines []byte
	for i := range ledger {
		line, _ := json.Marshal(LedgerEntry{Tenant: "acme", Hash: fmt.Sprintf("h%d", i), RequestedAt: takenAt, ClientID: "ci"})
		lines = append(append(lines, line...), '\n')
	}
	files := map[string][]byte{ledgerFile: lines}
	if manifest {
		files[ManifestFile], _ = json.Marshal(Manifest{Format: backupFormat, TakenAt: takenAt, ExpiresAt: takenAt.Add(BackupRetention)})
	}
	var size int64
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		size += int64(len(data))
	}
	return size
}

// plantOwed writes backups-owed.jsonl with one deletion, each another,
// owed to each of dirs ("" stands for every backup).
func plantOwed(t *testing.T, dataDir string, dirs ...string) {
	t.Helper()
	var data []byte
	for i, dir := range dirs {
		line, _ := json.Marshal(owedEntry{Dir: dir, EveryBackup: dir == "", LedgerEntry: LedgerEntry{Tenant: "acme", Hash: fmt.Sprintf("h%d", i), RequestedAt: t0, ClientID: "ci"}})
		data = append(append(data, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dataDir, owedFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestListReportsEachState: "admin backups" lists every registered backup,
// those the registry keeps past retention included, sorted by the time
// taken, each with its state, size, ledger and owed deletions, and changes
// nothing. There was no way to list them but to read backups.json.
func TestListReportsEachState(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, root := t.TempDir(), t.TempDir()
	dir := func(name string) string { return filepath.Join(root, name) }
	old := t0.Add(-BackupRetention - time.Hour)
	sizes := map[string]int64{
		"complete":    plantBackup(t, dir("complete"), t0.Add(-2*time.Hour), true, 2),
		"taking":      plantBackup(t, dir("taking"), t0, false, 0),
		"stopped":     plantBackup(t, dir("stopped"), t0.Add(-3*time.Hour), false, 1),
		"damaged":     plantBackup(t, dir("damaged"), t0.Add(-4*time.Hour), false, 0),
		"old":         plantBackup(t, dir("old"), old, true, 3),
		"old-expired": plantBackup(t, dir("old-expired"), old.Add(-time.Hour), true, 0),
	}
	if err := os.WriteFile(filepath.Join(dir("damaged"), ManifestFile), []byte(`{"format": 1, "tak`), 0o600); err != nil {
		t.Fatal(err)
	}
	sizes["damaged"] += int64(len(`{"format": 1, "tak`))
	reg := &backupRegistry{
		Backups: []backupEntry{
			{Dir: dir("taking"), TakenAt: t0},
			{Dir: dir("complete"), TakenAt: t0.Add(-2 * time.Hour), Complete: true},
			{Dir: dir("stopped"), TakenAt: t0.Add(-3 * time.Hour)},
			{Dir: dir("damaged"), TakenAt: t0.Add(-4 * time.Hour), Complete: true},
			{Dir: dir("gone"), TakenAt: t0.Add(-5 * time.Hour), Complete: true, Missing: true},
			{Dir: dir("old"), TakenAt: old, Complete: true},
		},
		Expired: []backupEntry{{Dir: dir("old-expired"), TakenAt: old.Add(-time.Hour), Complete: true}},
	}
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(reg); err != nil {
		t.Fatal(err)
	}
	plantOwed(t, dataDir, dir("gone"), dir("gone"), "", dir("old-expired"))
	bk.taking[dir("taking")] = true
	before := snapshotDir(t, dataDir)

	got := listed(t, bk, false)
	exp := func(at time.Time) time.Time { return at.Add(BackupRetention) }
	want := &BackupList{Backups: []BackupInfo{
		{Dir: dir("old-expired"), TakenAt: old.Add(-time.Hour), ExpiresAt: exp(old.Add(-time.Hour)), State: BackupPastRetention,
			Bytes: sizes["old-expired"], OwedDeletions: 1, Note: "past retention: 'admin backups prune' removes it"},
		{Dir: dir("old"), TakenAt: old, ExpiresAt: exp(old), State: BackupPastRetention, Bytes: sizes["old"], LedgerEntries: 3,
			OwedDeletions: 1, Note: "past retention: 'admin backups prune' removes it"},
		{Dir: dir("gone"), TakenAt: t0.Add(-5 * time.Hour), ExpiresAt: exp(t0.Add(-5 * time.Hour)), State: BackupMissing, OwedDeletions: 3,
			Note: "directory not there (disk unmounted?): deletions are owed to it until it is back"},
		{Dir: dir("damaged"), TakenAt: t0.Add(-4 * time.Hour), ExpiresAt: exp(t0.Add(-4 * time.Hour)), State: BackupDamagedManifest,
			Bytes: sizes["damaged"], OwedDeletions: 1, Note: "manifest.json does not decode as a coupond backup manifest (restore refuses it)"},
		{Dir: dir("stopped"), TakenAt: t0.Add(-3 * time.Hour), ExpiresAt: exp(t0.Add(-3 * time.Hour)), State: BackupIncomplete,
			Bytes: sizes["stopped"], LedgerEntries: 1, OwedDeletions: 1,
			Note: "no manifest.json: a backup that stopped before its end (restore refuses it); remove it once looked at"},
		{Dir: dir("complete"), TakenAt: t0.Add(-2 * time.Hour), ExpiresAt: exp(t0.Add(-2 * time.Hour)), State: BackupComplete,
			Bytes: sizes["complete"], LedgerEntries: 2, OwedDeletions: 1},
		{Dir: dir("taking"), TakenAt: t0, ExpiresAt: exp(t0), State: BackupBeingTaken, Bytes: sizes["taking"], OwedDeletions: 1},
	}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, snapshotDir(t, dataDir)); diff != "" {
		t.Errorf("List changed the data dir (-before +after):\n%s", diff)
	}
}

// TestListCountsEachDeletionOnce: a deletion is written to a backup's
// ledger (or owed to it) at its request and again by the deletion worker,
// so "admin backups" counts the ledger's and the owed deletions, not their
// lines: one deletion showed as 2 in LEDGER and OWED.
func TestListCountsEachDeletionOnce(t *testing.T) {
	dataDir, root := t.TempDir(), t.TempDir()
	here, gone := filepath.Join(root, "here"), filepath.Join(root, "gone")
	plantBackup(t, here, t0.Add(-time.Hour), true, 0)
	one := LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci"}
	again := LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0.Add(time.Hour), ClientID: "ci"} // erased again later
	other := LedgerEntry{Tenant: "shop", Hash: "h1", RequestedAt: t0, ClientID: "ci"}
	var ledger, owed []byte
	for _, l := range []LedgerEntry{one, one, again, other, other} {
		line, _ := json.Marshal(l)
		ledger = append(append(ledger, line...), '\n')
	}
	for _, o := range []owedEntry{{Dir: gone, LedgerEntry: one}, {Dir: gone, LedgerEntry: one}, {EveryBackup: true, LedgerEntry: one}, {EveryBackup: true, LedgerEntry: again}} {
		line, _ := json.Marshal(o)
		owed = append(append(owed, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(here, ledgerFile), ledger, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, owedFile), owed, 0o600); err != nil {
		t.Fatal(err)
	}
	bk := NewBackups(dataDir, clock.NewFake(t0).Now, zerolog.Nop())
	reg := &backupRegistry{Backups: []backupEntry{
		{Dir: gone, TakenAt: t0.Add(-2 * time.Hour), Complete: true, Missing: true},
		{Dir: here, TakenAt: t0.Add(-time.Hour), Complete: true},
	}}
	if err := bk.saveRegistry(reg); err != nil {
		t.Fatal(err)
	}
	type counts struct{ Ledger, Owed int }
	want := map[string]counts{gone: {0, 2}, here: {3, 2}}
	got := map[string]counts{}
	for _, b := range listed(t, bk, false).Backups {
		got[b.Dir] = counts{b.LedgerEntries, b.OwedDeletions}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ledger and owed deletions by backup (-want +got):\n%s", diff)
	}
}

// snapshotDir maps each file under dir to its content.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[strings.TrimPrefix(path, dir)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestListPastUnusableRegistry: a registry that cannot be used is
// reported (RegistryErr) and its copy listed, changing nothing: List
// neither stops nor rebuilds it.
func TestListPastUnusableRegistry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		damage   func(t *testing.T, bk *Backups)
		wantErr  string
		fromCopy bool
	}{
		{"cut short", func(t *testing.T, bk *Backups) {
			writeFile(t, filepath.Join(bk.dataDir, backupsFile), `{"backups": [{"dir": "`)
		}, "backups.json does not decode: unexpected end of JSON input", true},
		{"gone, its copy there", func(t *testing.T, bk *Backups) {
			if err := os.Remove(filepath.Join(bk.dataDir, backupsFile)); err != nil {
				t.Fatal(err)
			}
		}, "backups.json is gone while backups.copy.json is there", true},
		{"unreadable", func(t *testing.T, bk *Backups) {
			bk.readRegistry = func(path string) ([]byte, error) {
				return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES}
			}
		}, "backups.json cannot be read: permission denied", true},
		{"both cut short", func(t *testing.T, bk *Backups) {
			writeFile(t, filepath.Join(bk.dataDir, backupsFile), `{"backups": [{"dir": "`)
			writeFile(t, filepath.Join(bk.dataDir, registryCopy), `{"backups": [{"dir": "`)
		}, "backups.json does not decode: unexpected end of JSON input", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, backup := t.TempDir(), filepath.Join(t.TempDir(), "b")
			size := plantBackup(t, backup, t0, true, 0)
			bk := NewBackups(dataDir, clock.NewFake(t0).Now, zerolog.Nop())
			if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: backup, TakenAt: t0, Complete: true}}}); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, bk)
			before := snapshotDir(t, dataDir)
			got := listed(t, bk, false)
			if got.RegistryErr == nil || got.RegistryErr.Error() != tc.wantErr || got.FromCopy != tc.fromCopy {
				t.Errorf("List: registry error %v from copy %v; want %q, %v", got.RegistryErr, got.FromCopy, tc.wantErr, tc.fromCopy)
			}
			want := []BackupInfo{}
			if tc.fromCopy {
				want = append(want, BackupInfo{Dir: backup, TakenAt: t0, ExpiresAt: t0.Add(BackupRetention), State: BackupComplete, Bytes: size})
			}
			if diff := cmp.Diff(want, got.Backups); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			if !bk.RegistryUnusable() {
				t.Error("RegistryUnusable false after List read an unusable registry")
			}
			if diff := cmp.Diff(before, snapshotDir(t, dataDir)); diff != "" {
				t.Errorf("List changed the data dir (-before +after):\n%s", diff)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// pruneWorld is a data dir whose registry holds a backup of each kind
// Prune meets, under root.
type pruneWorld struct {
	bk      *Backups
	root    string
	entries map[string]backupEntry // by name under root
	bytes   map[string]int64
}

func newPruneWorld(t *testing.T, clk *clock.Fake) *pruneWorld {
	w := &pruneWorld{root: t.TempDir(), entries: map[string]backupEntry{}, bytes: map[string]int64{}}
	w.bk = NewBackups(t.TempDir(), clk.Now, zerolog.Nop())
	old := t0.Add(-BackupRetention - time.Hour)
	for _, b := range []struct {
		name     string
		takenAt  time.Time
		manifest bool
		on, exp  bool // its dir is there; it is in Expired
	}{
		{"fresh", t0.Add(-time.Hour), true, true, false},
		{"old", old, true, true, false},
		{"old-expired", old.Add(-time.Hour), true, true, true},
		{"old-stopped", old.Add(-2 * time.Hour), false, true, false},
		{"old-gone", old.Add(-3 * time.Hour), true, false, true},
		{"old-renewed", old.Add(-4 * time.Hour), true, true, true}, // a fresh backup since, into the same dir
	} {
		dir := filepath.Join(w.root, b.name)
		if b.on {
			at := b.takenAt
			if b.name == "old-renewed" {
				at = t0.Add(-time.Minute)
			}
			w.bytes[b.name] = plantBackup(t, dir, at, b.manifest, 1)
		}
		w.entries[b.name] = backupEntry{Dir: dir, TakenAt: b.takenAt, Complete: b.manifest}
	}
	reg := &backupRegistry{}
	for _, name := range []string{"fresh", "old", "old-stopped"} {
		reg.Backups = append(reg.Backups, w.entries[name])
	}
	reg.Backups = append(reg.Backups, backupEntry{Dir: w.entries["old-renewed"].Dir, TakenAt: t0.Add(-time.Minute), Complete: true})
	for _, name := range []string{"old-expired", "old-gone", "old-renewed"} {
		reg.Expired = append(reg.Expired, w.entries[name])
	}
	if err := w.bk.saveRegistry(reg); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPruneRemovesOnlyBackupsPastRetention: "admin backups prune" removes
// the complete backups past retention (directory and registration),
// unregisters those whose directory is gone or a later backup renewed,
// reports and leaves alone one without a manifest, and never touches a
// backup within retention; --dry-run reports the same and changes nothing.
// Before it, the registry forgot a backup past retention at the next
// deletion and nothing removed its directory.
func TestPruneRemovesOnlyBackupsPastRetention(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		t.Run(map[bool]string{false: "prune", true: "dry run"}[dryRun], func(t *testing.T) {
			clk := clock.NewFake(t0)
			w := newPruneWorld(t, clk)
			before := snapshotDir(t, w.root)
			regBefore, _ := w.bk.loadRegistry()
			got, err := w.bk.Prune(dryRun)
			if err != nil {
				t.Fatal(err)
			}
			pruned := func(name, outcome, reason string) Pruned {
				e := w.entries[name]
				p := Pruned{Dir: e.Dir, TakenAt: e.TakenAt, ExpiresAt: e.TakenAt.Add(BackupRetention), Outcome: outcome, Reason: reason}
				if outcome == PruneRemoved {
					p.Bytes = w.bytes[name]
				}
				return p
			}
			want := []Pruned{
				pruned("old-renewed", PruneUnregistered, "a backup within retention was taken into this directory since: it stays, only the old registration goes"),
				pruned("old-gone", PruneUnregistered, "directory not there"),
				pruned("old-stopped", PruneLeft, "not a complete coupond backup: no manifest.json; remove it yourself once looked at"),
				pruned("old-expired", PruneRemoved, ""),
				pruned("old", PruneRemoved, ""),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Prune (-want +got):\n%s", diff)
			}
			reg, err := w.bk.loadRegistry()
			if err != nil {
				t.Fatal(err)
			}
			wantReg := &backupRegistry{
				Backups: []backupEntry{w.entries["fresh"], {Dir: w.entries["old-renewed"].Dir, TakenAt: t0.Add(-time.Minute), Complete: true}},
				Expired: []backupEntry{w.entries["old-stopped"]},
			}
			if dryRun {
				wantReg = regBefore
			}
			if diff := cmp.Diff(wantReg, reg); diff != "" {
				t.Errorf("registry after Prune (-want +got):\n%s", diff)
			}
			wantFiles := before
			if !dryRun {
				wantFiles = map[string]string{}
				for path, data := range before {
					if !strings.HasPrefix(path, "/old/") && !strings.HasPrefix(path, "/old-expired/") {
						wantFiles[path] = data
					}
				}
			}
			if diff := cmp.Diff(wantFiles, snapshotDir(t, w.root)); diff != "" {
				t.Errorf("backup dirs after Prune (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPruneFinishesStoppedRemoval: a backup whose removal stopped after
// Prune moved it aside (a crash) is removed by the next Prune, and a
// backup that fails to be removed stays registered for the next one.
func TestPruneFinishesStoppedRemoval(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, root := t.TempDir(), t.TempDir()
	old := t0.Add(-BackupRetention - time.Hour)
	dir := filepath.Join(root, "old")
	plantBackup(t, dir, old, true, 1)
	if err := os.Rename(dir, tombOf(dir)); err != nil {
		t.Fatal(err)
	}
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Expired: []backupEntry{{Dir: dir, TakenAt: old, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	got, err := bk.Prune(false)
	if err != nil || len(got) != 1 || got[0].Outcome != PruneUnregistered || got[0].Bytes == 0 {
		t.Fatalf("Prune: %+v %v; want it unregistered and the leftover removed", got, err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left after Prune: %v", entries)
	}
	if reg, _ := bk.loadRegistry(); len(reg.Backups)+len(reg.Expired) != 0 {
		t.Errorf("registry after Prune: %+v; want it empty", reg)
	}
}

// TestPruneBesideDeletionsAndBackups: deletions and backups go on while
// Prune removes a directory, and none of what they did is lost: the
// deletion reaches the ledger of every backup within retention (and not
// the one going), the backup taken meanwhile stays registered. Prune
// removes the directories with the registry lock released (a removal of
// gigabytes would hold every deletion back), so it must not write back a
// registry it read before them.
func TestPruneBesideDeletionsAndBackups(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, root := t.TempDir(), t.TempDir()
	old, fresh, taken := filepath.Join(root, "old"), filepath.Join(root, "fresh"), filepath.Join(root, "taken")
	oldAt := t0.Add(-BackupRetention - time.Hour)
	plantBackup(t, old, oldAt, true, 0)
	plantBackup(t, fresh, t0.Add(-time.Hour), true, 0)
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{
		{Dir: old, TakenAt: oldAt, Complete: true}, {Dir: fresh, TakenAt: t0.Add(-time.Hour), Complete: true},
	}}); err != nil {
		t.Fatal(err)
	}
	entry := LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci"}
	bk.beforeRemove = func(string) {
		// A backup registers as Take does before its checkpoint (which
		// the in-memory store cannot write to disk).
		if err := os.Mkdir(taken, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := claimLedger(filepath.Join(taken, ledgerFile)); err != nil {
			t.Fatal(err)
		}
		if err := bk.updateRegistry(func(reg *backupRegistry) bool {
			reg.Backups = append(reg.Backups, backupEntry{Dir: taken, TakenAt: clk.Now()})
			return true
		}); err != nil {
			t.Errorf("backup during Prune: %v", err)
		}
		if err := bk.Ledger(entry); err != nil {
			t.Errorf("deletion during Prune: %v", err)
		}
	}
	got, err := bk.Prune(false)
	if err != nil || len(got) != 1 || got[0].Outcome != PruneRemoved {
		t.Fatalf("Prune: %+v %v; want the old backup removed", got, err)
	}
	for _, dir := range []string{fresh, taken} {
		l, err := readLedger(filepath.Join(dir, ledgerFile))
		if diff := cmp.Diff([]LedgerEntry{entry}, l); err != nil || diff != "" {
			t.Errorf("ledger of %s (-want +got): %v\n%s", filepath.Base(dir), err, diff)
		}
	}
	if _, err := os.Lstat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pruned backup: %v; want it gone (no ledger recreated in it)", err)
	}
	reg, err := bk.loadRegistry()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, b := range append(reg.Backups, reg.Expired...) {
		dirs = append(dirs, filepath.Base(b.Dir))
	}
	if diff := cmp.Diff([]string{"fresh", "taken"}, dirs); diff != "" {
		t.Errorf("registered after Prune (-want +got):\n%s", diff)
	}
}

// TestDeletionKeepsExpiredBackupForPrune: a deletion stops feeding a
// backup past retention but the registry keeps it, apart, for List and
// Prune; it forgot it, so that nothing listed or removed it.
func TestDeletionKeepsExpiredBackupForPrune(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, old := t.TempDir(), filepath.Join(t.TempDir(), "old")
	oldAt := t0.Add(-BackupRetention - time.Hour)
	size := plantBackup(t, old, oldAt, true, 0)
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: old, TakenAt: oldAt, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := bk.Ledger(LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci"}); err != nil {
		t.Fatal(err)
	}
	want := []BackupInfo{{Dir: old, TakenAt: oldAt, ExpiresAt: oldAt.Add(BackupRetention), State: BackupPastRetention, Bytes: size,
		Note: "past retention: 'admin backups prune' removes it"}}
	if diff := cmp.Diff(want, listed(t, bk, false).Backups); diff != "" {
		t.Errorf("List after a deletion (-want +got):\n%s", diff)
	}
	if got, err := bk.Prune(false); err != nil || len(got) != 1 || got[0].Outcome != PruneRemoved {
		t.Errorf("Prune after a deletion: %+v %v; want the backup removed", got, err)
	}
}

// TestRebuiltRegistryKeepsExpiredBackups: a registry rebuilt from its
// copy (the original damaged) still holds the backups past retention the
// copy kept apart, for Prune to remove.
func TestRebuiltRegistryKeepsExpiredBackups(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, old := t.TempDir(), filepath.Join(t.TempDir(), "old")
	oldAt := t0.Add(-BackupRetention - time.Hour)
	plantBackup(t, old, oldAt, true, 0)
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Expired: []backupEntry{{Dir: old, TakenAt: oldAt, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dataDir, backupsFile), `{"backups": [{"dir": "`)
	if err := bk.Ledger(LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci"}); err != nil {
		t.Fatal(err)
	}
	reg, err := bk.loadRegistry()
	if err != nil {
		t.Fatal(err)
	}
	want := &backupRegistry{Expired: []backupEntry{{Dir: old, TakenAt: oldAt, Complete: true}}}
	if diff := cmp.Diff(want, reg); diff != "" {
		t.Errorf("rebuilt registry (-want +got):\n%s", diff)
	}
}

// TestPruneLeavesSymlinkedBackup: a backup registered under a symbolic
// link (--out was one) is reported and left, link and backup both, still
// registered. Prune renamed and removed the link alone and said the
// backup was removed: the backup stayed on disk, past retention and
// forgotten by the registry, so no deletion would reach its ledger.
func TestPruneLeavesSymlinkedBackup(t *testing.T) {
	clk := clock.NewFake(t0)
	dataDir, root := t.TempDir(), t.TempDir()
	oldAt := t0.Add(-BackupRetention - time.Hour)
	real, link := filepath.Join(root, "real"), filepath.Join(root, "latest")
	plantBackup(t, real, oldAt, true, 1)
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Expired: []backupEntry{{Dir: link, TakenAt: oldAt, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	for _, dryRun := range []bool{true, false} {
		got, err := bk.Prune(dryRun)
		if err != nil {
			t.Fatal(err)
		}
		want := []Pruned{{Dir: link, TakenAt: oldAt, ExpiresAt: oldAt.Add(BackupRetention), Outcome: PruneLeft,
			Reason: "a symbolic link, not the backup's directory: remove the backup it points to and the link yourself"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Prune(dryRun %v) (-want +got):\n%s", dryRun, diff)
		}
	}
	for _, p := range []string{link, filepath.Join(real, ManifestFile)} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("after Prune: %v", err)
		}
	}
	if reg, _ := bk.loadRegistry(); len(reg.Expired) != 1 {
		t.Errorf("registry after Prune: %+v; want the link still registered", reg)
	}
}

// TestListFindsDamagedStores: a backup whose store no longer matches its
// manifest is listed damaged, as restore would refuse it: a file cut short
// by its size, a flipped byte only with verify (which reads every file).
// Both were listed complete, "restorable", because only the manifest's
// presence was looked at. So was, even with verify, a changed keys.json.
func TestListFindsDamagedStores(t *testing.T) {
	const table, keys = "000001.sst", `{"hash":"AAAA"}`
	for _, tc := range []struct {
		name, content, keys string
		verify              bool
		state, note         string
	}{
		{"intact", "0123456789", keys, true, BackupComplete, ""},
		{"cut short", "01234", keys, false, BackupDamaged, "its db holds 1 files, 5 bytes; its manifest lists 1 files, 10 bytes (restore refuses it)"},
		{"flipped byte, no verify", "0123X56789", keys, false, BackupComplete, ""},
		{"flipped byte, verify", "0123X56789", keys, true, BackupDamaged, "db/" + table + " does not match the checksum its manifest lists (restore refuses it)"},
		{"keys changed, verify", "0123456789", `{"hash":"AAAB"}`, true, BackupDamaged, "keys.json does not match the checksum its manifest lists (restore refuses it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, backup := t.TempDir(), filepath.Join(t.TempDir(), "b")
			plantBackup(t, backup, t0, false, 0)
			db := filepath.Join(backup, "db")
			if err := os.MkdirAll(db, 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(db, table), "0123456789")
			sums, err := digests(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := json.Marshal(Manifest{Format: backupFormat, TakenAt: t0, ExpiresAt: t0.Add(BackupRetention), Bytes: 10, Files: 1, SHA256: sums,
				KeysSHA256: bytesDigest([]byte(keys))})
			writeFile(t, filepath.Join(backup, ManifestFile), string(m))
			writeFile(t, filepath.Join(db, table), tc.content)
			writeFile(t, filepath.Join(backup, "keys.json"), tc.keys)
			bk := NewBackups(dataDir, clock.NewFake(t0).Now, zerolog.Nop())
			if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: backup, TakenAt: t0, Complete: true}}}); err != nil {
				t.Fatal(err)
			}
			got := listed(t, bk, tc.verify).Backups
			if len(got) != 1 {
				t.Fatalf("List: %d backups, want 1", len(got))
			}
			if diff := cmp.Diff([]string{tc.state, tc.note}, []string{got[0].State, got[0].Note}); diff != "" {
				t.Errorf("state, note (-want +got):\n%s", diff)
			}
		})
	}
}

// listed is bk.List with a ctx that does not end.
func listed(tb testing.TB, bk *Backups, verify bool) *BackupList {
	tb.Helper()
	l, err := bk.List(context.Background(), verify, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// TestListVerifyShowsProgress: "admin backups --verify" reads every
// backup whole (120 backups of a year's store: 88 GB) and printed nothing
// until its list; it now writes a line as each backup is read, and none
// without verify.
func TestListVerifyShowsProgress(t *testing.T) {
	dataDir, root := t.TempDir(), t.TempDir()
	var entries []backupEntry
	for i, name := range []string{"a", "b"} {
		dir := filepath.Join(root, name)
		plantBackup(t, dir, t0.Add(time.Duration(i)*time.Hour), false, 0)
		entries = append(entries, backupEntry{Dir: dir, TakenAt: t0.Add(time.Duration(i) * time.Hour), Complete: true})
	}
	bk := NewBackups(dataDir, clock.NewFake(t0).Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: entries}); err != nil {
		t.Fatal(err)
	}
	for _, verify := range []bool{false, true} {
		var progress bytes.Buffer
		if _, err := bk.List(context.Background(), verify, &progress); err != nil {
			t.Fatal(err)
		}
		want := ""
		if verify {
			want = "backups: 1/2 checked, 0.0 MB, " + entries[0].Dir + ": " + BackupIncomplete + "\n" +
				"backups: 2/2 checked, 0.0 MB, " + entries[1].Dir + ": " + BackupIncomplete + "\n"
		}
		if diff := cmp.Diff(want, progress.String()); diff != "" {
			t.Errorf("progress with verify %v (-want +got):\n%s", verify, diff)
		}
	}
}
