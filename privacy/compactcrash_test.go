package privacy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestDeletionCompactsWhatACrashedPassErased: a crash after an erasure's
// batch committed and before the pass compacted leaves the deletion
// programado; the pass after the restart finds nothing left to erase of
// the customer's decision and idempotency record, so unless the erasure's
// batch kept its keys with the job (deletionJob.Erased), it compacts only
// what it erases again (the features, the customer state) and reports
// completado while a table of the store's bottom level still holds the
// decision.
func TestDeletionCompactsWhatACrashedPassErased(t *testing.T) {
	const canary = "Wq83lostZk"
	mem, db, p := deepCanary(t, canary, nil)
	crashed := crashAfterErasure(t, mem, p)
	db.Close()
	resumeAfterCrash(t, crashed, canary, 1)
}

// TestDeletionCompactsItsQueueEntryAfterACrash: a crash after the batch
// that marks a deletion completado and deletes its queue entry, before the
// pass compacted the entry, leaves the entry's old value, which names the
// customer, in a table of the store's bottom level; no job is queued any
// more, so unless the purge the batch marked owed names the entry
// (store.Batch.OwePurge), the pass after the restart purges the logs and
// never compacts it.
func TestDeletionCompactsItsQueueEntryAfterACrash(t *testing.T) {
	const canary = "Wq83entryZk"
	mem, db, p := deepCanary(t, canary, nil)
	var crashed *storefs.MemFS
	p.beforePurge = func() error { crashed = mem.CrashClone(storefs.CrashCloneCfg{}); return nil }
	if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 || crashed == nil {
		t.Fatalf("first pass: %+v %v, crash clone taken %v", st, err, crashed != nil)
	}
	db.Close()
	resumeAfterCrash(t, crashed, canary, 0)
}

// openCrashable opens a store on a crashable in-memory filesystem with
// the sandbox tenant acme, and its engine and service; the caller closes
// the store (a crash test closes it once it has taken its clone).
func openCrashable(t *testing.T) (*storefs.MemFS, *store.DB, *engine.Engine, *Service) {
	t.Helper()
	mem := storefs.CrashableMem()
	db, err := store.Open("db", mem)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Sandbox(t, db, "acme", t0, store.DefaultSettings())
	now := func() time.Time { return t0 }
	e := engine.New(engine.Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: now, Seed: 1})
	return mem, db, e, newService(e, db, now)
}

