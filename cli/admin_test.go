package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTenantSetRejectsBadValues: every bad value of admin tenant set is an
// error naming its flag, NaN and spans past a year included, and leaves the
// tenant's settings as they were.
func TestTenantSetRejectsBadValues(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	settings := func() map[string]any {
		var v struct {
			Settings map[string]any `json:"settings"`
		}
		if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "show", "acme", "--json"), &v); err != nil {
			t.Fatal(err)
		}
		return v.Settings
	}
	before := settings()
	for _, args := range [][]string{
		{"--control-share", "NaN"}, {"--control-share", "0.6"}, {"--control-share", "-0.1"},
		{"--optout-penalty-mxn", "NaN"}, {"--optout-penalty-mxn", "-1"}, {"--optout-penalty-mxn", "+Inf"},
		{"--reward-window", "366d"}, {"--reward-window", "100000d"}, {"--reward-window", "30m"},
		{"--reward-grace", "366d"}, {"--reward-grace", "-1d"},
		{"--control-kind", "todos"}, {"--paused", "maybe"}, {"--shadow", "yes"}, {"--quota-events-day", "-1"},
	} {
		_, _, err := runCLI(t, append([]string{"admin", "tenant", "set", "acme", "--data-dir", dir}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("tenant set %v: %v; want an error naming %s", args, err, args[0])
		}
	}
	if diff := cmp.Diff(before, settings()); diff != "" {
		t.Errorf("rejected values changed the settings (-before +after):\n%s", diff)
	}
	runIn(t, dir, "admin", "tenant", "set", "acme", "--reward-window", "365d", "--reward-grace", "0d", "--optout-penalty-mxn", "12.5")
	if s := settings(); s["reward_window"] != "365d" || s["optout_penalty_mxn"] != 12.5 {
		t.Errorf("the bounds themselves: %v", s)
	}
}
