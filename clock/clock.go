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
