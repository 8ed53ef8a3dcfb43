package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// ingestTestEvent is event number id of TestIngestConcurrentNoDoubleCount:
// the same content (and canonical form) every time it is sent.
func ingestTestEvent(id, customers int) IngestEvent {
	ref := fmt.Sprintf("cust-%02d", id%customers)
	ev := Event{ID: fmt.Sprintf("ev-%04d", id), ClienteRef: ref, TS: t0.Add(-time.Duration(id) * time.Hour),
		Tipo: CompraCat, Clave: fmt.Sprintf("cat%d", id%3), ValorCents: int64(1000 + id), TicketID: fmt.Sprintf("t%d", id), MargenCents: int64(100 + id)}
	if id%7 == 0 {
		ev = Event{ID: ev.ID, ClienteRef: ref, TS: ev.TS, Tipo: CuponRecibido, Clave: "T1", CuponEmitidoID: "cup-" + ref, Caducidad: t0.Add(48 * time.Hour)}
	}
	return IngestEvent{Event: ev, Canonical: []byte(ev.ID + "/v1")}
}

// TestIngestConcurrentNoDoubleCount sends overlapping requests (the same
// event ids and customers, also repeated inside a request) from several
// goroutines at once: every event_id is accepted exactly once, every other
// delivery is a duplicate, and the features, attribution links and
// quality counters equal those of sending each event once, one request at
// a time. Run it with -race.
func TestIngestConcurrentNoDoubleCount(t *testing.T) {
	const (
		workers   = 8
		requests  = 12
		perReq    = 40
		ids       = 300
		customers = 12
	)
	e, _ := newTestEngine(t, 1, nil)
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	// Hold each apply back so that the next request folds before it.
	ts.ingestMu.beforeApply = func() { time.Sleep(200 * time.Microsecond) }
	var mu sync.Mutex
	var total IngestResult
	sent := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range requests {
				evs := make([]IngestEvent, perReq)
				for k := range evs {
					evs[k] = ingestTestEvent(rng.IntN(ids), customers)
					evs[k].Index = k
				}
				res, err := e.Ingester.Ingest("acme", evs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total.Aceptados += res.Aceptados
				total.Duplicados += res.Duplicados
				total.Rechazados = append(total.Rechazados, res.Rechazados...)
				sent += perReq
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()

	// The reference: each distinct event once, in one request each.
	ref, _ := newTestEngine(t, 1, nil)
	seen := map[string]bool{}
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		for range requests * perReq {
			ev := ingestTestEvent(rng.IntN(ids), customers)
			if seen[ev.Event.ID] {
				continue
			}
			seen[ev.Event.ID] = true
			if _, err := ref.Ingester.Ingest("acme", []IngestEvent{ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff(IngestResult{Aceptados: len(seen), Duplicados: sent - len(seen)}, total); diff != "" {
		t.Errorf("concurrent totals (-want +got):\n%s", diff)
	}
	for c := range customers {
		name := fmt.Sprintf("cust-%02d", c)
		got, err := e.loadFeatures("acme", name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.loadFeatures("acme", name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Export(t0), got.Export(t0)); diff != "" {
			t.Errorf("features of %s (-want +got):\n%s", name, diff)
		}
	}
	for c := range customers {
		cup := fmt.Sprintf("cup-cust-%02d", c)
		var got, want attribution
		gerr := e.db.GetJSON(store.AttributionKey("acme", cup), &got)
		werr := ref.db.GetJSON(store.AttributionKey("acme", cup), &want)
		if (gerr == nil) != (werr == nil) || got != want {
			t.Errorf("attribution %s: got %+v (%v), want %+v (%v)", cup, got, gerr, want, werr)
		}
	}
	gq, err := e.Ingester.Quality("acme")
	if err != nil {
		t.Fatal(err)
	}
	wq, err := ref.Ingester.Quality("acme")
	if err != nil {
		t.Fatal(err)
	}
	// Out-of-order arrivals depend on the interleaving; the rest must not.
	gq.EventosFueraDeOrden, wq.EventosFueraDeOrden = 0, 0
	if diff := cmp.Diff(wq, gq); diff != "" {
		t.Errorf("quality counters (-want +got):\n%s", diff)
	}
}

// TestIngestSameContentAsWritten: an event stored with the hash of its JSON
// as written (as releases before Canonical did) is the same content when
// sent again with that AsWritten, whatever its Canonical; without it, or
// with another, the resend is a duplicado rejection.
func TestIngestSameContentAsWritten(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	old := ingestTestEvent(1, 3)
	old.Canonical = []byte(`{"ts":"-06:00"}`)
	if res, err := e.Ingester.Ingest("acme", []IngestEvent{old}); err != nil || res.Aceptados != 1 {
		t.Fatalf("first delivery: %+v, %v", res, err)
	}
	tests := []struct {
		name      string
		asWritten string
		want      IngestResult
	}{
		{"as written then", `{"ts":"-06:00"}`, IngestResult{Duplicados: 1}},
		{"nothing as written", "", IngestResult{Rechazados: []Rejection{duplicadoRejection(old.Event.ID)}}},
		{"written otherwise", `{"ts":"-05:00"}`, IngestResult{Rechazados: []Rejection{duplicadoRejection(old.Event.ID)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			again := old
			again.Canonical = []byte(`{"ts":"Z"}`)
			if tt.asWritten != "" {
				again.AsWritten = []byte(tt.asWritten)
			}
			res, err := e.Ingester.Ingest("acme", []IngestEvent{again})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, res); diff != "" {
				t.Errorf("resend (-want +got):\n%s", diff)
			}
		})
	}
}

func duplicadoRejection(id string) Rejection {
	campo := "event_id"
	return Rejection{EventID: &id, Codigo: "duplicado", Campo: &campo, Mensaje: "event_id ya procesado con otro contenido; se conserva el primero"}
}
