package server

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coupond/coupond/engine"
)

// TestDecisionActionLabelsBounded: coupond_decisions_total carries at most
// maxActionLabels action ids besides 0 (per tenant with the tenant label);
// decisions for ids past them, as a tenant whose catalogs keep replacing
// their ids would make, count under action="other" instead of adding
// series without end, and none is lost.
func TestDecisionActionLabelsBounded(t *testing.T) {
	const ids = maxActionLabels + 500
	for _, tenantLabel := range []bool{false, true} {
		t.Run("tenantLabel="+strconv.FormatBool(tenantLabel), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			b := newBusiness(reg, tenantLabel)
			for _, tenant := range []string{"acme", "beta"} {
				for id := 0; id <= ids; id++ {
					b.decision(tenant, "online", &engine.Decision{Accion: id})
					b.decision(tenant, "respaldo", &engine.Decision{Accion: id, EnRespaldo: true})
				}
			}
			type got struct {
				Actions, Series, Other int // Actions: distinct values per tenant
				Total                  float64
			}
			var g got
			actions := map[string]map[string]bool{}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() != "coupond_decisions_total" {
					continue
				}
				for _, m := range f.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if actions[labels["tenant"]] == nil {
						actions[labels["tenant"]] = map[string]bool{}
					}
					actions[labels["tenant"]][labels["action"]] = true
					g.Series++
					g.Total += m.GetCounter().GetValue()
					if labels["action"] == actionOther {
						g.Other += int(m.GetCounter().GetValue())
					}
				}
			}
			tenants, acme := 1, ""
			if tenantLabel {
				tenants, acme = 2, "acme"
			}
			g.Actions = len(actions[acme])
			// 0, maxActionLabels ids and "other", for both sources.
			want := got{Actions: maxActionLabels + 2, Series: tenants * 2 * (maxActionLabels + 2),
				Other: 2 * 2 * (ids - maxActionLabels), Total: 2 * 2 * (ids + 1)}
			if diff := cmp.Diff(want, g); diff != "" {
				t.Errorf("coupond_decisions_total (-want +got):\n%s", diff)
			}
		})
	}
}
