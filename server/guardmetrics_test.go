package server

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// storeGuard stores for tenant a fresh model whose guard holds the given
// sums (policy.Guard's JSON: "policy", "options"), as the learner would
// have stored it; the engine reads it when the tenant is first used.
func storeGuard(t *testing.T, h *harness, tenant string, guard map[string]any) {
	t.Helper()
	data, err := policy.New(policy.DefaultConfig()).Marshal("v5-guard")
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	g := f["guard"].(map[string]any)
	for k, v := range guard {
		g[k] = v
	}
	if data, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	b := h.db.NewBatch()
	defer b.Close()
	b.Set(store.ModelKey(tenant), data)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyValueLargestBelowZero: without the tenant label,
// coupond_policy_value_mxn is the largest of the tenants' values. With
// every tenant's learned policy estimated below zero, the largest is
// below zero too, not the 0 the aggregation started from.
func TestPolicyValueLargestBelowZero(t *testing.T) {
	h := newHarness(t)
	for tenant, v := range map[string]float64{"acme": -250, "beta": -400} {
		h.tenant(tenant, true, nil)
		storeGuard(t, h, tenant, map[string]any{"policy": map[string]any{"w": 1, "w2": 1, "v": v}})
	}
	got := sample(scrape(t, h), "coupond_policy_value_mxn")
	if diff := cmp.Diff("-2.5", got); diff != "" {
		t.Errorf("coupond_policy_value_mxn (-want +got):\n%s", diff)
	}
}
