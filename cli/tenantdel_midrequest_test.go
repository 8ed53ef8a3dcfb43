package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
)

// TestTenantDeleteMidRequest: a request of acme that passed authentication
// before acme's deletion began, its body still on its way, reaches its
// handler once acme is erased: it is answered 401 as every later one, not
// 500, and writes nothing that the sweep would not remove.
func TestTenantDeleteMidRequest(t *testing.T) {
	w := newTenantWorld(t)
	// acme's sandbox clock past the hour of the filling's batch job.
	if _, err := w.e.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(2 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	now := w.clk.Now()
	type req struct {
		method, path string
		body         any
	}
	reqs := []req{
		{"POST", "/v1/eventos", map[string]any{"eventos": []map[string]any{purchaseEvent("ev-mid", "c-acme-00001", now.Add(-time.Hour))}}},
		{"POST", "/v1/decisiones", map[string]any{"cliente_ref": "c-acme-00001", "contexto": map[string]any{"canal": "push", "campana_id": "camp1"}}},
		{"POST", "/v1/lotes-decision", map[string]any{"campana_id": "camp1", "clientes": []string{"c-acme-00001"}}},
		{"PUT", "/v1/campanas/camp2", map[string]any{"canal": "push", "descripcion": "otra"}},
		{"PUT", "/v1/catalogo-acciones", map[string]any{"acciones": []map[string]any{
			{"id": 1, "nombre": "diez", "tipo_cupon": "T10", "costo_envio_mxn": 0.5, "descuento_max_mxn": 10, "descuento_pct": 10, "activa": true}}}},
	}
	conns := make([]net.Conn, len(reqs))
	rests := make([][]byte, len(reqs))
	for i, r := range reqs {
		body, _ := json.Marshal(r.body)
		c, err := net.Dial("tcp", w.api.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
			r.method, r.path, w.tokens["acme"], len(body))
		if _, err := c.Write(append([]byte(head), body[:1]...)); err != nil {
			t.Fatal(err)
		}
		conns[i], rests[i] = c, body[1:]
	}
	time.Sleep(200 * time.Millisecond) // every request authenticated, reading its body
	if _, err := w.e.svc.privacy.DeleteTenant(context.Background(), "acme", "uid 1", deletionHooks(w.e.svc, false)); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if _, err := conns[i].Write(rests[i]); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conns[i]), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 401 {
			t.Errorf("%s %s authenticated before acme's deletion, handled after: %d %s; want 401", r.method, r.path, resp.StatusCode, b)
		}
	}
	flushCounters(w.e.svc, w.e.log)
	w.clk.Advance(tenantSweepGrace)
	if _, err := w.e.svc.privacy.ProcessDeletions(context.Background(), deletionHooks(w.e.svc, false)); err != nil {
		t.Fatal(err)
	}
	flushCounters(w.e.svc, w.e.log)
	if d, _ := w.e.db.TenantDeletionOf("acme"); d == nil || d.State != store.TenantDeleted {
		t.Errorf("after the grace: %+v, want deleted", d)
	}
	if left := recordsOf(t, w.e.db, "acme"); len(left) != 1 {
		for k := range left {
			table, text := store.DescribeKey("acme", []byte(k))
			t.Errorf("left of acme after its deletion: %s %s", table, text)
		}
	}
}
