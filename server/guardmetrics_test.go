package server

import (
	"encoding/json"
	"strings"
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
	b.Set(store.ModelKey(tenant, 1), data)
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

// TestPolicyValueVsBaseline: coupond_policy_value_vs_baseline, which the
// example alert CoupondPolicyBelowBaseline reads, is the learned policy's
// estimated value minus its best baseline's: per tenant the smallest
// difference of the guard's baselines (0 before any), and without the
// tenant label the smallest over tenants.
func TestPolicyValueVsBaseline(t *testing.T) {
	baselines := func(d0, d1 float64) map[string]any {
		return map[string]any{"options": map[string]any{
			"0": map[string]any{"w": 4, "w2": 4, "v": 1000, "d": 4 * d0, "d2": 4 * d0 * d0},
			"1": map[string]any{"w": 4, "w2": 4, "v": 1000, "d": 4 * d1, "d2": 4 * d1 * d1},
		}}
	}
	h := newHarness(t)
	h.tenant("acme", true, nil)
	storeGuard(t, h, "acme", baselines(150, -200)) // 1.50 MXN above never-send, 2 MXN below action 1
	h.tenant("beta", true, nil)
	storeGuard(t, h, "beta", baselines(50, 30))
	h.tenant("gamma", true, nil) // no estimate yet
	if diff := cmp.Diff("-2", sample(scrape(t, h), "coupond_policy_value_vs_baseline")); diff != "" {
		t.Errorf("coupond_policy_value_vs_baseline (-want +got):\n%s", diff)
	}
}

// TestPolicyValueLeavesOutTenantsWithoutEstimate: a tenant with no reward
// learned yet has no coupond_policy_value_mxn; it showed 0, which read as
// an estimate and, without the tenant label, hid the other tenants'
// largest value below zero.
func TestPolicyValueLeavesOutTenantsWithoutEstimate(t *testing.T) {
	for _, label := range []bool{false, true} {
		h := newHarnessWith(t, func(d *Deps) { d.MetricsTenantLabel = label })
		h.tenant("acme", true, nil)
		storeGuard(t, h, "acme", map[string]any{"policy": map[string]any{"w": 1, "w2": 1, "v": -250}})
		h.tenant("gamma", true, nil) // no estimate yet
		out := scrape(t, h)
		if label {
			if strings.Contains(out, `coupond_policy_value_mxn{tenant="gamma"}`) || !strings.Contains(out, `coupond_policy_value_mxn{tenant="acme"} -2.5`) {
				t.Errorf("with the tenant label: want acme's -2.5 and no series for gamma in\n%s", grepLines(out, "coupond_policy_value_mxn"))
			}
			continue
		}
		if diff := cmp.Diff("-2.5", sample(out, "coupond_policy_value_mxn")); diff != "" {
			t.Errorf("coupond_policy_value_mxn (-want +got):\n%s", diff)
		}
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPolicyValueVsBaselineZ: coupond_policy_value_vs_baseline_z, which the
// example alert reads, is the smallest difference in its standard errors:
// a baseline that earns more by a little with a wide error (a coupon seldom
// sent) reads near 0, where the difference alone read below 0 and fired
// the alert on noise; one that earns more with confidence reads below -2.
func TestPolicyValueVsBaselineZ(t *testing.T) {
	option := func(d, sd float64) map[string]any { // 4 decisions of mean d and SD sd (cents)
		return map[string]any{"w": 4, "w2": 4, "v": 1000, "d": 4 * d, "d2": 4 * (d*d + sd*sd)}
	}
	h := newHarness(t)
	h.tenant("acme", true, nil)
	storeGuard(t, h, "acme", map[string]any{"options": map[string]any{"0": option(150, 100), "1": option(-200, 3000)}})
	noisy := scrape(t, h)
	h.tenant("beta", true, nil)
	storeGuard(t, h, "beta", map[string]any{"options": map[string]any{"0": option(-200, 50)}})
	sure := scrape(t, h)
	got := []string{sample(noisy, "coupond_policy_value_vs_baseline"), sample(noisy, "coupond_policy_value_vs_baseline_z"),
		sample(sure, "coupond_policy_value_vs_baseline_z")}
	// −2 MXN over a standard error of 30/√3 MXN; over one of 0.5/√3 MXN.
	if diff := cmp.Diff([]string{"-2", "-0.11547005383792516", "-6.92820323027551"}, got); diff != "" {
		t.Errorf("vs_baseline, its z; the sure one's z (-want +got):\n%s", diff)
	}
}

// TestPolicyValueVsBaselineZAbove: when the policy beats every baseline
// the z reads the smallest margin, above 0 (as coupond_policy_value_vs_baseline
// reads its difference), not a 0 that reads as "no estimate" or a tie.
func TestPolicyValueVsBaselineZAbove(t *testing.T) {
	option := func(d, sd float64) map[string]any { // 4 decisions of mean d and SD sd (cents)
		return map[string]any{"w": 4, "w2": 4, "v": 1000, "d": 4 * d, "d2": 4 * (d*d + sd*sd)}
	}
	for _, tc := range []struct {
		name    string
		options map[string]any
		want    []string
	}{
		// +1.5 MXN over a standard error of 1/√3 MXN; +3 over the same.
		{"one baseline", map[string]any{"0": option(150, 100)}, []string{"1.5", "2.598076211353316"}},
		{"the smaller z", map[string]any{"0": option(150, 100), "1": option(300, 100)}, []string{"1.5", "2.598076211353316"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.tenant("acme", true, nil)
			storeGuard(t, h, "acme", map[string]any{"options": tc.options})
			text := scrape(t, h)
			got := []string{sample(text, "coupond_policy_value_vs_baseline"), sample(text, "coupond_policy_value_vs_baseline_z")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("vs_baseline, its z (-want +got):\n%s", diff)
			}
		})
	}
}
