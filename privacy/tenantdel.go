package privacy

// A tenant's deletion ("admin tenant delete"): a retailer that leaves takes
// its customers' data with it, from the store, the files beside it, the
// process's memory and, through the ledger, every backup.
//
// DeleteTenant marks the tenant (store.DB.MarkTenantDeleting: a tombstone,
// synced, that hides it and its credentials at once, so its tokens answer
// 401 and no loop picks it up; its records all still stored), then takes
// the deletion as far as it goes now (advanceTenant), and the deletion
// worker takes every unfinished one further at each pass
// (ProcessDeletions, resumeTenants), after a crash too:
//
//  1. marked (store.TenantDeleting): the deletion is written to the ledger
//     of every backup (LedgerEntry of kind LedgerTenant, or owed to it),
//     before anything is removed; its running batch job and its webhook
//     delivery pass are cancelled (TenantHooks.Stop); then one synced batch
//     erases its key space (every table, every store.Kind), its tenant and
//     credential records and its console audit entries
//     (store.DB.EraseTenant); the engine's memory of it
//     (Records.ForgetTenant) and the server's (TenantHooks.Forget: rate
//     limits, abuse state, metrics series) are dropped;
//  2. erased (store.TenantErased): its batch result files are removed
//     (TenantHooks.RemoveFiles); once TenantHooks.Grace has passed since
//     the mark (a request authenticated before it may still commit a
//     record until then) and no read of the store is open, its key space is
//     deleted again, compacted, and the write-ahead logs and MANIFESTs
//     purged (store.DB.CompleteTenantDeletion);
//  3. deleted (store.TenantDeleted): the tombstone stays, naming the
//     tenant, who asked and when, and nothing of its customers.
//
// A restore re-applies it (reapplyTenantDeletions): a restored store that
// holds the tenant as it was before its deletion (created then or
// earlier: store.TenantDeletion.Holds) has it deleted again before it
// serves, whether the deletion comes from the backup's ledger or from the
// tombstone of the store being replaced. A tenant created again with the
// same id after the deletion is kept.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/coupond/coupond/store"
)

// LedgerTenant is the Kind of a ledger line that records a tenant's
// deletion (its Hash is empty); a customer's has none.
const LedgerTenant = "tenant"

// TenantHooks reach what a tenant's deletion removes beyond the store and
// the engine. Every field is optional.
type TenantHooks struct {
	// Stop cancels the tenant's running batch job and its webhook
	// delivery pass and returns once they have stopped
	// (batch.Runner.CancelTenant, batch.Webhooks.CancelTenant).
	Stop func(ctx context.Context, tenant string) error
	// Forget drops what the API server keeps in memory of the tenant and
	// of its credentials (server.Server.ForgetTenant).
	Forget func(tenant string, clientIDs []string)
	// RemoveFiles removes the tenant's files beside the store, its batch
	// result files (batch.Runner.RemoveTenantResults).
	RemoveFiles func(tenant string) error
	// Grace is how long after the mark the sweep waits, for requests
	// that had passed authentication before it: serve's; 0 when
	// nothing else writes to the store (an admin command with serve
	// stopped, a restore).
	Grace time.Duration
}

// DeleteTenant deletes tenant, for the operator by ("uid 1000"): it
// returns once the tenant is hidden and, unless a step fails, erased;
// with hooks.Tenant.Grace 0, deleted. The deletion worker finishes it
// (ProcessDeletions). A tenant already being deleted is taken further;
// an unknown one is store.ErrNotFound.
func (s *Service) DeleteTenant(ctx context.Context, tenant, by string, hooks DeletionHooks) (*store.TenantDeletion, error) {
	d, err := s.db.MarkTenantDeleting(tenant, by, s.now())
	if err != nil {
		return nil, err
	}
	s.log.Warn().Str("tenant", tenant).Str("by", by).Msg("tenant deletion: tenant hidden, its tokens refused")
	s.deletionMu.Lock()
	defer s.deletionMu.Unlock()
	// A worker pass may have taken it further while this waited.
	if cur, err := s.db.TenantDeletionOf(tenant); err != nil {
		return d, err
	} else if cur != nil {
		d = cur
	}
	if d.State == store.TenantDeleted {
		return d, nil
	}
	return s.advanceTenant(ctx, *d, hooks)
}

