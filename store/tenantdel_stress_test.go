package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTenantDeletionStress races a tenant's deletion steps, which hold
// db.mu only to hide the tenant, against every cached write of the tenant
// and of others: credential creation, rotation and revocation, last-use
// touches and their flush, settings updates, a second deletion of the same
// tenant, the creation again of its id and the creation of another
// tenant, and a writer of the tenant's key space that took it before its
// mark (a request authenticated before) and commits until refused. After
// each round: nothing of the deleted tenant is stored (its
// tombstone aside) or cached, its credentials refused from the moment its
// mark returned, and the tenants created meanwhile (the id again, another
// id) are whole in the store and in the caches.
func TestTenantDeletionStress(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	db, _ := openMem(t)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	fillTenant(t, db, "beta", at)
	// Each step's window between its check (or scan) and its commit,
	// where the writers interleave, widened.
	db.tenantDelHook = func(string, string) { time.Sleep(time.Millisecond) }
	var creds, recreated int
	for r := range rounds {
		c, again := stressRound(t, db, r, at.Add(time.Duration(r)*time.Hour))
		creds += c
		if again {
			recreated++
		}
	}
	t.Logf("%d rounds: %d credentials created during the deletions, the id created again in %d", rounds, creds, recreated)
}

// stressRound deletes tenant "x" (created at at) while the writers of the
// test above run, and checks what is left. It returns how many
// credentials of x were created meanwhile and whether x was created again.
func stressRound(t *testing.T, db *DB, r int, at time.Time) (int, bool) {
	const x = "x"
	if err := db.CreateTenant(&Tenant{ID: x, CreatedAt: at, Settings: DefaultSettings()}); err != nil {
		t.Fatalf("round %d: %v", r, err)
	}
	old := fmt.Sprintf("ci-x-%d", r)
	if err := db.CreateCredential(&Credential{ClientID: old, Tenant: x, SecretHash: HashSecret("s"), CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		marked  = make(chan struct{}) // closed once the mark returned
		done    = make(chan struct{}) // closed once the deletion is done
		created atomic.Int32          // credentials created for the old tenant
		late    atomic.Value          // a credential of the old tenant answering after its mark
		again   atomic.Bool           // the id created again
		errs    = make(chan error, 16)
	)
	run := func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() }
	run(func() { // the deletion
		defer close(done)
		if _, err := db.MarkTenantDeleting(x, "a", at); err != nil {
			errs <- err
			close(marked)
			return
		}
		close(marked)
		if _, err := db.EraseTenant(x, at); err != nil {
			errs <- err
		}
		if _, err := db.CompleteTenantDeletion(context.Background(), x, at); err != nil {
			errs <- err
		}
	})
	run(func() { // a second deletion of the same tenant
		_, err := db.MarkTenantDeleting(x, "b", at)
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs <- err
		}
	})
	run(func() { // credentials created, rotated, revoked, touched, flushed
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", old, i)
			err := db.CreateCredential(&Credential{ClientID: id, Tenant: x, SecretHash: HashSecret("s"), CreatedAt: at})
			if err != nil {
				return
			}
			created.Add(1)
			db.TouchCredential(id, at.Add(time.Duration(i+2)*time.Second))
			_, _ = db.UpdateCredential(old, func(c *Credential) error { c.Rotate(HashSecret(id), at, time.Hour); return nil })
			_, _ = db.UpdateCredential(id, func(c *Credential) error { c.Revoked = i%2 == 0; return nil })
			_ = db.FlushLastUsed()
		}
	})
	run(func() { // settings and suspension of the tenant
		for i := 0; ; i++ {
			_, err := db.UpdateTenant(x, func(tn *Tenant) error {
				if tn.CreatedAt.After(at) {
					return errors.New("the new tenant")
				}
				tn.Settings.Paused = i%2 == 0
				return nil
			})
			if err != nil {
				return
			}
		}
	})
	run(func() { // a token's authentication, from the mark's return on
		<-marked
		for {
			for i := int32(-1); i < created.Load(); i++ {
				id := old
				if i >= 0 {
					id = fmt.Sprintf("%s-%d", old, i)
				}
				if _, ok := db.Credential(id); ok {
					late.Store(id)
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	stale := make(chan struct{}) // closed once the writer below stopped
	run(func() {                 // a writer that took the tenant before its mark
		defer close(stale)
		for i := 0; ; i++ {
			b := db.NewBatch()
			b.Set(EventKey(x, fmt.Sprintf("stale-%d", i)), []byte("stale"))
			err := b.Commit()
			b.Close()
			if errors.Is(err, ErrTenantErased) {
				return
			}
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	run(func() { // the id created again as soon as it may be
		<-stale // the stale writer's late writes would be the new tenant's
		for {
			select {
			case <-done:
				return
			default:
			}
			if db.CreateTenant(&Tenant{ID: x, CreatedAt: at.Add(time.Minute), Settings: DefaultSettings()}) == nil {
				again.Store(true)
				return
			}
		}
	})
	other := fmt.Sprintf("other-%d", r)
	run(func() { // another tenant created meanwhile
		if err := db.CreateTenant(&Tenant{ID: other, CreatedAt: at, Settings: DefaultSettings()}); err != nil {
			errs <- err
			return
		}
		if err := db.CreateCredential(&Credential{ClientID: "ci-" + other, Tenant: other, SecretHash: HashSecret("s"), CreatedAt: at}); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("round %d: %v", r, err)
	}
	if id := late.Load(); id != nil {
		t.Errorf("round %d: credential %s of the deleted tenant answered after its mark returned", r, id)
	}
	checkAfterStress(t, db, r, x, other, again.Load(), at)
	// The next round creates x again.
	if again.Load() {
		if _, err := db.MarkTenantDeleting(x, "c", at); err != nil {
			t.Fatal(err)
		}
		if _, err := db.EraseTenant(x, at); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CompleteTenantDeletion(context.Background(), x, at); err != nil {
			t.Fatal(err)
		}
	}
	return int(created.Load()), again.Load()
}

// checkAfterStress checks the store and the caches after a round: nothing
// of the old x (created at at) stored or cached; x created again (again)
// and other whole; beta untouched.
func checkAfterStress(t *testing.T, db *DB, r int, x, other string, again bool, at time.Time) {
	t.Helper()
	lo, hi := TenantSpan(x)
	if n, err := db.Count(lo, hi); err != nil || n != 0 {
		t.Errorf("round %d: %d keys in the span of the deleted tenant (%v)", r, n, err)
	}
	stored := map[string]string{} // client id → tenant, as stored
	err := db.Scan(credentialRecordsPrefix(), prefixEnd(credentialRecordsPrefix()), func(k, v []byte) error {
		stored[string(k[2:len(k)-1])] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range stored {
		if strings.HasPrefix(id, "ci-x-") {
			t.Errorf("round %d: credential %s of the deleted tenant stored: %s", r, id, v)
		}
	}
	for _, c := range db.Credentials("") {
		if _, ok := stored[c.ClientID]; !ok {
			t.Errorf("round %d: credential %s cached, not stored", r, c.ClientID)
		}
		if c.Tenant == x {
			t.Errorf("round %d: credential %s of the deleted tenant cached", r, c.ClientID)
		}
	}
	var rec Tenant
	err = db.GetJSON(tenantKey(x), &rec)
	cachedX, okX := db.Tenant(x)
	switch {
	case again && (err != nil || !rec.CreatedAt.After(at) || !okX || !cachedX.CreatedAt.After(at)):
		t.Errorf("round %d: x created again: stored %+v %v, cached %+v %v", r, rec, err, cachedX, okX)
	case !again && (!errors.Is(err, ErrNotFound) || okX):
		t.Errorf("round %d: x deleted: stored %+v %v, cached %v", r, rec, err, okX)
	}
	if _, ok := db.Tenant(other); !ok {
		t.Errorf("round %d: %s not cached", r, other)
	}
	if _, ok := db.Credential("ci-" + other); !ok || stored["ci-"+other] == "" {
		t.Errorf("round %d: credential of %s: cached %v, stored %q", r, other, ok, stored["ci-"+other])
	}
	if _, ok := db.Credential("ci-beta"); !ok {
		t.Errorf("round %d: beta's credential lost", r)
	}
}
