package privacy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
)

// TestLedgerOwesEveryBackupWhileRegistryUnreadable: a backups.json that is
// there but cannot be read (no permission, an I/O error) neither holds
// back the erasure of live data nor loses the backups' ledger entries: the
// deletion is owed to every registered backup and reaches their ledgers
// once the registry reads again (to one still missing, it stays owed).
// Ledger returned the read's error, so the deletion worker retried forever
// and the customer's data stayed in place.
func TestLedgerOwesEveryBackupWhileRegistryUnreadable(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EIO} {
		t.Run(errno.Error(), func(t *testing.T) {
			e, p, db, clk := newTest(t, 1)
			ingestFor(t, e, "dora-00000001", "d", 3)
			dataDir := t.TempDir()
			here, gone := t.TempDir(), filepath.Join(t.TempDir(), "gone")
			if err := claimLedger(filepath.Join(here, ledgerFile)); err != nil {
				t.Fatal(err)
			}
			bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
			if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{
				{Dir: here, TakenAt: t0.Add(-time.Hour), Complete: true},
				{Dir: gone, TakenAt: t0.Add(-time.Hour), Complete: true},
			}}); err != nil {
				t.Fatal(err)
			}
			unreadable(bk, errno)
			hash := eraseWithLedger(t, p, db, bk.Ledger, "dora-00000001", "with the registry unreadable")
			if got := ledgerHashes(t, here); len(got) != 0 {
				t.Errorf("ledger written while the registry is unreadable: %v", got)
			}
			for _, dir := range []string{here, gone} {
				if got := owedHashes(t, bk, dir); !slices.Equal(got, []string{hash}) {
					t.Errorf("owed to %s while the registry is unreadable: %v, want %v", dir, got, []string{hash})
				}
			}
			var unread *UnreadableRegistryError
			if err := bk.CheckRegistry(); !errors.As(err, &unread) || !errors.Is(err, errno) {
				t.Errorf("CheckRegistry: %v, want an UnreadableRegistryError of %v", err, errno)
			}
			if err := bk.DeliverOwedDue(time.Minute); !errors.As(err, &unread) {
				t.Errorf("DeliverOwedDue with the registry unreadable: %v, want an UnreadableRegistryError", err)
			}
			// Readable again: the deletion reaches the backup there and
			// stays owed, to it alone, to the one missing.
			bk.readRegistry = os.ReadFile
			clk.Advance(time.Minute)
			if err := bk.DeliverOwedDue(time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := ledgerHashes(t, here); !slices.Equal(got, []string{hash}) {
				t.Errorf("ledger once the registry reads: %v, want %v", got, []string{hash})
			}
			owed, err := bk.readOwed()
			if err != nil {
				t.Fatal(err)
			}
			var dirs []string
			for _, o := range owed {
				dirs = append(dirs, o.Dir)
			}
			if diff := cmp.Diff([]string{gone}, slices.Compact(dirs)); diff != "" {
				t.Errorf("owed once delivered (-want +got):\n%s", diff)
			}
			if err := bk.CheckRegistry(); err != nil {
				t.Errorf("CheckRegistry once readable: %v", err)
			}
		})
	}
}

// TestLedgerUnreadableRegistryNotOwable: with the registry unreadable and
// the owed deletions unwritable too, Ledger fails, naming both, so the
// deletion waits rather than be lost to the backups; the registry stays
// as it was (never set aside nor rebuilt, it may name backups nothing
// else does).
func TestLedgerUnreadableRegistryNotOwable(t *testing.T) {
	dataDir := t.TempDir()
	bk := NewBackups(dataDir, func() time.Time { return t0 }, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: t.TempDir(), TakenAt: t0, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dataDir, backupsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dataDir, owedFile), 0o700); err != nil { // not appendable
		t.Fatal(err)
	}
	unreadable(bk, syscall.EIO)
	err = bk.Ledger(LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci_1"})
	var unread *UnreadableRegistryError
	if !errors.As(err, &unread) || !errors.Is(err, syscall.EIO) {
		t.Errorf("Ledger: %v, want the registry's read error", err)
	}
	if after, err := os.ReadFile(filepath.Join(dataDir, backupsFile)); err != nil || string(after) != string(before) {
		t.Errorf("registry after Ledger: %q %v, want it unchanged", after, err)
	}
	if aside := bk.SetAside(); len(aside) != 0 {
		t.Errorf("set aside: %v, want nothing", aside)
	}
}

