package server

import (
	"fmt"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

// QuarantineRelease applies every event of tenant held in the abuse
// quarantine (idempotently, as if posted now, validated again but for the
// ts range, which held events met when they arrived) and removes them from
// quarantine. It returns how many were accepted and how many were
// duplicates.
func (s *Server) QuarantineRelease(tenant string, now time.Time) (accepted, duplicates int, err error) {
	return s.Engine.Ingester.ReleaseHeld(tenant, now, heldChecker(now))
}

// IndexHeldEvents writes the held-event index entries the batches held in
// every tenant's abuse quarantine lack (engine.Ingester.IndexHeld: those a
// release before the index held), so that a resend of their events is a
// duplicate; serve calls it at start. It returns how many it wrote per
// tenant, for the tenants it wrote some for.
func (s *Server) IndexHeldEvents() (map[string]int, error) {
	indexed := map[string]int{}
	for _, t := range s.DB.Tenants() {
		if s.DB.CountHeld(t.ID) == 0 {
			continue
		}
		n, err := s.Engine.Ingester.IndexHeld(t.ID, heldChecker(time.Time{}))
		if n > 0 {
			indexed[t.ID] = n
		}
		if err != nil {
			return indexed, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
	}
	return indexed, nil
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