// resumeTenants takes every unfinished tenant deletion further
// (advanceTenant); the worker's passes call it first. deletionMu is held.
func (s *Service) resumeTenants(ctx context.Context, hooks DeletionHooks) error {
	ds, err := s.db.TenantDeletions()
	if err != nil {
		return fmt.Errorf("tenant deletions: %w", err)
	}
	var firstErr error
	for _, d := range ds {
		if d.State == store.TenantDeleted {
			continue
		}
		if _, err := s.advanceTenant(ctx, d, hooks); err != nil {
			s.log.Error().Err(err).Str("tenant", d.Tenant).Msg("tenant deletion: retried on the next pass")
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// advanceTenant takes the deletion d as far as it can go now (see the file
// comment) and returns its tombstone as it leaves it. deletionMu is held.
func (s *Service) advanceTenant(ctx context.Context, d store.TenantDeletion, hooks DeletionHooks) (*store.TenantDeletion, error) {
	th := hooks.Tenant
	if d.State == store.TenantDeleting {
		e, err := s.eraseTenant(ctx, d, hooks)
		if err != nil {
			return &d, err
		}
		d = *e
	}
	if th.RemoveFiles != nil {
		if err := th.RemoveFiles(d.Tenant); err != nil {
			return &d, fmt.Errorf("removing the tenant's batch result files: %w", err)
		}
	}
	if s.now().Before(d.RequestedAt.Add(th.Grace)) {
		return &d, nil // swept by a later pass
	}
	// A read open now would keep the erased bytes through the compaction:
	// wait for it as a customer deletion's pass does (only the reads open
	// now: a steady stream of them cannot hold the sweep off for good).
	if !s.db.AwaitSnapshots(ctx, s.snapshotWaitOrDefault()) {
		return &d, nil // swept by a later pass
	}
	done, err := s.db.CompleteTenantDeletion(ctx, d.Tenant, s.now())
	if err != nil {
		return &d, fmt.Errorf("compacting the tenant's erased records away: %w", err)
	}
	s.log.Warn().Str("tenant", d.Tenant).Str("by", d.By).Msg("tenant deleted")
	return done, nil
}

// eraseTenant is step 1 of the file comment for the marked deletion d.
func (s *Service) eraseTenant(ctx context.Context, d store.TenantDeletion, hooks DeletionHooks) (*store.TenantDeletion, error) {
	if hooks.Ledger != nil {
		at := d.CreatedAt
		l := LedgerEntry{Tenant: d.Tenant, RequestedAt: d.RequestedAt, Kind: LedgerTenant, TenantCreatedAt: &at}
		if err := hooks.Ledger(l); err != nil {
			return nil, fmt.Errorf("backup ledgers: %w", err)
		}
	}
	if hooks.Tenant.Stop != nil {
		if err := hooks.Tenant.Stop(ctx, d.Tenant); err != nil {
			return nil, fmt.Errorf("cancelling the tenant's batch job: %w", err)
		}
	}
	ids, err := s.db.TenantCredentialIDs(d.Tenant)
	if err != nil {
		return nil, err
	}
	e, err := s.db.EraseTenant(d.Tenant, s.now())
	if err != nil {
		return nil, fmt.Errorf("erasing the tenant's records: %w", err)
	}
	s.rec.ForgetTenant(d.Tenant)
	if hooks.Tenant.Forget != nil {
		hooks.Tenant.Forget(d.Tenant, ids)
	}
	s.log.Warn().Str("tenant", d.Tenant).Int("credentials", len(ids)).Msg("tenant deletion: its records erased")
	return e, nil
}

// TenantDeletions lists the tombstones of the tenants deleted or being
// deleted ("admin tenant deletions").
func (s *Service) TenantDeletions() ([]store.TenantDeletion, error) { return s.db.TenantDeletions() }

// reapplyTenantDeletions deletes from db, a restore's staging store served
// by svc, every tenant that a deletion of the ledger or a tombstone of the
// store being replaced (live) removed and that db holds as it was then
// (store.TenantDeletion.Holds), before its customers' deletions are
// re-applied; the tenants db was deleting already are finished by the
// deletion passes that follow. No one else writes to db: the sweep does
// not wait. It returns how many tenants it deleted.
func reapplyTenantDeletions(ctx context.Context, svc *Service, db *store.DB, ledger []LedgerEntry, live []liveDeletion,
	hooks DeletionHooks, progress io.Writer) (int, error) {
	gone := map[string]store.TenantDeletion{}
	add := func(d store.TenantDeletion) {
		if old, ok := gone[d.Tenant]; !ok || d.CreatedAt.After(old.CreatedAt) {
			gone[d.Tenant] = d
		}
	}
	for _, l := range ledger {
		if l.Kind == LedgerTenant && l.TenantCreatedAt != nil {
			add(store.TenantDeletion{Tenant: l.Tenant, CreatedAt: *l.TenantCreatedAt, RequestedAt: l.RequestedAt})
		}
	}
	for _, l := range live {
		if l.gone != nil && l.gone.State != "" {
			add(*l.gone)
		}
	}
	hooks.Tenant.Grace = 0
	n := 0
	for _, id := range slices.Sorted(maps.Keys(gone)) {
		d := gone[id]
		t, ok := db.Tenant(id)
		if !ok || !d.Holds(t.CreatedAt) {
			continue // not in the backup, or created again after the deletion
		}
		fmt.Fprintf(progress, "restore: tenant %s was deleted on %s: deleting it from the restored store\n", id, d.RequestedAt.Format(time.RFC3339))
		done, err := svc.DeleteTenant(ctx, id, "restore (deleted on "+d.RequestedAt.Format(time.RFC3339)+")", hooks)
		if err != nil {
			return n, fmt.Errorf("re-applying the deletion of tenant %s: %w", id, err)
		}
		if done.State != store.TenantDeleted {
			return n, fmt.Errorf("re-applying the deletion of tenant %s: left %s", id, done.State)
		}
		n++
	}
	return n, nil
}
