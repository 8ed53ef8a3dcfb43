package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A tenant's deletion, in the store's terms: a tombstone record under
// 0x01 'R' tenant, written when the deletion is asked for and kept for
// good, and three steps, each a synced write, so that a crash anywhere
// leaves the tenant either whole (and hidden) or erased:
//
//  1. MarkTenantDeleting writes the tombstone (TenantDeleting) and hides
//     the tenant and its credentials from the caches at once: Tenant,
//     Tenants and Credential no longer know them, so its tokens answer
//     401 and no loop of serve picks it up; its records are all still
//     there. Open hides a tenant so marked again.
//  2. EraseTenant deletes, in one synced batch, the tenant's key space
//     (TenantSpan: every table, every Kind), its tenant and credential
//     records, its console audit entries, and moves the tombstone to
//     TenantErased. From then on a batch that sets a key in that space is
//     refused (ErrTenantErased): a writer that took the tenant before
//     step 1 (a request authenticated before) may reach its commit at any
//     time, after the sweep below too, whose grace only bounds the usual.
//  3. CompleteTenantDeletion deletes that space again (a writer that held
//     the tenant's state from before step 1 may have committed since),
//     compacts the ranges so the bytes leave the sstables, purges the
//     write-ahead logs and MANIFESTs written before, and moves the
//     tombstone to TenantDeleted.
//
// A tenant id whose tombstone is TenantDeleted may be created again: the
// new tenant's CreatedAt is later than the tombstone's, which is how a
// restore tells the deleted tenant (removed again) from the new one
// (kept).

// States of a tenant's deletion (TenantDeletion.State).
const (
	TenantDeleting = "deleting" // marked: hidden, its records all still stored
	TenantErased   = "erased"   // its records deleted; sweep, compaction and purge owed
	TenantDeleted  = "deleted"  // done: nothing of it left in the store's files
)

// TenantDeletion is the tombstone of a deleted tenant: who asked and when,
// and how far the deletion went. It holds nothing of the tenant's
// customers. Times are real time, UTC.
type TenantDeletion struct {
	Tenant string `json:"tenant"`
	// CreatedAt is the deleted tenant's CreatedAt: a restored store whose
	// tenant of this id was created then or before holds the deleted one.
	CreatedAt   time.Time  `json:"created_at"`
	RequestedAt time.Time  `json:"requested_at"`
	By          string     `json:"by"`
	State       string     `json:"state"`
	ErasedAt    *time.Time `json:"erased_at,omitempty"`
	DeletedAt   *time.Time `json:"deleted_at,omitempty"`
}

// Holds reports whether a tenant record created at createdAt is the
// tenant this deletion removes (or an older one of the same id), not one
// created again after it.
func (d *TenantDeletion) Holds(createdAt time.Time) bool { return !createdAt.After(d.CreatedAt) }

// tenantDeletionKey is the key of tenant's tombstone.
func tenantDeletionKey(tenant string) []byte {
	return appendStr([]byte{spaceGlobal, globalTenantDel}, tenant)
}

// tenantDeletionsPrefix bounds the scan over every tombstone.
func tenantDeletionsPrefix() []byte { return []byte{spaceGlobal, globalTenantDel} }

// TenantDeletionOf returns the tombstone of tenant, nil when it has none.
func (db *DB) TenantDeletionOf(tenant string) (*TenantDeletion, error) {
	v, err := db.Get(tenantDeletionKey(tenant))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := decodeTenantDeletion(tenant, v)
	return &d, nil
}

// decodeTenantDeletion decodes the tombstone of tenant. One that does not
// decode stands for a deletion under way (the worker redoes it, and
// rewrites it), never for a done one: its tenant stays hidden.
func decodeTenantDeletion(tenant string, v []byte) TenantDeletion {
	var d TenantDeletion
	if json.Unmarshal(v, &d) != nil || d.Tenant != tenant {
		return TenantDeletion{Tenant: tenant, State: TenantDeleting}
	}
	return d
}

// TenantDeletions returns every tombstone, ordered by tenant id.
func (db *DB) TenantDeletions() ([]TenantDeletion, error) {
	lo := tenantDeletionsPrefix()
	var out []TenantDeletion
	err := db.Scan(lo, prefixEnd(lo), func(k, v []byte) error {
		out = append(out, decodeTenantDeletion(string(k[len(lo):len(k)-1]), v))
		return nil
	})
	return out, err
}

