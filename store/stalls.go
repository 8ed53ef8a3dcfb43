package store

import (
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// writeStalls counts the times Pebble stopped every commit (a write stall:
// too many memtables waiting to be flushed, or too many sublevels in L0)
// and how long they lasted, from its event listener.
type writeStalls struct {
	count   atomic.Int64
	nanos   atomic.Int64 // ended stalls' total duration
	began   atomic.Int64 // unix nanoseconds of the stall under way, 0 when none
	reasons [2]atomic.Int64
}

// Reasons of a write stall, as Pebble's WriteStallBeginInfo names them.
const (
	stallMemtables = 0 // "memtable count limit reached"
	stallL0        = 1 // "L0 file count limit exceeded"
)

func (w *writeStalls) begin(info pebble.WriteStallBeginInfo) {
	w.count.Add(1)
	w.began.Store(time.Now().UnixNano())
	if info.Reason == "memtable count limit reached" {
		w.reasons[stallMemtables].Add(1)
	} else {
		w.reasons[stallL0].Add(1)
	}
}

func (w *writeStalls) end() {
	if b := w.began.Swap(0); b != 0 {
		w.nanos.Add(time.Now().UnixNano() - b)
	}
}

// total is the stalls' count and their duration so far, the one under way
// included.
func (w *writeStalls) total() (int64, time.Duration) {
	d := w.nanos.Load()
	if b := w.began.Load(); b != 0 {
		d += time.Now().UnixNano() - b
	}
	return w.count.Load(), time.Duration(d)
}
