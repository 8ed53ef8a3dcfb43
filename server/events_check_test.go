package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

// TestEventCheckerReusesMemory: one eventChecker for a request's events
// (one schema.Checker, one buffer of canonical JSON) gives each event what
// a checker of its own gives (its canonical JSON and its JSON as written
// included), and a tipo that names no schema is rejected with
// eventTipoOnly's message.
func TestEventCheckerReusesMemory(t *testing.T) {
	events := []string{
		`{"event_id":"a1","cliente_ref":"cliente-0001","ts":"` + fuzzTS + `","tipo":"COMPRA_CAT","clave":"abarrotes","valor":100.50,` +
			`"extra":{"ticket_id":"t1","margen":1e1,"cantidad":2,"canal":"tienda"}}`,
		`{"tipo":"ALTA","event_id":"a2","cliente_ref":"cliente-0002","ts":"` + fuzzTS + `","clave":"web","extra":{"segmento":"oro","perfil":"caf\u00e9"}}`,
		`{"event_id":"a3","cliente_ref":"cliente-0003","ts":"` + fuzzTS + `","clave":"web"}`,
		`{"event_id":"a4","cliente_ref":"cliente-0003","ts":"` + fuzzTS + `","tipo":7,"clave":"web"}`,
		`{"event_id":"a5","cliente_ref":"cliente-0003","ts":"` + fuzzTS + `","tipo":"alta","clave":"web"}`,
		`{"event_id":"a6","cliente_ref":"cliente-0003","ts":"` + fuzzTS + `","tipo":null,"clave":"web"}`,
		`{"event_id":"a7","cliente_ref":"cliente-0004","ts":"` + fuzzTS + `","tipo":"CUPON_RECIBIDO","clave":"TA","valor":10,` +
			`"extra":{"cupon_emitido_id":"cup-1","caducidad":"` + fuzzTS + `","descuento_pct":15}}`,
		`{"event_id":"a8","cliente_ref":"cliente-0005","ts":"` + fuzzTS + `","tipo":"BAJA","clave":"comunicaciones","extra":{"canal":"sms"},"otro":1}`,
		`{"event_id":"a9","cliente_ref":"cliente-0005","ts":"` + fuzzTS + `","tipo":"CUPON_CADUCADO","clave":"TA","valor":0,"extra":{"cupon_emitido_id":"cup-2"}}`,
		`{"event_id":"a10","cliente_ref":"cliente-0006","ts":"2026-11-02T05:00:00.50-06:00","tipo":"ALTA","clave":"web","decision_id":null,"extra":{"perfil":null}}`,
	}
	shared := newEventChecker(testStart, true, 16) // small: the buffer grows while events keep their parts
	type result struct {
		Event     engine.IngestEvent
		Canonical string
		Rejection *engine.Rejection
	}
	var got, want []result
	for i, text := range events {
		v, err := schema.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		ev, rej := shared.check(i, v)
		got = append(got, result{ev, string(ev.Canonical) + "|" + string(ev.AsWritten), rej})

		own, orej := newEventChecker(testStart, true, 0).check(i, v)
		if orej != nil && orej.Campo != nil && *orej.Campo == "tipo" {
			bad := schema.Validate(eventTipoOnly, v)
			if len(bad) == 0 || orej.Mensaje != bad[0].Msg {
				t.Errorf("event %d: tipo rejected with %q, want eventTipoOnly's %v", i, orej.Mensaje, bad)
			}
		}
		want = append(want, result{own, string(own.Canonical) + "|" + string(own.AsWritten), orej})
	}
	for i := range got {
		got[i].Event.Canonical, want[i].Event.Canonical = nil, nil
		got[i].Event.AsWritten, want[i].Event.AsWritten = nil, nil
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(engine.IngestEvent{})); diff != "" {
		t.Errorf("events checked with one eventChecker (-want +got):\n%s", diff)
	}
	for _, i := range []int{0, 1, 6, 9} {
		if got[i].Rejection != nil {
			t.Errorf("valid event %d rejected: %+v", i, got[i].Rejection)
		}
	}
	if want := `{"clave":"web","cliente_ref":"cliente-0006","event_id":"a10","tipo":"ALTA","ts":"2026-11-02T11:00:00.5Z"}|` +
		`{"clave":"web","cliente_ref":"cliente-0006","decision_id":null,"event_id":"a10","extra":{"perfil":null},"tipo":"ALTA","ts":"2026-11-02T05:00:00.50-06:00"}`; got[9].Canonical != want {
		t.Errorf("event 9: canonical|as written = %s, want %s", got[9].Canonical, want)
	}
}

