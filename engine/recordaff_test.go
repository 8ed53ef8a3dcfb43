package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRecordKeepsAffinitiesOnlyWhenSome: a decision record keeps its
// candidates' affinities (DecisionRecord.Aff) only when one of them is not
// 0; learning and evaluation (policyInputs) read a record without them as
// they read the zeros, so a decision for a customer who bought in none of
// the coupons' categorias stores nothing for them. Before, every record
// kept three zeros per candidate, a fifth of a 1,000-action record.
func TestRecordKeepsAffinitiesOnlyWhenSome(t *testing.T) {
	e, _ := newTestEngine(t, 0, nil)
	acts := []Action{
		{ID: 1, Nombre: "abarrotes", TipoCupon: "T1", CostoEnvioCents: 50, DescuentoMaxCents: 1000, DescuentoPct: 10, Activa: true, Categorias: []string{"abarrotes"}},
		{ID: 2, Nombre: "todo", TipoCupon: "T2", CostoEnvioCents: 50, DescuentoMaxCents: 2000, DescuentoPct: 10, Activa: true},
	}
	if _, err := e.Campaigns.ReplaceCatalog("acme", acts, t0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, clave string
		kept       bool
	}{
		{"compra-abarrotes", "abarrotes", true},
		{"compra-ropa", "ropa", false},
	} {
		ev := IngestEvent{Event: Event{ID: "ev-" + tc.ref, ClienteRef: tc.ref, TS: t0.Add(-24 * time.Hour), Tipo: CompraCat, Clave: tc.clave,
			ValorCents: 50000, TicketID: "t-" + tc.ref, MargenCents: 12000}, Canonical: []byte(tc.ref)}
		if _, err := e.Ingester.Ingest("acme", []IngestEvent{ev}); err != nil {
			t.Fatal(err)
		}
		d, err := e.Decide("acme", Request{ClienteRef: tc.ref, Canal: "push", CapExempt: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.DecisionByID("acme", d.DecisionID)
		if err != nil {
			t.Fatal(err)
		}
		if kept := r.Aff != nil; kept != tc.kept {
			t.Errorf("%s: affinities %v kept: %v, want %v", tc.clave, r.Aff, kept, tc.kept)
		}
		zeros := *r
		if zeros.Aff == nil {
			zeros.Aff = make([]float64, affPerAction*len(r.Candidates))
		}
		if diff := cmp.Diff(arms(&zeros), arms(r)); diff != "" {
			t.Errorf("%s: policy inputs of the record (-with zeros +stored):\n%s", tc.clave, diff)
		}
	}
}

// arms are the candidates' policy arms r's policy inputs rebuild.
func arms(r *DecisionRecord) []string {
	_, cands := r.policyInputs()
	var out []string
	for _, c := range cands {
		out = append(out, fmt.Sprintf("%d %+v", c.id, c.arm))
	}
	return out
}
