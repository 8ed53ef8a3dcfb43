package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFlagDocsKeepParentheses: the configuration reference drops the
// "env COUPOND_X" a usage names (the table has a column for it) but not
// the parenthesis around it: "(default http://ADDR; env COUPOND_BASE_URL)"
// lost its ")" and the README showed "(default http://ADDR".
func TestFlagDocsKeepParentheses(t *testing.T) {
	for _, tc := range []struct{ usage, want string }{
		{"listen address (env COUPOND_ADDR)", "listen address"},
		{"external base URL (default http://ADDR; env COUPOND_BASE_URL)", "external base URL (default http://ADDR)"},
		{"data directory (env COUPOND_DATA_DIR); serve creates it", "data directory; serve creates it"},
		{"console address, empty for none (env COUPOND_CONSOLE_ADDR); sign in", "console address, empty for none; sign in"},
		{"sizes like 512MiB (auto: larger; 0 disables; env COUPOND_DISK_RESERVE)", "sizes like 512MiB (auto: larger; 0 disables)"},
		{"no variable named", "no variable named"},
	} {
		if diff := cmp.Diff(tc.want, envNote.ReplaceAllString(tc.usage, "")); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.usage, diff)
		}
	}
	var doc bytes.Buffer
	if err := writeFlagDocs(&doc, newRoot(&app{})); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(doc.String(), "\n") {
		cells := strings.Split(line, " | ")
		desc := cells[len(cells)-1]
		if strings.Count(desc, "(") != strings.Count(desc, ")") || strings.Contains(desc, "env COUPOND_") {
			t.Errorf("description with unbalanced parentheses or its variable left in: %s", line)
		}
	}
}

// TestTenantSetDocsNewTenantValues: the flags of "admin tenant set" change
// a setting only when given, so the configuration reference shows no
// default for them (it showed "0" for --control-share and
// --optout-penalty-mxn, whose new tenant's values are 0.05 and 50 MXN),
// and each usage names the value a new tenant really has.
func TestTenantSetDocsNewTenantValues(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	var shown struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "show", "acme", "--json"), &shown); err != nil {
		t.Fatal(err)
	}
	onOff := map[any]string{true: "on", false: "off"}
	s := shown.Settings
	want := map[string]string{
		"shadow": onOff[s["shadow"]], "paused": fmt.Sprint(s["paused"]), "rate-limits": onOff[s["rate_limits"]],
		"reward-window": fmt.Sprint(s["reward_window"]), "reward-grace": fmt.Sprint(s["reward_grace"]),
		"control-share": fmt.Sprint(s["control_share"]), "control-kind": fmt.Sprint(s["control_kind"]),
		"quota-decisions-day": fmt.Sprint(s["quota_decisions_day"]), "quota-events-day": fmt.Sprint(s["quota_events_day"]),
		"optout-penalty-mxn": fmt.Sprint(s["optout_penalty_mxn"]),
	}
	var doc bytes.Buffer
	if err := writeFlagDocs(&doc, newRoot(&app{})); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(doc.String(), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) != 5 || cells[0] != "| admin tenant set" {
			continue
		}
		flag := strings.Trim(cells[1], "`-")
		if cells[2] != "" {
			t.Errorf("--%s: default column %q, want none (the flag changes its setting only when given)", flag, cells[2])
		}
		_, v, _ := strings.Cut(cells[4], "a new tenant's: ")
		got[flag] = strings.TrimSuffix(v, " |")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("new tenant's values in the docs (-shown by tenant show +docs):\n%s", diff)
	}
}

// TestServiceUnitLeavesSettingsToEnv: the systemd unit gives serve only
// --data-dir, which the unit's own directories pin. It also gave --addr,
// and a flag wins over its variable: COUPOND_ADDR in /etc/coupond/env,
// where the README says settings go, was silently ignored.
func TestServiceUnitLeavesSettingsToEnv(t *testing.T) {
	data, err := os.ReadFile("../deploy/coupond.service")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, line := range strings.Split(string(data), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			for _, w := range strings.Fields(cmd) {
				if strings.HasPrefix(w, "--") {
					flags = append(flags, w)
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"--data-dir"}, flags); diff != "" {
		t.Errorf("flags of the unit's ExecStart (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(data), "EnvironmentFile=-/etc/coupond/env") {
		t.Error("the unit reads no /etc/coupond/env")
	}
}

// TestBackupUnitNeverStartsServe: the backup timer's unit needs serve
// running (Requisite) but never starts it. With Requires it did: a timer
// firing while the operator had stopped the service for a restore or an
// upgrade started serve on the data dir in the middle of it.
func TestBackupUnitNeverStartsServe(t *testing.T) {
	data, err := os.ReadFile("../deploy/coupond-backup.service")
	if err != nil {
		t.Fatal(err)
	}
	var deps []string
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.Contains(value, "coupond.service") {
			deps = append(deps, key)
		}
	}
	if diff := cmp.Diff([]string{"Requisite", "After"}, deps); diff != "" {
		t.Errorf("the backup unit's dependencies on coupond.service (-want +got):\n%s", diff)
	}
}
