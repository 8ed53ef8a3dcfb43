package client_test

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/clock"
)

// fakeTime is a clock.Fake whose sleeps pass at once: each moves the
// clock by its length and is recorded.
type fakeTime struct {
	*clock.Fake
	mu     sync.Mutex
	sleeps []time.Duration
}

// newFakeTime returns a fakeTime that starts far from the real clock
// (2001), so a time read from the real clock by mistake shows.
func newFakeTime() *fakeTime {
	return &fakeTime{Fake: clock.NewFake(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC))}
}

// Sleep moves the clock by d at once, unless ctx has ended.
func (f *fakeTime) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.sleeps = append(f.sleeps, d)
	f.mu.Unlock()
	f.Advance(d)
	return nil
}

// Sleeps returns the sleeps so far and forgets them.
func (f *fakeTime) Sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := slices.Clone(f.sleeps)
	f.sleeps = nil
	return s
}

// option is the client.Option that makes a Client run on f.
func (f *fakeTime) option() client.Option { return client.WithClock(f.Now, f.Sleep) }
