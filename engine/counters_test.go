package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
)

func TestCountersFlushAndHours(t *testing.T) {
	db := storetest.Open(t)
	c := NewCounters(db)
	t0 := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	h0 := HourOf(t0)
	for _, id := range []string{"acme", "other"} { // a tenant not in the store has its counts dropped
		if err := db.CreateTenant(&store.Tenant{ID: id, CreatedAt: t0, Settings: store.DefaultSettings()}); err != nil {
			t.Fatal(err)
		}
	}

	c.decided("acme", &DecisionRecord{At: t0, Explorado: true, Accion: 2})
	c.decided("acme", &DecisionRecord{At: t0, EnControl: true})
	c.decided("acme", &DecisionRecord{At: t0, EnRespaldo: true}) // fallback: not a decision
	c.Add("acme", t0.Add(time.Hour), CountErrorPfx+"limite_excedido", 2)
	c.Add("other", t0, CountDecisions, 7)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// After the flush: a confirmation of the first hour's decision, pending.
	c.confirmed("acme", &DecisionRecord{At: t0.Add(time.Minute), Estado: EstadoEjecutada})
	var tally decisionTally
	tally.add(&DecisionRecord{At: t0.Add(time.Hour), Accion: 1})
	c.addTally("acme", &tally)

	got, err := c.Hours("acme", h0-1, h0+1)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]int64{
		{},
		{CountDecisions: 2, CountExplored: 1, CountSent: 1, CountControl: 1, CountConfirmed: 1, CountEjecutada: 1},
		{CountErrorPfx + "limite_excedido": 2, CountDecisions: 1, CountSent: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Hours before the second flush (-want +got):\n%s", diff)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	again, err := NewCounters(db).Hours("acme", h0-1, h0+1) // a restarted process reads the same
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("Hours after the flush, read afresh (-want +got):\n%s", diff)
	}
	var nilC *Counters
	nilC.Add("acme", t0, CountEvents, 1) // counts nothing, does not panic
}

func TestHourOfNegative(t *testing.T) {
	if got := HourOf(time.Unix(-1, 0)); got != -1 {
		t.Errorf("HourOf(-1 s) = %d, want -1", got)
	}
}

func BenchmarkCountersDecided(b *testing.B) {
	c := NewCounters(storetest.Open(b))
	r := &DecisionRecord{At: time.Now(), Explorado: true, Accion: 1}
	b.ReportAllocs()
	for b.Loop() {
		c.decided("acme", r)
	}
}

// TestCountersFollowTheLoop checks what the engine's own paths count:
// online and batch decisions, confirmations by decision hour, a voided
// batch job, a fallback record and the events of an ingest.
func TestCountersFollowTheLoop(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "camp", Canal: "push", Descripcion: "d"}, t0); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("online%02d", i), Canal: "push"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.DecisionID)
	}
	advance(t, db, time.Hour)
	if _, err := e.Confirm("acme", ids[0], Confirmation{Ejecutada: true}); err != nil {
		t.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", "job1", "camp")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := bd.Decide(fmt.Sprintf("batch%02d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	bd.Close()
	if n, err := e.VoidJob("acme", "job1"); err != nil || n != 4 {
		t.Fatalf("VoidJob = %d, %v; want 4", n, err)
	}
	if err := e.Fallback("acme", FallbackInput{ClienteRef: "fallback01", Canal: "push", CampanaID: "camp"}); err != nil {
		t.Fatal(err)
	}
	h0 := HourOf(t0)
	got, err := e.Counters().Hours("acme", h0, h0+1)
	if err != nil {
		t.Fatal(err)
	}
	pick := func(m map[string]int64, names ...string) map[string]int64 {
		out := map[string]int64{}
		for _, n := range names {
			if m[n] != 0 {
				out[n] = m[n]
			}
		}
		return out
	}
	names := []string{CountDecisions, CountConfirmed, CountEjecutada, CountRechazada, CountFallbacks}
	want := []map[string]int64{
		{CountDecisions: 3, CountConfirmed: 1, CountEjecutada: 1},
		{CountDecisions: 4, CountConfirmed: 4, CountRechazada: 4, CountFallbacks: 1},
	}
	for i := range want {
		if diff := cmp.Diff(want[i], pick(got[i], names...)); diff != "" {
			t.Errorf("hour %d (-want +got):\n%s", i, diff)
		}
	}
}
