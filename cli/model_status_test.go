package cli

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// TestTenantShowNamesTheLastGoodModel: a tenant whose newest stored model
// does not decode goes on from the last good one, and admin tenant show
// says so in its warnings, naming that model's version.
func TestTenantShowNamesTheLastGoodModel(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	good, err := policy.New(policy.DefaultConfig()).Marshal("v40-20261103T130000")
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set(store.ModelKey("acme", 1), good)
	b.Set(store.ModelKey("acme", 2), []byte(`{"format":5,"phi":[1,2`))
	err = b.Commit()
	b.Close()
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	show := tenantShow(t, dir)
	want := "learning goes on from the last good model: its newest stored model did not decode (quarantined); the last good one " +
		"before it, politica_version v40-20261103T130000, was loaded; the rewards of the update that stored the damaged one are not in it"
	if !slices.Contains(show.Warnings, want) || show.Usage["policy_version"] != "v40-20261103T130000" {
		t.Errorf("tenant show: policy_version %v, warnings %q; want the last good model and the warning %q", show.Usage["policy_version"], show.Warnings, want)
	}
}

// tenantShowJSON is what the tests read of "admin tenant show acme --json".
type tenantShowJSON struct {
	Usage    map[string]any `json:"usage"`
	Warnings []string       `json:"warnings"`
}

// tenantShow runs "admin tenant show acme --json" on the data dir dir.
func tenantShow(t *testing.T, dir string) tenantShowJSON {
	t.Helper()
	var show tenantShowJSON
	if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "show", "acme", "--json"), &show); err != nil {
		t.Fatal(err)
	}
	return show
}
