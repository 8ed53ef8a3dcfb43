package server

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limitClass groups routes that share a per-credential rate limit.
type limitClass int

const (
	classNone limitClass = iota
	classDecisiones
	classEventos
	classEjecucion
	classOther
	classToken
	classTokenFailure // failed token requests, per source address
	nClasses
)

// classRates are the per-credential token buckets: the spec's Limits table
// and, for what it leaves open, contract section 7.
var classRates = [nClasses]struct {
	perSecond float64
	burst     int
}{
	classDecisiones: {50, 100},
	classEventos:    {20, 40},
	classEjecucion:  {50, 100},
	classOther:      {20, 40},
	classToken:      {10, 20},
	// Failed token requests per source address: a client that mistyped
	// its secret retries well within it; guessing gets 1 a second.
	classTokenFailure: {1, 20},
}

// limiter holds token buckets per key: per credential for the API routes
// and the token endpoint, per source address for failed token requests.
// Buckets run on real time: rates are about load, not about a tenant's
// business clock.
//
// Its memory is bounded without ever resetting anyone: past capacity keys
// the least recently used key is evicted, one at a time. Keys are
// credentials that passed authentication (few) or source addresses, so an
// attacker who sends made-up client ids never creates a key, and one who
// sends from many addresses only evicts addresses idle longer than every
// other.
type limiter struct {
	mu       sync.Mutex
	capacity int
	keys     map[string]*limitEntry
	lru      limitEntry // sentinel of the recency ring: lru.next is the most recent
}

// limitEntry is one key's buckets and its place in the recency ring.
type limitEntry struct {
	key        string
	buckets    [nClasses]*rate.Limiter
	prev, next *limitEntry
}

// limiterCapacity bounds the keys of one limiter (a few hundred bytes each).
const limiterCapacity = 100_000

// tokenFailureAddresses bounds the source addresses whose failed token
// requests are tracked.
const tokenFailureAddresses = 50_000

func newLimiter() *limiter { return newLimiterCap(limiterCapacity) }

func newLimiterCap(capacity int) *limiter {
	l := &limiter{capacity: max(capacity, 1), keys: map[string]*limitEntry{}}
	l.lru.prev, l.lru.next = &l.lru, &l.lru
	return l
}

// entry returns the entry of id, most recent now, creating it (and
// evicting the least recently used key past capacity). l.mu is held.
func (l *limiter) entry(id string) *limitEntry {
	e := l.keys[id]
	if e == nil {
		if len(l.keys) >= l.capacity {
			old := l.lru.prev
			old.unlink()
			delete(l.keys, old.key)
		}
		e = &limitEntry{key: id}
		l.keys[id] = e
	} else if l.lru.next == e {
		return e
	} else {
		e.unlink()
	}
	e.prev, e.next = &l.lru, l.lru.next
	l.lru.next.prev = e
	l.lru.next = e
	return e
}

func (e *limitEntry) unlink() {
	e.prev.next = e.next
	e.next.prev = e.prev
}

// bucket returns the bucket of (id, class) at the rate scaled by factor.
func (l *limiter) bucket(id string, class limitClass, now time.Time, factor float64) *rate.Limiter {
	r := classRates[class]
	lim := rate.Limit(r.perSecond * factor)
	burst := max(1, int(float64(r.burst)*factor))
	l.mu.Lock()
	e := l.entry(id)
	b := e.buckets[class]
	if b == nil {
		b = rate.NewLimiter(lim, burst)
		e.buckets[class] = b
	} else if b.Limit() != lim {
		b.SetLimitAt(now, lim)
		b.SetBurstAt(now, burst)
	}
	l.mu.Unlock()
	return b
}

// allow takes one token from the bucket of (id, class) and reports how long
// to wait when there is none. factor < 1 brakes the credential (abuse
// escalation) by scaling its rate and burst.
func (l *limiter) allow(id string, class limitClass, now time.Time, factor float64) (ok bool, retryAfter int) {
	if class == classNone {
		return true, 0
	}
	res := l.bucket(id, class, now, factor).ReserveN(now, 1)
	if !res.OK() {
		return false, 1
	}
	d := res.DelayFrom(now)
	if d <= 0 {
		return true, 0
	}
	res.CancelAt(now)
	return false, max(1, int(math.Ceil(d.Seconds())))
}

// exhausted reports, without taking a token, whether the bucket of
// (id, class) is empty, and how long until it holds one again.
func (l *limiter) exhausted(id string, class limitClass, now time.Time) (empty bool, retryAfter int) {
	b := l.bucket(id, class, now, 1)
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return false, 0
	}
	wait := (1 - tokens) / float64(b.Limit())
	return true, max(1, int(math.Ceil(wait)))
}

// rateLimited is the 429 of a request over the bucket of class, at the
// rate scaled by factor (the brake), to be retried after wait seconds. Its
// mensaje names the limit the request met, so that a caller can tell it
// from the daily limits, which name theirs.
func rateLimited(class limitClass, factor float64, wait int) *apiError {
	r := classRates[class]
	rate, burst := r.perSecond*factor, max(1, int(float64(r.burst)*factor))
	var msg string
	switch class {
	case classToken:
		msg = "límite de solicitudes de token del client_id excedido (%g por segundo, ráfaga %d)"
	case classTokenFailure:
		msg = "límite de solicitudes de token fallidas desde esta dirección excedido (%g por segundo, ráfaga %d)"
	default:
		msg = "límite de peticiones de la credencial en esta ruta excedido (%g por segundo, ráfaga %d)"
	}
	return &apiError{kind: kindRateLimited, retryAfter: wait, msg: fmt.Sprintf(msg, rate, burst) + "; reintente tras Retry-After segundos"}
}
