package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// acceptEvents posts events and fails unless all are accepted.
func (h *harness) acceptEvents(tok string, evs ...map[string]any) {
	h.t.Helper()
	st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": evs})
	if st != 200 || body["aceptados"] != float64(len(evs)) {
		h.t.Fatalf("eventos: %d %v", st, body)
	}
}

func purchaseAt(id, ref string, ts time.Time) map[string]any {
	return map[string]any{"event_id": id, "cliente_ref": ref, "ts": ts.Format(time.RFC3339), "tipo": "COMPRA_CAT",
		"clave": "abarrotes", "valor": 120.5, "extra": map[string]any{"ticket_id": "t-" + id, "margen": 30.25, "tienda": "centro"}}
}

// storeHolds reports whether any key or value of the store contains b.
func (h *harness) storeHolds(b []byte) bool {
	h.t.Helper()
	found := false
	if err := h.db.Scan(nil, nil, func(k, v []byte) error {
		if bytes.Contains(k, b) || bytes.Contains(v, b) {
			found = true
		}
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return found
}

func TestClienteExportAndDeletion(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	const ana, beto = "ana-00000001", "beto-0000002"
	ts := testStart.Add(-48 * time.Hour)

	// Ana: a decision and its confirmation (each with an Idempotency-Key),
	// the coupon it sent received and redeemed, and a purchase. Beto: a
	// purchase and a decision, to check that his data stays.
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ana, nil), "Idempotency-Key", "idem-ana-1")
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	decisionID := d["decision_id"].(string)
	if st, body := h.do("POST", "/v1/decisiones/"+decisionID+"/ejecucion", tok, map[string]any{"ejecutada": true}, "Idempotency-Key", "conf-ana-1"); st != 200 {
		t.Fatalf("confirm: %d %v", st, body)
	}
	h.acceptEvents(tok,
		purchaseAt("ev-ana-1", ana, ts),
		map[string]any{"event_id": "ev-ana-2", "cliente_ref": ana, "ts": testStart.Add(-time.Hour).Format(time.RFC3339), "tipo": "CUPON_RECIBIDO",
			"clave": "TA", "decision_id": decisionID, "extra": map[string]any{"cupon_emitido_id": "cup-ana-1", "caducidad": testStart.Add(240 * time.Hour).Format(time.RFC3339), "canal": "push"}},
		map[string]any{"event_id": "ev-ana-3", "cliente_ref": ana, "ts": testStart.Add(-30 * time.Minute).Format(time.RFC3339), "tipo": "CUPON_REDIMIDO",
			"clave": "TA", "valor": 10, "extra": map[string]any{"cupon_emitido_id": "cup-ana-1", "ticket_id": "t-9"}},
		purchaseAt("ev-beto-1", beto, ts),
	)
	if st, _ := h.do("POST", "/v1/decisiones", tok, decideBody(beto, nil)); st != 200 {
		t.Fatal("beto decision")
	}

	// Export before deletion: everything, times in UTC.
	st, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	if st != 200 {
		t.Fatalf("export: %d %v", st, x)
	}
	evs := x["eventos"].([]any)
	if len(evs) != 3 || x["cliente_ref"] != ana || x["borrado"] != nil {
		t.Fatalf("export before deletion: %v", x)
	}
	first := evs[0].(map[string]any)
	if first["event_id"] != "ev-ana-1" || first["ts"] != ts.Format(time.RFC3339) || first["valor"] != 120.5 ||
		first["extra"].(map[string]any)["margen"] != 30.25 || first["extra"].(map[string]any)["tienda"] != "centro" {
		t.Errorf("exported purchase: %v", first)
	}
	if evs[1].(map[string]any)["decision_id"] != decisionID {
		t.Errorf("exported CUPON_RECIBIDO lacks its decision_id: %v", evs[1])
	}
	feats := x["caracteristicas"].(map[string]any)
	if len(feats) == 0 || feats["canales_baja"] == nil {
		t.Errorf("export features: %v", feats)
	}
	decs := x["decisiones"].([]any)
	if len(decs) != 1 || decs[0].(map[string]any)["decision_id"] != decisionID || decs[0].(map[string]any)["estado_ejecucion"] != "ejecutada" {
		t.Errorf("export decisions: %v", decs)
	}
	confs := x["confirmaciones"].([]any)
	if len(confs) != 1 || confs[0].(map[string]any)["estado_ejecucion"] != "ejecutada" {
		t.Errorf("export confirmations: %v", confs)
	}
	links := x["vinculos_cupon"].([]any)
	if len(links) != 1 || links[0].(map[string]any)["cupon_emitido_id"] != "cup-ana-1" || links[0].(map[string]any)["redimido"] != true {
		t.Errorf("export coupon links: %v", links)
	}
	log, err := h.srv.Privacy.AccessLog("acme")
	if err != nil || len(log) != 1 || log[0].ClienteRef != ana || log[0].ClientID == "" || log[0].TraceID == "" {
		t.Fatalf("access log after one export: %+v %v", log, err)
	}

	if !h.storeHolds([]byte(ana)) || !h.storeHolds([]byte("cup-ana-1")) {
		t.Fatal("storeHolds does not see the customer before deletion")
	}

	// Deletion: 202 programado, durable job, visible in the export.
	st, body := h.do("DELETE", "/v1/clientes/"+ana, tok, nil)
	if st != 202 || body["cliente_ref"] != ana || body["estado"] != "programado" {
		t.Fatalf("delete: %d %v", st, body)
	}
	_, x = h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	if b, _ := x["borrado"].(map[string]any); b["estado"] != "programado" || len(x["eventos"].([]any)) != 3 {
		t.Errorf("export while scheduled: %v", x)
	}
	stats, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{})
	if err != nil || stats.Completed != 1 {
		t.Fatalf("deletion pass: %+v %v", stats, err)
	}

	// After: only the deletion record.
	st, x = h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	if st != 200 {
		t.Fatalf("export after deletion: %d %v", st, x)
	}
	b, _ := x["borrado"].(map[string]any)
	if b["estado"] != "completado" || b["completado_en"] == nil || len(x["eventos"].([]any)) != 0 || len(x["decisiones"].([]any)) != 0 ||
		len(x["confirmaciones"].([]any)) != 0 || len(x["vinculos_cupon"].([]any)) != 0 || len(x["caracteristicas"].(map[string]any)) != 0 {
		t.Errorf("export after deletion: %v", x)
	}
	// Nothing in the store names Ana any more; the access log shows her hash.
	if h.storeHolds([]byte(ana)) {
		t.Error("the store still holds the deleted cliente_ref")
	}
	if h.storeHolds([]byte("cup-ana-1")) || h.storeHolds([]byte("ev-ana-")) {
		t.Error("the store still holds the deleted customer's events or coupon links")
	}
	log, _ = h.srv.Privacy.AccessLog("acme")
	if len(log) != 3 {
		t.Fatalf("access log: %d entries, want 3", len(log))
	}
	for _, a := range log {
		if a.ClienteRef != "" || a.ClienteHash != h.srv.Privacy.CustomerHash("acme", ana) {
			t.Errorf("access-log entry after deletion: %+v", a)
		}
	}
	// The idempotency record went with her: the same key decides anew.
	_, d2 := h.do("POST", "/v1/decisiones", tok, decideBody(ana, nil), "Idempotency-Key", "idem-ana-1")
	if d2["decision_id"] == decisionID {
		t.Error("Idempotency-Key replayed a deleted decision")
	}
	// The old decision id is gone: confirming it is 404, also with the
	// confirmation's key, whose record went with her.
	if st, _ := h.do("POST", "/v1/decisiones/"+decisionID+"/ejecucion", tok, map[string]any{"ejecutada": false}); st != 404 {
		t.Errorf("confirm deleted decision: %d, want 404", st)
	}
	if st, b := h.do("POST", "/v1/decisiones/"+decisionID+"/ejecucion", tok, map[string]any{"ejecutada": true}, "Idempotency-Key", "conf-ana-1"); st != 404 {
		t.Errorf("confirmation of a deleted decision repeated with its key: %d %v, want 404", st, b)
	}
	// Beto is untouched.
	_, bx := h.do("GET", "/v1/clientes/"+beto+"/exportacion", tok, nil)
	if len(bx["eventos"].([]any)) != 1 || len(bx["decisiones"].([]any)) != 1 || bx["borrado"] != nil {
		t.Errorf("other customer's export after Ana's deletion: %v", bx)
	}
}

