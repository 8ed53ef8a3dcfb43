package client

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBackoffCapped: the wait before a retry is drawn below
// min(max, base·2ⁿ)·scale and never reaches backoffCeil, whatever
// WithRetries set and however many attempts came before: a large attempt
// count or base overflowed the shift (a negative or wrapped wait), and a
// large max slept for minutes.
func TestBackoffCapped(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	tests := []struct {
		name      string
		base, max time.Duration
		scale     time.Duration
		n         int
		bound     time.Duration // draws are below it (0: all 0), some at least half of it
	}{
		{name: "Decide default, first retry", base: 5 * time.Millisecond, max: 40 * time.Millisecond, scale: 1, n: 0,
			bound: 5 * time.Millisecond},
		{name: "Decide default, capped by max", base: 5 * time.Millisecond, max: 40 * time.Millisecond, scale: 1, n: 1000,
			bound: 40 * time.Millisecond},
		{name: "other calls, capped by max", base: 5 * time.Millisecond, max: 40 * time.Millisecond, scale: 20, n: 10,
			bound: 800 * time.Millisecond},
		{name: "large max, capped by the ceiling", base: time.Second, max: time.Hour, scale: 20, n: 5, bound: backoffCeil},
		{name: "huge base, many attempts", base: huge, max: huge, scale: 20, n: 1 << 40, bound: backoffCeil},
		{name: "base that overflowed the shift", base: 3 * time.Hour, max: huge, scale: 1, n: 20, bound: backoffCeil},
		{name: "no backoff", base: 0, max: 0, scale: 20, n: 7, bound: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{cfg: config{backoffBase: tt.base, backoffCap: tt.max}}
			type summary struct{ AllInRange, SomeOverHalf bool }
			got := summary{AllInRange: true}
			for range 400 {
				w := c.backoff(tt.n, tt.scale)
				if w < 0 || w > tt.bound || w == tt.bound && tt.bound > 0 {
					got.AllInRange = false
					t.Logf("drew %v", w)
				}
				got.SomeOverHalf = got.SomeOverHalf || w >= tt.bound/2
			}
			if diff := cmp.Diff(summary{AllInRange: true, SomeOverHalf: true}, got); diff != "" {
				t.Errorf("draws below %v (-want +got):\n%s", tt.bound, diff)
			}
		})
	}
}

// TestFallbackWaitCapped: the wait between deliveries of a fallback record
// is full jitter over min(max, min·2ⁿ) plus min/2, and the Retry-After up
// to max, however many deliveries failed: a large WithFallbackRetry min
// overflowed the shift into a negative bound, and rand.N panicked in the
// background goroutine.
func TestFallbackWaitCapped(t *testing.T) {
	huge := time.Duration(math.MaxInt64 / 2)
	tests := []struct {
		name       string
		min, max   time.Duration
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration // draws are in [lo, hi)
	}{
		{name: "default, first", min: 200 * time.Millisecond, max: 30 * time.Second, n: 0,
			lo: 100 * time.Millisecond, hi: 300 * time.Millisecond},
		{name: "default, many", min: 200 * time.Millisecond, max: 30 * time.Second, n: 1 << 40,
			lo: 100 * time.Millisecond, hi: 30*time.Second + 100*time.Millisecond},
		{name: "large min", min: 3 * time.Hour, max: huge, n: 20, lo: 90 * time.Minute, hi: huge + 90*time.Minute},
		{name: "Retry-After capped by max", min: time.Millisecond, max: time.Second, n: 0, retryAfter: 24 * time.Hour,
			lo: time.Second, hi: time.Second + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config{fbRetryMin: tt.min, fbRetryMax: tt.max}
			var bad []time.Duration
			for range 400 {
				var w time.Duration
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("panic: %v", p)
						}
					}()
					w = fallbackWait(cfg, tt.n, tt.retryAfter)
				}()
				if w < tt.lo || w >= tt.hi {
					bad = append(bad, w)
				}
			}
			if diff := cmp.Diff([]time.Duration(nil), bad); diff != "" {
				t.Errorf("draws outside [%v, %v) (-want +got):\n%s", tt.lo, tt.hi, diff)
			}
		})
	}
}
