package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// newEvents are n purchases, event ids prefix-0 on.
func newEvents(prefix string, n int) []map[string]any {
	evs := make([]map[string]any, n)
	for i := range evs {
		evs[i] = purchase(fmt.Sprintf("%s-%d", prefix, i), "cliente-"+prefix, testStart.Add(-time.Hour), 100, 10)
	}
	return evs
}

// TestEventsQuota: the daily quota of events counts the events accepted
// and is never passed: a request whose new events do not fit is 429 with
// Retry-After to the tenant's midnight and applies nothing, one that fits
// is answered, and N requests at once accept at most the quota.
func TestEventsQuota(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.QuotaEventsDay = 25; s.RateLimits = false })
	tok := h.token("acme", allScopes...)
	const n, batch = 6, 10
	var mu sync.Mutex
	statuses := map[int]int{}
	accepted := 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, body := postEvents(h, tok, newEvents(fmt.Sprintf("r%d", i), batch)...)
			mu.Lock()
			defer mu.Unlock()
			statuses[st]++
			if st == 200 {
				accepted += int(body["aceptados"].(float64))
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(map[int]int{200: 2, 429: n - 2}, statuses); diff != "" {
		t.Errorf("statuses of %d requests of %d events, quota 25 (-want +got):\n%s", n, batch, diff)
	}
	if accepted != 2*batch {
		t.Errorf("%d events accepted, want %d", accepted, 2*batch)
	}

	resp := h.raw("POST", "/v1/eventos", tok, map[string]any{"eventos": newEvents("late", 6)})
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != fmt.Sprint(12*3600) {
		t.Errorf("6 new events with room for 5: %d Retry-After %q, want 429 %d", resp.StatusCode, resp.Header.Get("Retry-After"), 12*3600)
	}
	if st, body := postEvents(h, tok, newEvents("last", 5)...); st != 200 || body["aceptados"] != 5.0 {
		t.Errorf("5 new events with room for 5: %d %v", st, body)
	}
	if st, body := postEvents(h, tok, newEvents("over", 1)...); st != 429 {
		t.Errorf("an event past the quota: %d %v, want 429", st, body)
	}
}
