package privacy

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestRetryWaitingOnJobEnd: a deletion waiting for a batch job of its
// tenant completes within a second or two of that job's end
// (RetryWaiting, which the batch runner calls), not deletionRetry later
// nor at the worker's next interval; the end of another tenant's job
// leaves it waiting. The worker's interval and the clock do not move here.
func TestRetryWaitingOnJobEnd(t *testing.T) {
	tests := []struct {
		name   string
		ended  string // the tenant whose batch job ended
		want   string
		within time.Duration
	}{
		{"its tenant's job ended", "acme", DeletionCompleted, 5 * time.Second},
		{"another tenant's job ended", "otro", DeletionScheduled, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, p, _, _ := newTest(t, 2)
			ingestFor(t, e, "dora-00000001", "d", 3)
			if _, err := p.RequestDeletion("acme", "dora-00000001", "ci_1"); err != nil {
				t.Fatal(err)
			}
			var jobRuns atomic.Bool
			jobRuns.Store(true)
			hooks := DeletionHooks{External: func(string, string, *store.Batch) ([][]byte, bool, error) {
				return nil, jobRuns.Load(), nil
			}}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); p.RunDeletions(ctx, time.Hour, hooks) }()
			defer func() { cancel(); <-done }()
			state := func() (string, string) {
				rec, err := p.Deletion("acme", "dora-00000001")
				if err != nil || rec == nil {
					t.Fatalf("deletion record: %v %v", rec, err)
				}
				return rec.Estado, rec.Espera
			}
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, espera := state(); espera != "" {
					break // the first pass found the batch job
				}
			}
			jobRuns.Store(false)
			p.RetryWaiting(tt.ended)
			end := time.Now().Add(tt.within)
			for estado, _ := state(); estado != DeletionCompleted && time.Now().Before(end); estado, _ = state() {
				time.Sleep(20 * time.Millisecond)
			}
			got, _ := state()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("deletion %v after the job's end (-want +got):\n%s", tt.within, diff)
			}
		})
	}
}
