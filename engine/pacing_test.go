package engine

import (
	"testing"
	"time"
)

// TestBackgroundPacer: within a slice the pacer never pauses; at a slice's
// end it pauses onlinePauseRatio times the slice while online decisions
// are being answered, and not at all without them or on a frozen clock.
// The pause is read from the pacer's sleep, not timed, so a loaded machine
// cannot make the test fail.
func TestBackgroundPacer(t *testing.T) {
	tests := []struct {
		name   string
		online bool          // an online decision began just before the slice ended
		slice  time.Duration // clock time one slice of work took
		want   time.Duration // pause asked for
	}{
		{"no online traffic: full speed", false, 3 * time.Millisecond, 0},
		{"online traffic: pause onlinePauseRatio times the slice", true, 3 * time.Millisecond, onlinePauseRatio * 3 * time.Millisecond},
		{"online traffic, a long slice: the pause is bounded", true, time.Second, onlinePauseRatio * maxPause},
		{"online traffic, frozen clock (tests): no pause", true, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
			e := &Engine{core: &core{now: func() time.Time { return clock }}}
			p := e.NewBackgroundPacer(4)
			var paused time.Duration
			p.sleep = func(d time.Duration) { paused += d }
			for i := 0; i < 3; i++ {
				p.Step() // within the slice: never pauses
			}
			if paused != 0 {
				t.Fatalf("paused %v within the slice", paused)
			}
			clock = clock.Add(tc.slice)
			if tc.online {
				e.markOnline()
			}
			p.Step()
			if paused != tc.want {
				t.Errorf("paused %v, want %v", paused, tc.want)
			}
		})
	}
}