// MarkTenantDeleting starts the deletion of tenant (step 1 above): the
// tombstone, synced, then the tenant and its credentials hidden. A tenant
// already being deleted returns its tombstone as it is; an unknown one
// is ErrNotFound. It holds db.mu, which every request's authentication
// reads, only to hide the tenant, not through the synced write: a tenant
// or credential record written meanwhile (CreateCredential,
// UpdateTenant) is the tenant's and is erased with it; a CreateTenant of
// the id finds the tenant cached until the tombstone is stored, and the
// tombstone after.
func (db *DB) MarkTenantDeleting(tenant, by string, now time.Time) (*TenantDeletion, error) {
	db.tenantDelMu.Lock()
	defer db.tenantDelMu.Unlock()
	t, ok := db.Tenant(tenant)
	if !ok {
		d, err := db.TenantDeletionOf(tenant)
		if err == nil && d != nil && d.State != TenantDeleted {
			return d, nil
		}
		return nil, fmt.Errorf("store: tenant %q: %w", tenant, ErrNotFound)
	}
	d := &TenantDeletion{Tenant: tenant, CreatedAt: t.CreatedAt, RequestedAt: now.UTC(), By: by, State: TenantDeleting}
	if db.tenantDelHook != nil {
		db.tenantDelHook(tenant, TenantDeleting)
	}
	if err := db.putLocked(tenantDeletionKey(tenant), d); err != nil {
		return nil, err
	}
	db.hideTenant(tenant)
	return d, nil
}

// hideTenant is hideTenantLocked under db.mu.
func (db *DB) hideTenant(tenant string) {
	db.mu.Lock()
	db.hideTenantLocked(tenant)
	db.mu.Unlock()
}

// hideTenantLocked drops tenant and its credentials from the caches (and
// their last-use times not yet stored, which FlushLastUsed would write
// back). db.mu must be held.
func (db *DB) hideTenantLocked(tenant string) {
	delete(db.tenants, tenant)
	for id, c := range db.creds {
		if c.Tenant == tenant {
			delete(db.creds, id)
			delete(db.touched, id)
		}
	}
}

// hideDeleting hides, at Open, the tenants whose deletion is under way.
func (db *DB) hideDeleting() error {
	ds, err := db.TenantDeletions()
	if err != nil {
		return fmt.Errorf("store: tenant deletions: %w", err)
	}
	for _, d := range ds {
		if d.State != TenantDeleted {
			db.hideTenantLocked(d.Tenant)
		}
	}
	return nil
}

// TenantCredentialIDs lists the client ids of tenant's credential records
// as stored (the cache no longer holds those of a tenant being deleted).
func (db *DB) TenantCredentialIDs(tenant string) ([]string, error) {
	lo := credentialRecordsPrefix()
	var ids []string
	err := db.Scan(lo, prefixEnd(lo), func(k, v []byte) error {
		var c struct {
			ClientID string `json:"client_id"`
			Tenant   string `json:"tenant"`
		}
		if json.Unmarshal(v, &c) == nil && c.Tenant == tenant {
			ids = append(ids, string(k[len(lo):len(k)-1]))
		}
		return nil
	})
	return ids, err
}

// eraseTenantRecords adds to b the deletion of everything stored of
// tenant: its key space, its tenant record, its credential records and
// its console audit entries.
func (db *DB) eraseTenantRecords(b *Batch, tenant string) error {
	ids, err := db.TenantCredentialIDs(tenant)
	if err != nil {
		return err
	}
	b.DeleteRange(TenantSpan(tenant))
	b.Delete(tenantKey(tenant))
	for _, id := range ids {
		b.Delete(credentialKey(id))
	}
	b.DeleteRange(ConsoleAuditSpan(tenant))
	return nil
}

// EraseTenant is step 2 above: one synced batch deletes every record of
// tenant, whose deletion MarkTenantDeleting started, and records it
// erased. Repeating it is harmless.
func (db *DB) EraseTenant(tenant string, now time.Time) (*TenantDeletion, error) {
	return db.advanceTenantDeletion(tenant, TenantErased, now)
}

// CompleteTenantDeletion is step 3 above. Until it returns, a crash leaves
// the tombstone erased and the next call redoes it. It stops with ctx's
// error at the compaction's or the purge's next paced flush.
func (db *DB) CompleteTenantDeletion(ctx context.Context, tenant string, now time.Time) (*TenantDeletion, error) {
	if _, err := db.advanceTenantDeletion(tenant, "", now); err != nil { // the sweep
		return nil, err
	}
	if err := db.CompactSpans(ctx, tenantSpans(tenant)); err != nil {
		return nil, err
	}
	if err := db.PurgeWAL(ctx); err != nil {
		return nil, err
	}
	if err := db.PurgeManifest(ctx); err != nil {
		return nil, err
	}
	return db.advanceTenantDeletion(tenant, TenantDeleted, now)
}

