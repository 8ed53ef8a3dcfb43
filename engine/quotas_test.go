package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

// TestQuotas: Decide counts every answer but a replay against the
// tenant's daily quota, CheckQuota refuses past it with the wait until the
// tenant's midnight, the count survives a flush and a new engine, and the
// next day starts again.
func TestQuotas(t *testing.T) {
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.QuotaDecisionsDay = 2 })
	tenant := func() *store.Tenant { tn, _ := db.Tenant("acme"); return tn }
	now := func() time.Time { return tenant().Now(t0) }
	req := Request{ClienteRef: "c1", Canal: "email", Idempotency: Idempotency{Key: "k1", BodyHash: HashBody([]byte("a"))}}
	for i := 0; i < 2; i++ { // the second is a replay: it does not count
		if _, err := e.Decide("acme", req); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Quotas.CheckQuota(tenant(), QuotaDecisions, now()); err != nil {
		t.Fatalf("second decision refused: %v", err)
	}
	if _, err := e.Decide("acme", Request{ClienteRef: "c2", Canal: "email"}); err != nil {
		t.Fatal(err)
	}
	err := e.Quotas.CheckQuota(tenant(), QuotaDecisions, now())
	var lim *DayLimitError
	if !errors.As(err, &lim) || !errors.Is(err, ErrQuota) || lim.RetryAfter != 12*3600 {
		t.Fatalf("third decision: %v, want ErrQuota with Retry-After %d", err, 12*3600)
	}
	if err := e.Quotas.CheckQuota(tenant(), QuotaEvents, now()); err != nil {
		t.Errorf("events quota (0: none) refused: %v", err)
	}

	if err := e.Quotas.FlushQuotas(); err != nil {
		t.Fatal(err)
	}
	e2 := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 1})
	if err := e2.Quotas.CheckQuota(tenant(), QuotaDecisions, now()); !errors.Is(err, ErrQuota) {
		t.Errorf("after flush, a new engine: %v, want ErrQuota", err)
	}
	advance(t, db, 12*time.Hour)
	if err := e2.Quotas.CheckQuota(tenant(), QuotaDecisions, now()); err != nil {
		t.Errorf("next day: %v", err)
	}
}

// TestDailyCapRetryAfter: the per-customer cap answers a DayLimitError
// whose wait ends at the tenant's next UTC midnight.
func TestDailyCapRetryAfter(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	var err error
	for i := 0; i <= DailyCap && err == nil; i++ {
		_, err = e.Decide("acme", Request{ClienteRef: "c1", Canal: "email"})
	}
	var lim *DayLimitError
	if !errors.As(err, &lim) || !errors.Is(err, ErrDailyCap) || lim.RetryAfter != 12*3600 {
		t.Fatalf("over the cap: %v, want ErrDailyCap with Retry-After %d", err, 12*3600)
	}
}

// TestDecideNeverErrsAfterCommit: a store read of the quota count that
// fails may refuse a decision, but only one not made: an answer is never an
// error for a decision already committed (the caller, told 500, would
// decide again or apply its own rule while the engine keeps the decision,
// its reward window and its campaign send).
func TestDecideNeverErrsAfterCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"new decision", Request{ClienteRef: "quota-ana", Canal: "push"}},
		{"with Idempotency-Key", Request{ClienteRef: "quota-ana", Canal: "push", Idempotency: Idempotency{Key: "k", BodyHash: HashBody([]byte("a"))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			boom := errors.New("read failed")
			e.quotas.readFault = func() error { return boom }
			_, err := e.Decide("acme", tc.req)
			if err == nil {
				return // answered: its count is what failed, not the answer
			}
			if _, serr := db.Get(customerStateKey("acme", tc.req.ClienteRef)); !errors.Is(serr, store.ErrNotFound) {
				t.Errorf("Decide answered %v for a decision it committed (customer state: %v)", err, serr)
			}
		})
	}
}

