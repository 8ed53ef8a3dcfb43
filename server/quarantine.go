package server

import (
	"fmt"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// QuarantineRelease applies every event of tenant held in the abuse
// quarantine (idempotently, as if posted now, validated again but for the
// ts range, which held events met when they arrived) and removes them from
// quarantine. It returns how many were accepted and how many were
// duplicates.
func (s *Server) QuarantineRelease(tenant string, now time.Time) (accepted, duplicates int, err error) {
	return s.Engine.Ingester.ReleaseHeld(tenant, now, heldChecker(now))
}

// HeldIndexed is what IndexHeldEvents did for one tenant: the held-event
// index entries it wrote and those it deleted.
type HeldIndexed struct{ Written, Deleted int }

// IndexHeldEvents writes the held-event index entries the batches held in
// every tenant's abuse quarantine lack and deletes those no held batch
// holds (engine.Ingester.IndexHeld: a release before the index held
// batches without entries; one run on the data dir since left entries
// behind), so that a resend of a held event is a duplicate and one of an
// event no longer held is not; serve calls it at start. It returns what it
// did per tenant, for the tenants it did something for.
func (s *Server) IndexHeldEvents() (map[string]HeldIndexed, error) {
	done := map[string]HeldIndexed{}
	for _, t := range s.DB.Tenants() {
		if n, err := s.DB.Count(store.HeldEventSpan(t.ID)); err == nil && n == 0 && s.DB.CountHeld(t.ID) == 0 { // on an error IndexHeld says it
			continue
		}
		w, d, err := s.Engine.Ingester.IndexHeld(t.ID, heldChecker(time.Time{}))
		if w > 0 || d > 0 {
			done[t.ID] = HeldIndexed{w, d}
		}
		if err != nil {
			return done, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
	}
	return done, nil
}

// heldChecker converts an event held in the abuse quarantine (its JSON as
// held) as the release does, at now: validated again but for the ts range.
func heldChecker(now time.Time) func(raw []byte, i int) (engine.IngestEvent, bool, error) {
	check := newEventChecker(now, false, 0)
	return func(raw []byte, i int) (engine.IngestEvent, bool, error) {
		val, err := schema.Parse(raw)
		if err != nil {
			return engine.IngestEvent{}, false, fmt.Errorf("quarantined event: %w", err)
		}
		ev, rej := check.check(i, val)
		return ev, rej == nil, nil
	}
}

// HeldEvent converts an event held in the abuse quarantine (its JSON as
// sent) as QuarantineRelease does: ok false for one the release drops, an
// error for one that does not parse. The customer's export lists held
// events through it (privacy.Config.HeldEvent).
func HeldEvent(raw []byte) (ev engine.Event, ok bool, err error) {
	it, ok, err := heldChecker(time.Time{})(raw, 0)
	return it.Event, ok, err
}

// QuarantineCount is how many requests wait in quarantine.
func (s *Server) QuarantineCount(tenant string) int { return s.Engine.Ingester.HeldCount(tenant) }
