package privacy

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestErasureWaitsForOlderExports: an export streamed to a slow client
// holds a snapshot of the whole store, and Pebble keeps, through flushes
// and compactions, every value a snapshot sees. A deletion pass that runs
// meanwhile (of any customer) must not say completado while the erased
// bytes are still in the store's files: it leaves the job to a later pass,
// which completes it once the export has ended, with no byte left.
func TestErasureWaitsForOlderExports(t *testing.T) {
	const canary = "Wq83snapZk"
	mem, _, p := newPurgeTest(t, canary)
	// Another customer's export, held after its first chunk as a slow
	// client holds it.
	p.exportChunk = 1
	inWalk, release, exported := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	first := true
	p.afterExportChunk = func() error {
		if first {
			first = false
			close(inWalk)
			<-release
		}
		return nil
	}
	go func() {
		write, err := p.ExportStream("acme", "mas-00000000", "ci", "trace")
		if err == nil {
			err = write(io.Discard)
		}
		exported <- err
	}()
	<-inWalk

	p.snapshotWait = 50 * time.Millisecond
	st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
	if held := filesHolding(t, mem, "db", []byte(canary)); err != nil || st.Completed != 0 || st.Pending != 1 {
		t.Errorf("a pass during the export: %+v, %v (files holding the erased customer: %v), want it pending", st, err, held)
	}
	close(release)
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if st, err = p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
		t.Fatalf("the pass after the export: %+v, %v", st, err)
	}
	checkNoFileHolds(t, mem, "db", []byte(canary))
}
