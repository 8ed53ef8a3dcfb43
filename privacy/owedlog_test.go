package privacy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
)

// owedLogLine is what TestRunOwedLogsChanges reads of a log line: its
// level and message, whether it has an error and a failing_since, and its
// failed_tries_not_logged.
type owedLogLine struct {
	Level, Message   string
	Error, Since     bool
	UnloggedFailures int
}

// TestRunOwedLogsChanges: while the registry stays unreadable, serve's
// owed-deletion worker (RunOwed, one tryOwed every 5 minutes) logs the
// failure when it starts, then at most once an hour with the tries not
// logged since, and once when the tries succeed again; a new failure is
// logged at once. It logged the same error at every try, every 5 minutes.
func TestRunOwedLogsChanges(t *testing.T) {
	const every = 5 * time.Minute
	failed := owedLogLine{Level: "error", Message: "deletions owed to backups not delivered; retried later, logged again within the hour while it lasts", Error: true}
	again := func(n int) owedLogLine {
		l := failed
		l.Since, l.UnloggedFailures = true, n
		return l
	}
	back := func(n int) owedLogLine {
		return owedLogLine{Level: "info", Message: "deletions owed to backups delivered again", Since: true, UnloggedFailures: n}
	}
	var logs bytes.Buffer
	clk := clock.NewFake(t0)
	bk := NewBackups(t.TempDir(), clk.Now, zerolog.New(&logs))
	if err := bk.saveRegistry(&backupRegistry{}); err != nil {
		t.Fatal(err)
	}
	var st owedLog
	for _, step := range []struct {
		name     string
		readable bool
		tries    int // one every `every`, the first at once
		want     []owedLogLine
	}{
		{"readable", true, 3, nil},
		{"unreadable, first hour", false, 12, []owedLogLine{failed}},
		{"unreadable, second hour", false, 12, []owedLogLine{again(11)}},
		{"unreadable, a little more", false, 5, []owedLogLine{again(11)}},
		{"readable again", true, 12, []owedLogLine{back(4)}},
		{"unreadable once more", false, 1, []owedLogLine{failed}},
		{"readable at the next try", true, 1, []owedLogLine{back(0)}},
	} {
		bk.readRegistry = os.ReadFile
		if !step.readable {
			unreadable(bk, syscall.EIO)
		}
		logs.Reset()
		for range step.tries {
			bk.tryOwed(&st, every)
			bk.tryOwed(&st, every) // not due: no try, nothing logged
			clk.Advance(every)
		}
		if diff := cmp.Diff(step.want, owedLogLines(t, logs.String())); diff != "" {
			t.Errorf("%s: log (-want +got):\n%s", step.name, diff)
		}
	}
}

// owedLogLines decodes the JSON log lines of text.
func owedLogLines(t *testing.T, text string) []owedLogLine {
	t.Helper()
	var out []owedLogLine
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if l == "" {
			continue
		}
		var got struct {
			Level    string `json:"level"`
			Message  string `json:"message"`
			Error    string `json:"error"`
			Since    string `json:"failing_since"`
			Unlogged int    `json:"failed_tries_not_logged"`
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, owedLogLine{Level: got.Level, Message: got.Message, Error: got.Error != "", Since: got.Since != "", UnloggedFailures: got.Unlogged})
	}
	return out
}

// TestOwedTriesAfterClockBack: the clock set back (a day) neither stops
// the owed-deletion worker's tries until it catches up nor its log of a
// lasting failure: the next try is made, and logged, at once, and the
// tries go on every 5 minutes from there. The next try waited a day.
func TestOwedTriesAfterClockBack(t *testing.T) {
	const every = 5 * time.Minute
	var logs bytes.Buffer
	clk := clock.NewFake(t0)
	bk := NewBackups(t.TempDir(), clk.Now, zerolog.New(&logs))
	reads := 0
	bk.readRegistry = func(path string) ([]byte, error) {
		reads++
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EIO}
	}
	var st owedLog
	var got []string
	for _, move := range []time.Duration{0, -24 * time.Hour, time.Minute, 4 * time.Minute} {
		clk.Advance(move)
		logs.Reset()
		before := reads
		bk.tryOwed(&st, every)
		got = append(got, fmt.Sprintf("moved %v: %d tries, %d lines logged", move, reads-before, len(owedLogLines(t, logs.String()))))
	}
	want := []string{
		"moved 0s: 1 tries, 1 lines logged",
		"moved -24h0m0s: 1 tries, 1 lines logged",
		"moved 1m0s: 0 tries, 0 lines logged",
		"moved 4m0s: 1 tries, 0 lines logged",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tries (-want +got):\n%s", diff)
	}
}