// TestQuotaConcurrentDecisions: N decisions at once against a daily quota
// Q answer exactly min(N, Q) (the others ErrQuota), and a decision refused
// after it took its unit (the customer's daily cap) gives the unit back.
func TestQuotaConcurrentDecisions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quota    int64
		used     int // decisions answered before, one at a time
		capped   int // decisions refused by the customer's cap before
		n        int // concurrent decisions
		answered int
	}{
		{"more requests than quota", 5, 0, 0, 20, 5},
		{"one left", 5, 4, 0, 20, 1},
		{"fewer requests than quota", 30, 0, 0, 12, 12},
		{"exactly the quota", 8, 0, 0, 8, 8},
		{"cap refusals give the unit back", 6, DailyCap, 2, 10, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 2, func(s *store.Settings) { s.QuotaDecisionsDay = tc.quota })
			for i := range tc.used { // DailyCap per customer: u0 first
				if _, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("u%d", i/DailyCap), Canal: "email"}); err != nil {
					t.Fatalf("decision %d before: %v", i, err)
				}
			}
			for range tc.capped {
				if _, err := e.Decide("acme", Request{ClienteRef: "u0", Canal: "email"}); !errors.Is(err, ErrDailyCap) {
					t.Fatalf("over u0's cap: %v, want ErrDailyCap", err)
				}
			}
			var answered, refused atomic.Int64
			var wg sync.WaitGroup
			for i := range tc.n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("c%d", i), Canal: "email"})
					switch {
					case err == nil:
						answered.Add(1)
					case errors.Is(err, ErrQuota):
						refused.Add(1)
					default:
						t.Errorf("decision %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			got := [2]int64{answered.Load(), refused.Load()}
			if diff := cmp.Diff([2]int64{int64(tc.answered), int64(tc.n - tc.answered)}, got); diff != "" {
				t.Errorf("[answered refused] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDailyCapConcurrentDecisions: N decision requests at once for each
// of several customers answer exactly min(N, DailyCap) per customer (the
// others ErrDailyCap), with or without distinct Idempotency-Keys: the cap
// is checked and counted under the customer's lock, in the state
// committed before the lock is released.
func TestDailyCapConcurrentDecisions(t *testing.T) {
	const customers = 32
	for _, tc := range []struct {
		name string
		n    int
		keys bool
	}{
		{"many requests", 16, false},
		{"many requests with keys", 16, true},
		{"fewer than the cap", DailyCap - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 2, nil)
			var answered, capped [customers]atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			for c := range customers {
				for i := range tc.n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req := Request{ClienteRef: fmt.Sprintf("ana%d", c), Canal: "email"}
						if tc.keys {
							req.Idempotency = Idempotency{Key: fmt.Sprintf("k%d-%d", c, i), BodyHash: HashBody([]byte("a"))}
						}
						<-start
						switch _, err := e.Decide("acme", req); {
						case err == nil:
							answered[c].Add(1)
						case errors.Is(err, ErrDailyCap):
							capped[c].Add(1)
						default:
							t.Errorf("decision %d of ana%d: %v", i, c, err)
						}
					}()
				}
			}
			close(start)
			wg.Wait()
			want := min(tc.n, DailyCap)
			for c := range customers {
				got := [2]int64{answered[c].Load(), capped[c].Load()}
				if diff := cmp.Diff([2]int64{int64(want), int64(tc.n - want)}, got); diff != "" {
					t.Errorf("ana%d: [answered capped] (-want +got):\n%s", c, diff)
				}
			}
		})
	}
}

// quotaTestEvents are n purchases of customer ref, event ids prefix-0 on.
func quotaTestEvents(prefix, ref string, n int) []IngestEvent {
	evs := make([]IngestEvent, n)
	for i := range evs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		evs[i] = IngestEvent{Index: i, Canonical: []byte(fmt.Sprintf(`{"event_id":%q}`, id)), Event: Event{
			ID: id, ClienteRef: ref, TS: t0.Add(-time.Hour), Tipo: CompraCat, Clave: "c",
			ValorCents: 1000, TicketID: "t-" + id, MargenCents: 100,
		}}
	}
	return evs
}

// quotaUsed is the tenant's count of kind today (t0's day).
func quotaUsed(t *testing.T, e *Engine, kind string) int64 {
	t.Helper()
	e.quotas.mu.Lock()
	defer e.quotas.mu.Unlock()
	c, err := e.quotas.get(quotaKey{"acme", kind, quotaDay(t0)})
	if err != nil {
		t.Fatal(err)
	}
	return c.n
}

