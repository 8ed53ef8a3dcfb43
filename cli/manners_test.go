package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Run(context.Background(), args, nil, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestUnknownCommandsAndFlags: a typo exits non-zero and suggests the
// command or flag meant.
func TestUnknownCommandsAndFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args    []string
		unknown string // what the error says is unknown: "command" or "flag"
		suggest string
	}{
		{[]string{"admin", "tenant", "lst"}, "command", "list"},
		{[]string{"admin", "tenat"}, "command", "tenant"},
		{[]string{"serv"}, "command", "serve"},
		{[]string{"admin", "tenant", "list", "--jsn"}, "flag", "--json"},
		{[]string{"serve", "--adr", "x"}, "flag", "--addr"},
		// A mistyped subcommand followed by its flags is the subcommand's
		// mistake, not the flag's.
		{[]string{"admin", "evalute", "--tenant", "acme"}, "command", "evaluate"},
		{[]string{"admin", "tenant", "creat", "acme", "--sandbox"}, "command", "create"},
		{[]string{"srve", "--addr", "127.0.0.1:18080"}, "command", "serve"},
	}
	for _, tt := range tests {
		_, _, err := runCLI(t, append(tt.args, "--data-dir", dir)...)
		if ExitCode(err) == 0 || !strings.Contains(err.Error(), "unknown "+tt.unknown) ||
			!strings.Contains(err.Error(), "Did you mean this?") || !strings.Contains(err.Error(), tt.suggest) {
			t.Errorf("%v: exit %d, %v; want non-zero, unknown %s, suggesting %s", tt.args, ExitCode(err), err, tt.unknown, tt.suggest)
		}
	}
	// A value that does not parse as its flag's type is refused in the
	// words of coupond's own checks, not strconv's.
	_, _, err := runCLI(t, "admin", "tenant", "list", "--json=yes", "--data-dir", dir)
	if want := "--json: want true or false, got \"yes\"\n\nRun 'coupond admin tenant list --help' for usage"; err == nil || err.Error() != want {
		t.Errorf("admin tenant list --json=yes: %v; want %q", err, want)
	}
	// A group without a subcommand prints its help and succeeds.
	out, _, err := runCLI(t, "admin", "tenant")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("admin tenant: %v\n%s", err, out)
	}
}

