package privacy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
	if held := storetest.FilesHolding(t, mem, "db", []byte(canary)); err != nil || st.Completed != 0 || st.Pending != 1 {
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
	// A wait per tenant takes tenants × wait at least; one wait leaves the
	// rest of that as slack for a loaded machine.
	if limit := time.Duration(tenants-1) * wait; took >= limit {
		t.Errorf("the pass took %s with a snapshot held, want less than %s (one wait of %s, not one per tenant)", took, limit, wait)
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

// TestErasureLeftPendingKeepsItsBounds: a deletion left to a later pass
// keeps in its queue entry the bounds of every table its erasure deleted
// from (its decisions' among them): the later pass's erasure, finding
// nothing left, would not give them to its compaction, and on a store
// whose files are narrow the bytes would stay.
func TestErasureLeftPendingKeepsItsBounds(t *testing.T) {
	p, db, decisions := deletionRequested(t, "Wq83keepZk")
	release := holdExport(t, p, "mas-00000000")
	defer release()
	p.snapshotWait = 10 * time.Millisecond
	if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Pending != 1 {
		t.Fatalf("a pass during the export: %+v, %v, want it pending", st, err)
	}
	if tables := chunkedTables(t, db); !slices.Contains(tables, decisions) {
		t.Errorf("the pending deletion's bounds cover the tables %q, not the decisions' %q", tables, decisions)
	}
}

// TestErasureWhoseCompactionFailedKeepsItsBounds: a pass that erased a
// customer and then failed to compact (serve's shutdown cancels it there)
// leaves the job for a later pass, whose erasure finds nothing left in most
// tables: the queue entry keeps the bounds of what was erased, as one left
// pending does, so that pass still compacts the decisions' bytes away. A
// pass stopped so is not a failure: the deletion is pending, its record
// notes no error.
func TestErasureWhoseCompactionFailedKeepsItsBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool // the deletion waits for a batch job after its erasure
	}{{"to complete", false}, {"waiting for a batch job", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const ref = "Wq83failZk"
			p, db, decisions := deletionRequested(t, ref)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hooks := DeletionHooks{External: func(string, string, *store.Batch) ([][]byte, bool, error) {
				cancel() // the shutdown comes once the data is erased
				return nil, tc.wait, nil
			}}
			// Stopped, not failed: pending, nothing noted on the record.
			if st, _ := p.ProcessDeletions(ctx, hooks); st.Failed != 0 || st.Pending != 1 {
				t.Fatalf("a pass cancelled before its compaction: %+v, want one pending, none failed", st)
			}
			if rec, err := p.Deletion("acme", ref); err != nil || rec == nil || rec.Intentos != 0 || rec.UltimoError != "" {
				t.Errorf("the deletion's record after a stopped pass: %+v, %v; want no failure noted", rec, err)
			}
			if tables := chunkedTables(t, db); !slices.Contains(tables, decisions) {
				t.Errorf("the deletion's bounds cover the tables %q, not the decisions' %q", tables, decisions)
			}
		})
	}
}

// deletionRequested makes customer ref (3 events, 3 decisions) and a
// neighbour with 2 events, and requests ref's deletion; it returns the
// service, its store and the table of ref's decision records.
func deletionRequested(t *testing.T, ref string) (*Service, *store.DB, string) {
	t.Helper()
	e, p, db, _ := newTest(t, 1)
	ingestFor(t, e, ref, "k", 3)
	decideMany(t, e, db, ref, 3)
	ingestFor(t, e, "mas-00000000", "m", 2)
	lo, hi := store.CustomerDecisionSpan("acme", ref)
	nonces, _, err := p.indexChunk(db, "acme", decisionIndex, lo, hi, 1)
	if err != nil || len(nonces) != 1 {
		t.Fatalf("decision index: %v, %v", nonces, err)
	}
	if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
	return p, db, string(tableOf(p.rec.DecisionKey("acme", nonces[0])))
}

// chunkedTables lists the tables of the keys and bounds (Erased, Chunked)
// the entries of acme's deletion queue keep to compact.
func chunkedTables(t *testing.T, db *store.DB) []string {
	t.Helper()
	qlo, qhi := store.DeletionQueueSpan("acme")
	var tables []string
	if err := db.Scan(qlo, qhi, func(_, v []byte) error {
		var j deletionJob
		if err := json.Unmarshal(v, &j); err != nil {
			return err
		}
		for _, b := range append(j.Chunked, j.Erased...) {
			tables = append(tables, string(tableOf(b)))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return tables
}
