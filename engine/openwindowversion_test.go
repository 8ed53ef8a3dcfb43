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

// TestOpenWindowAnswerReadsNoDecisionRecord checks that the open window's
// answer takes the open decision's politica_version from the customer's
// state, without reading the decision record (a point read and a whole
// record's decoding on every repeat request): with the record gone it
// still names the open decision's version. A state of format 1, which
// keeps no version, still reads it from the record.
func TestOpenWindowAnswerReadsNoDecisionRecord(t *testing.T) {
	tests := []struct {
		name string
		// prepare changes the store between the two requests.
		prepare func(t *testing.T, e *Engine, nonce, ref string)
	}{
		{"state of format 2, record gone", func(t *testing.T, e *Engine, nonce, _ string) {
			b := e.db.NewBatch()
			defer b.Close()
			b.Delete(decisionKey("acme", nonce))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}},
		{"state of format 1", func(t *testing.T, e *Engine, _, ref string) {
			cs, err := e.loadCustomerState("acme", ref, true)
			if err != nil {
				t.Fatal(err)
			}
			b := e.db.NewBatch()
			defer b.Close()
			b.Set(customerStateKey("acme", ref), marshalCustomerStateFormat1(&cs))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newTestEngine(t, 2, nil)
			const ref = "cust-window-1"
			first, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"})
			if err != nil {
				t.Fatal(err)
			}
			nonce, ok := e.ids.parse("acme", first.DecisionID)
			if !ok {
				t.Fatalf("decision id %q does not parse", first.DecisionID)
			}
			ts, err := e.state("acme")
			if err != nil {
				t.Fatal(err)
			}
			ts.model.Store(&publishedModel{version: "v9-20261103T120000", m: ts.model.Load().m})
			tt.prepare(t, e, nonce, ref)
			again, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"})
			if err != nil {
				t.Fatal(err)
			}
			got := [2]string{again.DecisionID, again.PoliticaVersion}
			want := [2]string{first.DecisionID, first.PoliticaVersion}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("open window answer's decision_id, politica_version (-want +got):\n%s", diff)
			}
		})
	}
}
