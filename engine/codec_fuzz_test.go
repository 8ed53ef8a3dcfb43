package engine

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The store must never hold a record it cannot read back (issue 17, item
// 2): whatever the engine is willing to write decodes to itself. The
// writers refuse times outside storableTime (Confirm, Ingest), so these
// targets build records from any field values, drop the ones the writers
// refuse, and check decode(encode(r)) == r.

func fuzzTime(sec int64, nsec uint32) time.Time { return time.Unix(sec, int64(nsec%1e9)).UTC() }

func FuzzEventRoundTrip(f *testing.F) {
	f.Add("ev-1", "cliente-0001", "abarrotes", byte(0), int64(1793620800), uint32(0), int64(12050), "t-1", int64(-300), 2.5, true,
		"cup-1", int64(1794225600), uint32(5), 10.0, true, "seg")
	f.Add("", "", "", byte(1), int64(253402300800), uint32(0), int64(0), "", int64(0), math.NaN(), false, "", int64(-62135596801), uint32(0), 0.0, false, "")
	f.Add("x", "y", "z", byte(5), int64(-62135596800), uint32(999999999), int64(math.MaxInt64), "\x00", int64(math.MinInt64), math.Inf(1), true,
		"c", int64(0), uint32(1), math.Copysign(0, -1), true, "p")
	f.Fuzz(func(t *testing.T, id, ref, clave string, tipo byte, ts int64, tsn uint32, valor int64, ticket string, margen int64,
		cantidad float64, hasCantidad bool, cupon string, cad int64, cadn uint32, pct float64, hasPct bool, seg string) {
		tp, ok := eventTypeAt(tipo % 6)
		if !ok {
			t.Fatal("eventTypeAt")
		}
		e := Event{ID: id, ClienteRef: ref, Clave: clave, Tipo: tp, TS: fuzzTime(ts, tsn), ValorCents: valor, TicketID: ticket, MargenCents: margen,
			Cantidad: cantidad, HasCantidad: hasCantidad, CuponEmitidoID: cupon, Caducidad: fuzzTime(cad, cadn), DescuentoPct: pct,
			HasDescuentoPct: hasPct, Segmento: seg}
		if !hasCantidad {
			e.Cantidad = 0
		}
		if !hasPct {
			e.DescuentoPct = 0
		}
		if cad == 0 && cadn == 0 || e.Caducidad.IsZero() {
			e.Caducidad = time.Time{}
		}
		if unstorableField(&e) != "" || math.IsNaN(e.Cantidad) || math.IsInf(e.Cantidad, 0) || math.IsNaN(e.DescuentoPct) || math.IsInf(e.DescuentoPct, 0) {
			return // refused before encoding: the API's ranges, finite numbers
		}
		got, ok := DecodeEvent(e.AppendEncode(nil))
		if !ok {
			t.Fatalf("an event the engine would store does not decode: %+v", e)
		}
		if diff := cmp.Diff(e, got, cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) })); diff != "" {
			t.Fatalf("round trip (-stored +read):\n%s", diff)
		}
	})
}

