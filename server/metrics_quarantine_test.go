package server

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestQuarantinedRecordsCountsUnreadable: coupond_quarantined_records
// counts the tenant and credential records the store could not decode at
// open (store.DB.Unreadable), which admin check lists and exits 1 on; the
// gauge counted only the quarantine tables and said 0 for them.
func TestQuarantinedRecordsCountsUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken []string // credentials stored without their id
		want   string
	}{
		{"none", nil, "0"},
		{"two credentials", []string{"ci_uno", "ci_dos"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := storefs.Mem()
			db, err := store.Open("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: testStart, Settings: store.DefaultSettings()}); err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.broken {
				if err := db.CreateCredential(&store.Credential{ClientID: id, Tenant: "acme", Name: "pos", Scopes: []string{"eventos:publicar"}}); err != nil {
					t.Fatal(err)
				}
				if _, err := db.UpdateCredential(id, func(c *store.Credential) error { c.ClientID = ""; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			h := newHarnessOn(t, fs)
			if n := len(h.db.Unreadable()); n != len(tc.broken) {
				t.Fatalf("store left %d records unread at open, want %d", n, len(tc.broken))
			}
			if diff := cmp.Diff(tc.want, sample(scrape(t, h), "coupond_quarantined_records")); diff != "" {
				t.Errorf("coupond_quarantined_records (-want +got):\n%s", diff)
			}
		})
	}
}

// TestQuarantinedRecordsHelpNamesWhatItCounts: the gauge's HELP names
// every kind of record it counts, the owed-deletion lines set aside among
// them (Config.SetAside lists them); it named the backup registries only.
func TestQuarantinedRecordsHelpNamesWhatItCounts(t *testing.T) {
	h := newHarness(t)
	var help string
	for _, l := range strings.Split(scrape(t, h), "\n") {
		if s, ok := strings.CutPrefix(l, "# HELP coupond_quarantined_records "); ok {
			help = s
		}
	}
	var missing []string
	for _, want := range []string{"quarantine", "tenant and credential records", "backup registries", "owed-deletion lines"} {
		if !strings.Contains(help, want) {
			missing = append(missing, want)
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("HELP %q lacks (-want +got):\n%s", help, diff)
	}
}
