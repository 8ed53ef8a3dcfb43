package privacy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestTenantDeletionReachesLedgers: a tenant's deletion is written to the
// ledger of every registered backup before anything is erased (a line of
// kind tenant naming its creation time, no customer), "admin backups"
// counts it apart, and the tenant's key space is empty after.
func TestTenantDeletionReachesLedgers(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	ingestFor(t, e, "ana-0000001", "ev", 3)
	backup := t.TempDir()
	bk := NewBackups(t.TempDir(), func() time.Time { return t0 }, zerolog.Nop())
	if err := bk.saveRegistry(&backupRegistry{Backups: []backupEntry{{Dir: backup, TakenAt: t0.Add(-time.Hour), Complete: true}}}); err != nil {
		t.Fatal(err)
	}
	var erasedBeforeLedger bool
	ledger := func(l LedgerEntry) error {
		lo, hi := store.TenantSpan("acme")
		empty, err := db.Empty(lo, hi)
		erasedBeforeLedger = empty || err != nil
		return bk.Ledger(l)
	}
	d, err := p.DeleteTenant(context.Background(), "acme", "uid 1000", DeletionHooks{Ledger: ledger})
	if err != nil || d.State != store.TenantDeleted {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if erasedBeforeLedger {
		t.Error("the tenant was erased before its deletion reached the ledger")
	}
	got, err := readLedger(filepath.Join(backup, ledgerFile))
	created := t0
	want := []LedgerEntry{{Tenant: "acme", RequestedAt: t0, Kind: LedgerTenant, TenantCreatedAt: &created}}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("ledger: %v; diff (-want +got):\n%s", err, cmp.Diff(want, got))
	}
	l, err := bk.List(context.Background(), false, nil)
	if err != nil || len(l.Backups) != 1 || l.Backups[0].TenantDeletions != 1 || l.Backups[0].LedgerEntries != 1 {
		t.Errorf("backups list: %+v %v; want its one ledger entry counted as a tenant deletion", l, err)
	}
	lo, hi := store.TenantSpan("acme")
	if empty, err := db.Empty(lo, hi); err != nil || !empty {
		t.Errorf("acme's key space after its deletion: empty %v, %v", empty, err)
	}
	if holds(t, db, []byte("ana-0000001")) {
		t.Error("the store still names the deleted tenant's customer")
	}
}

// TestTenantDeletionCrashes: a kill -9 during a tenant's deletion (crash
// clones of its store taken after the mark and after the erasure) leaves
// the tenant hidden and either whole or erased, never part of it; the
// first deletion pass after the restart completes it, and no file of the
// store holds its customer then.
func TestTenantDeletionCrashes(t *testing.T) {
	const canary = "cnry-000000042"
	mem, db, e, p := openCrashable(t)
	ingestFor(t, e, canary, "ev", 3)
	lo, hi := store.TenantSpan("acme")
	whole, err := db.Count(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	crashes := map[string]*storefs.MemFS{}
	hooks := DeletionHooks{
		Ledger: func(LedgerEntry) error {
			crashes["after the mark"] = mem.CrashClone(storefs.CrashCloneCfg{})
			return nil
		},
		Tenant: TenantHooks{Forget: func(string, []string) { crashes["after the erasure"] = mem.CrashClone(storefs.CrashCloneCfg{}) }},
	}
	if d, err := p.DeleteTenant(context.Background(), "acme", "uid 1", hooks); err != nil || d.State != store.TenantDeleted {
		t.Fatalf("delete: %+v %v", d, err)
	}
	db.Close()
	for name, crashed := range crashes {
		t.Run(name, func(t *testing.T) {
			db, p := reopenService(t, crashed)
			if _, ok := db.Tenant("acme"); ok {
				t.Error("after the crash the tenant is listed")
			}
			if n, err := db.Count(lo, hi); err != nil || (n != whole && n != 0) {
				t.Errorf("after the crash the tenant holds %d records of %d (%v): want all or none", n, whole, err)
			}
			if _, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil {
				t.Fatal(err)
			}
			if d, err := db.TenantDeletionOf("acme"); err != nil || d.State != store.TenantDeleted {
				t.Errorf("after the pass: %+v %v; want deleted", d, err)
			}
			checkNoFileHolds(t, crashed, "db", []byte(canary))
		})
	}
	if len(crashes) != 2 {
		t.Fatalf("crash clones taken: %d, want 2", len(crashes))
	}
}

// TestTenantSweepWaitsForOpenReads: a read open when the tenant's final
// sweep is due (an export streaming to a slow client) is waited for, as a
// customer deletion's pass waits (snapshotWait), and the sweep runs once
// it closes: with reads always open at the pass's look (a steady stream of
// exports), a sweep that only looked left the tenant erased for good.
func TestTenantSweepWaitsForOpenReads(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	ingestFor(t, e, "ana-0000001", "ev", 3)
	p.snapshotWait = 5 * time.Second
	hooks := DeletionHooks{Tenant: TenantHooks{Grace: time.Minute}}
	if d, err := p.DeleteTenant(context.Background(), "acme", "uid 1", hooks); err != nil || d.State != store.TenantErased {
		t.Fatalf("delete: %+v %v; want erased, its sweep after the grace", d, err)
	}
	p.now = func() time.Time { return t0.Add(2 * time.Minute) }
	snap := db.NewSnapshot()
	go func() {
		time.Sleep(50 * time.Millisecond)
		snap.Close()
	}()
	if _, err := p.ProcessDeletions(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	if d, err := db.TenantDeletionOf("acme"); err != nil || d.State != store.TenantDeleted {
		t.Errorf("after the pass with a read open 50 ms: %+v %v; want deleted", d, err)
	}
}
