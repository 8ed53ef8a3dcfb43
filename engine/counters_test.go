package engine

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

func TestCountersFlushAndHours(t *testing.T) {
	db, err := store.Open("db", vfs.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCounters(db)
	t0 := time.Date(2026, 11, 2, 10, 30, 0, 0, time.UTC)
	h0 := HourOf(t0)

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
	db, err := store.Open("db", vfs.NewMem())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c := NewCounters(db)
	r := &DecisionRecord{At: time.Now(), Explorado: true, Accion: 1}
	b.ReportAllocs()
	for b.Loop() {
		c.decided("acme", r)
	}
}
