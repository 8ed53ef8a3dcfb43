package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// keyed is a Submission of refs for campaign "camp" with Idempotency-Key
// key, its identity the hash of body (a stand-in for the request body).
func keyed(key, body string, refs ...string) Submission {
	id := engine.Idempotency{Key: key, BodyHash: engine.HashBatchBody(bytes.NewReader([]byte(body)))}
	return Submission{CampanaID: "camp", Clientes: refs, Idempotency: id}
}

// TestSubmitIdempotencyKey: a keyed batch creation repeated with the same
// body within 24 h of the tenant clock returns the first job and creates
// nothing, past the one-job-per-hour limit too, and also while another
// retry of it holds the key; another body, or a key whose first request
// is still running (of any route), is ErrIdempotencyConflict; after 24 h
// the key is new again.
func TestSubmitIdempotencyKey(t *testing.T) {
	tests := []struct {
		name    string
		advance time.Duration // tenant clock moved after the first job
		hold    bool          // the key is held by a request in flight
		second  Submission
		wantErr error
		same    bool // the second answer is the first job
		jobs    int  // stored jobs after the second call
	}{
		{name: "replay", advance: 10 * time.Minute, second: keyed("k1", "cuerpo", "c-1"), same: true, jobs: 1},
		{name: "replay near the end of retention", advance: 24*time.Hour - time.Second, second: keyed("k1", "cuerpo", "c-1"), same: true, jobs: 1},
		{name: "other body", advance: 10 * time.Minute, second: keyed("k1", "otro", "c-2"), wantErr: engine.ErrIdempotencyConflict, jobs: 1},
		{name: "first request in flight", advance: 2 * time.Hour, hold: true, second: keyed("k3", "cuerpo", "c-1"), wantErr: engine.ErrIdempotencyConflict, jobs: 1},
		{name: "replay beside another retry", advance: 10 * time.Minute, hold: true, second: keyed("k1", "cuerpo", "c-1"), same: true, jobs: 1},
		{name: "other key within the hour", advance: 10 * time.Minute, second: keyed("k2", "cuerpo", "c-1"), wantErr: ErrBusy, jobs: 1},
		{name: "expired key", advance: 24 * time.Hour, second: keyed("k1", "cuerpo", "c-1"), jobs: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
			first, err := e.r.Submit("acme", keyed("k1", "cuerpo", "c-1"))
			if err != nil {
				t.Fatal(err)
			}
			done := *first // run: only the hourly limit holds a new job back
			done.Estado = api.EstadoCompletado
			if err := e.r.save(&done); err != nil {
				t.Fatal(err)
			}
			if _, err := e.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(tc.advance); return nil }); err != nil {
				t.Fatal(err)
			}
			if tc.hold {
				now := jobsStart.Add(tc.advance)
				claim, err := e.eng.KeyClaims.Claim("acme", now, tc.second.Idempotency)
				if err != nil {
					t.Fatal(err)
				}
				defer claim.Release()
			}
			got, err := e.r.Submit("acme", tc.second)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Submit: %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff([]any{first.ID, first.Estado, first.CreadoEn}, []any{got.ID, got.Estado, got.CreadoEn}); (diff == "") != tc.same {
					t.Errorf("second answer is the first job: %v, want %v (%s)", diff == "", tc.same, diff)
				}
			}
			jobs, err := e.r.Jobs("acme")
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != tc.jobs {
				t.Errorf("%d jobs stored, want %d", len(jobs), tc.jobs)
			}
		})
	}
}

// TestSubmitIdempotencySharesKeys: an Idempotency-Key the tenant used for a
// decision is not a batch's: a batch creation with it is a conflict, never
// a replay of the decision.
func TestSubmitIdempotencySharesKeys(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	body := `{"cliente_ref":"c-1","contexto":{"canal":"push"}}`
	req := engine.Request{ClienteRef: "c-1", Canal: "push",
		Idempotency: engine.Idempotency{Key: "k1", BodyHash: engine.HashBody([]byte(body))}}
	if _, err := e.eng.Decide("acme", req); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Submit("acme", keyed("k1", body, "c-1")); !errors.Is(err, engine.ErrIdempotencyConflict) {
		t.Fatalf("Submit with a decision's key: %v, want ErrIdempotencyConflict", err)
	}
}

