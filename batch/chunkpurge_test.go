package batch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store/storefs"
)

// TestFinishedJobChunksCompactedByTheOwedPurge: a job's stored request
// chunks name its customers; finish deletes them by range, and unless its
// batch marks their keys for the purge the deletion worker does first on
// each pass (store.DB.PurgeOwed), nothing compacts them: a customer of the
// job deleted later finds no chunk to scrub, and her cliente_ref stays in
// the store's files after her deletion is completado.
func TestFinishedJobChunksCompactedByTheOwedPurge(t *testing.T) {
	mem := storefs.Mem()
	e := newJobEnv(t, mem, "db", 2, -1)
	e.customers(t, 2)
	chunk := []byte(`"Qa7xLm2Pz","Wv4bHn8Ty"`) // the chunk's bytes alone
	j, err := e.r.Submit("acme", Submission{CampanaID: "camp", Clientes: []string{"Wv4bHn8Ty", "Qa7xLm2Pz"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.Flush(); err != nil { // the chunk in a table, as a busy store leaves it
		t.Fatal(err)
	}
	if len(storetest.FilesHolding(t, mem, "db", chunk)) == 0 {
		t.Fatal("no file holds the chunk before the job runs: the test does not exercise the purge")
	}
	if n := e.r.RunPending(context.Background()); n != 1 {
		t.Fatalf("RunPending ran %d jobs, want 1", n)
	}
	if got, err := e.r.Job("acme", j.ID); err != nil || got.Estado != api.EstadoCompletado {
		t.Fatalf("job: %+v %v, want completado", got, err)
	}
	if err := e.db.PurgeOwed(context.Background()); err != nil {
		t.Fatal(err)
	}
	var left []string
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(50 * time.Millisecond) {
		if left = tablesHolding(t, mem, chunk); len(left) == 0 {
			break // Pebble removes obsolete tables in the background
		}
	}
	if len(left) > 0 {
		t.Errorf("tables still holding the finished job's request chunk: %v", left)
	}
	// The logs holding it go with the next deletion's purge (a deletion
	// of one of the job's customers included).
	if err := e.db.PurgeWAL(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := storetest.FilesHolding(t, mem, "db", chunk); len(left) > 0 {
		t.Errorf("files still holding the finished job's request chunk after a deletion's purge of the logs: %v", left)
	}
}

// tablesHolding is filesHolding of the store's tables (*.sst).
func tablesHolding(t *testing.T, fs storefs.FS, b []byte) []string {
	t.Helper()
	var out []string
	for _, n := range storetest.FilesHolding(t, fs, "db", b) {
		if strings.HasSuffix(n, ".sst") {
			out = append(out, n)
		}
	}
	return out
}
