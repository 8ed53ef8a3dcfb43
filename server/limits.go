package server

import (
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
}

// limiter holds the token buckets of every credential (and, for the token
// endpoint, every client_id presented). Buckets run on real time: rates are
// about load, not about a tenant's business clock.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*[nClasses]*rate.Limiter
}

func newLimiter() *limiter {
	return &limiter{buckets: map[string]*[nClasses]*rate.Limiter{}}
}

// allow takes one token from the bucket of (id, class) and reports how long
// to wait when there is none. factor < 1 brakes the credential (abuse
// escalation) by scaling its rate and burst.
func (l *limiter) allow(id string, class limitClass, now time.Time, factor float64) (ok bool, retryAfter int) {
	if class == classNone {
		return true, 0
	}
	l.mu.Lock()
	set := l.buckets[id]
	if set == nil {
		if len(l.buckets) > 100_000 { // client_ids presented to /v1/token are attacker-chosen
			clear(l.buckets)
		}
		set = new([nClasses]*rate.Limiter)
		l.buckets[id] = set
	}
	b := set[class]
	r := classRates[class]
	lim := rate.Limit(r.perSecond * factor)
	burst := max(1, int(float64(r.burst)*factor))
	if b == nil {
		b = rate.NewLimiter(lim, burst)
		set[class] = b
	} else if b.Limit() != lim {
		b.SetLimitAt(now, lim)
		b.SetBurstAt(now, burst)
	}
	l.mu.Unlock()
	res := b.ReserveN(now, 1)
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
