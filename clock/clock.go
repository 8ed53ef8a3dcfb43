// Package clock holds coupond's one fake clock. Production code takes a
// func() time.Time (time.Now in cli); tests, and the lab's simulated
// retailers, pass Fake.Now and move time with Advance or Set.
package clock

import (
	"sync"
	"time"
)

// Fake is a clock that moves only when told. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake that reads t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the clock's time. Pass the method value (c.Now) where a
// func() time.Time is wanted.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward when d < 0).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Slack is how far the clock may step back (an NTP correction) before a
// token, signed link or session made just before is taken as expired
// (Expired).
const Slack = time.Minute

// Expired reports whether what expires at exp, made to live ttl, is
// expired at now: at or after exp, and also when exp lies further ahead
// than ttl (and Slack). Such a thing was made before the clock went back,
// and would otherwise live as much longer (a day back: a 15-minute token
// or a 10-minute link a day, a 12-hour session 36 hours). The API's tokens,
// batch's signed result URLs and the console's links and sessions all
// expire by it, and a batch job's hold on its tenant's hour ends by it.
func Expired(exp time.Time, ttl time.Duration, now time.Time) bool {
	return !now.Before(exp) || exp.Sub(now) > ttl+Slack
}