func TestClienteEndpointsValidation(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	noScope := h.token("acme", "eventos:publicar")

	// Unknown customer: 200 with empty collections.
	st, x := h.do("GET", "/v1/clientes/nadie-00000/exportacion", tok, nil)
	if st != 200 || x["borrado"] != nil {
		t.Fatalf("unknown customer: %d %v", st, x)
	}
	for _, k := range []string{"eventos", "decisiones", "confirmaciones", "vinculos_cupon"} {
		if l, ok := x[k].([]any); !ok || len(l) != 0 {
			t.Errorf("unknown customer %s: %v", k, x[k])
		}
	}
	if m, ok := x["caracteristicas"].(map[string]any); !ok || len(m) != 0 {
		t.Errorf("unknown customer caracteristicas: %v", x["caracteristicas"])
	}

	for _, tc := range []struct{ ref, typ string }{
		{"abc", "string_too_short"},
		{"5512345678", "value_error"},
		{"ana%40mail.com", "string_pattern_mismatch"},
	} {
		for _, m := range []struct{ method, suffix string }{{"DELETE", ""}, {"GET", "/exportacion"}} {
			st, body := h.do(m.method, "/v1/clientes/"+tc.ref+m.suffix, tok, nil)
			detail, _ := body["detail"].([]any)
			if st != 422 || len(detail) != 1 {
				t.Errorf("%s %s: %d %v, want 422", m.method, tc.ref, st, body)
				continue
			}
			v := detail[0].(map[string]any)
			if v["type"] != tc.typ || fmt.Sprint(v["loc"]) != "[path cliente_ref]" {
				t.Errorf("%s %s: violation %v, want %s at path.cliente_ref", m.method, tc.ref, v, tc.typ)
			}
		}
	}
	if st, body := h.do("DELETE", "/v1/clientes/ana-00000001", noScope, nil); st != 403 || body["codigo"] != "sin_permiso" {
		t.Errorf("delete without clientes:borrar: %d %v", st, body)
	}
	if st, _ := h.do("GET", "/v1/clientes/ana-00000001/exportacion", noScope, nil); st != 403 {
		t.Errorf("export without clientes:exportar: %d", st)
	}
	if st, _ := h.do("DELETE", "/v1/clientes/ana-00000001", "", nil); st != 401 {
		t.Errorf("delete without token: %d", st)
	}
	// Repeating a scheduled deletion is the same deletion.
	for i := 0; i < 2; i++ {
		if st, body := h.do("DELETE", "/v1/clientes/ana-00000001", tok, nil); st != 202 || body["estado"] != "programado" {
			t.Fatalf("delete %d: %d %v", i, st, body)
		}
	}
	if n, _ := h.srv.Privacy.PendingDeletions(); n != 1 {
		t.Errorf("two DELETEs of one customer queued %d jobs, want 1", n)
	}
}

