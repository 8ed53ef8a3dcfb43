package engine

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordCodecRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 4, 5, 123456000, time.UTC)
	accion, reward := 3, int64(-1250)
	ts, conf := at.Add(time.Hour), at.Add(2*time.Hour)
	tests := []struct {
		name string
		r    DecisionRecord
	}{
		{"empty", DecisionRecord{}},
		{"new decision", DecisionRecord{Nonce: "AZxyz0123456", ClienteRef: "cliente-0001", At: at, Canal: "push", CampanaID: "navidad",
			Accion: 2, Propension: 0.8123456789, Version: "v12-20261123T100000", Explorado: true, EnSombra: true,
			CaducaEn: at.Add(DecisionTTL), Motivo: "exploración: cupón «10 %» elegida con probabilidad 0.081",
			X: []float64{0.5, 1. / 3, 0, 12, -0.25}, Candidates: []int{0, 2, 7}, Probs: []float64{0.1, 0.8123456789, 0.0876543211},
			Mu: []float64{1200, -35, 4410}, Priors: []float64{1000, 0, -20}, BudgetCents: 5000}},
		{"confirmed and learned", DecisionRecord{Nonce: "n", ClienteRef: "c", At: at, JobID: "job-1", Accion: 1, Propension: 1,
			EnControl: true, EnRespaldo: true, CaducaEn: at, Estado: EstadoModificada, AccionReal: &accion, MotivoRechazo: "sin stock",
			TsEjecucion: &ts, ConfirmadaEn: &conf, Recompensa: &reward, Aprendida: true,
			Mu: []float64{math.Copysign(0, -1), 1e300}, Priors: []float64{maxExactInt, -7}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := marshalRecord(&tc.r)
			var got DecisionRecord
			if err := unmarshalRecord(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.r, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			js, _ := json.Marshal(&tc.r)
			if len(tc.r.X) > 0 && len(b) >= len(js)/2 {
				t.Errorf("binary record is %d bytes, JSON %d: want less than half", len(b), len(js))
			}
		})
	}
}

// Records written by earlier versions are JSON and must still be read.
func TestRecordCodecReadsJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	want := DecisionRecord{Nonce: "abc", ClienteRef: "cliente-9", At: at, Accion: 1, Propension: 0.5, X: []float64{1, 2},
		Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, Estado: EstadoEjecutada}
	js, err := json.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	var got DecisionRecord
	if err := unmarshalRecord(js, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRecordCodecRejectsDamage(t *testing.T) {
	r := DecisionRecord{Nonce: "n", ClienteRef: "cliente-1", Motivo: "m", X: []float64{1.5}, Candidates: []int{0, 1}}
	b := marshalRecord(&r)
	for _, bad := range [][]byte{nil, {}, {9}, b[:len(b)-1], append(append([]byte(nil), b...), 0)} {
		var got DecisionRecord
		if err := unmarshalRecord(bad, &got); err == nil {
			t.Errorf("unmarshalRecord(%x): want an error", bad)
		}
	}
}

func FuzzRecordCodec(f *testing.F) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	f.Add(marshalRecord(&DecisionRecord{Nonce: "n", ClienteRef: "cliente-1", At: at, X: []float64{0.25}, Candidates: []int{0, 4},
		Probs: []float64{0.5, 0.5}, Mu: []float64{10, 20}}))
	f.Add([]byte(`{"nonce":"x","accion":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r DecisionRecord
		if unmarshalRecord(b, &r) != nil || len(b) == 0 || b[0] == '{' {
			return
		}
		// Whatever decodes re-encodes to a record that decodes the same.
		var again DecisionRecord
		if err := unmarshalRecord(marshalRecord(&r), &again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if diff := cmp.Diff(r, again, cmp.Comparer(func(a, b float64) bool {
			return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
		})); diff != "" {
			t.Fatalf("(-first +second):\n%s", diff)
		}
	})
}
