package engine

import (
	"runtime"
	"time"
)

// Background work (batch jobs, learner passes) runs beside online
// decisions on the same cores. It runs in goroutines that never block, and
// Go preempts those only every 10 ms, so on a 2-core machine a decision
// that arrives while background work holds a processor can wait that long;
// and a batch job alone takes a whole core from the decisions and the
// network. A BackgroundPacer bounds both: every few units of work it offers
// its processor, and while online decisions are being answered it also
// sleeps onlinePauseRatio times as long as it has just worked, so
// background work takes at most about a quarter of a core from them.
// Without online traffic it runs at full speed.
type BackgroundPacer struct {
	e          *core
	every, n   int
	sliceStart time.Time
	// sleep pauses the caller: time.Sleep, or a recorder in tests, which
	// judge the pause asked for rather than the wall time it took.
	sleep func(time.Duration)
}

const (
	// onlineWindow: decisions answered this recently count as online
	// traffic.
	onlineWindow = 200 * time.Millisecond
	// onlinePauseRatio is the pause per unit of slice while online. At 1
	// (background work on at most half a core) a 100,000-customer batch job
	// beside 2,000 decisions/s put their p99 at 2.8-4.1 ms on a quiet
	// 2-core machine (median 3.2), at 3 at 1.9-2.8 ms (median 2.4); the job
	// took 10.7 s instead of 7.7 beside them, and the learner's fold of a
	// 100,000-reward backlog 5.2 s instead of 3.1 (its step's p99 4.2 →
	// 3.7 ms). Alone, background work never pauses (cli/BENCH.md, speed4).
	onlinePauseRatio = 3
	// maxPause bounds one slice's worth of pause, whatever the slice took
	// (a slice that blocked on the disk was not CPU).
	maxPause = 5 * time.Millisecond
)

// NewBackgroundPacer paces work done in units; every is the units of one
// slice (about half a millisecond of work).
func (e *core) NewBackgroundPacer(every int) *BackgroundPacer {
	return &BackgroundPacer{e: e, every: max(1, every), sliceStart: e.now(), sleep: time.Sleep}
}

// Step records one unit of work and, at the end of a slice, yields.
func (p *BackgroundPacer) Step() {
	p.n++
	if p.n%p.every != 0 {
		return
	}
	now := p.e.now()
	if p.e.onlineSince(now) < onlineWindow {
		if pause := onlinePauseRatio * min(now.Sub(p.sliceStart), maxPause); pause > 0 {
			p.sleep(pause)
			p.sliceStart = p.e.now()
			return
		}
	}
	runtime.Gosched()
	p.sliceStart = now
}

// markOnline records that an online decision is being answered.
func (e *core) markOnline() { e.onlineAt.Store(e.now().UnixNano()) }

// onlineSince is the time since the last online decision.
func (e *core) onlineSince(now time.Time) time.Duration {
	return time.Duration(now.UnixNano() - e.onlineAt.Load())
}
