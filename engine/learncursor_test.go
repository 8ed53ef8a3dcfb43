package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestLearnCursor: passes over a backlog (cut short as while online
// decisions are answered) fold every reward, each starting where the last
// stopped; and a reward queued behind the cursor is still folded: a pass
// that finds nothing ahead of the cursor scans the queue from its start.
func TestLearnCursor(t *testing.T) {
	e, db := newTestEngine(t, 3, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
	const n = 1200
	rewardBacklog(t, e, db, n)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	e.markOnline() // passes of learnBatchOnline rewards
	total, passes := 0, 0
	for {
		e.markOnline()
		st, err := e.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		done := st.Folded + st.Unconfirmed + st.Modified + st.Control + st.Released
		if done == 0 {
			break
		}
		if done > learnBatchOnline {
			t.Fatalf("a pass while online did %d rewards, want at most %d", done, learnBatchOnline)
		}
		total += done
		passes++
	}
	if total != n || passes < 3 {
		t.Fatalf("folded %d rewards in %d passes, want %d in at least 3", total, passes, n)
	}

	// One more decision, its reward due; the cursor is then put after it
	// (as if the queue ahead had been done): the next pass finds nothing
	// there, scans from the start and folds it.
	rewardBacklog(t, e, db, 1)
	_, now, err := e.tenantNow("acme")
	if err != nil {
		t.Fatal(err)
	}
	lo, cursor := store.RewardQueueDueSpan("acme", now.Add(-time.Nanosecond)) // cursor: the first key due at now
	ts.learnMu.Lock()
	ts.learnCursor = cursor
	ts.learnMu.Unlock()
	var queued int
	if err := db.Scan(lo, ts.learnCursor, func(_, _ []byte) error { queued++; return nil }); err != nil || queued == 0 {
		t.Fatalf("queue behind the cursor: %d keys, %v; want some", queued, err)
	}
	st, err := e.Learner.Learn("acme")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Worked() {
		t.Fatalf("the reward behind the cursor was not learned: %+v", st)
	}
}

// TestDueEntriesSaysWhatItLeaves: a pass cut short while online decisions
// are answered says that entries due now are left (so the gate holds its
// look for the pass that folds them: policy.Model.UpdateGuard); the pass
// that takes the last of them says none are, also when they fill it
// exactly. Fails if a pass's "more" is wrong either way.
func TestDueEntriesSaysWhatItLeaves(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []bool // per pass, until one finds nothing
	}{
		{2*learnBatchOnline + 1, []bool{true, true, false}},
		{learnBatchOnline, []bool{false}},
	} {
		e, db := newTestEngine(t, 3, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
		rewardBacklog(t, e, db, tc.n)
		var got []bool
		for {
			e.markOnline()
			ts, err := e.state("acme")
			if err != nil {
				t.Fatal(err)
			}
			_, now, err := e.tenantNow("acme")
			if err != nil {
				t.Fatal(err)
			}
			ts.learnMu.Lock()
			work, more, err := e.Learner.dueEntries(ts, "acme", now)
			ts.learnMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if len(work) == 0 {
				break
			}
			got = append(got, more)
			e.markOnline()
			if _, err := e.Learner.Learn("acme"); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%d due: entries left per pass (-want +got):\n%s", tc.n, diff)
		}
	}
}
