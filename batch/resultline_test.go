package batch

import (
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"testing/iotest"
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

// TestStripDetalle: a line loses its detalle member and nothing else, byte
// for byte; text that only looks like the member inside a string is left;
// a detalle that does not end within the line is refused.
func TestStripDetalle(t *testing.T) {
	d := &engine.Decision{DecisionID: "acme.Zk3x9QvR2mT8", Accion: 2, AccionNombre: `cupon ,"detalle":{`, Propension: 0.8712345678901234,
		PoliticaVersion: "v12", CaducaEn: time.Date(2026, 11, 2, 12, 0, 0, 123456789, time.UTC), Motivo: `a "}" b`, EnSombra: true}
	explained := *d
	explained.Detalle = &engine.Detalle{Acciones: []engine.DetalleAccion{{Accion: 0, MuMXN: 12.5, SigmaMXN: 3.25, Probabilidad: 0.05},
		{Accion: 2, MuMXN: 31.75, SigmaMXN: 4.5, Probabilidad: 0.95}}}
	plainLine := string(AppendResultLine(nil, "c9f1a2b3d4e5", d))
	tests := []struct {
		name, line, want string
		ok               bool
	}{
		{"explained", string(AppendResultLine(nil, "c9f1a2b3d4e5", &explained)), plainLine, true},
		{"no detalle", plainLine, plainLine, true},
		{"detalle last", `{"cliente_ref":"x","detalle":{"acciones":[]}}`, `{"cliente_ref":"x"}`, true},
		{"string with brackets in detalle", `{"a":1,"detalle":{"s":"}]\"{"},"b":2}`, `{"a":1,"b":2}`, true},
		{"detalle does not end", `{"a":1,"detalle":{"acciones":[{"accion":0}`, "", false},
		{"detalle not an object", `{"a":1,"detalle":null}`, "", false},
	}
	for _, tt := range tests {
		got, ok := StripDetalle([]byte("kept:"), []byte(tt.line))
		if ok != tt.ok || ok && string(got) != "kept:"+tt.want {
			t.Errorf("%s: StripDetalle = %q, %v; want %q, %v", tt.name, got, ok, "kept:"+tt.want, tt.ok)
		}
	}
}

// TestStripDetalleReader: lines come out stripped and in order through
// any read size; a damaged line or a failing source is an error.
func TestStripDetalleReader(t *testing.T) {
	in := "{\"a\":1,\"detalle\":{\"x\":[1]}}\n{\"a\":2}\n\n{\"a\":3,\"detalle\":{},\"b\":true}\n"
	want := "{\"a\":1}\n{\"a\":2}\n\n{\"a\":3,\"b\":true}\n"
	for _, tc := range []struct {
		name string
		r    func(io.Reader) io.Reader
	}{{"whole", func(r io.Reader) io.Reader { return r }}, {"one byte", iotest.OneByteReader}} {
		got, err := io.ReadAll(tc.r(StripDetalleReader(strings.NewReader(in))))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, want)
		}
	}
	if _, err := io.ReadAll(StripDetalleReader(strings.NewReader("{\"a\":1}\n{\"a\":1,\"detalle\":{\n"))); !errors.Is(err, ErrResultDamaged) {
		t.Errorf("detalle cut short: %v, want ErrResultDamaged", err)
	}
	long := "{\"a\":\"" + strings.Repeat("x", MaxResultLine) + "\"}\n"
	if _, err := io.ReadAll(StripDetalleReader(strings.NewReader(long))); !errors.Is(err, ErrResultDamaged) {
		t.Errorf("line over MaxResultLine: %v, want ErrResultDamaged", err)
	}
	boom := errors.New("boom")
	src := io.MultiReader(strings.NewReader("{\"a\":1}\n"), iotest.ErrReader(boom))
	if got, err := io.ReadAll(StripDetalleReader(src)); !errors.Is(err, boom) || string(got) != "{\"a\":1}\n" {
		t.Errorf("failing source: %q, %v; want the first line and %v", got, err, boom)
	}
}