// TestSubmitIdempotencyCrash: the job and its key's record are committed
// in one synced batch: a process killed right after Submit returns finds
// both at its restart, and the retry there gets the same job; the record
// names no customer (a deletion does not look for it: only hashes of the
// body are kept).
func TestSubmitIdempotencyCrash(t *testing.T) {
	mem := storefs.CrashableMem()
	e := newJobEnv(t, mem, "db", 2, -1)
	sub := keyed("k1", "cuerpo", "cliente-secreto-1", "cliente-secreto-2")
	first, err := e.r.Submit("acme", sub)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open("db", mem.CrashClone(storefs.CrashCloneCfg{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec, err := db.Idempotency("acme", "k1")
	if err != nil {
		t.Fatalf("idempotency record after the crash: %v", err)
	}
	if bytes.Contains(rec, []byte("cliente-secreto")) {
		t.Errorf("idempotency record names a customer: %s", rec)
	}
	eng := engine.New(engine.Config{DB: db, Secrets: e.secrets, Log: zerolog.Nop(), Now: e.clock.Now, Seed: 42})
	r := NewRunner(RunnerConfig{DB: db, Engine: eng, Log: zerolog.Nop(), Dir: e.dir, Now: e.clock.Now, Signer: e.r.Signer})
	again, err := r.Submit("acme", sub)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Errorf("retry after the crash: job %s, want %s", again.ID, first.ID)
	}
	if _, err := r.Job("acme", first.ID); err != nil {
		t.Errorf("job after the crash: %v", err)
	}
}

// TestPruneBatchIdempotency: the learner's pruning deletes a batch
// creation's record past 24 h as any other, and keeps it before; it does
// not take it for a damaged record (quarantine).
func TestPruneBatchIdempotency(t *testing.T) {
	tests := []struct {
		advance     time.Duration
		deleted     int
		quarantined int
	}{
		{advance: time.Hour},
		{advance: 24 * time.Hour, deleted: 1},
	}
	for _, tc := range tests {
		e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
		if _, err := e.r.Submit("acme", keyed("k1", "cuerpo", "c-1")); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(tc.advance); return nil }); err != nil {
			t.Fatal(err)
		}
		n, err := e.eng.PruneIdempotency("acme")
		if err != nil {
			t.Fatal(err)
		}
		q, err := e.eng.Quarantine.QuarantinedRecords()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([2]int{tc.deleted, tc.quarantined}, [2]int{n, q}); diff != "" {
			t.Errorf("after %v: [deleted quarantined] (-want +got):\n%s", tc.advance, diff)
		}
	}
}

// TestSubmitDamagedIdempotencyRecord: a key's record that matches the
// body but whose answer is no batch creation's (damaged) is moved to
// quarantine and the request answered afresh (contract §8), not refused
// with an error (a 500) for the record's 24 h.
func TestSubmitDamagedIdempotencyRecord(t *testing.T) {
	for _, answer := range []string{`{"job_id":5}`, `{"decision_id":"d1"}`, `"x"`} {
		t.Run(answer, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
			sub := keyed("k1", "cuerpo", "c-1")
			rec, err := json.Marshal(map[string]any{"h": sub.Idempotency.BodyHash, "at": jobsStart, "answer": json.RawMessage(answer)})
			if err != nil {
				t.Fatal(err)
			}
			b := e.db.NewBatch()
			b.SetIdempotency("acme", "k1", rec)
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			j, err := e.r.Submit("acme", sub)
			if err != nil {
				t.Fatalf("Submit: %v, want a new job", err)
			}
			again, err := e.r.Submit("acme", sub)
			if err != nil {
				t.Fatalf("Submit again: %v, want the replay", err)
			}
			q, err := e.eng.Quarantine.QuarantinedRecords()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([2]any{j.ID, 1}, [2]any{again.ID, q}); diff != "" {
				t.Errorf("[replayed job, quarantined] (-want +got):\n%s", diff)
			}
		})
	}
}
