package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBatchChunkLocks: while a batch chunk is pending (decided, not yet
// committed), an online decision of another customer without a campaign
// is answered at once; one of a customer of the chunk, and one with a
// campana_id (budgets are counters written whole), wait for the chunk's
// commit; and a decider that meets a customer whose lock is taken commits
// its chunk first and then waits, holding no customer lock.
func TestBatchChunkLocks(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "camp", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", "job1", "camp")
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	in := map[uint32]bool{}
	for i := range 8 {
		ref := fmt.Sprintf("batch%02d", i)
		in[ts.custLockIndex(e.seed, ref)] = true
		if _, err := bd.Decide(ref, false); err != nil {
			t.Fatal(err)
		}
	}
	other := ""
	for i := 0; other == ""; i++ {
		if ref := fmt.Sprintf("online%03d", i); !in[ts.custLockIndex(e.seed, ref)] {
			other = ref
		}
	}
	decide := func(req Request) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := e.Decide("acme", req)
			done <- err
		}()
		return done
	}
	answered := func(done chan error, within time.Duration) bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return true
		case <-time.After(within):
			return false
		}
	}
	if !answered(decide(Request{ClienteRef: other, Canal: "push"}), 5*time.Second) {
		t.Fatal("an online decision of a customer outside the chunk waited for the chunk")
	}
	sameCustomer := decide(Request{ClienteRef: "batch03", Canal: "push"})
	withCampaign := decide(Request{ClienteRef: other + "x", Canal: "push", CampanaID: "camp"})
	if answered(sameCustomer, 50*time.Millisecond) || answered(withCampaign, 50*time.Millisecond) {
		t.Fatal("an online decision of a chunk's customer, or with a campaign, was answered before the chunk's commit")
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	if !answered(sameCustomer, 5*time.Second) || !answered(withCampaign, 5*time.Second) {
		t.Fatal("online decisions still waiting after the chunk's commit")
	}

	// A customer whose lock is taken (an online decision in progress): the
	// decider commits what it has, then waits for that lock alone.
	if _, err := bd.Decide("batch10", false); err != nil {
		t.Fatal(err)
	}
	lock := ts.custLock(e.seed, "busy")
	lock.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := bd.Decide("busy", false)
		done <- err
	}()
	// The decider's chunk is committed and its locks released before it
	// waits: an online decision of batch10 answers with the chunk's open
	// decision.
	got := make(chan *Decision, 1)
	go func() {
		d, _ := e.Decide("acme", Request{ClienteRef: "batch10", Canal: "push"})
		got <- d
	}()
	var d *Decision
	select {
	case d = <-got:
	case <-time.After(5 * time.Second):
		lock.Unlock()
		t.Fatal("the waiting decider still holds the lock of its chunk's customer")
	}
	if d == nil {
		lock.Unlock()
		t.Fatal("online decision of batch10 failed")
	}
	if !strings.Contains(d.Motivo, "ventana de recompensa abierta") {
		lock.Unlock()
		t.Fatalf("online decision of batch10: motivo %q, want the open window of the committed chunk", d.Motivo)
	}
	select {
	case err := <-done:
		t.Fatalf("the decider decided a customer whose lock is taken (err %v)", err)
	default:
	}
	lock.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