// canaryToDelete opens a crashable store (openCrashable) with customer
// canary (2 purchases, a decision with an idempotency key), and requests
// canary's deletion.
func canaryToDelete(t *testing.T, canary string) (*storefs.MemFS, *store.DB, *Service) {
	t.Helper()
	mem, db, e, p := openCrashable(t)
	ingestFor(t, e, canary, "zz-"+canary, 2)
	if _, err := e.Decide("acme", engine.Request{ClienteRef: canary, Canal: "push", Idempotency: engine.Idempotency{Key: "idem-" + canary}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RequestDeletion("acme", canary, "ci"); err != nil {
		t.Fatal(err)
	}
	return mem, db, p
}

// crashAfterErasure makes a deletion pass of p and returns a crash clone
// of mem taken once the erasure has committed, before the pass compacts
// (its External hook).
func crashAfterErasure(t *testing.T, mem *storefs.MemFS, p *Service) *storefs.MemFS {
	t.Helper()
	var crashed *storefs.MemFS
	crash := DeletionHooks{External: func(string, string, *store.Batch) ([][]byte, bool, error) {
		if crashed == nil { // the erasure has committed, the compaction is to come
			crashed = mem.CrashClone(storefs.CrashCloneCfg{})
		}
		return nil, false, nil
	}}
	if _, err := p.ProcessDeletions(context.Background(), crash); err != nil || crashed == nil {
		t.Fatalf("first pass: %v, crash clone taken %v", err, crashed != nil)
	}
	return crashed
}

// deepCanary opens a store on a crashable in-memory filesystem in the shape
// months of writes leave (160 MiB of others' decisions compacted to the
// bottom level with the canary's data and its deletion's queue entry, 64
// MiB more in the levels above: the base level lies above the bottom one,
// so tombstones stop there, away from the tables a deletion compacts), and
// returns it with the canary's deletion requested. damage, when not nil,
// alters the canary's records before the load.
func deepCanary(t *testing.T, canary string, damage func(*store.DB)) (*storefs.MemFS, *store.DB, *Service) {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("loads 160 MiB, and needs the store's shape after months of writes")
	}
	mem, db, p := canaryToDelete(t, canary)
	if damage != nil {
		damage(db)
	}
	rng := rand.NewChaCha8([32]byte{2})
	loadDecisions(t, db, rng, 160<<20)
	if err := db.Compact(t.Context(), []byte{0}, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	loadDecisions(t, db, rng, 64<<20)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); db.Metrics().CompactionsInProgress > 0 && time.Since(start) < time.Minute; {
		time.Sleep(50 * time.Millisecond) // the compactions the load started
	}
	return mem, db, p
}

// TestDeletionCompactsTheDamagedDecisionItQuarantines: the erasure reads
// the customer's decision record, finds it damaged and moves it to
// quarantine (engine.Records.LoadDecision), which deletes the record's key
// in a batch of its own; the erasure deletes the quarantined copy, and
// unless it compacts the record's own key too, a table of the store's
// bottom level still holds the damaged record's bytes, which name the
// customer, once the deletion is completado.
func TestDeletionCompactsTheDamagedDecisionItQuarantines(t *testing.T) {
	const canary = "Wq83damagedZk"
	mem, db, p := deepCanary(t, canary, func(db *store.DB) {
		lo, hi := store.DecisionSpan("acme")
		var keys [][]byte
		if err := db.Scan(lo, hi, func(k, _ []byte) error { keys = append(keys, slices.Clone(k)); return nil }); err != nil || len(keys) != 1 {
			t.Fatalf("the canary's decisions: %d, %v; want 1", len(keys), err)
		}
		b := db.NewBatch()
		defer b.Close()
		b.Set(keys[0], []byte(`{"cliente_ref":"`+canary+`", damaged`))
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	})
	defer db.Close()
	if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
		t.Fatalf("pass: %+v %v; want 1 completed", st, err)
	}
	checkNoFileHolds(t, mem, "db", []byte(canary))
}

// resumeAfterCrash opens the store crashed at, makes a deletion pass that
// completes want deletions, and checks that no file then holds canary.
func resumeAfterCrash(t *testing.T, crashed *storefs.MemFS, canary string, want int) {
	t.Helper()
	if len(storetest.FilesHolding(t, crashed, "db", []byte(canary))) == 0 {
		t.Fatal("no file holds the canary at the crash: the test does not exercise the compaction")
	}
	_, p := reopenService(t, crashed)
	if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != want {
		t.Fatalf("pass after the crash: %+v %v; want %d completed", st, err, want)
	}
	checkNoFileHolds(t, crashed, "db", []byte(canary))
}

