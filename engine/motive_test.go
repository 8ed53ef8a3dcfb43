package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExplorationMotiveShowsThePropensity: an explored decision's motivo
// names the probability it was drawn with, legibly even for the floor's
// tiny ones (never "probabilidad 0.000" for an action that was drawn).
func TestExplorationMotiveShowsThePropensity(t *testing.T) {
	cat := &Catalog{Acciones: []Action{{ID: 2, Nombre: "$30", Activa: true}}}
	tests := []struct {
		p    float64
		want string
	}{
		{0.475, "exploración: $30 elegida con probabilidad 0.475"},
		{0.05, "exploración: $30 elegida con probabilidad 0.050"},
		{0.001, "exploración: $30 elegida con probabilidad 0.001"},
		{0.0001880724457660596, "exploración: $30 elegida con probabilidad 0.000188"},
		{0.00002, "exploración: $30 elegida con probabilidad 0.0000200"},
	}
	for _, tc := range tests {
		rec := &DecisionRecord{Accion: 2, Propension: tc.p, Explorado: true}
		if diff := cmp.Diff(tc.want, choiceMotive(cat, rec, "", 2)); diff != "" {
			t.Errorf("p=%g (-want +got):\n%s", tc.p, diff)
		}
	}
}