// TestClienteExportHoldsHeldEvents: events of a credential at the abuse
// guard's quarantine step are accepted ("aceptados") and kept, not yet
// applied. The engine holds them, so the customer's export lists them
// (contract §4: every event held for the customer), in the export's form
// (UTC ts, null members left out), and not another customer's; after
// the deletion neither the export nor the store has them.
func TestClienteExportHoldsHeldEvents(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	rights := h.token("acme", "clientes:exportar", "clientes:borrar")
	const ana, beto = "ana-00000001", "beto-0000002"
	h.acceptEvents(tok, purchaseAt("ev-ana-1", ana, testStart.Add(-2*time.Hour)))
	stepToCuarentena(t, g, id)
	held := purchaseAt("ev-ana-2", ana, testStart)
	held["ts"] = testStart.Add(-time.Hour).In(time.FixedZone("CST", -6*3600)).Format("2006-01-02 15:04-0700") // RFC 3339 as the API reads it
	held["extra"].(map[string]any)["canal"] = nil
	h.acceptEvents(tok, held, purchaseAt("ev-beto-1", beto, testStart.Add(-time.Hour)))
	if n := h.srv.QuarantineCount("acme"); n != 1 {
		t.Fatalf("quarantine holds %d requests, want 1", n)
	}
	exported := func(ref string) []any {
		t.Helper()
		st, x := h.do("GET", "/v1/clientes/"+ref+"/exportacion", rights, nil)
		if st != 200 {
			t.Fatalf("export %s: %d %v", ref, st, x)
		}
		return x["eventos"].([]any)
	}
	want := []any{
		map[string]any{"event_id": "ev-ana-1", "cliente_ref": ana, "ts": testStart.Add(-2 * time.Hour).Format(time.RFC3339), "tipo": "COMPRA_CAT",
			"clave": "abarrotes", "valor": 120.5, "decision_id": nil, "extra": map[string]any{"ticket_id": "t-ev-ana-1", "margen": 30.25, "tienda": "centro"}},
		map[string]any{"event_id": "ev-ana-2", "cliente_ref": ana, "ts": testStart.Add(-time.Hour).Format(time.RFC3339), "tipo": "COMPRA_CAT",
			"clave": "abarrotes", "valor": 120.5, "decision_id": nil, "extra": map[string]any{"ticket_id": "t-ev-ana-2", "margen": 30.25, "tienda": "centro"}},
	}
	if diff := cmp.Diff(want, exported(ana)); diff != "" {
		t.Errorf("export with a held event (-want +got):\n%s", diff)
	}
	if got := exported(beto); len(got) != 1 || got[0].(map[string]any)["event_id"] != "ev-beto-1" {
		t.Errorf("other customer's export: %v, want only ev-beto-1", got)
	}
	if st, body := h.do("DELETE", "/v1/clientes/"+ana, rights, nil); st != 202 {
		t.Fatalf("delete: %d %v", st, body)
	}
	if st, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{}); err != nil || st.Completed != 1 {
		t.Fatalf("deletion pass: %+v %v", st, err)
	}
	if got := exported(ana); len(got) != 0 {
		t.Errorf("export after deletion: %v, want no events", got)
	}
	if h.storeHolds([]byte(ana)) {
		t.Error("the store still holds the deleted cliente_ref")
	}
}