// loadDecisions writes bytes of incompressible decision records under
// random nonces to db.
func loadDecisions(t *testing.T, db *store.DB, rng *rand.ChaCha8, bytes int) {
	t.Helper()
	const size, perBatch = 1024, 1024
	for i := 0; i < bytes; i += size * perBatch {
		b := db.NewBatch()
		for range perBatch {
			var nonce [15]byte
			_, _ = rng.Read(nonce[:])
			v := make([]byte, size)
			_, _ = rng.Read(v)
			b.Set(store.DecisionKey("acme", base64.RawURLEncoding.EncodeToString(nonce[:])), v)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// TestErasureKeepsItsKeysWithTheJob is the short form of the test above: a
// crash after the erasure's batch committed, before the pass compacted,
// leaves in the deletion's queue entry the keys that batch deleted, the
// customer's decision among them, for the pass after the restart.
func TestErasureKeepsItsKeysWithTheJob(t *testing.T) {
	const canary = "Qm27keptZk"
	mem, db, p := canaryToDelete(t, canary)
	crashed := crashAfterErasure(t, mem, p)
	db.Close()
	db2, _ := reopenService(t, crashed)
	job := onlyQueued(t, db2)
	dlo, dhi := store.DecisionSpan("acme")
	decisions := 0
	for _, k := range job.Erased {
		if bytes.Compare(k, dlo) >= 0 && bytes.Compare(k, dhi) < 0 {
			decisions++
		}
	}
	if decisions != 1 {
		t.Errorf("the queue entry keeps %d decision keys of the %d keys erased, want the customer's 1", decisions, len(job.Erased))
	}
}

// onlyQueued returns the one entry of acme's deletion queue.
func onlyQueued(t *testing.T, db *store.DB) deletionJob {
	t.Helper()
	var jobs []deletionJob
	lo, hi := store.DeletionQueueSpan("acme")
	err := db.Scan(lo, hi, func(_, v []byte) error {
		var j deletionJob
		jobs = append(jobs, j)
		return json.Unmarshal(v, &jobs[len(jobs)-1])
	})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("deletion queue: %d entries, %v; want 1", len(jobs), err)
	}
	return jobs[0]
}

// TestExternalChangesKeptWithTheJob: what the External hook changes in
// the store (a batch job's request chunk) commits with the queue entry
// that keeps its key for the compaction, and with the entry's retry time
// when part of the batch data must wait: a crash before the compaction
// cannot lose the key, as the chunk no longer holds the customer for a
// later pass to find.
func TestExternalChangesKeptWithTheJob(t *testing.T) {
	const ref = "Zk41chunkQ"
	e, p, db, _ := newTest(t, 1)
	ingestFor(t, e, ref, "c", 2)
	if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
	chunk := store.JobChunkKey("acme", "lote-1", 0)
	// A read open (an export streaming): the pass's compaction cannot
	// rewrite what the entry keeps out of the files, so it keeps it.
	snap := db.NewSnapshot()
	defer snap.Close()
	hooks := DeletionHooks{External: func(_, _ string, b *store.Batch) ([][]byte, bool, error) {
		b.Set(chunk, []byte(`["otro"]`))  // the customer's line gone
		return [][]byte{chunk}, true, nil // another job still runs
	}}
	if st, err := p.ProcessDeletions(context.Background(), hooks); err != nil || st.Pending != 1 {
		t.Fatalf("pass: %+v %v; want 1 pending", st, err)
	}
	if v, err := db.Get(chunk); err != nil || string(v) != `["otro"]` {
		t.Errorf("the hook's change: %q %v; want it committed", v, err)
	}
	job := onlyQueued(t, db)
	if !slices.ContainsFunc(job.Erased, func(k []byte) bool { return bytes.Equal(k, chunk) }) || job.RetryAt.IsZero() {
		t.Errorf("queue entry after the pass: erased %q, retry at %v; want the chunk's key and a retry time", job.Erased, job.RetryAt)
	}
}

// TestWaitingDeletionKeepsEachErasedKeyOnce: a deletion that waits for a
// batch job is retried every deletionRetry, and each retry's erasure
// deletes the customer's features and state keys again; while a read
// older than the erasures stays open (an export streaming), so that no
// pass can forget what its compaction did not rewrite, its queue entry
// must keep each key once, or a batch job running for hours grows it past
// maxJobPoints (2,048 retries, under 9 hours), and the entry's keys turn
// into bounds per table, whose whole spans (a customer's decisions and
// events spread over their tables) every later retry compacts.
func TestWaitingDeletionKeepsEachErasedKeyOnce(t *testing.T) {
	const ref = "Zk52waitQ"
	p, db, clk := waitingDeletion(t, ref)
	snap := db.NewSnapshot()
	defer snap.Close()
	var first []string
	for retry := range 3 {
		if st, err := p.ProcessDeletions(context.Background(), batchJobRuns()); err != nil || st.Pending != 1 {
			t.Fatalf("retry %d: %+v %v; want 1 pending", retry, st, err)
		}
		clk.Advance(deletionRetry)
		var keys []string
		for _, k := range onlyQueued(t, db).Erased {
			keys = append(keys, string(k))
		}
		if retry == 0 {
			first = keys
			continue
		}
		if diff := cmp.Diff(first, keys); diff != "" {
			t.Fatalf("erased keys kept after retry %d, against the first pass's (-first +now):\n%s", retry, diff)
		}
	}
	if len(first) == 0 {
		t.Fatal("the entry keeps no key: the test does not exercise the retries")
	}
}

// TestWaitingDeletionForgetsWhatItsPassCompacted: once a pass has
// compacted, with no read open, what a waiting deletion erased and what
// its queue entry kept to compact, the entry keeps nothing more: each
// retry while the batch job runs would compact it all again (a customer's
// keys past maxJobPoints, kept as bounds per table, whole spans of the
// decisions and events tables every deletionRetry).
func TestWaitingDeletionForgetsWhatItsPassCompacted(t *testing.T) {
	const ref = "Zk53waitQ"
	p, db, clk := waitingDeletion(t, ref)
	for retry := range 2 {
		if st, err := p.ProcessDeletions(context.Background(), batchJobRuns()); err != nil || st.Pending != 1 {
			t.Fatalf("retry %d: %+v %v; want 1 pending", retry, st, err)
		}
		clk.Advance(deletionRetry)
		if job := onlyQueued(t, db); len(job.Erased) != 0 || len(job.Chunked) != 0 || job.RetryAt.IsZero() {
			t.Fatalf("queue entry after retry %d: %d keys, %d bounds, retry at %v; want none, none, a retry time",
				retry, len(job.Erased), len(job.Chunked), job.RetryAt)
		}
	}
}

// batchJobRuns is the deletion hooks while a batch job of the tenant runs:
// the batch data waits.
func batchJobRuns() DeletionHooks {
	return DeletionHooks{External: func(string, string, *store.Batch) ([][]byte, bool, error) {
		return nil, true, nil
	}}
}

// waitingDeletion is a store where ref has events and a decision and her
// deletion is requested.
func waitingDeletion(t *testing.T, ref string) (*Service, *store.DB, *clock.Fake) {
	t.Helper()
	e, p, db, clk := newTest(t, 1)
	ingestFor(t, e, ref, "w"+ref, 2)
	if _, err := e.Decide("acme", engine.Request{ClienteRef: ref, Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
	return p, db, clk
}

// TestPurgeStoppedByShutdownIsNoFailure: serve's shutdown cancelling a
// pass during the purge a completed deletion owes leaves the deletion
// completado with no failure noted on its record (the next pass purges
// first: TestDeletionCompactsItsQueueEntryAfterACrash).
func TestPurgeStoppedByShutdownIsNoFailure(t *testing.T) {
	const ref = "Zk52stopQ"
	e, p, _, _ := newTest(t, 1)
	ingestFor(t, e, ref, "s", 2)
	if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.beforePurge = func() error { cancel(); return ctx.Err() } // the shutdown, as the purge starts
	if st, err := p.ProcessDeletions(ctx, DeletionHooks{}); err != nil || st.Failed != 0 || st.Pending != 1 {
		t.Fatalf("a pass stopped in its purge: %+v %v; want one pending, none failed", st, err)
	}
	rec, err := p.Deletion("acme", ref)
	if err != nil || rec == nil || rec.Estado != DeletionCompleted || rec.Intentos != 0 || rec.UltimoError != "" {
		t.Errorf("the deletion's record: %+v %v; want completado with no failure noted", rec, err)
	}
	// The next pass, stopped too as it starts the purge owed: no error
	// logged, the purge left to the pass after the restart.
	var logged bytes.Buffer
	p.log = zerolog.New(&logged)
	p.beforePurge = nil
	if _, err := p.ProcessDeletions(ctx, DeletionHooks{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a pass whose context has ended: %v, want %v", err, context.Canceled)
	}
	if strings.Contains(logged.String(), `"level":"error"`) {
		t.Errorf("a pass stopped by the shutdown logged an error: %s", logged.String())
	}
}
