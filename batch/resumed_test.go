package batch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/atomicfile/faultfs"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestUnsavedFullDiskEndWaits: a job whose run met a full disk and whose
// end could not be saved (its wait for space, or its reason after a failed
// void) is ended by the next round for the full disk: it waits for space,
// and completes once there is some. The round recorded it fallido "error
// interno": its record kept no reason.
func TestUnsavedFullDiskEndWaits(t *testing.T) {
	const customers = 300
	tests := []struct {
		name      string
		voidFails bool
	}{
		{"wait for space not saved", false},
		{"reason of a failed void not saved", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 3, 5000)
			fsys := faultfs.New(atomicfile.OS{}, faultfs.NoSpace)
			r := e.runnerOn(fsys)
			if tt.voidFails {
				r.voidJob = failOnce(r.voidJob)
			}
			saveFails := true
			r.saveFault = func(j *Job) error {
				if saveFails && (j.WaitsForSpace || j.Error != "") { // the failed run's end
					saveFails = false
					return fmt.Errorf("store: commit: %w", store.ErrFailed)
				}
				return nil
			}
			j, err := r.Submit("acme", Submission{CampanaID: "camp", Clientes: refsN("lleno", customers)})
			if err != nil {
				t.Fatal(err)
			}
			r.RunPending(context.Background())
			if got := jobState(t, r, j.ID); got.Estado != api.EstadoEnCurso || got.Waits || got.Error != "" {
				t.Fatalf("job whose end was not saved: %+v, want en_curso with nothing recorded", got)
			}
			for round := range 2 { // the disk stays full
				r.RunPending(context.Background())
				if diff := cmp.Diff(waiting, jobState(t, r, j.ID)); diff != "" {
					t.Errorf("round %d after the unsaved end (-want +got):\n%s", round, diff)
				}
			}
			fsys.SetFault(nil) // space is back
			checkCompletesOnce(t, e, r, j.ID, customers)
		})
	}
}

// failOnce is void failing its first call, as a store read failing does.
func failOnce(void func(tenant, jobID string) (int, error)) func(tenant, jobID string) (int, error) {
	failed := false
	return func(tenant, jobID string) (int, error) {
		if !failed {
			failed = true
			return 0, errors.New("store read failed")
		}
		return void(tenant, jobID)
	}
}
