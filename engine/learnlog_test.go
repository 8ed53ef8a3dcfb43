package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

// TestLearnerFailureLoggedOnce: a tenant whose learner pass keeps failing
// is logged at error once, at debug while it goes on failing, and at info
// when a pass works again; it used to log an error every interval (every
// second) for as long as the failure lasted.
func TestLearnerFailureLoggedOnce(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	var buf bytes.Buffer
	e.Learner.core.log = zerolog.New(&buf).Level(zerolog.DebugLevel)
	failing := map[string]bool{}
	for range 3 { // no such tenant yet: every pass fails
		e.Learner.learnOnce("beta", failing)
	}
	storetest.Sandbox(t, db, "beta", t0, store.DefaultSettings())
	for range 2 {
		e.Learner.learnOnce("beta", failing)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l struct{ Level, Message string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, l.Level+" "+l.Message)
	}
	want := []string{"error learner pass", "debug learner pass", "debug learner pass", "info learner passes work again"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}
