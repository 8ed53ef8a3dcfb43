package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		auto bool
		bad  bool
	}{
		{"", 0, true, false}, {"auto", 0, true, false}, {"0", 0, false, false}, {"512MiB", 512 << 20, false, false},
		{"2GiB", 2 << 30, false, false}, {"1.5GiB", 3 << 29, false, false}, {"100MB", 100e6, false, false}, {"4096", 4096, false, false},
		{"16m", 16 << 20, false, false}, {"-1", 0, false, true}, {"GiB", 0, false, true}, {"12XB", 0, false, true}, {"1e30", 0, false, true},
	} {
		got, auto, err := parseSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want || auto != tc.auto {
			t.Errorf("parseSize(%q) = %d, %v, %v; want %d, %v, error %v", tc.in, got, auto, err, tc.want, tc.auto, tc.bad)
		}
	}
}

// TestLogReserveWarnsWhenSmall: a reserve set under what the store writes
// without asking (a flush) is logged as a warning; none (0) and enough are not.
func TestLogReserveWarnsWhenSmall(t *testing.T) {
	for _, tc := range []struct {
		reserve uint64
		warn    bool
	}{{0, false}, {1 << 20, true}, {64 << 20, true}, {128 << 20, false}, {1 << 30, false}} {
		var buf bytes.Buffer
		logReserve(zerolog.New(&buf), tc.reserve)
		if got := strings.Contains(buf.String(), `"level":"warn"`); got != tc.warn {
			t.Errorf("reserve %d: warned %v, want %v (log %q)", tc.reserve, got, tc.warn, buf.String())
		}
	}
}
