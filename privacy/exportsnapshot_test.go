package privacy

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
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
	release := holdExport(t, p, "mas-00000000")
	p.snapshotWait = 50 * time.Millisecond
	st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
	if held := filesHolding(t, mem, "db", []byte(canary)); err != nil || st.Completed != 0 || st.Pending != 1 {
		t.Errorf("a pass during the export: %+v, %v (files holding the erased customer: %v), want it pending", st, err, held)
	}
	release()
	if st, err = p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
		t.Fatalf("the pass after the export: %+v, %v", st, err)
	}
	checkNoFileHolds(t, mem, "db", []byte(canary))
}

// TestErasureWaitsOncePerPass: a pass waits for the older snapshots once,
// not once per tenant with a deletion (tenants × the wait, while a slow
// export lasts).
func TestErasureWaitsOncePerPass(t *testing.T) {
	e, p, db, _ := newTest(t, 1)
	ingestFor(t, e, "mas-00000000", "m", 2)
	const tenants, wait = 4, 500 * time.Millisecond
	for i := range tenants {
		id := fmt.Sprintf("t%d", i)
		storetest.Sandbox(t, db, id, t0, store.DefaultSettings())
		if _, err := e.Ingester.Ingest(id, []engine.IngestEvent{{Event: engine.Event{ID: "e", ClienteRef: "c", TS: t0.Add(-time.Hour),
			Tipo: engine.CompraCat, Clave: "abarrotes", ValorCents: 100, TicketID: "t"}, Canonical: []byte("e")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RequestDeletion(id, "c", "ci"); err != nil {
			t.Fatal(err)
		}
	}
	release := holdExport(t, p, "mas-00000000")
	defer release()
	p.snapshotWait = wait
	start := time.Now()
	st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
	took := time.Since(start)
	if err != nil || st.Pending != tenants {
		t.Errorf("the pass: %+v, %v; want %d pending", st, err, tenants)
	}
	if took >= 2*wait {
		t.Errorf("the pass took %s with a snapshot held, want less than twice its wait of %s", took, wait)
	}
}

// holdExport starts ref's export and holds it after its first chunk, as a
// slow client holds it, until the returned release is called (which waits
// for the export's end; a second call does nothing).
func holdExport(t *testing.T, p *Service, ref string) (release func()) {
	t.Helper()
	p.exportChunk = 1
	inWalk, proceed, exported := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	first := true
	p.afterExportChunk = func() error {
		if first {
			first = false
			close(inWalk)
			<-proceed
		}
		return nil
	}
	go func() {
		write, err := p.ExportStream("acme", ref, "ci", "trace")
		if err == nil {
			err = write(io.Discard)
		}
		exported <- err
	}()
	<-inWalk
	released := false
	return func() {
		if released {
			return
		}
		released = true
		close(proceed)
		if err := <-exported; err != nil {
			t.Error(err)
		}
	}
}
