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
