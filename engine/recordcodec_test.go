package engine

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
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
		{"zeros and repeated probabilities", DecisionRecord{Nonce: "n2", ClienteRef: "c", At: at, Accion: 0, Propension: 0.7,
			X: []float64{1, 0, 0, 0.2018, 0.54, 0.54, 0.54, 0, 1, 1}, Candidates: []int{0, 1, 2, 3},
			Probs: []float64{0.7, 0.1, 0.1, 0.1}, Mu: []float64{1, 2, 3, 4}, Priors: []float64{1, 2, 3, 4}}},
		{"policy inputs", DecisionRecord{Nonce: "n3", ClienteRef: "c", At: at, Accion: 1, Propension: 0.9, Recompensa: &reward,
			X: []float64{1, 0.5}, Candidates: []int{0, 1}, Probs: []float64{0.1, 0.9}, Mu: []float64{5, 6}, Priors: []float64{5, 6},
			Shares: []float64{0.6, 0.4, 0}, Aff: []float64{0, 0, 0, 0.6, 7. / 13, 1}}},
		{"affinity without shares", DecisionRecord{Nonce: "n4", ClienteRef: "c", At: at, Candidates: []int{0}, Aff: []float64{0, 0, 0}}},
		{"the policy's choice", DecisionRecord{Nonce: "n5", ClienteRef: "c", At: at, Accion: 0, Propension: 0.5, Explorado: true,
			Candidates: []int{0, 4}, Probs: []float64{0.5, 0.5}, Shares: []float64{1}, Aff: []float64{0, 0, 0, 1, 1, 1}, Eleccion: &accion}},
		{"never-send chosen, no policy inputs", DecisionRecord{Nonce: "n6", ClienteRef: "c", At: at, Candidates: []int{0}, Probs: []float64{1}, Eleccion: new(int)}},
		{"downsides", DecisionRecord{Nonce: "n7", ClienteRef: "c", At: at, Accion: 4, Propension: 0.5, Candidates: []int{0, 4},
			Probs: []float64{0.5, 0.5}, Priors: []float64{900, 950}, Downs: []float64{0, 112}, Eleccion: &accion}},
		{"downsides without the choice", DecisionRecord{Nonce: "n8", ClienteRef: "c", At: at, Candidates: []int{0, 4}, Downs: []float64{0, 1}}},
		{"sending cost when sent", DecisionRecord{Nonce: "n11", ClienteRef: "c", At: at, Accion: 4, Propension: 0.5, Candidates: []int{0, 4},
			Downs: []float64{0, 1}, CostoEnvioCents: &reward}},
		{"nothing sent, cost known", DecisionRecord{Nonce: "n12", ClienteRef: "c", At: at, CostoEnvioCents: new(int64)}},
		{"model keys of a reused id", DecisionRecord{Nonce: "n13", ClienteRef: "c", At: at, Accion: 4, Propension: 0.5, Candidates: []int{0, 4, 1_000_000},
			Arms: []int{0, newArmKey(4, "OTRO"), newArmKey(1_000_000, "X")}, CostoEnvioCents: &reward}},
		{"voided by its job", DecisionRecord{Nonce: "n9", ClienteRef: "c", At: at, CampanaID: "camp", JobID: "lote_1", Accion: 1,
			Propension: 0.5, Estado: EstadoRechazada, MotivoRechazo: motivoLoteFallido, ConfirmadaEn: &conf, Anulada: true}},
		{"the caller's rejection in the void's words", DecisionRecord{Nonce: "n10", ClienteRef: "c", At: at, JobID: "lote_1",
			Accion: 1, Propension: 0.5, Estado: EstadoRechazada, MotivoRechazo: motivoLoteFallido, ConfirmadaEn: &conf}},
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