// TestEventTSBoundsStated: the range a ts_fuera_de_rango rejection states
// is accepted at both ends, also when the tenant clock has a fraction of a
// second, and an instant just outside either end is refused.
func TestEventTSBoundsStated(t *testing.T) {
	now := testStart.Add(400 * time.Millisecond)
	const msg = "ts debe estar entre 2023-11-02T12:00:01Z y 2026-11-02T12:05:00Z (reloj del inquilino)"
	tests := []struct {
		ts   string
		want string // the rejection's message, "" when accepted
	}{
		{"2023-11-02T12:00:01Z", ""},
		{"2026-11-02T12:05:00Z", ""},
		{"2023-11-02T12:00:00.399Z", msg},
		{"2026-11-02T12:05:00.401Z", msg},
	}
	for _, tt := range tests {
		v, err := schema.Parse([]byte(`{"event_id":"e1","cliente_ref":"cliente-0001","ts":"` + tt.ts + `","tipo":"ALTA","clave":"web"}`))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if _, rej := newEventChecker(now, true, 0).check(0, v); rej != nil {
			got = rej.Codigo + ": " + rej.Mensaje
		}
		want := tt.want
		if want != "" {
			want = "ts_fuera_de_rango: " + want
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ts %s (-want +got):\n%s", tt.ts, diff)
		}
	}
}

// TestSameAsWritten: sameAsWritten, which spares most events their
// as-written form, says true only when appendContent and AppendJSON write
// the event alike, and false wherever they differ (nulls, an empty or
// all-null extra, a ts or caducidad not in UTC RFC 3339 text).
func TestSameAsWritten(t *testing.T) {
	head := `{"event_id":"e1","cliente_ref":"cliente-0001","tipo":"CUPON_RECIBIDO","clave":"TA","valor":30,`
	for _, tc := range []struct {
		rest string
		same bool
	}{
		{`"ts":"2026-11-02T11:00:00Z"}`, true},
		{`"ts":"2026-11-02T11:00:00.5Z","extra":{"canal":"sms","caducidad":"2027-01-31T23:59:59Z"}}`, true},
		{`"ts":"2026-11-02T11:00:00.50Z"}`, false},
		{`"ts":"2026-11-02T05:00:00-06:00"}`, false},
		{`"ts":"2026-11-02T11:00:00+00:00"}`, false},
		{`"ts":"2026-11-02T11:00:00Z","decision_id":null}`, false},
		{`"ts":"2026-11-02T11:00:00Z","extra":{}}`, false},
		{`"ts":"2026-11-02T11:00:00Z","extra":{"canal":null}}`, false},
		{`"ts":"2026-11-02T11:00:00Z","extra":{"caducidad":"2027-01-31T17:59:59-06:00"}}`, false},
	} {
		v, err := schema.Parse([]byte(head + tc.rest))
		if err != nil {
			t.Fatal(err)
		}
		alike := string(appendContent(nil, v)) == string(v.AppendJSON(nil))
		if got := sameAsWritten(v); got != tc.same || (got && !alike) || (!got && alike) {
			t.Errorf("%s: sameAsWritten %v (want %v), the two forms alike: %v", tc.rest, got, tc.same, alike)
		}
	}
}
