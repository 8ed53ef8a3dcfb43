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
// sleeps as long as it has just worked, so background work takes at most
// about half a core from them. Without online traffic it runs at full
// speed.
type BackgroundPacer struct {
	e          *core
	every, n   int
	sliceStart time.Time
}

const (
	// onlineWindow: decisions answered this recently count as online
	// traffic.
	onlineWindow = 200 * time.Millisecond
	// maxPause bounds one pause, whatever the slice took (a slice that
	// blocked on the disk was not CPU).
	maxPause = 5 * time.Millisecond
)

// NewBackgroundPacer paces work done in units; every is the units of one
// slice (about half a millisecond of work).
func (e *core) NewBackgroundPacer(every int) *BackgroundPacer {
	return &BackgroundPacer{e: e, every: max(1, every), sliceStart: e.now()}
}

// Step records one unit of work and, at the end of a slice, yields.
func (p *BackgroundPacer) Step() {
	p.n++
	if p.n%p.every != 0 {
		return
	}
	now := p.e.now()
	if p.e.onlineSince(now) < onlineWindow {
		if pause := min(now.Sub(p.sliceStart), maxPause); pause > 0 {
			time.Sleep(pause)
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
