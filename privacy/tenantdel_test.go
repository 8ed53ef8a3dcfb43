package privacy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
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
