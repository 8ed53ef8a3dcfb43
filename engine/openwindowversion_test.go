package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOpenWindowAnswerKeepsTheOpenDecisionsVersion checks that the answer
// given while a reward window is open labels the open decision it names
// with that decision's politica_version, not the version of a model
// published since: the answer carries the open decision's decision_id and
// caduca_en, and an integrator that logs decision_id with
// politica_version must not read two versions for one decision.
func TestOpenWindowAnswerKeepsTheOpenDecisionsVersion(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	first, err := e.Decide("acme", Request{ClienteRef: "cust-window-1", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := e.state("acme")
	if err != nil {
		t.Fatal(err)
	}
	old := ts.model.Load()
	ts.model.Store(&publishedModel{version: "v9-20261103T120000", m: old.m}) // as the learner publishes one

	again, err := e.Decide("acme", Request{ClienteRef: "cust-window-1", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	type label struct {
		DecisionID, PoliticaVersion string
		Accion                      int
		Propension                  float64
	}
	got := label{again.DecisionID, again.PoliticaVersion, again.Accion, again.Propension}
	want := label{first.DecisionID, first.PoliticaVersion, 0, 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("open window answer (-want +got):\n%s", diff)
	}
	fresh, err := e.Decide("acme", Request{ClienteRef: "cust-window-2", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.PoliticaVersion != "v9-20261103T120000" {
		t.Errorf("new decision's politica_version %q, want the published model's", fresh.PoliticaVersion)
	}
}
