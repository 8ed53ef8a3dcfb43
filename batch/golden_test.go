package batch

import (
	"bytes"
	"context"
	"testing"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/internal/golden"
	"github.com/coupond/coupond/store"
)

// TestGoldenResultLines: the lines of a small job's result file, as a
// client downloads them (testdata/batch/result.jsonl as one JSON array,
// decision ids and expiry times replaced; what the policy chose is left
// to the policy's tests).
func TestGoldenResultLines(t *testing.T) {
	e := newJobEnv(t, store.NewMemFS(), "db", 3, -1)
	e.customers(t, 5)
	j := e.submitAll(t)
	e.r.RunPending(context.Background())
	j, _ = e.r.Job("acme", j.ID)
	if j.Estado != api.EstadoCompletado || j.Procesados != 5 {
		t.Fatalf("job: %+v", j)
	}
	doc := append([]byte("["), bytes.Join(readLines(t, e.r, j), []byte(","))...)
	doc = append(doc, ']')
	golden.JSON(t, "batch/result.json", doc, "decision_id", "caduca_en",
		"accion", "accion_nombre", "propension", "motivo", "explorado", "politica_version")
}
