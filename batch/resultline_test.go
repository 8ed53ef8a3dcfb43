package batch

import (
	"errors"
	"math"
	"os"
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

// TestLineWriterPanicIsAnError: a line the encoder refuses (AppendResultLine
// panics on a NaN, which the decider is not meant to make) fails the
// writer, and so the job, like any other bug met by a job (runSafe). The
// lines are encoded on the writer's own goroutine, out of runSafe's reach:
// the panic ended the process, and the job, voided at the next start, could
// end the next process too if it met the same decision again.
func TestLineWriterPanicIsAnError(t *testing.T) {
	dir := t.TempDir()
	w, err := CreateResult(dir, "roto"+resultSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	lw := newLineWriter(w)
	d := &engine.Decision{DecisionID: "acme.x", Propension: math.NaN(), CaducaEn: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)}
	for range 2 * lineBlock {
		if err := lw.add("cliente-0001", d); err != nil {
			break
		}
	}
	if err := lw.close(); !errors.Is(err, errLinePanic) {
		t.Errorf("close after an unencodable line: %v, want errLinePanic", err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}
