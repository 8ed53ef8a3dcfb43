package privacy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
)

// TestExportDecisionShadowAndState: an exported decision says whether it
// was made in shadow mode (it did not), and an unconfirmed one reads
// pendiente, a confirmed one its confirmation's state.
func TestExportDecisionShadowAndState(t *testing.T) {
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		rec        engine.DecisionRecord
		wantShadow bool
		wantState  string
	}{
		{engine.DecisionRecord{At: at, EnSombra: true}, true, "pendiente"},
		{engine.DecisionRecord{At: at, Estado: engine.EstadoEjecutada}, false, "ejecutada"},
	} {
		d := exportDecision("d1", &tc.rec)
		if diff := cmp.Diff([]any{tc.wantShadow, tc.wantState}, []any{d.EnSombra, d.EstadoEjecucion}); diff != "" {
			t.Errorf("en_sombra, estado_ejecucion (-want +got):\n%s", diff)
		}
	}
}
