package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReplayFeaturesAcrossChunks: a customer whose history spans several
// of replayFeatures' chunks (a walk-in cliente_ref) is rebuilt to the
// features her ingestion kept, purchases of every chunk and an opt-out in
// the last one included.
func TestReplayFeaturesAcrossChunks(t *testing.T) {
	const hot = "MOSTRADOR0001"
	e, _ := newTestEngine(t, 2, nil)
	ingestFor(t, e, hot, "h", 2*replayChunk+500)
	baja := Event{ID: "baja-hot", ClienteRef: hot, TS: t0.Add(-time.Minute), Tipo: Baja, Clave: BajaComunicaciones}
	if _, err := e.Ingester.Ingest("acme", []IngestEvent{{Event: baja, Canonical: []byte(baja.ID)}}); err != nil {
		t.Fatal(err)
	}
	kept, err := e.CustomerFeatures("acme", hot)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.replayFeatures("acme", hot)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(kept.Export(t0), got.Export(t0)); diff != "" {
		t.Errorf("replayed features (-kept +replayed):\n%s", diff)
	}
}
