package engine

import (
	"testing"
	"time"
)

func TestBackgroundPacer(t *testing.T) {
	tests := []struct {
		name      string
		online    bool          // an online decision began just before the slice ended
		slice     time.Duration // clock time one slice of work took
		wantPause bool
	}{
		{"no online traffic: full speed", false, 3 * time.Millisecond, false},
		{"online traffic: pause onlinePauseRatio times the slice", true, 3 * time.Millisecond, true},
		{"online traffic, frozen clock (tests): no pause", true, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
			e := &Engine{core: &core{now: func() time.Time { return clock }}}
			p := e.NewBackgroundPacer(4)
			for i := 0; i < 3; i++ {
				p.Step() // within the slice: never pauses
			}
			clock = clock.Add(tc.slice)
			if tc.online {
				e.markOnline()
			}
			start := time.Now()
			p.Step()
			took := time.Since(start)
			paused := took >= tc.slice/2 && tc.slice > 0
			if paused != tc.wantPause {
				t.Errorf("paused %v (%v), want %v", paused, took, tc.wantPause)
			}
			if want := onlinePauseRatio * tc.slice; tc.wantPause && took < want {
				t.Errorf("paused %v, want at least %v (onlinePauseRatio × slice)", took, want)
			}
		})
	}
}
