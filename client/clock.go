package client

import (
	"context"
	"time"
)

// clock is the time a Client reads and waits by: the real one, or the one
// WithClock sets.
type clock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// wait waits d (nothing if d <= 0) or until ctx ends; it reports whether
// d passed with ctx still live.
func (k clock) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	return k.sleep(ctx, d) == nil
}

// waitBefore is wait, but it waits not at all, and reports false, unless
// d passes before deadline (the zero Time: no deadline).
func (k clock) waitBefore(ctx context.Context, d time.Duration, deadline time.Time) bool {
	if !deadline.IsZero() && !k.now().Add(d).Before(deadline) {
		return false
	}
	return k.wait(ctx, d)
}

// deadline returns ctx's deadline on this clock, if it has one (else the
// zero Time and false). A
// context's deadline is on the real clock (the runtime's timers end it),
// so what is left of it now is read there and counted from k's now.
func (k clock) deadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	return k.now().Add(time.Until(d)), true
}

// timeout returns a copy of ctx that ends at deadline on this clock: a
// real timeout as long as what is left until then.
func (k clock) timeout(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, deadline.Sub(k.now()))
}

// timerSleep is the real clock's sleep: it waits d or until ctx ends.
func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