// TestRecordCodecReadsOlderForms: records written by earlier versions
// still load: the JSON form, and records from before
// DecisionRecord.Anulada, whose void is read from VoidJob's motivo_rechazo
// (a batch decision rechazada in its words), in either form.
func TestRecordCodecReadsOlderForms(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	asJSON := func(r DecisionRecord) []byte {
		js, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	plain := DecisionRecord{Nonce: "abc", ClienteRef: "cliente-9", At: at, Accion: 1, Propension: 0.5, X: []float64{1, 2},
		Candidates: []int{0, 1}, Probs: []float64{0.5, 0.5}, Estado: EstadoEjecutada}
	void := DecisionRecord{Nonce: "v", ClienteRef: "c", At: at, JobID: "lote_1", Accion: 1, Propension: 0.5,
		Estado: EstadoRechazada, MotivoRechazo: motivoLoteFallido}
	rejected := void
	rejected.MotivoRechazo = "sin stock"
	online := void
	online.JobID = ""
	// Written by the binary format before Anulada: a voided batch decision
	// (2026-11-23T10:04:05.123456Z, job lote_1, campaign camp, action 1).
	const oldVoid = "01026e390163aabea0b00d8094ef3a000463616d70066c6f74655f31023fe0000000000000004000aaa8eab00d8094ef3a000000000000000972656368617a616461296c6f74652066616c6c69646f3a206c6120646563697369c3b36e206e6f20736520656e74726567c3b3eaaea1b00d8094ef3a"
	oldVoidBytes, err := hex.DecodeString(oldVoid)
	if err != nil {
		t.Fatal(err)
	}
	at2 := time.Date(2026, 11, 23, 10, 4, 5, 123456000, time.UTC)
	conf := at2.Add(2 * time.Hour)
	tests := []struct {
		name   string
		stored []byte
		want   DecisionRecord
	}{
		{"JSON", asJSON(plain), plain},
		{"JSON, voided by its job", asJSON(void), func() DecisionRecord { r := void; r.Anulada = true; return r }()},
		{"JSON, rejected by the caller", asJSON(rejected), rejected},
		{"JSON, an online decision rejected in the void's words", asJSON(online), online},
		{"binary before Anulada, voided by its job", oldVoidBytes, DecisionRecord{Nonce: "n9", ClienteRef: "c", At: at2, CampanaID: "camp",
			JobID: "lote_1", Accion: 1, Propension: 0.5, CaducaEn: at2.Add(DecisionTTL), Estado: EstadoRechazada,
			MotivoRechazo: motivoLoteFallido, ConfirmadaEn: &conf, Anulada: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got DecisionRecord
			if err := unmarshalRecord(tc.stored, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecordFloatKinds checks the kind appendFloats picks for a float list
// and that every kind reads back bit for bit.
func TestRecordFloatKinds(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := []struct {
		name     string
		v        []float64
		wantKind byte
		wantLen  int // bytes after the length and kind
	}{
		{"whole numbers", []float64{3733, -20, 0}, 1, 4},
		{"distinct", []float64{0.1, 0.2, 0.3}, 0, 24},
		{"zeros", []float64{0.5, 0, 0, 0}, 2, 4 + 8},
		{"repeats", []float64{0.25, 0.0327, 0.0327, 0.0327}, 2, 4 + 16},
		{"negative zero is written in full", []float64{negZero, negZero, 0.5}, 2, 3 + 16},
		{"one raw value among few zeros", []float64{0.5, 0.25, 0}, 2, 3 + 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := appendFloats(nil, tc.v)
			if b[1] != tc.wantKind || len(b)-2 != tc.wantLen {
				t.Errorf("kind %d, %d bytes; want kind %d, %d bytes", b[1], len(b)-2, tc.wantKind, tc.wantLen)
			}
			d := binReader{b: b}
			got := recordFloats(&d)
			if !d.done() {
				t.Fatalf("recordFloats(%x): not read back", b)
			}
			bits := func(v []float64) []uint64 {
				out := make([]uint64, len(v))
				for i, x := range v {
					out[i] = math.Float64bits(x)
				}
				return out
			}
			if diff := cmp.Diff(bits(tc.v), bits(got)); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordFloatsRejectDamage(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"repeat of nothing", []byte{1, 2, floatRepeat}},
		{"unknown tag", []byte{2, 2, floatZero, 7}},
		{"truncated raw value", []byte{2, 2, floatZero, floatRaw, 0x3f, 0xf0}},
		{"missing tag", []byte{2, 2, floatZero}},
		{"infinity", []byte{1, 2, floatRaw, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}},
		{"unknown kind", []byte{1, 3, 0}},
	}
	for _, tc := range tests {
		d := binReader{b: tc.b}
		if got := recordFloats(&d); d.done() {
			t.Errorf("%s: recordFloats(%x) = %v, want an error", tc.name, tc.b, got)
		}
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
	four := 4
	f.Add(marshalRecord(&DecisionRecord{Nonce: "m", ClienteRef: "cliente-2", At: at, Candidates: []int{0, 4}, Probs: []float64{0.5, 0.5},
		Shares: []float64{1}, Eleccion: &four}))
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

func TestCustomerStateCodec(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 4, 5, 123456000, time.UTC)
	tests := []struct {
		name string
		cs   customerState
	}{
		{"zero", customerState{}},
		{"window open", customerState{OpenNonce: "X0nipVAAk-hdo9HgfDaG", OpenAt: at, Day: "2026-11-23", Count: 2, OpenVersion: "v3-20261123T100000"}},
		{"window closed by a void", customerState{Day: "2026-11-23", Count: 1}},
		{"many requests", customerState{Day: "2026-11-23", Count: 1 << 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got customerState
			if err := unmarshalCustomerState(marshalCustomerState(&tc.cs), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.cs, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			// States written by earlier versions are JSON and must still be read.
			js, err := json.Marshal(&tc.cs)
			if err != nil {
				t.Fatal(err)
			}
			got = customerState{Count: -1}
			if err := unmarshalCustomerState(js, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.cs, got); diff != "" {
				t.Errorf("from JSON %s (-want +got):\n%s", js, diff)
			}
		})
	}
	// A state of format 1 keeps no OpenVersion.
	v1 := customerState{OpenNonce: "X0nipVAAk-hdo9HgfDaG", OpenAt: at, Day: "2026-11-23", Count: 2}
	var got customerState
	if err := unmarshalCustomerState(marshalCustomerStateFormat1(&v1), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(v1, got); diff != "" {
		t.Errorf("format 1 (-want +got):\n%s", diff)
	}
	b := marshalCustomerState(&tests[1].cs)
	for _, bad := range [][]byte{nil, {}, {9}, b[:len(b)-1], append(append([]byte(nil), b...), 0), []byte("{bad")} {
		var got customerState
		if err := unmarshalCustomerState(bad, &got); err == nil {
			t.Errorf("unmarshalCustomerState(%q): want an error", bad)
		}
	}
}

// TestRecordStoredForm: the stored form of a record is the bytes the
// format has always written (float lists of every kind: IEEE 754 with a
// -0, tagged zeros and repeats, whole cents as varints). Records written
// before must still load and what is written must load in older code, so
// a change here is a format change, not a refactoring. (The second flag
// byte's flagVoidKnown, 0x20, came with DecisionRecord.Anulada; older code
// ignores it.)
func TestRecordStoredForm(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 4, 5, 123456000, time.UTC)
	choice := 2
	r := DecisionRecord{Nonce: "AZxyz0123456", ClienteRef: "cliente-0001", At: at, Canal: "push",
		Accion: 2, Propension: 0.8, Version: "v0-prior", Explorado: true, CaducaEn: at.Add(DecisionTTL), Motivo: "m",
		X: []float64{1, 0, 0, 0.25, 0.5, 0.5}, Candidates: []int{0, 2, 7}, Probs: []float64{0.1, 0.45, 0.45},
		Mu: []float64{1200, -35, math.Copysign(0, -1)}, Priors: []float64{1000, 0, -20}, Shares: []float64{0, 0.5},
		Aff: []float64{0, 0, 0, 0.5, 0.25, 1, 0, 0, 0}, Downs: []float64{0, 112, 1}, Eleccion: &choice}
	const want = "010c415a78797a303132333435360c636c69656e74652d30303031aabea0b00d8094ef3a04707573680000043fe999999999999a0876302d7072696f72012eaaa8eab00d8094ef3a016d0602023ff00000000000000000023fd0000000000000023fe0000000000000010300040e0302023fb999999999999a023fdccccccccccccd0103004092c00000000000c04180000000000080000000000000000301d00f0027000000020200023fe00000000000000902000000023fe0000000000000023fd0000000000000023ff000000000000000000004030100e00102"
	if got := hex.EncodeToString(marshalRecord(&r)); got != want {
		t.Errorf("stored form:\n got %s\nwant %s", got, want)
	}
	// Encoded in memory that held a longer record: the same bytes.
	long := r
	long.Motivo = strings.Repeat("m", 600)
	if got := hex.EncodeToString(encodeRecord(marshalRecord(&long), &r)); got != want {
		t.Errorf("stored form in lent memory:\n got %s\nwant %s", got, want)
	}
}

// marshalCustomerStateFormat1 is the stored form of cs that releases of
// customer state format 1 wrote (no OpenVersion).
func marshalCustomerStateFormat1(cs *customerState) []byte {
	b := []byte{custStateFormat1}
	b = binAppendString(b, cs.OpenNonce)
	b = binAppendTime(b, cs.OpenAt)
	b = binAppendString(b, cs.Day)
	return binary.AppendUvarint(b, uint64(cs.Count))
}
