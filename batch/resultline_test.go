package batch

import (
	"testing"
	"time"

	"github.com/coupond/coupond/engine"
)

// BenchmarkAppendResultLine: the cost of one result line, for a decision
// as a job writes it and for an explained one.
func BenchmarkAppendResultLine(b *testing.B) {
	d := &engine.Decision{DecisionID: "acme.Zk3x9QvR2mT8", Accion: 2, AccionNombre: "cupon 10%", Propension: 0.8712345678901234,
		PoliticaVersion: "v12", Explorado: true, CaducaEn: time.Date(2026, 11, 2, 12, 0, 0, 123456789, time.UTC),
		Motivo: "mayor margen esperado: cupon 10%", EnSombra: true}
	explained := *d
	explained.Detalle = &engine.Detalle{Acciones: []engine.DetalleAccion{{Accion: 0, MuMXN: 12.5, SigmaMXN: 3.25, Probabilidad: 0.05},
		{Accion: 2, MuMXN: 31.75, SigmaMXN: 4.5, Probabilidad: 0.95}}}
	for _, tc := range []struct {
		name string
		d    *engine.Decision
	}{{"plain", d}, {"detalle", &explained}} {
		b.Run(tc.name, func(b *testing.B) {
			var line []byte
			b.ReportAllocs()
			for b.Loop() {
				line = AppendResultLine(line[:0], "c9f1a2b3d4e5", tc.d)
			}
		})
	}
}
