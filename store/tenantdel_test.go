package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

// kindKey is a key of tenant of kind k: every kind store.Kinds lists must
// have one, so that a new table fails TestTenantErasureCoversEveryKind
// until its author writes one here (and sees it erased).
func kindKey(t *testing.T, tenant string, k Kind) []byte {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	switch k {
	case KindEvent:
		return EventKey(tenant, "ev-1")
	case KindCustomerEvent:
		return CustomerEventKey(tenant, "ana", t0, "ev-1")
	case KindFeatures:
		return FeaturesKey(tenant, "ana")
	case KindDecision:
		return DecisionKey(tenant, "n-1")
	case KindCustomerDecision:
		return CustomerDecisionKey(tenant, "ana", t0, "n-1")
	case KindAttribution:
		return AttributionKey(tenant, "cup-1")
	case KindIdempotency:
		return IdempotencyKey(tenant, "idem-1")
	case KindCatalog:
		return CatalogKey(tenant)
	case KindCampaign:
		return CampaignKey(tenant, "camp")
	case KindBudget:
		return BudgetKey(tenant, "camp")
	case KindModel:
		return ModelKey(tenant, 3)
	case KindRewardQueue:
		return RewardQueueKey(tenant, t0, "r", "n-1")
	case KindJob:
		return JobKey(tenant, "job-1")
	case KindJobChunk:
		return JobChunkKey(tenant, "job-1", 0)
	case KindWebhook:
		return WebhookKey(tenant)
	case KindWebhookQueue:
		return WebhookDeliveryKey(tenant, t0, "wh-1")
	case KindDaily:
		return QuotaKey(tenant, "2026-03-04", "decisiones")
	case KindDeletion:
		return DeletionKey(tenant, "h-1")
	case KindDeletionQueue:
		return DeletionQueueKey(tenant, t0, "h-1")
	case KindAccessLog:
		return AccessLogKey(tenant, t0, "tr-1")
	case KindQuality:
		return QualityKey(tenant)
	case KindAbuse:
		return AbuseKey(tenant, "ci-"+tenant)
	case KindQuarantine:
		return QuarantineKey(tenant, t0, "tr-1")
	case KindMeta:
		return key(tenant, tableMeta, "other")
	case KindCustomerState:
		return CustomerStateKey(tenant, "ana")
	case KindHourly:
		return HourlyKey(tenant, 493_000)
	case KindDamaged:
		return DamagedKey(tenant, EventKey(tenant, "ev-2"))
	case KindHeldEvent:
		return HeldEventKey(tenant, "ev-1")
	}
	t.Fatalf("kind %d has no key in kindKey: add one, and make sure a tenant's deletion erases it", k)
	return nil
}

