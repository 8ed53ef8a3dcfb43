package cli

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestMetricsBackupRegistryUnreadable: while backups.json cannot be read,
// /metrics says so (coupond_backup_registry_unreadable 1), from the read
// serve's owed-deletion worker makes at start, and 0 once a read finds it
// readable again; only the log and admin check said so.
func TestMetricsBackupRegistryUnreadable(t *testing.T) {
	_, data, _ := backedUpTenant(t)
	registry := filepath.Join(data, "backups.json")
	saved, err := os.ReadFile(registry)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(registry); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(registry, 0o700); err != nil { // a directory: unreadable even as root
		t.Fatal(err)
	}
	e, err := openEnv(t.Context(), data, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	scrape := func() string {
		rec := httptest.NewRecorder()
		e.svc.api.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "coupond_backup_registry_unreadable ") {
				return l
			}
		}
		return ""
	}
	got := map[string]string{"before any read": scrape()}
	e.svc.backups.DeliverOwedDue(time.Minute) // reads the registry, as serve does at start; fails
	got["unreadable"] = scrape()
	if err := os.Remove(registry); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(registry, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.backups.CheckRegistry(); err != nil {
		t.Fatal(err)
	}
	got["readable again"] = scrape()
	want := map[string]string{
		"before any read": "coupond_backup_registry_unreadable 0",
		"unreadable":      "coupond_backup_registry_unreadable 1",
		"readable again":  "coupond_backup_registry_unreadable 0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/metrics (-want +got):\n%s", diff)
	}
}