// TestEveryCommandHasJSON: every command a user runs takes --json.
func TestEveryCommandHasJSON(t *testing.T) {
	root := newRoot(&app{})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		if c.Runnable() && !(c.HasSubCommands()) && c.Flags().Lookup("json") == nil && c.InheritedFlags().Lookup("json") == nil {
			t.Errorf("%s has no --json", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

func TestVersionAndCompletion(t *testing.T) {
	out, _, err := runCLI(t, "version", "--json")
	if err != nil || !strings.Contains(out, `"version"`) || !strings.Contains(out, fmt.Sprintf("send gate that tests them against never-send per frequency band, a guard back to never-send or one coupon, logged propensities with a floor (model format %d)", policy.Format)) {
		t.Errorf("version --json does not name the policy and its model format: %v %s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf(`"store_format": %d`, store.Format)) {
		t.Errorf("version --json does not name the store format (%d), which an upgrade's going back turns on: %s", store.Format, out)
	}
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, err := runCLI(t, "completion", sh)
		if err != nil || !strings.Contains(out, "coupond") {
			t.Errorf("completion %s: %v (%d bytes)", sh, err, len(out))
		}
	}
	// An unknown shell is an error, as an unknown subcommand is elsewhere:
	// it printed the help and exited 0.
	if _, _, err := runCLI(t, "completion", "bsh"); ExitCode(err) == 0 || !strings.Contains(err.Error(), "bash") {
		t.Errorf("completion bsh: %v; want an error suggesting bash", err)
	}
}

func TestProgressMode(t *testing.T) {
	tests := []struct {
		flag           string
		terminal, json bool
		want           string
		wantErr        bool
	}{
		{"auto", true, false, progressTTY, false},
		{"auto", false, false, progressPlain, false},
		{"auto", true, true, progressOff, false},
		{"plain", true, false, progressPlain, false},
		{"tty", false, false, progressTTY, false},
		{"off", true, false, progressOff, false},
		{"bar", true, false, "", true},
	}
	for _, tt := range tests {
		got, err := progressMode(tt.flag, tt.terminal, tt.json)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("progressMode(%q, %v, %v) = %q, %v", tt.flag, tt.terminal, tt.json, got, err)
		}
	}
}

// TestWatchJobPlain: for pipes and files, whole lines at most every
// plainEvery with the rate and ETA, no '\r', and the summary.
func TestWatchJobPlain(t *testing.T) {
	start := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	done := start.Add(30 * time.Second)
	clock := start
	now := func() time.Time { clock = clock.Add(2 * time.Second); return clock }
	var states []batch.Job
	for p := 0; p <= 1000; p += 100 {
		states = append(states, batch.Job{ID: "lote_p", Estado: api.EstadoEnCurso, Total: 1000, Procesados: p, IniciadoEn: &start})
	}
	states = append(states, batch.Job{ID: "lote_p", Estado: api.EstadoCompletado, Total: 1000, Procesados: 1000, IniciadoEn: &start, CompletadoEn: &done})
	var out bytes.Buffer
	if _, err := watchJob(context.Background(), &out, fakeJob(states...), time.Millisecond, progressPlain, true, now); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if strings.Contains(s, "\r") || len(lines) < 3 || len(lines) > 7 {
		t.Errorf("plain output: %d lines, want 3 to 7 without \\r:\n%s", len(lines), s)
	}
	if !strings.Contains(s, "lines/s  ETA ") || !strings.HasSuffix(s, "completed in 30s: 1000 lines, 0 sends\n") {
		t.Errorf("plain output lacks the rate, ETA or summary:\n%s", s)
	}
	out.Reset()
	if _, err := watchJob(context.Background(), &out, fakeJob(states...), time.Millisecond, progressOff, true, now); err != nil || out.Len() != 0 {
		t.Errorf("off: %v %q", err, out.String())
	}
}

// TestNoColour: console logs carry no ANSI escape off a terminal or with
// NO_COLOR.
func TestNoColour(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	var buf bytes.Buffer
	log, err := newLogger("info", "console", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Str("k", "v").Msg("hola")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "hola") {
		t.Errorf("console log: %q", buf.String())
	}
	if useColor(&buf) {
		t.Error("useColor on a buffer")
	}
}

// TestArgumentCountNamesArguments: a command given too few or too many
// arguments says which it takes, by the names of its usage line, not
// cobra's "accepts 1 arg(s), received 0".
func TestArgumentCountNamesArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "tenant", "create"}, "want 1 argument (ID), got 0 (usage: coupond admin tenant create ID [flags])"},
		{[]string{"admin", "tenant", "show", "a", "b"}, "want 1 argument (ID), got 2"},
		{[]string{"admin", "credential", "rotate", "--grace", "1h"}, "want 1 argument (CLIENT_ID), got 0"},
		{[]string{"admin", "batch", "watch", "--tenant", "acme"}, "want 1 argument (JOB_ID), got 0"},
		{[]string{"lab", "compare", "a.json"}, "want 2 arguments (A.json B.json), got 1"},
	} {
		_, _, err := runCLI(t, append(tc.args, "--data-dir", dir)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error containing %q", tc.args, err, tc.want)
		}
	}
	for use, want := range map[string][]string{
		"rotate CLIENT_ID [--grace 24h]":                 {"CLIENT_ID"},
		"watch --tenant ID JOB_ID":                       {"JOB_ID"},
		"compare A.json B.json":                          {"A.json", "B.json"},
		"create --tenant ID --name NAME --scopes a,b":    nil,
		"pprof --kind cpu|heap [--seconds N] --out FILE": nil,
	} {
		if diff := cmp.Diff(want, argNames(use)); diff != "" {
			t.Errorf("argNames(%q) (-want +got):\n%s", use, diff)
		}
	}
}

// TestEnvErrorsNameVariable: a bad value set by an environment variable is
// refused naming the variable as well as the flag; a value given on the
// command line is refused as before.
func TestEnvErrorsNameVariable(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "sb", "--sandbox")
	for _, tc := range []struct {
		env, value string
		args       []string
		want       string
	}{
		{"COUPOND_LOG_LEVEL", "loud", []string{"serve", "--addr", "127.0.0.1:0", "--console-addr", ""},
			`--log-level: want debug, info, warn or error, got "loud" (--log-level came from COUPOND_LOG_LEVEL)`},
		{"COUPOND_ADDR", "x", []string{"serve", "--console-addr", ""},
			`--addr: want host:port such as 127.0.0.1:8080, got "x" (--addr came from COUPOND_ADDR)`},
		{"COUPOND_BY", "-1h", []string{"admin", "clock", "advance", "--tenant", "sb"},
			`--by: want a positive duration such as 36h or 7d, got "-1h" (--by came from COUPOND_BY)`},
		{"COUPOND_CONTROL_SHARE", "2", []string{"admin", "tenant", "set", "sb", "--control-share", "0.7"},
			`--control-share: want 0 to 0.5, got 0.7`},
		// A value that does not parse as the flag's type: pflag's words
		// ("strconv.ParseBool: parsing …: invalid syntax") were Go's.
		{"COUPOND_SECONDS", "ten", []string{"admin", "debug", "pprof", "--out", "x.pprof"},
			`--seconds: want a whole number, got "ten" (--seconds came from COUPOND_SECONDS)`},
		{"COUPOND_JSON", "yes", []string{"admin", "tenant", "list"}, // last: it stays set, and every command has --json
			`--json: want true or false, got "yes" (--json came from COUPOND_JSON)`},
	} {
		t.Setenv(tc.env, tc.value)
		_, _, err := runCLI(t, append(tc.args, "--data-dir", dir)...)
		if err == nil {
			t.Fatalf("%s=%s %v: no error", tc.env, tc.value, tc.args)
		}
		if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
			t.Errorf("%s=%s %v (-want +got):\n%s", tc.env, tc.value, tc.args, diff)
		}
	}
}
