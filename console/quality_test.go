package console

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestCouponLabellingOnThePages: a shadow tenant sent an uploaded history
// of 3 coupons from before its creation (no decision_id) and 1 unlabelled
// coupon since. The tenants page's share reads the coupon since creation
// only, and says so; the tenant page's data-quality table lists counters
// only: the shadow period's start (a time, sombra_desde) is no counter and
// was shown as 0. They are named as "admin tenant show" names them: the
// table showed the stored record's Spanish names (tickets_con_iva_sospechoso
// for tickets_vat_suspect) and two counters admin does not print.
func TestCouponLabellingOnThePages(t *testing.T) {
	h := newHarness(t)
	now := h.clock.Now()
	s := store.DefaultSettings()
	s.Shadow, s.ShadowSince = true, now
	if err := h.db.CreateTenant(&store.Tenant{ID: "sombra", CreatedAt: now, Settings: s}); err != nil {
		t.Fatal(err)
	}
	var evs []engine.IngestEvent
	for i, ts := range []time.Time{now.Add(-40 * 24 * time.Hour), now.Add(-30 * 24 * time.Hour), now.Add(-20 * 24 * time.Hour), now} {
		ev := engine.Event{ID: fmt.Sprintf("ev-%d", i), ClienteRef: fmt.Sprintf("cliente%04d", i), TS: ts, Tipo: engine.CuponRecibido,
			Clave: "T10", CuponEmitidoID: fmt.Sprintf("cup-%d", i), Caducidad: ts.Add(7 * 24 * time.Hour)}
		evs = append(evs, engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)})
	}
	if res, err := h.eng.Ingester.Ingest("sombra", evs); err != nil || len(res.Rechazados) > 0 {
		t.Fatalf("ingest: %+v, %v", res, err)
	}
	c := h.client()
	h.signIn(c, h.link())
	_, list := get(t, c, h.con.URL+"/")
	if !strings.Contains(list, "coupons labelled since each tenant's creation") {
		t.Errorf("tenants page does not say which coupons its labelling share reads:\n%s", list)
	}
	if !strings.Contains(list, `0.0 % <span class="muted">(0/1)</span>`) {
		t.Errorf("tenants page: want sombra's labelling share 0/1 (the coupon since its creation):\n%s", list)
	}
	_, page := get(t, c, h.con.URL+"/t/sombra")
	_, section, _ := strings.Cut(page, "<h3>Data quality</h3>")
	section, _, _ = strings.Cut(section, "</table>")
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr><td>([^<]+)</td><td class="num">([^<]*)</td></tr>`).FindAllStringSubmatch(section, -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{ // the names and counters of "admin tenant show" (engine.Quality.Counts)
		"coupons_received": "4", "coupons_received_without_decision_id": "4",
		"coupons_since_creation": "1", "coupons_since_creation_unlabelled": "1",
		"events_accepted": "4", "out_of_order_events": "0", "events_after_account_closure": "0", "negative_margins": "0",
		"redemptions": "0", "redemptions_of_unknown_coupons": "0", "tickets_vat_suspect": "0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("data-quality table (-want +got):\n%s", diff)
	}
}
