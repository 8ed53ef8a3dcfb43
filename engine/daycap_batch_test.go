package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBatchLinesLeaveTheDailyCap: the 3 decisions per cliente_ref per day
// are requests to POST /v1/decisiones (spec, Limits; contract §5 counts
// requests): a batch line decided for a customer opens her reward window
// but takes none of her 3, so after a batch she still has 3 online
// requests that day (answered with the batch decision's window), and the
// fourth is refused. The same holds when her state is rebuilt from her
// decisions after damage.
func TestBatchLinesLeaveTheDailyCap(t *testing.T) {
	const ana = "ana-00000001"
	for _, damaged := range []bool{false, true} {
		t.Run(map[bool]string{false: "stored state", true: "state rebuilt"}[damaged], func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "x"}, t0); err != nil {
				t.Fatal(err)
			}
			bd, err := e.NewBatchDecider("acme", "lote_1", "c1")
			if err != nil {
				t.Fatal(err)
			}
			line, err := bd.Decide(ana, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := bd.Flush(); err != nil {
				t.Fatal(err)
			}
			bd.Close()
			if damaged {
				damage(t, db, customerStateKey("acme", ana), "\xee")
			}
			var got []string
			for range DailyCap + 1 {
				d, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"})
				switch {
				case errors.Is(err, ErrDailyCap):
					got = append(got, "cap")
				case err != nil:
					t.Fatal(err)
				case d.DecisionID == line.DecisionID:
					got = append(got, "window")
				default:
					got = append(got, "new")
				}
			}
			want := []string{"window", "window", "window", "cap"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("online requests after a batch line (-want +got):\n%s", diff)
			}
		})
	}
}
