package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"
)

// Tenant is a tenant's record: identity, operator settings and, for sandbox
// tenants, the test clock. Records handed out by DB are shared and must not
// be modified; change them with UpdateTenant.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// Sandbox tenants have a test clock that starts at creation and moves only
	// through "admin clock advance".
	Sandbox  bool      `json:"sandbox"`
	ClockNow time.Time `json:"clock_now,omitempty"`

	Settings Settings `json:"settings"`
}

// Settings are the tenant settings the operator owns ("admin tenant set").
type Settings struct {
	Shadow bool `json:"shadow"`
	// ShadowSince is the tenant's time when Shadow was last switched on
	// (zero for a tenant switched on before it was recorded): the shadow
	// report's coupon-labelling share counts the coupons received from then.
	ShadowSince        time.Time     `json:"shadow_since,omitzero"`
	Paused             bool          `json:"paused"`
	RewardWindow       time.Duration `json:"reward_window"`
	RewardGrace        time.Duration `json:"reward_grace"`
	ControlShare       float64       `json:"control_share"`
	ControlKind        string        `json:"control_kind"`
	QuotaDecisionsDay  int64         `json:"quota_decisions_day"`
	QuotaEventsDay     int64         `json:"quota_events_day"`
	OptoutPenaltyCents int64         `json:"optout_penalty_cents"`
	RateLimits         bool          `json:"rate_limits"`
}

// DefaultSettings are the settings of a new tenant.
func DefaultSettings() Settings {
	return Settings{
		RewardWindow:       28 * 24 * time.Hour,
		RewardGrace:        2 * 24 * time.Hour,
		ControlShare:       0.05,
		ControlKind:        "nada",
		OptoutPenaltyCents: 5000,
		RateLimits:         true,
	}
}

// Now is the tenant's clock: the real time for ordinary tenants, the test
// clock for sandbox tenants.
func (t *Tenant) Now(real time.Time) time.Time {
	if t.Sandbox {
		return t.ClockNow
	}
	return real.UTC()
}

// LastSandboxClock is as far as "admin clock advance" moves a sandbox
// clock. The times coupond derives from a tenant clock and keys run up to
// two years ahead of it (a reward window and its grace, a year each at
// most), and must stay before LastKeyTime: past it a window's events and
// its reward's queue entry sort out of order, so a reward window crossing
// it read no purchases and its learner pass requeued the reward forever.
func LastSandboxClock() time.Time { return time.Date(2260, 1, 1, 0, 0, 0, 0, time.UTC) }

var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ValidTenantID reports whether id is a valid tenant id: 1 to 32 characters,
// lower-case letters, digits, '_' and '-', starting with a letter or digit.
// Tenant ids end up inside decision ids, so they are kept short and free of '.'.
func ValidTenantID(id string) bool { return tenantPattern.MatchString(id) }

// CreateTenant stores a new tenant; ErrExists if the id is taken.
func (db *DB) CreateTenant(t *Tenant) error {
	if !ValidTenantID(t.ID) {
		return fmt.Errorf("store: invalid tenant id %q (1 to 32 of a-z 0-9 _ -)", t.ID)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.tenants[t.ID]; ok {
		return fmt.Errorf("store: tenant %q: %w", t.ID, ErrExists)
	}
	// A deleted tenant's id may be taken again once its deletion is done
	// (tenantdel.go); before, its records may still be stored.
	if d, err := db.TenantDeletionOf(t.ID); err != nil {
		return err
	} else if d != nil && d.State != TenantDeleted {
		return fmt.Errorf("store: tenant %q is being deleted (%s): %w", t.ID, d.State, ErrExists)
	}
	db.erased.set(t.ID, false) // the new tenant's writes are taken
	return putCachedLocked(db, db.tenants, t.ID, tenantKey(t.ID), t)
}

// Tenant returns the tenant record, shared: do not modify it.
func (db *DB) Tenant(id string) (*Tenant, bool) {
	return cached(db, db.tenants, id)
}

// cached returns cache[id], read under db.mu: the cached record itself,
// shared with every reader and replaced whole on update, never modified.
func cached[T any](db *DB, cache map[string]*T, id string) (*T, bool) {
	db.mu.RLock()
	v, ok := cache[id]
	db.mu.RUnlock()
	return v, ok
}

// Tenants returns every tenant, ordered by id.
func (db *DB) Tenants() []*Tenant {
	db.mu.RLock()
	defer db.mu.RUnlock()
	out := make([]*Tenant, 0, len(db.tenants))
	for _, id := range slices.Sorted(maps.Keys(db.tenants)) {
		out = append(out, db.tenants[id])
	}
	return out
}

// UpdateTenant applies fn to a copy of the tenant's record, stores the copy
// with Sync and publishes it. fn's error aborts the update.
func (db *DB) UpdateTenant(id string, fn func(t *Tenant) error) (*Tenant, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return updateCachedLocked(db, db.tenants, "tenant", id, tenantKey(id), fn)
}

// updateCachedLocked applies fn to a copy of cache[id], stores the copy
// under key with Sync and publishes it in cache, so readers of the cache
// never see a half-updated record; fn's error aborts the update. what names
// the record kind in the ErrNotFound of an unknown id. db.mu must be held.
func updateCachedLocked[T any](db *DB, cache map[string]*T, what, id string, key []byte, fn func(*T) error) (*T, error) {
	old, ok := cache[id]
	if !ok {
		return nil, fmt.Errorf("store: %s %q: %w", what, id, ErrNotFound)
	}
	v := *old
	if err := fn(&v); err != nil {
		return nil, err
	}
	if err := putCachedLocked(db, cache, id, key, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// putCachedLocked stores v under key with Sync, then publishes it as
// cache[id]: a cached record is never one the store might not hold.
// db.mu must be held.
func putCachedLocked[T any](db *DB, cache map[string]*T, id string, key []byte, v *T) error {
	if err := db.putLocked(key, v); err != nil {
		return err
	}
	cache[id] = v
	return nil
}

func (db *DB) putLocked(key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode: %w", err)
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(key, data)
	return b.Commit()
}

// tenantKey is the key of a tenant record.
func tenantKey(tenant string) []byte {
	return appendStr([]byte{spaceGlobal, globalTenant}, tenant)
}

// tenantRecordsPrefix bounds the scan over all tenant records.
func tenantRecordsPrefix() []byte { return []byte{spaceGlobal, globalTenant} }
