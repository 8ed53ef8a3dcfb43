package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPutAbuseStates: one batch writes every state named, a client named
// twice keeps its later state, and each tenant's states stay its own.
func TestPutAbuseStates(t *testing.T) {
	db, _ := openMem(t)
	err := db.PutAbuseStates([]AbuseStateWrite{
		{Tenant: "acme", ClientID: "a", State: []byte(`1`)},
		{Tenant: "acme", ClientID: "b", State: []byte(`2`)},
		{Tenant: "acme", ClientID: "a", State: []byte(`3`)},
		{Tenant: "otro", ClientID: "a", State: []byte(`4`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, tenant := range []string{"acme", "otro"} {
		got[tenant] = map[string]string{}
		err := db.ScanAbuseStates(tenant, func(k, v []byte) error {
			for _, id := range []string{"a", "b"} {
				if string(k) == string(AbuseKey(tenant, id)) {
					got[tenant][id] = string(v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]string{"acme": {"a": "3", "b": "2"}, "otro": {"a": "4"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored states (-want +got):\n%s", d)
	}
}
