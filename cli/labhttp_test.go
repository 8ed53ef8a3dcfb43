package cli

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/engine/lab"
	"github.com/coupond/coupond/internal/syncbuf"
)

// TestLabOverHTTPMatchesInProcess runs tiny worlds through the HTTP API
// (httpOpener: a server of their own, the client package, the clock moved
// as admin clock advance moves it) and in process, and wants the same
// report: the same keys and seed make the same decisions, and a week's
// rewards (fewer than one online learner pass, engine.learnBatchOnline)
// are folded in one pass either way, so any difference is the HTTP path's
// (an event, catalog or confirmation that reached the engine otherwise,
// a fold that came late). Seed 47001 has a control group, customers who
// never redeem and rejected sends; 47002 opt-outs and a coupon that joins
// the catalog at mid-run.
func TestLabOverHTTPMatchesInProcess(t *testing.T) {
	customers, weeks := 150, 4
	if testing.Short() {
		customers, weeks = 60, 3
	}
	t.Setenv("TMPDIR", t.TempDir())
	for _, seed := range []uint64{47001, 47002} {
		fam := lab.DrawFamily(seed)
		fam.Resize(customers, weeks)
		in, err := lab.RunWorld(context.Background(), fam)
		if err != nil {
			t.Fatal(err)
		}
		var serverLog syncbuf.Buffer
		over, err := lab.RunWorldOn(context.Background(), fam, httpOpener(&serverLog))
		if err != nil {
			t.Fatalf("seed %d over HTTP: %v\nserver log:\n%s", seed, err, serverLog.String())
		}
		if d := cmp.Diff(in, over, cmpopts.EquateNaNs(), cmpopts.IgnoreUnexported(lab.Family{})); d != "" {
			t.Errorf("seed %d: over HTTP differs from in process (-in process +over HTTP):\n%s", seed, d)
		}
		if serverLog.String() != "" {
			t.Errorf("seed %d: the server logged errors:\n%s", seed, serverLog.String())
		}
	}
}
