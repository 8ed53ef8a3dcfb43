package console

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/storetest"
)

// TestAuditLast: Audit returns the latest entries, at most last of them,
// and none (not a panic) for a last of 0 or less.
func TestAuditLast(t *testing.T) {
	db := storetest.Open(t)
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	for i, action := range []string{"pause", "resume", "shadow"} {
		if err := appendAudit(db, AuditEntry{At: t0.Add(time.Duration(i) * time.Minute), Session: "s", Tenant: "acme", Action: action, Outcome: "ok"}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		last int
		want []string
	}{{5, []string{"pause", "resume", "shadow"}}, {2, []string{"resume", "shadow"}}, {0, nil}, {-5, nil}} {
		entries, err := Audit(db, "acme", tc.last)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Action)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("last %d (-want +got):\n%s", tc.last, diff)
		}
	}
}

// TestAuditLastAcrossTenants: without a tenant, the last entries are the
// latest of every tenant's, oldest first, not the last tenant's by name.
func TestAuditLastAcrossTenants(t *testing.T) {
	db := storetest.Open(t)
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	for i, e := range []struct {
		tenant, action string
		at             time.Duration
	}{{"zeta", "pause", 0}, {"acme", "pause", time.Minute}, {"zeta", "resume", 2 * time.Minute}, {"acme", "resume", 3 * time.Minute}} {
		if err := appendAudit(db, AuditEntry{At: t0.Add(e.at), Session: "s", Tenant: e.tenant, Action: e.action, Outcome: "ok"}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := Audit(db, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Tenant+" "+e.Action)
	}
	if diff := cmp.Diff([]string{"zeta resume", "acme resume"}, got); diff != "" {
		t.Errorf("last 2 of every tenant (-want +got):\n%s", diff)
	}
}