// TestClienteEventsAfterDeletion states what the README and the OpenAPI
// document say of events sent for a customer after her deletion: they are
// accepted as a new history (the erased event's event_id too, since its
// record went with her), listed beside the completed deletion record, and
// a new DELETE schedules their erasure.
func TestClienteEventsAfterDeletion(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	const ana = "ana-00000001"
	ts := testStart.Add(-time.Hour)
	h.acceptEvents(tok, purchaseAt("ev-ana-1", ana, ts))
	erase := func() {
		t.Helper()
		if st, body := h.do("DELETE", "/v1/clientes/"+ana, tok, nil); st != 202 || body["estado"] != "programado" {
			t.Fatalf("delete: %d %v", st, body)
		}
		if st, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{}); err != nil || st.Completed != 1 {
			t.Fatalf("deletion pass: %+v %v", st, err)
		}
	}
	erase()
	h.acceptEvents(tok, purchaseAt("ev-ana-1", ana, ts), purchaseAt("ev-ana-2", ana, ts))
	_, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil)
	var ids []string
	for _, ev := range x["eventos"].([]any) {
		ids = append(ids, ev.(map[string]any)["event_id"].(string))
	}
	if diff := cmp.Diff([]string{"ev-ana-1", "ev-ana-2"}, ids); diff != "" {
		t.Errorf("events after the deletion (-want +got):\n%s", diff)
	}
	if b, _ := x["borrado"].(map[string]any); b["estado"] != "completado" {
		t.Errorf("borrado beside the new history: %v, want the completed record", x["borrado"])
	}
	erase()
	if h.storeHolds([]byte(ana)) {
		t.Error("the second deletion left the new history in the store")
	}
}
