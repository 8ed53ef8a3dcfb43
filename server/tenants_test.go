package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/privacy"
)

// TestTenantsNeverMeet runs tenant B's whole life (catalog, campaign,
// webhook, decisions with an Idempotency-Key, events, a batch job) and
// then tries to reach each of its records with tenant A's credential,
// through every route that names one: every attempt is 404 (or a
// rejection of the event), and none changes B's data or leaks it.
func TestTenantsNeverMeet(t *testing.T) {
	h, tokB := newCatalogHarness(t, 3, batchTenant)
	putCampaign(h, tokB, "camp-b", -1)
	h.tenant("tenant-a", true, batchTenant)
	tokA := h.token("tenant-a", allScopes...)
	const ref = "cliente-compartido"
	rc := newReceiver(t, 0)
	if st, b := h.do("PUT", "/v1/webhooks", tokB, map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}}); st != 200 {
		t.Fatalf("B's webhook: %d %v", st, b)
	}
	st, d := h.do("POST", "/v1/decisiones", tokB, decideBody(ref, nil), "Idempotency-Key", "clave-1")
	if st != 200 {
		t.Fatalf("B's decision: %d %v", st, d)
	}
	idB := d["decision_id"].(string)
	h.acceptEvents(tokB, purchaseAt("ev-b-1", ref, testStart.Add(-time.Hour)))
	job := submit(h, tokB, map[string]any{"campana_id": "camp-b", "clientes": []string{ref}})
	runJobs(h)

	// A's attempts.
	for _, p := range []string{"/v1/campanas/camp-b", "/v1/lotes-decision/" + job, "/v1/lotes-decision/" + job + "/resultado"} {
		if st, _, body := get(h, p, tokA); st != 404 || bytes.Contains(body, []byte(ref)) {
			t.Errorf("A: GET %s: %d %s, want 404", p, st, body)
		}
	}
	if st, b := h.do("POST", "/v1/decisiones/"+idB+"/ejecucion", tokA, map[string]any{"ejecutada": true}); st != 404 {
		t.Errorf("A confirms B's decision: %d %v, want 404", st, b)
	}
	if st, b := h.do("POST", "/v1/decisiones/"+idB+"/ejecucion", tokA, map[string]any{"ejecutada": true, "accion_real": int(d["accion"].(float64))}); st == 200 {
		t.Errorf("A confirms B's decision with its action: %d %v", st, b)
	}
	st, dA := h.do("POST", "/v1/decisiones", tokA, decideBody(ref, nil), "Idempotency-Key", "clave-1")
	if st != 200 || dA["decision_id"] == idB {
		t.Errorf("A's decision with B's Idempotency-Key: %d %v, want a decision of A's own", st, dA)
	}
	st, evs := postEvents(h, tokA, map[string]any{"event_id": "ev-a-1", "cliente_ref": ref, "ts": testStart.Add(-time.Minute).Format(time.RFC3339),
		"tipo": "CUPON_RECIBIDO", "clave": "TA", "decision_id": idB,
		"extra": map[string]any{"cupon_emitido_id": "cup-a-1", "caducidad": testStart.Add(240 * time.Hour).Format(time.RFC3339)}})
	if st != 200 || evs["aceptados"] != float64(0) {
		t.Errorf("A's event labelled with B's decision_id: %d %v, want it rejected", st, evs)
	}
	if st, b := h.do("POST", "/v1/lotes-decision", tokA, map[string]any{"campana_id": "camp-b", "clientes": []string{ref}}); st != 422 {
		t.Errorf("A's batch on B's campaign: %d %v, want 422", st, b)
	}
	if st, b := h.do("DELETE", "/v1/webhooks", tokA, nil); st != 200 {
		t.Errorf("A deletes its webhooks: %d %v", st, b)
	}
	if st, b := h.do("DELETE", "/v1/clientes/"+ref, tokA, nil); st != 202 {
		t.Errorf("A deletes its customer: %d %v", st, b)
	}
	if _, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{}); err != nil {
		t.Fatal(err)
	}
	st, x := h.do("GET", "/v1/clientes/"+ref+"/exportacion", tokA, nil)
	if st != 200 || len(asSlice(x["eventos"])) != 0 || strings.Contains(fmt.Sprint(x), idB) {
		t.Errorf("A's export of the shared cliente_ref: %d %v, want none of B's data", st, x)
	}
	if st, c := h.do("GET", "/v1/catalogo-acciones", tokA, nil); st != 200 || len(asSlice(c["acciones"])) != 0 {
		t.Errorf("A's catalog: %d %v, want empty", st, c)
	}

	// B's data is whole.
	if st, b := h.do("GET", "/v1/campanas/camp-b", tokB, nil); st != 200 {
		t.Errorf("B's campaign after A's attempts: %d %v", st, b)
	}
	st, x = h.do("GET", "/v1/clientes/"+ref+"/exportacion", tokB, nil)
	if st != 200 || len(asSlice(x["eventos"])) != 1 || x["borrado"] != nil {
		t.Errorf("B's export after A's attempts: %d %v", st, x)
	}
	if st, b := h.do("POST", "/v1/decisiones/"+idB+"/ejecucion", tokB, map[string]any{"ejecutada": true}); st != 200 {
		t.Errorf("B confirms its decision after A's attempts: %d %v", st, b)
	}
	if hooks, err := h.hooks.Registration("acme"); err != nil || hooks == nil {
		t.Errorf("B's webhook after A deleted its own: %v %v", hooks, err)
	}
}
