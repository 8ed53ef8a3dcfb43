package store

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestWriteStallsCountsEndedAndOngoing: Metrics' stall time takes in the
// stall under way, so a scrape during a long stall shows it.
func TestWriteStallsCountsEndedAndOngoing(t *testing.T) {
	var w writeStalls
	w.begin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	time.Sleep(20 * time.Millisecond)
	w.end()
	w.begin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	time.Sleep(20 * time.Millisecond)
	n, d := w.total()
	if n != 2 || d < 40*time.Millisecond {
		t.Errorf("total = %d stalls, %v; want 2, at least 40ms", n, d)
	}
	if m, l0 := w.reasons[stallMemtables].Load(), w.reasons[stallL0].Load(); m != 1 || l0 != 1 {
		t.Errorf("reasons: %d memtables, %d L0; want 1 and 1", m, l0)
	}
	w.end()
	if _, after := w.total(); after < d {
		t.Errorf("total after the end %v, below %v during it", after, d)
	}
}