// TestQuotaConcurrentEvents: N requests of events at once against a daily
// quota of events Q never accept more than Q events: each request's new
// events are taken from the quota in one step with the check, the whole
// request or none of it (ErrQuota, nothing applied); duplicates and
// rejected events take nothing, so a resend of accepted events is answered
// even when the quota is used up; and the count is the events accepted.
func TestQuotaConcurrentEvents(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quota    int64
		before   int  // events accepted before, one request
		n, batch int  // concurrent requests of batch events
		resend   bool // the concurrent requests resend the events accepted before
		bad      int  // events of each request with a decision_id not the tenant's
		accepted int  // requests answered
	}{
		{"batches past the quota", 50, 0, 8, 10, false, 0, 5},
		{"room smaller than a batch", 25, 0, 6, 10, false, 0, 2},
		{"little room left, large batches", 1000, 990, 4, 1000, false, 0, 0},
		{"exactly the room", 40, 20, 4, 5, false, 0, 4},
		{"resends of a full day", 30, 30, 6, 30, true, 0, 6},
		{"rejected events take nothing", 20, 0, 6, 10, false, 6, 5},
		{"no quota", 0, 0, 6, 10, false, 0, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 2, func(s *store.Settings) { s.QuotaEventsDay = tc.quota })
			d := Delivery{ClientID: "c1", At: t0, Now: t0}
			if tc.before > 0 {
				if res, err := e.Ingester.Receive("acme", quotaTestEvents("before", "ana", tc.before), d); err != nil || res.Aceptados != tc.before {
					t.Fatalf("events before: %+v %v", res, err)
				}
			}
			var answered, refused, accepted atomic.Int64
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range tc.n {
				evs := quotaTestEvents(fmt.Sprintf("r%d", i), fmt.Sprintf("c%d", i), tc.batch)
				if tc.resend {
					evs = quotaTestEvents("before", "ana", tc.batch)
				}
				for k := range tc.bad {
					evs[k].Event.DecisionID = "not-a-decision-id"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := e.Ingester.Receive("acme", evs, d)
					switch {
					case err == nil:
						answered.Add(1)
						accepted.Add(int64(res.Aceptados))
					case errors.Is(err, ErrQuota):
						refused.Add(1)
					default:
						t.Errorf("request %d: %v", i, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			want := [3]int64{int64(tc.accepted), int64(tc.n - tc.accepted), int64(tc.accepted * (tc.batch - tc.bad))}
			if tc.resend {
				want[2] = 0
			}
			got := [3]int64{answered.Load(), refused.Load(), accepted.Load()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[answered refused accepted] (-want +got):\n%s", diff)
			}
			if used, want := quotaUsed(t, e, QuotaEvents), int64(tc.before)+got[2]; used != want {
				t.Errorf("quota count %d, want %d (the events accepted)", used, want)
			}
			if tc.quota > 0 && int64(tc.before)+got[2] > tc.quota {
				t.Errorf("%d events accepted, quota %d", int64(tc.before)+got[2], tc.quota)
			}
		})
	}
}

// TestReplayPastDailyLimits: a keyed replay (same Idempotency-Key, same
// body) is answered with the original decision when the tenant's daily
// quota or the customer's daily cap is used up, and takes nothing from
// the quota; a new request is refused, and the same key with another body
// is a conflict.
func TestReplayPastDailyLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quota int64
		fill  []string // customers of the unkeyed decisions after the keyed one
		limit error    // what a new decision of ana gets then
	}{
		{"tenant quota used up", 3, []string{"bea", "eva"}, ErrQuota},
		{"customer cap used up", 0, []string{"ana", "ana"}, ErrDailyCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 2, func(s *store.Settings) { s.QuotaDecisionsDay = tc.quota })
			keyed := Request{ClienteRef: "ana", Canal: "email", Idempotency: Idempotency{Key: "k1", BodyHash: HashBody([]byte("a"))}}
			first, err := e.Decide("acme", keyed)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range tc.fill {
				if _, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "email"}); err != nil {
					t.Fatalf("decision of %s: %v", ref, err)
				}
			}
			if _, err := e.Decide("acme", Request{ClienteRef: "ana", Canal: "email"}); !errors.Is(err, tc.limit) {
				t.Fatalf("new decision past the limit: %v, want %v", err, tc.limit)
			}
			used := quotaUsed(t, e, QuotaDecisions)
			for i := range 2 {
				got, err := e.Decide("acme", keyed)
				if err != nil {
					t.Fatalf("replay %d: %v, want the original answer", i, err)
				}
				if diff := cmp.Diff(first, got); diff != "" {
					t.Errorf("replay %d (-original +replay):\n%s", i, diff)
				}
			}
			if got := quotaUsed(t, e, QuotaDecisions); got != used {
				t.Errorf("quota count %d after the replays, want %d (replays do not count)", got, used)
			}
			other := keyed
			other.Idempotency.BodyHash = HashBody([]byte("b"))
			if _, err := e.Decide("acme", other); !errors.Is(err, ErrIdempotencyConflict) {
				t.Errorf("same key, another body: %v, want ErrIdempotencyConflict", err)
			}
		})
	}
}
