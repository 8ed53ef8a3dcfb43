package store

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestPebbleErrorsLoggedThrottled: the errors Pebble reports in the
// background (a flush failing on a full disk, retried in a loop) reach the
// store's log, at most one line per pebbleErrorEvery with the count of
// those left out; they used to be dropped, so such a failure was never
// logged.
func TestPebbleErrorsLoggedThrottled(t *testing.T) {
	var buf bytes.Buffer
	errs := &pebbleErrors{log: zerolog.Nop()}
	db := &DB{pebbleErrs: errs}
	q := quietLogger{errs: errs, space: newSpace("db")}
	q.Errorf("before SetLog: %s", "dropped")
	db.SetLog(zerolog.New(&buf))
	t0 := time.Now().Add(time.Hour)
	for i, at := range []time.Duration{0, time.Second, 2 * time.Second, 9 * time.Second, 11 * time.Second} {
		errs.report(t0.Add(at), "flush failed "+string(rune('a'+i)))
	}
	type line struct {
		Level, Message, Error string
		Omitidos              int
	}
	var got []line
	for _, raw := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		got = append(got, l)
	}
	want := []line{
		{"error", "store: background error", "flush failed a", 0},
		{"error", "store: background error", "flush failed e", 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}
