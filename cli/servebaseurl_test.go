package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestWarnBaseURL: serve warns, naming --base-url, when the signed result
// links would derive from an --addr no client can fetch (no host, or an
// unspecified one: http://:8080/... was built in silence), and says
// nothing when --base-url is given or --addr names a host.
func TestWarnBaseURL(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		given bool
		warns bool
	}{
		{":8080", false, true},
		{"0.0.0.0:8080", false, true},
		{"[::]:8080", false, true},
		{":8080", true, false},
		{"0.0.0.0:8080", true, false},
		{"127.0.0.1:8080", false, false},
		{"[::1]:8080", false, false},
		{"192.0.2.7:8080", false, false},
		{"coupons.internal:8080", false, false},
	} {
		var logs bytes.Buffer
		warnBaseURL(zerolog.New(&logs), tc.addr, tc.given)
		s := logs.String()
		got := strings.Contains(s, `"level":"warn"`) && strings.Contains(s, "--base-url") && strings.Contains(s, "http://"+tc.addr+"/")
		if diff := cmp.Diff(tc.warns, got); diff != "" || (!tc.warns && s != "") {
			t.Errorf("--addr %s, --base-url given %v: warning %v, want %v; log: %s", tc.addr, tc.given, got, tc.warns, s)
		}
	}
}
