package privacy

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestErasureOfHotCustomerInChunks: a cliente_ref with a long history (a
// point of sale's walk-in account) is erased a chunk of events at a time,
// with the tenant's locks released between chunks (an ingestion of another
// customer goes through there), and the erasure is whole: its events, its
// coupon's event and link, its index, nothing of another customer.
func TestErasureOfHotCustomerInChunks(t *testing.T) {
	e, p, db, _ := newTest(t, 3)
	const hot = "MOSTRADOR0001"
	ingestFor(t, e, hot, "hot", 45)
	ingestFor(t, e, "vecina", "vec", 3)
	cup := engine.Event{ID: "cup-ev-1", ClienteRef: hot, TS: t0.Add(-time.Minute), Tipo: engine.CuponRecibido, Clave: "T1",
		CuponEmitidoID: "cup-hot-1", Caducidad: t0.Add(240 * time.Hour)}
	if _, err := e.Ingester.Ingest("acme", []engine.IngestEvent{{Event: cup, Canonical: []byte(cup.ID)}}); err != nil {
		t.Fatal(err)
	}
	p.eraseChunk = 10
	chunks, ingested := 0, make(chan error, 1)
	p.afterChunk = func() {
		chunks++
		if chunks == 1 { // between chunks, the tenant's ingestion is free
			go func() {
				ev := engine.Event{ID: "otra-1", ClienteRef: "otra", TS: t0.Add(-time.Hour), Tipo: engine.CompraCat, Clave: "abarrotes",
					ValorCents: 10000, TicketID: "t-otra-1", MargenCents: 2500}
				_, err := e.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}})
				ingested <- err
			}()
			select {
			case err := <-ingested:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(10 * time.Second):
				t.Error("an ingestion waited for the erasure between chunks")
			}
		}
	}
	if _, err := p.RequestDeletion("acme", hot, "ci_1"); err != nil {
		t.Fatal(err)
	}
	st, err := p.ProcessDeletions(t.Context(), DeletionHooks{})
	if err != nil || st.Completed != 1 {
		t.Fatalf("deletion: %+v %v", st, err)
	}
	// 46 index entries: 5 chunks; the coupon's event is left to the last batch.
	if diff := cmp.Diff(5, chunks); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	if holds(t, db, []byte(hot)) || holds(t, db, []byte("cup-hot-1")) {
		t.Error("the store still holds the erased customer or her coupon")
	}
	for _, ref := range []string{"vecina", "otra"} {
		x, err := p.Export("acme", ref, "ci_1", "tr")
		if err != nil || len(x.Eventos) == 0 {
			t.Errorf("%s after the erasure: %d events %v; want hers kept", ref, len(x.Eventos), err)
		}
	}
}

// TestErasureResumesAfterCrashMidChunks: a crash after some chunks of a
// long history were erased leaves the deletion programado; once the store
// is open again, the next pass erases the rest and compacts what the
// crashed pass's chunks deleted too (their bounds are in the queue entry),
// so no file of the store holds the customer.
func TestErasureResumesAfterCrashMidChunks(t *testing.T) {
	const canary = "Wq83chunkZk"
	mem, _, p := newPurgeTest(t, canary)
	// newPurgeTest's canary has 5 events: chunks of 2.
	p.eraseChunk = 2
	var crashed *storefs.MemFS
	p.afterChunk = func() {
		if crashed == nil {
			crashed = mem.CrashClone(storefs.CrashCloneCfg{})
		}
	}
	if _, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || crashed == nil {
		t.Fatalf("first pass: %v, crash clone taken %v", err, crashed != nil)
	}
	db, p2 := reopenService(t, crashed)
	p2.eraseChunk = 2
	if rec, err := p2.Deletion("acme", canary); err != nil || rec == nil || rec.Estado != DeletionScheduled {
		t.Fatalf("after the crash: deletion %+v %v, want programado", rec, err)
	}
	// The first chunk (the canary's two oldest events) is deleted, and its
	// keys' bounds are in the queue entry for the resumed pass to compact.
	var jobs []deletionJob
	lo, hi := store.DeletionQueueSpan("acme")
	if err := db.Scan(lo, hi, func(_, v []byte) error {
		var j deletionJob
		err := json.Unmarshal(v, &j)
		jobs = append(jobs, j)
		return err
	}); err != nil || len(jobs) != 1 {
		t.Fatalf("queue after the crash: %+v %v", jobs, err)
	}
	first := [][]byte{p2.rec.EventKey("acme", "zz-"+canary+"-0"), p2.rec.EventKey("acme", "zz-"+canary+"-1")}
	for _, k := range first {
		if ok, err := db.Has(k); err != nil || ok {
			t.Fatalf("event %q after the crash: present %v %v; want the first chunk deleted", k, ok, err)
		}
	}
	evBounds := func(keys [][]byte) (out [][]byte) {
		for _, k := range keys {
			if bytes.Equal(tableOf(k), tableOf(first[0])) {
				out = append(out, k)
			}
		}
		return out
	}
	if diff := cmp.Diff(first, evBounds(jobs[0].Chunked)); diff != "" {
		t.Errorf("event bounds in the queue entry after the crash (-want +got):\n%s", diff)
	}
	if st, err := p2.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
		t.Fatalf("pass after the crash: %+v %v", st, err)
	}
	checkNoFileHolds(t, crashed, "db", []byte(canary))
}
