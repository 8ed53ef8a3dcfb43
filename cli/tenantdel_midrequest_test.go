package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
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
	w.waitReading(t, int32(len(reqs)))
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
			if strings.HasPrefix(k, "\x01R") {
				continue // its tombstone
			}
			table, text := store.DescribeKey("acme", []byte(k))
			t.Errorf("left of acme after its deletion: %s %s", table, text)
		}
	}
}

// TestTenantDeleteSweepWaitsForReadTimeout: serve run with a --read-timeout
// longer than a minute lets a request authenticated before a tenant's
// deletion send its body later than a minute after it; the sweep waits
// for that (the read timeout and half a minute), so what the request
// leaves (its 401's console counter, a webhook registration) is swept,
// not kept for good after the deletion is done.
func TestTenantDeleteSweepWaitsForReadTimeout(t *testing.T) {
	w := &tenantWorld{dir: t.TempDir(), clk: clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)),
		tokens: map[string]string{}, creds: map[string][2]string{}}
	const readTimeout = 3 * time.Minute
	e, err := openEnv(context.Background(), w.dir, zerolog.Nop(), serviceOptions{now: w.clk.Now, readTimeout: readTimeout})
	if err != nil {
		t.Fatal(err)
	}
	w.e, w.api = e, httptest.NewServer(readingBodies(e.svc.api, &w.reading))
	t.Cleanup(w.close)
	for _, tenant := range []string{"acme", "beta"} {
		w.fillTenantAPI(t, tenant)
	}
	body := []byte(`{"url":"https://hooks.example.com/coupond","eventos":["lote.completado"]}`)
	c, err := net.Dial("tcp", w.api.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := fmt.Sprintf("PUT /v1/webhooks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		w.tokens["acme"], len(body))
	if _, err := c.Write(append([]byte(head), body[:1]...)); err != nil {
		t.Fatal(err)
	}
	w.waitReading(t, 1)
	hooks := deletionHooks(e.svc, false)
	if _, err := e.svc.privacy.DeleteTenant(context.Background(), "acme", "uid 1", hooks); err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(readTimeout - time.Second) // the body's last moment
	if _, err := e.svc.privacy.ProcessDeletions(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body[1:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("the late request: %d", resp.StatusCode)
	flushCounters(e.svc, e.log)
	w.clk.Advance(time.Minute)
	if _, err := e.svc.privacy.ProcessDeletions(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.db.TenantDeletionOf("acme"); d == nil || d.State != store.TenantDeleted {
		t.Errorf("the read timeout and half a minute after the mark: %+v, want deleted", d)
	}
	if left := recordsOf(t, e.db, "acme"); len(left) != 1 {
		for k := range left {
			if strings.HasPrefix(k, "\x01R") {
				continue // its tombstone
			}
			table, text := store.DescribeKey("acme", []byte(k))
			t.Errorf("left of acme after its deletion: %s %s", table, text)
		}
	}
}
