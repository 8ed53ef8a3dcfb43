package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/store"
)

// TestQuotas: Decide counts every answer (a replay too) against the
// tenant's daily quota, CheckQuota refuses past it with the wait until the
// tenant's midnight, the count survives a flush and a new engine, and the
// next day starts again.
func TestQuotas(t *testing.T) {
	e, db := newTestEngine(t, 2, func(s *store.Settings) { s.QuotaDecisionsDay = 3 })
	tenant := func() *store.Tenant { tn, _ := db.Tenant("acme"); return tn }
	now := func() time.Time { return tenant().Now(t0) }
	req := Request{ClienteRef: "c1", Canal: "email", IdempotencyKey: "k1", BodyHash: HashBody([]byte("a"))}
	for i := 0; i < 2; i++ { // the second is a replay: it counts too
		if _, err := e.Decide("acme", req); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Quotas.CheckQuota(tenant(), QuotaDecisions, now()); err != nil {
		t.Fatalf("third decision refused: %v", err)
	}
	if _, err := e.Decide("acme", Request{ClienteRef: "c2", Canal: "email"}); err != nil {
		t.Fatal(err)
	}
	err := e.Quotas.CheckQuota(tenant(), QuotaDecisions, now())
	var lim *DayLimitError
	if !errors.As(err, &lim) || !errors.Is(err, ErrQuota) || lim.RetryAfter != 12*3600 {
		t.Fatalf("fourth decision: %v, want ErrQuota with Retry-After %d", err, 12*3600)
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
		{"with Idempotency-Key", Request{ClienteRef: "quota-ana", Canal: "push", IdempotencyKey: "k", BodyHash: HashBody([]byte("a"))}},
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
