package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLogLevelFlag: --log-level takes debug, info, warn and error (any
// case) and refuses, naming the flag, every other value zerolog would
// parse: "disabled", "fatal", "panic" or a number would silence the error
// lines an operator relies on.
func TestLogLevelFlag(t *testing.T) {
	for _, tc := range []struct {
		level   string
		written []string // levels of the lines written when one of each level is logged
		err     string
	}{
		{level: "debug", written: []string{"debug", "info", "warn", "error"}},
		{level: "info", written: []string{"info", "warn", "error"}},
		{level: "WARN", written: []string{"warn", "error"}},
		{level: "error", written: []string{"error"}},
		{level: "", err: `--log-level: want debug, info, warn or error, got ""`},
		{level: "loud", err: `--log-level: want debug, info, warn or error, got "loud"`},
		{level: "disabled", err: `--log-level: want debug, info, warn or error, got "disabled"`},
		{level: "fatal", err: `--log-level: want debug, info, warn or error, got "fatal"`},
		{level: "panic", err: `--log-level: want debug, info, warn or error, got "panic"`},
		{level: "trace", err: `--log-level: want debug, info, warn or error, got "trace"`},
		{level: "5", err: `--log-level: want debug, info, warn or error, got "5"`},
		{level: "-1", err: `--log-level: want debug, info, warn or error, got "-1"`},
	} {
		var buf bytes.Buffer
		log, err := newLogger(tc.level, "json", &buf)
		if got := errText(err); got != tc.err {
			t.Errorf("--log-level %q: error %q, want %q", tc.level, got, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		log.Debug().Msg("d")
		log.Info().Msg("i")
		log.Warn().Msg("w")
		log.Error().Msg("e")
		var written []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var l struct{ Level string }
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("--log-level %q: line %q: %v", tc.level, line, err)
			}
			written = append(written, l.Level)
		}
		if diff := cmp.Diff(tc.written, written); diff != "" {
			t.Errorf("--log-level %q: levels written (-want +got):\n%s", tc.level, diff)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