func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("n1", "cliente-0001", int64(1793620800), uint32(0), 3, 0.25, "motivo", true, int64(1793620900), uint32(7), int64(1500), 1.5, 0.0)
	f.Add("", "", int64(0), uint32(0), -1, 1.0, "", true, int64(-62135596801), uint32(0), int64(0), math.NaN(), math.Inf(-1))
	f.Add("n", "r", int64(253402300799), uint32(999999999), 0, 0.0, "", false, int64(253402300800), uint32(0), int64(math.MinInt64), math.Copysign(0, -1), 1e300)
	f.Add("n", "r", int64(1793620800), uint32(0), 5, 0.5, motivoLoteFallido, true, int64(1793620900), uint32(0), int64(0), 0.5, 0.0)
	f.Add("n", "r", int64(1793620800), uint32(0), 5, 0.5, motivoLoteFallido+"!", true, int64(1793620900), uint32(0), int64(0), 0.5, 0.0)
	f.Fuzz(func(t *testing.T, nonce, ref string, at int64, atn uint32, accion int, prop float64, motivo string, confirmed bool,
		tsEj int64, tsEjn uint32, reward int64, x0, x1 float64) {
		r := DecisionRecord{Nonce: nonce, ClienteRef: ref, At: fuzzTime(at, atn), Accion: accion, Propension: prop, Motivo: motivo,
			CaducaEn: fuzzTime(at, atn).Add(7 * 24 * time.Hour), X: []float64{x0, x1, 0, x1}, Candidates: []int{0, accion}, Probs: []float64{prop, 1 - prop}}
		if accion%2 == 0 { // the policy's choice, logged since the send gate reads it
			choice := accion / 2
			r.Eleccion = &choice
		}
		if accion%3 == 0 { // the candidates' downsides, kept since the downside bar reads them
			r.Downs = []float64{0, x1}
		}
		if confirmed {
			ts, conf := fuzzTime(tsEj, tsEjn), fuzzTime(at, atn)
			r.Estado, r.TsEjecucion, r.ConfirmadaEn, r.Recompensa = EstadoEjecutada, &ts, &conf, &reward
			if accion%5 == 0 { // a batch decision rejected: voided by its job, or by the caller in any words
				r.JobID, r.Estado, r.MotivoRechazo, r.Anulada = "lote_1", EstadoRechazada, motivo, len(motivo)%2 == 0
			}
		}
		// The writers refuse these: times outside storableTime (the API's
		// range and Confirm), non-finite numbers (never computed).
		for _, tm := range []time.Time{r.At, r.CaducaEn} {
			if !storableTime(tm) {
				return
			}
		}
		if r.TsEjecucion != nil && !storableTime(*r.TsEjecucion) {
			if (Confirmation{TsEjecucion: r.TsEjecucion}).checkTimes() == nil {
				t.Fatal("Confirm would store an unstorable ts_ejecucion")
			}
			return
		}
		for _, v := range []float64{prop, x0, x1} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return
			}
		}
		var got DecisionRecord
		if err := unmarshalRecord(marshalRecord(&r), &got); err != nil {
			t.Fatalf("a record the engine would store does not decode: %v\n%+v", err, r)
		}
		if diff := cmp.Diff(r, got, cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) })); diff != "" {
			t.Fatalf("round trip (-stored +read):\n%s", diff)
		}
	})
}

// TestWritersRefuseUnstorableTimes: the engine's writers refuse the times
// of issue 17 even when a caller skipped the API's checks.
func TestWritersRefuseUnstorableTimes(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	y10000 := time.Date(10000, 1, 1, 13, 0, 0, 0, time.UTC)
	year0 := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := []IngestEvent{
		{Index: 0, Event: Event{ID: "e0", ClienteRef: "ana-00000001", TS: t0, Tipo: CuponRecibido, Clave: "T1", CuponEmitidoID: "c0", Caducidad: y10000}, Canonical: []byte("e0")},
		{Index: 1, Event: Event{ID: "e1", ClienteRef: "ana-00000001", TS: year0, Tipo: Alta, Clave: "web"}, Canonical: []byte("e1")},
	}
	res, err := e.Ingester.Ingest("acme", evs)
	if err != nil || res.Aceptados != 0 || len(res.Rechazados) != 2 || *res.Rechazados[0].Campo != "extra.caducidad" || *res.Rechazados[1].Campo != "ts" {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	d, err := e.Decide("acme", Request{ClienteRef: "ana-00000001", Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true, TsEjecucion: &year0}); !errors.Is(err, ErrUnstorableTime) {
		t.Fatalf("confirm with a year-0 ts_ejecucion: %v", err)
	}
	if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 0 {
		t.Fatalf("check: %+v %v", st, err)
	}
}
