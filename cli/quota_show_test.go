package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestTenantShowQuotaUse: admin tenant show reports what the tenant took
// today (the UTC day of its clock) of its daily quotas, and warns about a
// quota used up, which the API is answering with 429. Other days' counts
// are not today's.
func TestTenantShowQuotaUse(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox")
	runIn(t, dir, "admin", "tenant", "set", "acme", "--quota-decisions-day", "2", "--quota-events-day", "5")
	var clk struct {
		Now time.Time `json:"now"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "clock", "show", "--tenant", "acme", "--json"), &clk); err != nil {
		t.Fatal(err)
	}
	today, yesterday := clk.Now.UTC().Format(time.DateOnly), clk.Now.UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	db, err := store.Open(filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.SetQuotaCount("acme", today, engine.QuotaDecisions, 2)
	b.SetQuotaCount("acme", today, engine.QuotaEvents, 1)
	b.SetQuotaCount("acme", yesterday, engine.QuotaEvents, 9)
	err = b.Commit()
	b.Close()
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	show := tenantShow(t, dir)
	got := struct {
		Decisions, Events any
		Warnings          []string
	}{show.Usage["quota_decisions_today"], show.Usage["quota_events_today"], show.Warnings}
	want := struct {
		Decisions, Events any
		Warnings          []string
	}{2.0, 1.0, []string{"daily decision quota used up (2 of 2 on " + today +
		", UTC day of the tenant clock): POST /v1/decisiones answers 429 limite_excedido until 00:00 UTC"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tenant show (-want +got):\n%s", diff)
	}
}
