package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/jsonappend"
)

func TestDecisionAppendJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 2, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		d    Decision
	}{
		{"zero", Decision{}},
		{"typical", Decision{DecisionID: "acme.abc123", Accion: 2, AccionNombre: "cupon b", Propension: 0.8712345678901234,
			PoliticaVersion: "v12", Explorado: true, CaducaEn: at, Motivo: "mayor margen esperado: cupon b"}},
		{"window", Decision{DecisionID: "x", Propension: 1, CaducaEn: at.In(time.FixedZone("mx", -6*3600)),
			Motivo: "ventana de recompensa abierta hasta 2026-12-01T00:00:00Z", Detalle: &Detalle{Acciones: []DetalleAccion{{Accion: 0, Probabilidad: 1}}}, EnSombra: true}},
		{"detalle", Decision{Accion: 0, Propension: 1e-7, EnControl: true, EnRespaldo: true,
			Detalle: &Detalle{Acciones: []DetalleAccion{{Accion: 0, Probabilidad: 0.05}, {Accion: 3, MuMXN: -12.34, SigmaMXN: 1e21, Probabilidad: 0.95}}}}},
		{"nil acciones", Decision{Detalle: &Detalle{}}},
		{"escapes", Decision{AccionNombre: "a<b>&\"c\\\n\r\t\b\f\x01\x1f ñ \u2028\u2029 \xff end", Motivo: "exploración: <script>"}},
		{"big numbers", Decision{Accion: -5, Propension: 123456789012345678901234.0}},
		{"causa is not on the wire", Decision{DecisionID: "x", Causa: errors.New("the SDK's")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := jsonappend.Marshal(&tc.d)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := tc.d.AppendJSON(nil)
			if !ok {
				t.Fatal("AppendJSON: not ok")
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("AppendJSON differs from encoding/json (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecisionAppendJSONRefusesWhatEncodingJSONRejects(t *testing.T) {
	for _, d := range []Decision{{Propension: math.NaN()}, {Propension: math.Inf(1)}, {CaducaEn: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Detalle: &Detalle{Acciones: []DetalleAccion{{MuMXN: math.Inf(-1)}}}}} {
		if _, err := json.Marshal(&d); err == nil {
			t.Fatalf("encoding/json accepts %+v", d)
		}
		if _, ok := d.AppendJSON(nil); ok {
			t.Errorf("AppendJSON accepted %+v", d)
		}
	}
}

func FuzzDecisionAppendJSON(f *testing.F) {
	f.Add("acme.x", "cupon", "v1", "motivo <&>", 0.5, int64(1700000000), 3, true)
	f.Add("\xff\u2028", "\x00", "", "\"\\", 1e-9, int64(0), -1, false)
	f.Fuzz(func(t *testing.T, id, nombre, version, motivo string, p float64, sec int64, accion int, explain bool) {
		d := Decision{DecisionID: id, Accion: accion, AccionNombre: nombre, Propension: p, PoliticaVersion: version,
			CaducaEn: time.Unix(sec%253402300799, 0).UTC(), Motivo: motivo}
		if explain {
			d.Detalle = &Detalle{Acciones: []DetalleAccion{{Accion: accion, MuMXN: p * 3, SigmaMXN: p / 7, Probabilidad: p}}}
		}
		want, err := jsonappend.Marshal(&d)
		got, ok := d.AppendJSON(nil)
		if (err == nil) != ok {
			t.Fatalf("encoding/json error %v, AppendJSON ok %v", err, ok)
		}
		if ok && !bytes.Equal(want, got) {
			t.Fatalf("differs:\nwant %s\ngot  %s", want, got)
		}
	})
}