// fillTenant stores tenant, a credential of it, a console audit entry and
// a record of every kind, each value naming tenant.
func fillTenant(t *testing.T, db *DB, tenant string, at time.Time) {
	t.Helper()
	if err := db.CreateTenant(&Tenant{ID: tenant, CreatedAt: at, Settings: DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCredential(&Credential{ClientID: "ci-" + tenant, Tenant: tenant, SecretHash: HashSecret("s"), CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	defer b.Close()
	for _, k := range Kinds() {
		kk := kindKey(t, tenant, k)
		if got := KindOf(tenant, kk); got != k {
			t.Fatalf("kindKey(%d) is a key of kind %d", k, got)
		}
		b.Set(kk, []byte("record of "+tenant))
	}
	b.Set(ConsoleAuditKey(tenant, at, 1), []byte(`{"tenant":"`+tenant+`"}`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// dump is every key and value of the store but the purge round mark.
func dump(t *testing.T, db *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.Scan([]byte{0}, []byte{0xff}, func(k, v []byte) error {
		if !bytes.Equal(k, purgeRoundKey()) {
			out[string(k)] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// namesTenant reports whether the key or value k, v belongs to tenant
// acme (its key space, its tenant or credential record, its audit).
func namesTenant(k, v string) bool {
	return strings.Contains(k, "acme") || strings.Contains(v, "acme")
}

// acmeAndBeta opens an in-memory store holding tenants acme and beta,
// each with a record of every kind (fillTenant) made at the time it
// returns.
func acmeAndBeta(t *testing.T) (*DB, time.Time) {
	t.Helper()
	db, _ := openMem(t)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	fillTenant(t, db, "acme", at)
	fillTenant(t, db, "beta", at)
	return db, at
}

func TestTenantErasureCoversEveryKind(t *testing.T) {
	db, fs := openMem(t)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	fillTenant(t, db, "acme", at)
	fillTenant(t, db, "beta", at)
	before := dump(t, db)
	if _, err := db.MarkTenantDeleting("acme", "uid 1000", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := db.Tenant("acme"); ok {
		t.Error("a tenant being deleted is still listed")
	}
	if _, ok := db.Credential("ci-acme"); ok {
		t.Error("a credential of a tenant being deleted still answers")
	}
	if _, err := db.EraseTenant("acme", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	d, err := db.CompleteTenantDeletion(context.Background(), "acme", at.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.State != TenantDeleted {
		t.Errorf("state %q, want %q", d.State, TenantDeleted)
	}
	after := dump(t, db)
	for k, v := range after {
		if namesTenant(k, v) && k != string(tenantDeletionKey("acme")) {
			table, text := DescribeKey("acme", []byte(k))
			t.Errorf("left after the deletion: %s %s", table, text)
		}
	}
	kept := map[string]string{}
	for k, v := range before {
		if !namesTenant(k, v) {
			kept[k] = v
		}
	}
	delete(after, string(tenantDeletionKey("acme")))
	if diff := cmp.Diff(kept, after); diff != "" {
		t.Errorf("the other tenant's records changed (-before +after):\n%s", diff)
	}
	if files := filesHolding(t, db, fs, "db", "record of acme"); len(files) > 0 {
		t.Errorf("sstables still hold the deleted tenant's records: %v", files)
	}
	if files := logsHolding(t, fs, "db", []byte("record of acme")); len(files) > 0 {
		t.Errorf("write-ahead logs still hold the deleted tenant's records: %v", files)
	}
}

// logsHolding lists the write-ahead logs of dir whose bytes contain b.
func logsHolding(t *testing.T, fs vfs.FS, dir string, b []byte) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if !strings.HasSuffix(n, ".log") {
			continue
		}
		f, err := fs.Open(fs.PathJoin(dir, n))
		if err != nil {
			continue
		}
		st, _ := f.Stat()
		buf := make([]byte, st.Size())
		_, _ = f.ReadAt(buf, 0)
		f.Close()
		if bytes.Contains(buf, b) {
			out = append(out, n)
		}
	}
	return out
}

func TestTenantDeletionSurvivesReopenAndIDReuse(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	fillTenant(t, db, "acme", at)
	if _, err := db.MarkTenantDeleting("acme", "uid 1000", at); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// A crash after the mark: reopened, the tenant stays hidden, its
	// records whole, and its id cannot be taken.
	db, err = Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	if _, ok := db.Tenant("acme"); ok {
		t.Error("reopened, a tenant being deleted is listed again")
	}
	if _, ok := db.Credential("ci-acme"); ok {
		t.Error("reopened, a credential of a tenant being deleted answers again")
	}
	if v, err := db.Get(EventKey("acme", "ev-1")); err != nil || string(v) != "record of acme" {
		t.Errorf("marked only, its records: %q, %v; want them whole", v, err)
	}
	err = db.CreateTenant(&Tenant{ID: "acme", CreatedAt: at.Add(time.Hour)})
	if !errors.Is(err, ErrExists) {
		t.Errorf("created again while being deleted: %v", err)
	}
	if _, err := db.EraseTenant("acme", at); err != nil {
		t.Fatal(err)
	}
	d, err := db.CompleteTenantDeletion(context.Background(), "acme", at)
	if err != nil {
		t.Fatal(err)
	}
	again := &Tenant{ID: "acme", CreatedAt: at.Add(time.Hour)}
	if err := db.CreateTenant(again); err != nil {
		t.Fatalf("a deleted tenant's id cannot be taken again: %v", err)
	}
	if d.Holds(again.CreatedAt) || !d.Holds(at) {
		t.Errorf("tombstone created at %v: Holds(new) %v, Holds(deleted) %v", d.CreatedAt, d.Holds(again.CreatedAt), d.Holds(at))
	}
}

// TestTenantDeletionStepsLeaveCachesFree: every step of a tenant's
// deletion (the mark, the erasure, the sweep, the final step) holds no
// lock that requests take (db.mu: every request's authentication reads
// the tenant and credential caches) through its scan and its synced
// commit. At each step's hook, just before its commit, db.mu is free and
// another tenant's credential answers and its record update (a synced
// commit under db.mu) completes. With db.mu held through the step, as
// before, every request of every tenant waited for the deletion's fsyncs.
func TestTenantDeletionStepsLeaveCachesFree(t *testing.T) {
	db, at := acmeAndBeta(t)
	var got []string
	db.tenantDelHook = func(tenant, state string) {
		if !db.mu.TryLock() {
			got = append(got, state+": db.mu held")
			return
		}
		db.mu.Unlock()
		_, credOK := db.Credential("ci-beta")
		step := at.Add(time.Duration(len(got)+1) * time.Hour)
		_, err := db.UpdateTenant("beta", func(tn *Tenant) error { tn.ClockNow = step; return nil })
		got = append(got, fmt.Sprintf("%s: credential %v, update %v", state, credOK, err))
	}
	if _, err := db.MarkTenantDeleting("acme", "uid 1000", at); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", at); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteTenantDeletion(context.Background(), "acme", at); err != nil {
		t.Fatal(err)
	}
	want := []string{"deleting: credential true, update <nil>", "erased: credential true, update <nil>",
		": credential true, update <nil>", "deleted: credential true, update <nil>"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("at each step's hook (-want +got):\n%s", diff)
	}
	if b, ok := db.Tenant("beta"); !ok || !b.ClockNow.Equal(at.Add(4*time.Hour)) {
		t.Errorf("beta after the deletion: %+v %v; want its last update", b, ok)
	}
	for k, v := range dump(t, db) {
		if namesTenant(k, v) && !strings.HasPrefix(k, string(tenantDeletionKey("acme"))) {
			t.Errorf("left of acme: %q", k)
		}
	}
}

// TestTenantSweepFlushesOnce: the sweep's compaction of the tenant's four
// spans forces one flush of the memtable, not one a span: each forced
// flush rotates the write-ahead log holding the commit pipeline's lock,
// a stall of every tenant's commits (a block profile of serve during a
// sweep showed its decisions waiting on that lock).
func TestTenantSweepFlushesOnce(t *testing.T) {
	db, at := acmeAndBeta(t)
	if _, err := db.MarkTenantDeleting("acme", "uid 1000", at); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EraseTenant("acme", at); err != nil {
		t.Fatal(err)
	}
	before := db.pdb.Metrics().Flush.Count
	if err := db.CompactSpans(context.Background(), tenantSpans("acme")); err != nil {
		t.Fatal(err)
	}
	if n := db.pdb.Metrics().Flush.Count - before; n != 1 {
		t.Errorf("flushes for the four spans: %d, want 1", n)
	}
}

// TestTenantErasedRefusesWrites: once a tenant's deletion has erased its
// records, a batch that sets a key in its key space is refused, applying
// nothing (its writer took the tenant before the mark, and its write would
// outlive the sweep); a deletion in that space, another tenant's write and,
// once the id is created again, the new tenant's writes are taken.
func TestTenantErasedRefusesWrites(t *testing.T) {
	db, at := acmeAndBeta(t)
	write := func(del []byte, sets ...[]byte) error {
		b := db.NewBatch()
		defer b.Close()
		for _, k := range sets {
			b.Set(k, []byte("late"))
		}
		if del != nil {
			b.Delete(del)
		}
		return b.Commit()
	}
	var got []string
	step := func(name string, del []byte, sets ...[]byte) {
		got = append(got, fmt.Sprintf("%s: %v", name, errors.Is(write(del, sets...), ErrTenantErased)))
	}
	if _, err := db.MarkTenantDeleting("acme", "uid 1000", at); err != nil {
		t.Fatal(err)
	}
	step("marked, acme", nil, EventKey("acme", "late-1"))
	if _, err := db.EraseTenant("acme", at); err != nil {
		t.Fatal(err)
	}
	step("erased, acme", nil, EventKey("acme", "late-2"))
	step("erased, beta, acme deleted", EventKey("acme", "late-3"), EventKey("beta", "late"))
	step("erased, acme deleted", EventKey("acme", "late-4"))
	step("erased, beta then acme", nil, EventKey("beta", "late-5"), EventKey("acme", "late-5"))
	if _, err := db.CompleteTenantDeletion(context.Background(), "acme", at); err != nil {
		t.Fatal(err)
	}
	step("deleted, acme", nil, EventKey("acme", "late-6"))
	if err := db.CreateTenant(&Tenant{ID: "acme", CreatedAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	step("created again, acme", nil, EventKey("acme", "new"))
	want := []string{"marked, acme: false", "erased, acme: true", "erased, beta, acme deleted: false", "erased, acme deleted: false",
		"erased, beta then acme: true", "deleted, acme: true", "created again, acme: false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refused with ErrTenantErased (-want +got):\n%s", diff)
	}
	lo, hi := TenantSpan("acme")
	var keys []string
	if err := db.Scan(lo, hi, func(k, _ []byte) error { keys = append(keys, string(k[len(lo):])); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"enew\x00"}, keys); diff != "" {
		t.Errorf("acme's key space (-want +got):\n%s", diff)
	}
}
