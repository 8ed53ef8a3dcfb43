package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// outOfRange are timestamps with a valid RFC 3339 form whose UTC instant
// falls outside 1970-01-01 .. 9999-12-31 (issue 17, item 1 and 2): the
// first is year 10000 in UTC, the second year -1, the third the zero
// time.Time, which the event encoding used to drop silently.
var outOfRange = []string{"9999-12-31T23:00:00-14:00", "0000-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"}

// TestTimestampRangeConfirmation: an out-of-range ts_ejecucion is 422
// value_error and nothing is stored, so the customer's export, deletion and
// the tenant's learner all complete afterwards.
func TestTimestampRangeConfirmation(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	const ana = "ana-00000001"
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ana, nil))
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	id := d["decision_id"].(string)
	tooLate := testStart.Add(6 * time.Minute).Format(time.RFC3339)
	for _, ts := range append(outOfRange, tooLate) {
		st, body := h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, map[string]any{"ejecutada": true, "ts_ejecucion": ts})
		detail, _ := body["detail"].([]any)
		if st != 422 || len(detail) != 1 {
			t.Fatalf("ts_ejecucion %s: %d %v, want 422", ts, st, body)
		}
		v := detail[0].(map[string]any)
		if v["type"] != "value_error" || fmt.Sprint(v["loc"]) != "[body ts_ejecucion]" {
			t.Errorf("ts_ejecucion %s: violation %v", ts, v)
		}
	}
	// The tenant clock + 5 minutes is accepted.
	okTS := testStart.Add(5 * time.Minute).Format(time.RFC3339)
	if st, body := h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, map[string]any{"ejecutada": true, "ts_ejecucion": okTS}); st != 200 {
		t.Fatalf("confirm at clock+5m: %d %v", st, body)
	}

	// Export, learner and deletion complete.
	if st, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil); st != 200 || len(x["decisiones"].([]any)) != 1 {
		t.Fatalf("export: %d %v", st, x)
	}
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(40 * 24 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	if ls, err := h.engine.Learner.Learn("acme"); err != nil || ls.Folded != 1 {
		t.Fatalf("learner: %+v %v", ls, err)
	}
	if st, _ := h.do("DELETE", "/v1/clientes/"+ana, tok, nil); st != 202 {
		t.Fatal("delete")
	}
	stats, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{})
	if err != nil || stats.Completed != 1 {
		t.Fatalf("deletion: %+v %v", stats, err)
	}
}

// TestTimestampRangeEvents: an event field outside the range is a
// per-event esquema_invalido naming its dotted path; the event's own ts
// keeps ts_fuera_de_rango. Nothing of the rejected events is stored.
func TestTimestampRangeEvents(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	tok := h.token("acme", allScopes...)
	const ana = "ana-00000001"
	var evs []map[string]any
	for i, ts := range outOfRange {
		evs = append(evs, map[string]any{"event_id": fmt.Sprintf("cad-%d", i), "cliente_ref": ana, "ts": testStart.Add(-time.Hour).Format(time.RFC3339),
			"tipo": "CUPON_RECIBIDO", "clave": "TA", "extra": map[string]any{"cupon_emitido_id": fmt.Sprintf("cup-%d", i), "caducidad": ts}})
		p := purchaseAt(fmt.Sprintf("ts-%d", i), ana, testStart)
		p["ts"] = ts
		evs = append(evs, p)
	}
	evs = append(evs, map[string]any{"event_id": "cad-ok", "cliente_ref": ana, "ts": testStart.Add(-time.Hour).Format(time.RFC3339),
		"tipo": "CUPON_RECIBIDO", "clave": "TA", "extra": map[string]any{"cupon_emitido_id": "cup-ok", "caducidad": "9999-12-31T23:59:59+00:00"}})
	st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": evs})
	if st != 200 || body["aceptados"] != 1.0 {
		t.Fatalf("eventos: %d %v", st, body)
	}
	rej := body["rechazados"].([]any)
	if len(rej) != 2*len(outOfRange) {
		t.Fatalf("rechazados: %v", rej)
	}
	for i, r := range rej {
		r := r.(map[string]any)
		want := [2]string{"esquema_invalido", "extra.caducidad"}
		if i%2 == 1 {
			want = [2]string{"ts_fuera_de_rango", "ts"}
		}
		if got := [2]string{fmt.Sprint(r["codigo"]), fmt.Sprint(r["campo"])}; got != want {
			t.Errorf("rechazado %d (%s): %v, want %v", i, outOfRange[i/2], r, want)
		}
	}
	if h.storeHolds([]byte("cup-0")) || h.storeHolds([]byte("ts-0")) {
		t.Error("a rejected event was stored")
	}
	// The accepted one round-trips: export shows it, deletion erases it.
	st, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	if st != 200 || len(x["eventos"].([]any)) != 1 {
		t.Fatalf("export: %d %v", st, x)
	}
	if got := x["eventos"].([]any)[0].(map[string]any)["extra"].(map[string]any)["caducidad"]; got != "9999-12-31T23:59:59Z" {
		t.Errorf("exported caducidad %v", got)
	}
	if st, _ := h.do("DELETE", "/v1/clientes/"+ana, tok, nil); st != 202 {
		t.Fatal("delete")
	}
	if stats, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{}); err != nil || stats.Completed != 1 {
		t.Fatalf("deletion: %+v %v", stats, err)
	}
	if h.storeHolds([]byte(ana)) || h.storeHolds([]byte("cup-ok")) {
		t.Error("the deleted customer's event survived")
	}
}
