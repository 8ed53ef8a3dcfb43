package batch

import (
	"context"
	"time"
)

// waker is the loop of a background worker (the job runner, webhook
// deliveries): work now, then again when poked or when the interval has
// passed, until the context ends.
type waker chan struct{}

func newWaker() waker { return make(waker, 1) }

// poke asks the loop for another round soon; pokes while one is pending
// are one poke.
func (w waker) poke() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// loop calls work, then waits for a poke or every, until ctx ends. With
// refused set it also runs a round within spacePoll of refused turning
// false after it was seen true: work that waits for the store to take
// writes again does not wait for the next every.
func (w waker) loop(ctx context.Context, every time.Duration, refused func() bool, work func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var poll <-chan time.Time // nil without refused: never ready
	if refused != nil {
		t := time.NewTicker(spacePoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		work()
		wasRefused := refused != nil && refused()
		for wait := true; wait; {
			select {
			case <-ctx.Done():
				return
			case <-w:
				wait = false
			case <-tick.C:
				wait = false
			case <-poll:
				now := refused()
				wait = now || !wasRefused
				wasRefused = now
			}
		}
	}
}

// spacePoll is how often loop asks refused whether the store takes writes
// again: a cached reading (store.DB.WritesRefused), a statfs at most.
const spacePoll = time.Second
