package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkIngestRandomIDs ingests requests of 1,000 purchases with random
// event ids (as UUIDs are) by 400 of 100,000 customers: what the order of
// a batch's writes costs in the memtable.
func BenchmarkIngestRandomIDs(b *testing.B) {
	e, _ := newTestEngine(b, 1, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	request := func() []IngestEvent {
		evs := make([]IngestEvent, 1000)
		for i := range evs {
			ref := fmt.Sprintf("cust-%08d", rng.IntN(100_000))
			if i%3 != 0 {
				ref = evs[i-1].Event.ClienteRef
			}
			id := fmt.Sprintf("%016x-%016x", rng.Uint64(), rng.Uint64())
			ev := Event{ID: id, ClienteRef: ref, TS: t0.Add(-time.Duration(rng.IntN(2000)) * time.Hour), Tipo: CompraCat,
				Clave: "abarrotes", ValorCents: 1000, TicketID: id[:8], MargenCents: 200}
			evs[i] = IngestEvent{Index: i, Event: ev, Canonical: []byte(id)}
		}
		return evs
	}
	for range 100 { // a memtable of some 300,000 keys
		if _, err := e.Ingester.Ingest("acme", request()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		evs := request()
		b.StartTimer()
		if _, err := e.Ingester.Ingest("acme", evs); err != nil {
			b.Fatal(err)
		}
	}
}
