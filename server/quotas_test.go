package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/apitest"
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

// quotaStep is one request of a scenario past a daily limit.
type quotaStep struct {
	name string
	body any
	hdr  []string
	want int
	same bool // the answer is the first answer (a decision's decision_id, or the counts)
}

// runQuotaSteps sends each step to path and checks its status; first is
// the first step's answer.
func runQuotaSteps(t *testing.T, h *harness, tok, path string, steps []quotaStep) {
	t.Helper()
	var first map[string]any
	for i, s := range steps {
		resp := h.raw("POST", path, tok, s.body, s.hdr...)
		body := apitest.Object(t, resp)
		if resp.StatusCode != s.want {
			t.Errorf("%s: %d %v, want %d", s.name, resp.StatusCode, body, s.want)
			continue
		}
		if s.want == 429 && (body["codigo"] != "limite_excedido" || resp.Header.Get("Retry-After") == "") {
			t.Errorf("%s: %v Retry-After %q, want limite_excedido with Retry-After", s.name, body, resp.Header.Get("Retry-After"))
		}
		if i == 0 {
			first = body
		}
		if s.same && body["decision_id"] != first["decision_id"] {
			t.Errorf("%s: decision_id %v, want the first answer's %v", s.name, body["decision_id"], first["decision_id"])
		}
	}
}

// TestDecisionReplayPastDailyLimits: past the tenant's daily quota or the
// customer's daily cap, a keyed replay (same Idempotency-Key, same body,
// however spaced) answers the original decision, while every other
// request, with a key or not, is 429 before its body is looked at (413,
// 415, 422 and 409 come after 429, contract section 7).
func TestDecisionReplayPastDailyLimits(t *testing.T) {
	key := []string{"Idempotency-Key", "k1"}
	respaced := `{ "contexto": {"canal": "push"}, "cliente_ref": "cliente-ana" }`
	for _, tc := range []struct {
		name    string
		sandbox bool
		quota   int64
		fill    []string // customers of unkeyed decisions after the first
	}{
		{"tenant quota used up", true, 3, []string{"cliente-bea", "cliente-eva"}},
		{"customer cap used up", false, 0, []string{"cliente-ana", "cliente-ana"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.tenant("acme", tc.sandbox, func(s *store.Settings) { s.QuotaDecisionsDay = tc.quota; s.ControlShare = 0 })
			tok := h.token("acme", allScopes...)
			h.catalog(tok, 2)
			steps := []quotaStep{{name: "first, keyed", body: decideBody("cliente-ana", nil), hdr: key, want: 200}}
			for _, ref := range tc.fill {
				steps = append(steps, quotaStep{name: "decision of " + ref, body: decideBody(ref, nil), want: 200})
			}
			steps = append(steps,
				quotaStep{name: "new decision past the limit", body: decideBody("cliente-ana", nil), want: 429},
				quotaStep{name: "replay", body: decideBody("cliente-ana", nil), hdr: key, want: 200, same: true},
				quotaStep{name: "replay respaced", body: respaced, hdr: key, want: 200, same: true},
			)
			if tc.quota > 0 { // past the tenant's quota, nothing but a replay gets past 429
				steps = append(steps,
					quotaStep{name: "same key, another body", body: decideBody("cliente-bea", nil), hdr: key, want: 429},
					quotaStep{name: "new key", body: decideBody("cliente-zoe", nil), hdr: []string{"Idempotency-Key", "k2"}, want: 429},
					quotaStep{name: "key, body invalid", body: map[string]any{"cliente_ref": "cliente-ana"}, hdr: key, want: 429},
					quotaStep{name: "key, body not JSON", body: "cliente_ref=cliente-ana", hdr: append([]string{"Content-Type", "text/plain"}, key...), want: 429},
				)
			}
			runQuotaSteps(t, h, tok, "/v1/decisiones", steps)
		})
	}
}

// TestEventResendPastQuota: past the daily quota of events a resend of
// events accepted before (a replay: every event a duplicate) is answered
// with its counts, and anything else is 429: new events, a rejected event
// among the resent ones, a body that is not valid.
func TestEventResendPastQuota(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.QuotaEventsDay = 10; s.RateLimits = false })
	tok := h.token("acme", allScopes...)
	sent := newEvents("a", 10)
	changed := newEvents("a", 10)
	changed[3]["valor"] = 999
	runQuotaSteps(t, h, tok, "/v1/eventos", []quotaStep{
		{name: "the day's events", body: map[string]any{"eventos": sent}, want: 200},
		{name: "new event", body: map[string]any{"eventos": newEvents("b", 1)}, want: 429},
		{name: "resend", body: map[string]any{"eventos": sent}, want: 200},
		{name: "resend with a new event", body: map[string]any{"eventos": append(newEvents("c", 1), sent...)}, want: 429},
		{name: "resend with one changed (duplicado)", body: map[string]any{"eventos": changed}, want: 429},
		{name: "resend with one invalid", body: map[string]any{"eventos": append(sent[:9:9], map[string]any{"event_id": "x"})}, want: 429},
		{name: "no events", body: map[string]any{"eventos": []any{}}, want: 429},
	})
	if st, body := postEvents(h, tok, sent...); st != 200 || body["duplicados"] != 10.0 || body["aceptados"] != 0.0 {
		t.Errorf("resend: %d %v, want 10 duplicados", st, body)
	}
}