// tenantSpans are the key spans that hold records of tenant, which its
// sweep compacts: its key space, its console audit entries, its tenant
// record and the credential records (every tenant's: a credential's key
// does not name its tenant).
func tenantSpans(tenant string) [][2][]byte {
	return [][2][]byte{spanOf(TenantSpan(tenant)), spanOf(ConsoleAuditSpan(tenant)),
		{tenantKey(tenant), prefixEnd(tenantKey(tenant))}, {credentialRecordsPrefix(), prefixEnd(credentialRecordsPrefix())}}
}

func spanOf(lo, hi []byte) [2][]byte { return [2][]byte{lo, hi} }

// advanceTenantDeletion deletes every record of tenant and, in the same
// synced batch, sets its tombstone's state to state ("" keeps it). The
// steps are serialised by db.tenantDelMu; db.mu, which every request
// reads, is held only to hide the tenant again after the commit, not
// through the credential scan or the synced commit (the tenant has been
// hidden since its mark: no cached write reaches its records meanwhile).
// The final step (TenantDeleted) does not hide: once it is committed the
// id may be created again, and hiding would drop the new tenant.
func (db *DB) advanceTenantDeletion(tenant, state string, now time.Time) (*TenantDeletion, error) {
	db.tenantDelMu.Lock()
	defer db.tenantDelMu.Unlock()
	d, err := db.TenantDeletionOf(tenant)
	if err != nil {
		return nil, err
	}
	if d == nil || d.State == TenantDeleted {
		return nil, fmt.Errorf("store: tenant %q is not being deleted", tenant)
	}
	b := db.NewBatch()
	defer b.Close()
	if err := db.eraseTenantRecords(b, tenant); err != nil {
		return nil, err
	}
	at := now.UTC()
	switch state {
	case TenantErased:
		d.State, d.ErasedAt = state, &at
	case TenantDeleted:
		d.State, d.DeletedAt = state, &at
	}
	if err := b.SetJSON(tenantDeletionKey(tenant), d); err != nil {
		return nil, err
	}
	if db.tenantDelHook != nil {
		db.tenantDelHook(tenant, state)
	}
	db.erased.set(tenant, true) // from here on no write of it is applied
	if err := b.Commit(); err != nil {
		return nil, err
	}
	if state != TenantDeleted {
		db.hideTenant(tenant)
	}
	return d, nil
}

// ErrTenantErased is the commit's error for a batch that sets a key in
// the key space of a tenant whose records a deletion erased.
var ErrTenantErased = errors.New("store: tenant deleted")

// erasedTenants are the tenants whose records a deletion step erased, in
// this process: a batch that sets a key in one's key space is refused. A
// writer that took its tenant before the deletion's mark hid it (a
// request authenticated before, a loop's pass) may commit at any time
// after: the sweep, a grace after the mark, erases only what was applied
// before it, and what is applied after it stays for good, in the id
// created again too. After a restart no writer holds a tenant from before.
type erasedTenants struct {
	// mu is held shared from a batch's check to its apply, and exclusive
	// to add a tenant: a batch admitted before a tenant is added is
	// applied before the step that added it, which erases it.
	mu      sync.RWMutex
	tenants map[string]bool
}

// admit checks, for a batch that sets keys in the key spaces of tenants,
// that none of them is erased (else ErrTenantErased). held says it holds
// e.mu shared: release it once the batch is applied (or its apply given
// up).
func (e *erasedTenants) admit(tenants []string) (held bool, err error) {
	if len(tenants) == 0 {
		return false, nil
	}
	e.mu.RLock()
	for _, t := range tenants {
		if e.tenants[t] {
			e.mu.RUnlock()
			return false, fmt.Errorf("store: commit: a write of tenant %q, whose records were erased: %w", t, ErrTenantErased)
		}
	}
	return true, nil
}

// set marks tenant erased (true), or no longer (false: its id created
// again).
func (e *erasedTenants) set(tenant string, erased bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !erased {
		delete(e.tenants, tenant)
		return
	}
	if e.tenants == nil {
		e.tenants = map[string]bool{}
	}
	e.tenants[tenant] = true
}

// noteTenant adds to b.tenants the tenant in whose key space key is.
func (b *Batch) noteTenant(key []byte) {
	if len(key) == 0 || key[0] != spaceTenant {
		return
	}
	end := indexZero(key[1:])
	if end < 0 {
		return
	}
	id := key[1 : 1+end]
	for _, t := range b.tenants {
		if t == string(id) {
			return
		}
	}
	b.tenants = append(b.tenants, string(id))
}
