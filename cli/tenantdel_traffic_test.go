package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
)

// trafficStats counts the answers of one tenant's traffic by route and
// status.
type trafficStats struct {
	mu    sync.Mutex
	codes map[string]int // "route status" → count
}

func (s *trafficStats) add(route string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[fmt.Sprintf("%s %d", route, status)]++
}

// trafficCall sends one API request from a traffic goroutine (no t.Fatal
// there) and returns its status and JSON body; a transport error is 0.
func trafficCall(base, method, path, token string, body any) (int, map[string]any) {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// integratorTraffic posts, as tenant, events, decisions and their
// confirmations, batch jobs, exports and customer deletions until stop is
// closed, counting every answer in st.
func integratorTraffic(base, token, tenant string, worker int, now time.Time, st *trafficStats, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ref := fmt.Sprintf("c-%s-w%d-%05d", tenant, worker, i%50)
		evs := []map[string]any{purchaseEvent(fmt.Sprintf("ev-%s-w%d-%d", tenant, worker, i), ref, now.Add(-time.Hour))}
		code, _ := trafficCall(base, "POST", "/v1/eventos", token, map[string]any{"eventos": evs})
		st.add("eventos", code)
		code, d := trafficCall(base, "POST", "/v1/decisiones", token,
			map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push", "campana_id": "camp1"}})
		st.add("decisiones", code)
		if id, ok := d["decision_id"].(string); ok {
			code, _ = trafficCall(base, "POST", "/v1/decisiones/"+id+"/ejecucion", token, map[string]any{"ejecutada": true})
			st.add("ejecucion", code)
		}
		switch i % 5 {
		case 1:
			code, _ = trafficCall(base, "POST", "/v1/lotes-decision", token, map[string]any{"campana_id": "camp1", "clientes": []string{ref}})
			st.add("lotes", code)
		case 2:
			code, _ = trafficCall(base, "GET", "/v1/clientes/"+ref+"/exportacion", token, nil)
			st.add("exportacion", code)
		case 3:
			code, _ = trafficCall(base, "DELETE", "/v1/clientes/"+ref, token, nil)
			st.add("borrado", code)
		}
	}
}

// TestMeasureTenantDeleteLatency measures a quiet tenant's decisions over
// HTTP (p50, p99) while tenants of eventsPer events are deleted (the
// erasure and the sweep's compaction and purge, grace 0), and in windows as
// long without a deletion, alternated in one run:
// COUPOND_MEASURE_TENANTDEL_LATENCY=100000 go test -run
// TestMeasureTenantDeleteLatency -v ./cli/ (skipped without it).
func TestMeasureTenantDeleteLatency(t *testing.T) {
	eventsPer := 0
	fmt.Sscan(os.Getenv("COUPOND_MEASURE_TENANTDEL_LATENCY"), &eventsPer)
	if eventsPer == 0 {
		t.Skip("set COUPOND_MEASURE_TENANTDEL_LATENCY to the events of each deleted tenant")
	}
	const rounds = 3
	w := newTenantWorld(t)
	now := w.clk.Now()
	for r := 0; r < rounds; r++ {
		tenant := fmt.Sprintf("big%d", r)
		createTenantWithEvents(t, w.e, tenant, now, eventsPer)
	}
	// measure runs beta's decisions back to back, 2 ms apart, until done
	// is closed, and returns their latencies; any answer but 200 fails.
	measure := func(done <-chan struct{}) []time.Duration {
		var lat []time.Duration
		for i := 0; ; i++ {
			select {
			case <-done:
				return lat
			default:
			}
			start := time.Now()
			code, _ := trafficCall(w.api.URL, "POST", "/v1/decisiones", w.tokens["beta"],
				map[string]any{"cliente_ref": fmt.Sprintf("q-%06d", i), "contexto": map[string]any{"canal": "push", "campana_id": "camp1"}})
			lat = append(lat, time.Since(start))
			if code != 200 {
				t.Errorf("beta's decision: %d", code)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	hooks := deletionHooks(w.e.svc, false)
	hooks.Tenant.Grace = 0
	var idle, deleting []time.Duration
	for r := 0; r < rounds; r++ {
		done := make(chan struct{})
		took := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			if d, err := w.e.svc.privacy.DeleteTenant(context.Background(), fmt.Sprintf("big%d", r), "uid 1", hooks); err != nil || d.State != store.TenantDeleted {
				t.Errorf("delete: %+v %v", d, err)
			}
			took <- time.Since(start)
			close(done)
		}()
		lat := measure(done)
		d := <-took
		deleting = append(deleting, lat...)
		t.Logf("round %d: deletion of %d events took %v; beta during it: %s", r, eventsPer, d.Round(time.Millisecond), quantiles(lat))
		timer := make(chan struct{})
		time.AfterFunc(d, func() { close(timer) })
		lat = measure(timer)
		idle = append(idle, lat...)
		t.Logf("round %d: beta without a deletion, as long: %s", r, quantiles(lat))
	}
	t.Logf("beta's decisions during the deletions: %s; without: %s", quantiles(deleting), quantiles(idle))
}

// quantiles says how many latencies lat holds and their p50, p99 and max.
func quantiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "none"
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(s), q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond))
}
