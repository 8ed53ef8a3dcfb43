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
	check := newEventChecker(now, false, 0)
	return s.Engine.Ingester.ReleaseHeld(tenant, now, func(raw []byte, i int) (engine.IngestEvent, bool, error) {
		val, err := schema.Parse(raw)
		if err != nil {
			return engine.IngestEvent{}, false, fmt.Errorf("quarantined event: %w", err)
		}
		ev, rej := check.check(i, val)
		return ev, rej == nil, nil
	})
}

// HeldEvent converts an event held in the abuse quarantine (its JSON as
// sent) as QuarantineRelease does: ok false for one the release drops, an
// error for one that does not parse. The customer's export lists held
// events through it (privacy.Config.HeldEvent).
func HeldEvent(raw []byte) (ev engine.Event, ok bool, err error) {
	val, err := schema.Parse(raw)
	if err != nil {
		return engine.Event{}, false, fmt.Errorf("quarantined event: %w", err)
	}
	it, rej := newEventChecker(time.Time{}, false, 0).check(0, val)
	return it.Event, rej == nil, nil
}

// QuarantineCount is how many requests wait in quarantine.
func (s *Server) QuarantineCount(tenant string) int { return s.Engine.Ingester.HeldCount(tenant) }
