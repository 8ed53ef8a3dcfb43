package client

import (
	"sync"
	"time"
)

// breaker stops Decide from waiting for an engine that keeps failing.
//
// Closed, it counts consecutive failed decisions; at threshold it opens.
// Open, every call answers the fallback at once until wait has passed; then
// one call goes through as a probe (the others still answer the fallback).
// A probe the engine answers closes the breaker; a failed probe opens it
// for another wait. A probe that ends without a verdict (the caller gave
// up, or a 429) lets the next call probe.
type breaker struct {
	threshold int // 0: never opens
	wait      time.Duration

	mu        sync.Mutex
	failures  int
	open      bool
	probing   bool
	openUntil time.Time
	openings  int64
}

// allow reports whether a call may go to the engine, and whether it is the
// probe whose outcome decides the breaker's state.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	if b.threshold == 0 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return true, false
	case b.probing || now.Before(b.openUntil):
		return false, false
	default:
		b.probing = true
		return true, true
	}
}

// success records that the engine answered.
func (b *breaker) success(probe bool) {
	if b.threshold == 0 {
		return
	}
	b.mu.Lock()
	b.failures = 0
	if probe || !b.probing {
		b.open, b.probing = false, false
	}
	b.mu.Unlock()
}

// failure records a failed decision.
func (b *breaker) failure(probe bool, now time.Time) {
	if b.threshold == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		b.openUntil = now.Add(b.wait)
		return
	}
	b.failures++
	if !b.open && b.failures >= b.threshold {
		b.open, b.openUntil = true, now.Add(b.wait)
		b.openings++
	}
}

// release ends a call without a verdict.
func (b *breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// state reports whether the breaker is open and how often it opened.
func (b *breaker) state() (open bool, openings int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.openings
}