// unreadable makes bk's reads of backups.json fail with errno.
func unreadable(bk *Backups, errno syscall.Errno) {
	bk.readRegistry = func(path string) ([]byte, error) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errno}
	}
}

// ledgerHashes returns the keyed hashes in the ledger of the backup dir,
// each once.
func ledgerHashes(t *testing.T, dir string) []string {
	t.Helper()
	got, err := readLedger(filepath.Join(dir, ledgerFile))
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, l := range got {
		hashes = append(hashes, l.Hash)
	}
	return slices.Compact(hashes) // the request's entry and the worker's
}

// owedHashes returns the keyed hashes owed to the backup dir, each once.
func owedHashes(t *testing.T, bk *Backups, dir string) []string {
	t.Helper()
	owed, err := bk.owedTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, l := range owed {
		hashes = append(hashes, l.Hash)
	}
	return slices.Compact(hashes)
}

// TestRegistryUnusableFollowsReads: RegistryUnusable, which /metrics
// serves as coupond_backup_registry_unreadable, says what the last read of
// backups.json found, whoever read it (serve's owed-deletion worker, a
// deletion's Ledger, admin check): 1 while it cannot be read or, damaged,
// was not rebuilt; 0 once it reads or is rebuilt. /metrics had no such
// series: only the log and admin check said so.
func TestRegistryUnusableFollowsReads(t *testing.T) {
	dataDir := t.TempDir()
	clk := clock.NewFake(t0)
	bk := NewBackups(dataDir, clk.Now, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: t.TempDir(), TakenAt: t0, Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	registry := filepath.Join(dataDir, backupsFile)
	deliver := func(t *testing.T) {
		clk.Advance(time.Minute)
		bk.DeliverOwedDue(time.Minute) // its error is the read's, checked by the other tests
	}
	steps := []struct {
		name string
		do   func(t *testing.T)
		want bool
	}{
		{"before any read", func(*testing.T) {}, false},
		{"read by the worker", deliver, false},
		{"unreadable, read by the worker", func(t *testing.T) { unreadable(bk, syscall.EIO); deliver(t) }, true},
		{"readable again", func(t *testing.T) { bk.readRegistry = os.ReadFile; deliver(t) }, false},
		{"unreadable, read by a deletion", func(t *testing.T) {
			unreadable(bk, syscall.EACCES)
			if err := bk.Ledger(LedgerEntry{Tenant: "acme", Hash: "h1", RequestedAt: t0, ClientID: "ci_1"}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"readable again, read by admin check", func(t *testing.T) {
			bk.readRegistry = os.ReadFile
			if err := bk.CheckRegistry(); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"damaged, read by admin check", func(t *testing.T) {
			if err := os.WriteFile(registry, []byte(`{"backups": [{"dir": "`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := bk.CheckRegistry(); err == nil {
				t.Fatal("CheckRegistry: nil, want the damage")
			}
		}, true},
		{"damaged, rebuilt by the worker", deliver, false},
		{"damaged, its rebuild failing", func(t *testing.T) {
			if err := os.WriteFile(registry, []byte(`{"backups": [{"dir": "`), 0o600); err != nil {
				t.Fatal(err)
			}
			copyPath := filepath.Join(dataDir, registryCopy)
			if err := os.Remove(copyPath); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(copyPath, 0o700); err != nil { // not writable as a file
				t.Fatal(err)
			}
			deliver(t)
		}, true},
	}
	want, got := map[string]bool{}, map[string]bool{}
	for _, step := range steps {
		step.do(t)
		want[step.name], got[step.name] = step.want, bk.RegistryUnusable()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RegistryUnusable after each step (-want +got):\n%s", diff)
	}
}
