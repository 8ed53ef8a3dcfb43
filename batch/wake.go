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

// loop calls work, then waits for a poke or every, until ctx ends.
func (w waker) loop(ctx context.Context, every time.Duration, work func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		work()
		select {
		case <-ctx.Done():
			return
		case <-w:
		case <-tick.C:
		}
	}
}

// spacePoll is how often loopResuming asks whether the store takes writes
// again: a cached reading (store.DB.WritesRefused), a statfs at most.
const spacePoll = time.Second

// loopResuming is loop, plus a round within spacePoll of refused turning
// false after it was seen true: work that waits for the store to take
// writes again does not wait for the next every.
func (w waker) loopResuming(ctx context.Context, every time.Duration, refused func() bool, work func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	poll := time.NewTicker(spacePoll)
	defer poll.Stop()
	for {
		work()
		wasRefused := refused()
		for wait := true; wait; {
			select {
			case <-ctx.Done():
				return
			case <-w:
				wait = false
			case <-tick.C:
				wait = false
			case <-poll.C:
				now := refused()
				wait = now || !wasRefused
				wasRefused = now
			}
		}
	}
}
