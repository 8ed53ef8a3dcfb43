package batch

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// queueMessage queues in db message id of tenant acme with attempts
// made, due now.
func queueMessage(t *testing.T, db *store.DB, now time.Time, id string, attempts int) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	q := queued{ID: id, Body: []byte(`{"tipo":"lote.completado"}`), Attempt: attempts}
	if err := b.SetJSON(store.WebhookDeliveryKey("acme", now, id), q); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// queueLen is how many messages acme's webhook queue in db holds.
func queueLen(t *testing.T, db *store.DB) int {
	t.Helper()
	lo, hi := store.WebhookQueueSpan("acme")
	n := 0
	if err := db.Scan(lo, hi, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWebhookLastAttemptCutByACrash: serve killed (kill -9) while a
// message's last attempt is in flight does not cost the message that
// attempt: after the restart the next pass makes it again, with the same
// webhook-id, and a receiver that answers then has it delivered. A
// receiver during whose answer serve dies every time has it made again
// lastAttemptCuts times, then given up, and not at every restart for ever.
// Each restart opens the store as the crash left it (only what was synced).
// The last attempt was recorded out of the queue before it was made: after
// the crash the queue was empty and the message lost (0 attempts at the
// first restart).
func TestWebhookLastAttemptCutByACrash(t *testing.T) {
	tests := []struct {
		name    string
		crashes int // attempts during which serve dies
		want    crashRuns
	}{
		{name: "one crash", crashes: 1,
			want: crashRuns{Made: []int{1, 1}, Requests: 2, Outcomes: []string{WebhookDelivered}}},
		{name: "a crash at every attempt", crashes: 100,
			want: crashRuns{Made: []int{1, 1, 1, 1, 0}, Requests: 1 + lastAttemptCuts, Outcomes: []string{WebhookGivenUp}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, runCrashes(t, tt.crashes)); diff != "" {
				t.Errorf("runs of serve (-want +got):\n%s", diff)
			}
		})
	}
}

// crashRuns is what runCrashes saw: the attempts each run of serve made,
// the requests the receiver got (all with the message's webhook-id), the
// outcomes the last run reported and the messages it left queued.
type crashRuns struct {
	Made     []int
	Requests int
	Outcomes []string
	Left     int
}

// runCrashes runs serve (a delivery pass) over a store holding a message
// due for its last attempt, crashing the process during the first crashes
// attempts (the receiver takes the crash image when the request arrives)
// and restarting it from that image, until a run ends without a crash.
func runCrashes(t *testing.T, crashes int) crashRuns {
	mem := storefs.CrashableMem()
	e := newJobEnv(t, mem, "db", 2, -1)
	queueMessage(t, e.db, e.clock.Now(), "msg_lote_a", WebhookAttempts-1)
	var mu sync.Mutex
	var got crashRuns
	var crashed *storefs.MemFS
	fs := mem
	rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("webhook-id") == "msg_lote_a" {
			got.Requests++
		}
		if crashes > 0 {
			crashes--
			crashed = fs.CrashClone(storefs.CrashCloneCfg{}) // serve dies here
			rw.WriteHeader(http.StatusInternalServerError)
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	db := e.db
	for run := 0; run < 10; run++ {
		w := NewWebhooks(db, NewDeliverer(DelivererConfig{AllowPrivate: true, Timeout: 5 * time.Second}), zerolog.Nop(), e.clock.Now, 1)
		var outcomes []string
		w.Observe(Observer{WebhookAttempt: func(_, o string) { outcomes = append(outcomes, o) }})
		if run == 0 {
			if _, err := w.Register("acme", rc.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
				t.Fatal(err)
			}
		}
		got.Made = append(got.Made, w.DeliverDue(t.Context()))
		mu.Lock()
		image := crashed
		crashed = nil
		mu.Unlock()
		if image == nil {
			got.Outcomes, got.Left = outcomes, queueLen(t, db)
			break
		}
		// What the dead process did after the crash image is not kept.
		if run > 0 {
			db.Close()
		}
		var err error
		if db, err = store.Open("db", image); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		fs = image
		mu.Unlock()
	}
	if db != e.db {
		db.Close()
	}
	return got
}

// TestWebhookLastAttemptCutByAStop: serve stopping (SIGTERM) while a
// message's last attempt is in flight neither gives the message up nor
// reports an outcome: the next pass makes the attempt again, with the
// same webhook-id. The stop cut the attempt, which was counted given up
// (outcome given_up, and nothing left for the next pass).
func TestWebhookLastAttemptCutByAStop(t *testing.T) {
	w, hold, arrived, _ := hangingHooks(t, 1)
	queueMessage(t, w.db, w.now(), "msg_lote_a", WebhookAttempts-1) // lote_a's message, at its last attempt
	var outcomes []string
	var mu sync.Mutex // replaces hangingHooks' observer
	w.Observe(Observer{WebhookAttempt: func(_, o string) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }})
	ctx, cancel := context.WithCancel(t.Context())
	made := make(chan int, 1)
	go func() { made <- w.DeliverDue(ctx) }()
	first := <-arrived
	cancel()
	if n := <-made; n != 1 {
		t.Errorf("the stopped pass made %d attempts, want 1", n)
	}
	mu.Lock()
	stopped := slices.Clone(outcomes)
	mu.Unlock()
	hold.Store(false)
	if n := w.DeliverDue(t.Context()); n != 1 {
		t.Errorf("the next pass made %d attempts, want 1 (the last attempt again)", n)
	}
	var again string
	select {
	case again = <-arrived:
	default:
	}
	type seen struct {
		Stopped, Next []string
		IDs           [2]string
		Left          int
	}
	want := seen{Next: []string{WebhookDelivered}, IDs: [2]string{"msg_lote_a", "msg_lote_a"}}
	got := seen{Stopped: stopped, Next: outcomes[len(stopped):], IDs: [2]string{first, again}, Left: queueLen(t, w.db)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestWebhookErasedTenantNotPostponed: a pass whose attempt record (its
// retry) the store refuses because the tenant's deletion erased it meanwhile
// (store.ErrTenantErased) stops quietly: no "deliveries postponed" error,
// which says the store refuses writes (a full disk) and, logged once
// until an attempt is recorded again, would have kept a real
// postponement unsaid.
func TestWebhookErasedTenantNotPostponed(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	postponed := &lineCounter{msg: "postponed", at: func() {}}
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.New(postponed).Level(zerolog.InfoLevel), e.clock.Now, 1)
	if _, err := w.Register("acme", "http://127.0.0.1:9/hook", []string{EventLoteCompletado}, jobsStart); err != nil {
		t.Fatal(err)
	}
	queueMessage(t, e.db, e.clock.Now(), "msg_lote_a", 0) // its first attempt records a retry
	var once sync.Once
	var erased atomic.Bool
	w.beforeRecord = func() {
		once.Do(func() { // the deletion hides and erases the tenant now
			if _, err := e.db.MarkTenantDeleting("acme", "test", jobsStart); err != nil {
				t.Error(err)
			}
			if _, err := e.db.EraseTenant("acme", jobsStart); err != nil {
				t.Error(err)
			}
			erased.Store(true)
		})
	}
	due := w.due("acme") // listed by a pass before the deletion
	if n := w.deliverDue(t.Context(), "acme", due); n != 0 || !erased.Load() {
		t.Fatalf("pass over an erased tenant: %d attempts (erased %v), want 0", n, erased.Load())
	}
	if diff := cmp.Diff(0, postponed.n); diff != "" || w.postponed.Load() {
		t.Errorf("postponement log lines (-want +got):\n%s(postponed flag %v)", diff, w.postponed.Load())
	}
}
