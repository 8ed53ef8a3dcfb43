package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// fallbackQueue sends fallback records (POST /v1/decisiones/respaldo) in
// the background, one at a time in the order they were queued, each retried
// with backoff until the server accepts it or refuses it with a 4xx a retry
// cannot fix. The queue is bounded: when it is full a new record is dropped
// and counted, so Decide never blocks on it.
type fallbackQueue struct {
	c  *Client
	ch chan queuedFallback

	mu     sync.Mutex // guards closed against enqueue after close
	closed bool
	drain  chan struct{} // closed by close: send what is queued, then stop
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	queued, sent, rejected, dropped, pending atomic.Int64
	// early: the wait under way when close began was cut short (waitRetry).
	early atomic.Bool
}

func newFallbackQueue(c *Client, size int) *fallbackQueue {
	ctx, cancel := context.WithCancel(context.Background())
	return &fallbackQueue{c: c, ch: make(chan queuedFallback, size), drain: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// queuedFallback is a fallback record waiting to be sent: its body and,
// when Decide's attempts reached the server, their Idempotency-Key, sent
// as Replaces-Idempotency-Key so that a decision coupond made but whose
// answer never arrived is voided by the record that takes its place.
type queuedFallback struct {
	body     PeticionRespaldo
	replaces string
}

// replacesHeader is the header of a fallback record that takes the place
// of the decision request of Idempotency-Key key (nil for "": none).
func replacesHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Replaces-Idempotency-Key": {key}}
}

// enqueue queues r without blocking; a full queue or a closed client drops
// it.
func (q *fallbackQueue) enqueue(r queuedFallback) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.dropped.Add(1)
		return
	}
	select {
	case q.ch <- r:
		q.queued.Add(1)
		q.pending.Add(1)
	default:
		q.dropped.Add(1)
	}
}

// run sends records until close (after the queue is empty) or until the
// close deadline cancels it.
func (q *fallbackQueue) run() {
	defer close(q.done)
	for {
		select {
		case r := <-q.ch:
			q.deliver(r)
		case <-q.drain:
			for {
				select {
				case r := <-q.ch:
					q.deliver(r)
				default:
					return
				}
			}
		}
	}
}

// deliver sends r until it is accepted, refused for good, or the queue's
// context ends (then it counts as dropped). Every attempt carries the same
// Idempotency-Key: one whose answer was lost is stored once. Accepted
// means the API's answer: a 2xx whose body is not its JSON object (a
// proxy's page) is a failed attempt, as it is for RecordFallback.
func (q *fallbackQueue) deliver(r queuedFallback) {
	defer q.pending.Add(-1)
	cfg := &q.c.cfg
	key := []string{newIdempotencyKey()}
	hdr := replacesHeader(r.replaces)
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(q.ctx, 10*time.Second)
		err := q.c.callWith(ctx, http.MethodPost, "/v1/decisiones/respaldo", &r.body, &objetoVacio{}, retryRefused, key, hdr)
		cancel()
		var apiErr *Error
		switch {
		case err == nil:
			q.sent.Add(1)
			return
		case q.ctx.Err() != nil:
			q.dropped.Add(1)
			return
		case errors.As(err, &apiErr) && !apiErr.retryable() && apiErr.Status != http.StatusUnauthorized:
			// 401 may be a credential being rotated: keep trying.
			q.rejected.Add(1)
			return
		}
		var retryAfter time.Duration
		if apiErr != nil {
			retryAfter = apiErr.RetryAfter
		}
		if !q.waitRetry(fallbackWait(cfg, n, retryAfter)) {
			q.dropped.Add(1)
			return
		}
	}
}

// waitRetry waits d before the next delivery attempt and reports false if
// the queue's context ended first. The first wait under way when close
// begins (or the first after it) ends then: Close means "send them now",
// and a record waiting out a paused tenant's Retry-After (up to
// WithFallbackRetry's max, 30 s) after the tenant was resumed held Close
// that long, or past its deadline, dropping it. Later waits are whole, so
// a server still down is not retried in a loop.
func (q *fallbackQueue) waitRetry(d time.Duration) bool {
	if q.early.Load() {
		return q.c.cfg.clock.wait(q.ctx, d)
	}
	wctx, cancel := context.WithCancel(q.ctx)
	defer cancel()
	go func() {
		select {
		case <-q.drain:
			cancel()
		case <-wctx.Done():
		}
	}()
	if q.c.cfg.clock.wait(wctx, d) {
		return true
	}
	if q.ctx.Err() != nil {
		return false
	}
	q.early.Store(true) // close began: try again now, once
	return true
}

// fallbackWait is the wait after delivery n of a record failed: full
// jitter over min(max, min·2ⁿ), plus min/2 (WithFallbackRetry), or
// retryAfter if longer, capped at max: a paused tenant answers 60 s
// whatever the pause's length, and records should follow the resume.
func fallbackWait(cfg *config, n int, retryAfter time.Duration) time.Duration {
	wait := rand.N(doubled(cfg.fbRetryMin, cfg.fbRetryMax, n)) + cfg.fbRetryMin/2
	return max(wait, min(retryAfter, cfg.fbRetryMax))
}

// close stops taking records and waits for the queued ones to be sent, or
// for ctx to end; then whatever is left is dropped.
func (q *fallbackQueue) close(ctx context.Context) error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.drain)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel()
		<-q.done
		for {
			select {
			case <-q.ch:
				q.dropped.Add(1)
				q.pending.Add(-1)
			default:
				return ctx.Err()
			}
		}
	}
}
