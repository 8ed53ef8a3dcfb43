package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

func purchase(id, ref string, ts time.Time, valor, margen float64) map[string]any {
	return map[string]any{"event_id": id, "cliente_ref": ref, "ts": ts.Format(time.RFC3339), "tipo": "COMPRA_CAT",
		"clave": "abarrotes", "valor": valor, "extra": map[string]any{"ticket_id": "t-" + id, "margen": margen}}
}

func postEvents(h *harness, tok string, evs ...map[string]any) (int, map[string]any) {
	h.t.Helper()
	list := make([]any, len(evs))
	for i, e := range evs {
		list[i] = e
	}
	return h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": list})
}

// rejection is one rechazados item reduced to what tests compare.
type rejection struct {
	Indice int
	Codigo string
	Campo  string
}

func rejections(body map[string]any) []rejection {
	var out []rejection
	for _, r := range body["rechazados"].([]any) {
		m := r.(map[string]any)
		out = append(out, rejection{Indice: int(m["indice"].(float64)), Codigo: m["codigo"].(string), Campo: fmt.Sprint(m["campo"])})
	}
	return out
}

func TestEventFieldRules(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	ts := testStart.Add(-time.Hour)
	base := func() map[string]any { return purchase("e1", "cliente-01", ts, 100.5, 30.25) }
	with := func(mod func(m map[string]any)) map[string]any {
		m := base()
		mod(m)
		return m
	}
	extra := func(m map[string]any) map[string]any { return m["extra"].(map[string]any) }
	tests := []struct {
		name   string
		event  map[string]any
		codigo string
		campo  string
	}{
		{"valid purchase", base(), "", ""},
		{"missing event_id", with(func(m map[string]any) { delete(m, "event_id") }), "esquema_invalido", "event_id"},
		{"bad event_id pattern", with(func(m map[string]any) { m["event_id"] = "-x" }), "esquema_invalido", "event_id"},
		{"short cliente_ref", with(func(m map[string]any) { m["cliente_ref"] = "abc" }), "esquema_invalido", "cliente_ref"},
		{"email cliente_ref", with(func(m map[string]any) { m["cliente_ref"] = "ana@example.com" }), "esquema_invalido", "cliente_ref"},
		{"phone cliente_ref", with(func(m map[string]any) { m["cliente_ref"] = "55-1234-5678" }), "esquema_invalido", "cliente_ref"},
		{"ts without zone", with(func(m map[string]any) { m["ts"] = "2026-11-01T10:00:00" }), "esquema_invalido", "ts"},
		{"ts in the future", with(func(m map[string]any) { m["ts"] = testStart.Add(10 * time.Minute).Format(time.RFC3339) }), "ts_fuera_de_rango", "ts"},
		{"ts too old", with(func(m map[string]any) { m["ts"] = testStart.AddDate(-4, 0, 0).Format(time.RFC3339) }), "ts_fuera_de_rango", "ts"},
		{"unknown tipo", with(func(m map[string]any) { m["tipo"] = "COMPRA" }), "esquema_invalido", "tipo"},
		{"unknown field", with(func(m map[string]any) { m["Cliente_Ref"] = "x" }), "campo_desconocido", "Cliente_Ref"},
		{"unknown extra field", with(func(m map[string]any) { extra(m)["foo"] = 1 }), "campo_desconocido", "extra.foo"},
		{"three decimals", with(func(m map[string]any) { m["valor"] = 1.005 }), "esquema_invalido", "valor"},
		{"negative valor", with(func(m map[string]any) { m["valor"] = -1 }), "esquema_invalido", "valor"},
		{"missing margen", with(func(m map[string]any) { delete(extra(m), "margen") }), "esquema_invalido", "extra.margen"},
		{"margen three decimals", with(func(m map[string]any) { extra(m)["margen"] = 1.234 }), "esquema_invalido", "extra.margen"},
		{"missing ticket_id", with(func(m map[string]any) { delete(extra(m), "ticket_id") }), "esquema_invalido", "extra.ticket_id"},
		{"negative cantidad", with(func(m map[string]any) { extra(m)["cantidad"] = -1 }), "esquema_invalido", "extra.cantidad"},
		{"forged decision_id", with(func(m map[string]any) { m["decision_id"] = "dacme.AAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA" }), "esquema_invalido", "decision_id"},
		{"cupon recibido without caducidad", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "CUPON_RECIBIDO",
			"clave": "TA", "extra": map[string]any{"cupon_emitido_id": "cup-1"}}, "esquema_invalido", "extra.caducidad"},
		{"cupon recibido pct over 100", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "CUPON_RECIBIDO",
			"clave": "TA", "extra": map[string]any{"cupon_emitido_id": "cup-1", "caducidad": ts.Format(time.RFC3339), "descuento_pct": 101}}, "esquema_invalido", "extra.descuento_pct"},
		{"redimido without ticket", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "CUPON_REDIMIDO",
			"clave": "TA", "valor": 10, "extra": map[string]any{"cupon_emitido_id": "cup-1"}}, "esquema_invalido", "extra.ticket_id"},
		{"caducado valor not 0", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "CUPON_CADUCADO",
			"clave": "TA", "valor": 5, "extra": map[string]any{"cupon_emitido_id": "cup-1"}}, "esquema_invalido", "valor"},
		{"baja bad clave", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "BAJA", "clave": "todo"}, "esquema_invalido", "clave"},
		{"baja ok without extra", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "BAJA", "clave": "cuenta"}, "", ""},
		{"alta valor not 0", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "ALTA", "clave": "web", "valor": 1}, "esquema_invalido", "valor"},
		{"alta ok", map[string]any{"event_id": "e1", "cliente_ref": "cliente-01", "ts": ts.Format(time.RFC3339), "tipo": "ALTA", "clave": "web", "extra": map[string]any{"segmento": "oro"}}, "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.event["event_id"] = fmt.Sprintf("rule-%d-%v", i, tt.event["event_id"] != nil)
			if tt.name == "missing event_id" {
				delete(tt.event, "event_id")
			}
			if tt.name == "bad event_id pattern" {
				tt.event["event_id"] = "-x"
			}
			st, body := postEvents(h, tok, tt.event)
			if st != 200 {
				t.Fatalf("status %d body %v", st, body)
			}
			var want []rejection
			accepted := 1.0
			if tt.codigo != "" {
				want = []rejection{{0, tt.codigo, tt.campo}}
				accepted = 0
			}
			if diff := cmp.Diff(want, rejections(body)); diff != "" {
				t.Errorf("rechazados (-want +got):\n%s\nbody: %v", diff, body)
			}
			if body["aceptados"] != accepted {
				t.Errorf("aceptados = %v, want %v", body["aceptados"], accepted)
			}
		})
	}
}

func TestEventDuplicatesAndMixedBatch(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	ts := testStart.Add(-time.Hour)
	a := purchase("a", "cliente-01", ts, 10, 2)
	b := purchase("b", "cliente-02", ts, 20, 4)
	bChanged := purchase("b", "cliente-02", ts, 21, 4)
	bad := purchase("c", "x", ts, 10, 2)
	st, body := postEvents(h, tok, a, b, bad, a, bChanged)
	if st != 200 {
		t.Fatalf("%d %v", st, body)
	}
	got := []any{body["aceptados"], body["duplicados"]}
	if diff := cmp.Diff([]any{2.0, 1.0}, got); diff != "" {
		t.Errorf("aceptados, duplicados (-want +got):\n%s", diff)
	}
	want := []rejection{{2, "esquema_invalido", "cliente_ref"}, {4, "duplicado", "event_id"}}
	if diff := cmp.Diff(want, rejections(body)); diff != "" {
		t.Errorf("rechazados (-want +got):\n%s", diff)
	}
	// Across requests: same content is a duplicate, other content rejected, the first stands.
	_, body = postEvents(h, tok, a, bChanged)
	if body["aceptados"] != 0.0 || body["duplicados"] != 1.0 {
		t.Errorf("resend: %v", body)
	}
	if diff := cmp.Diff([]rejection{{1, "duplicado", "event_id"}}, rejections(body)); diff != "" {
		t.Errorf("resend rechazados (-want +got):\n%s", diff)
	}
	f, err := h.engine.CustomerFeatures("acme", "cliente-02")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Get("gasto_total_mxn", testStart); v != 20 {
		t.Errorf("gasto_total_mxn of cliente-02 = %v, want 20 (the first delivery stands)", v)
	}
}

func TestEventRequestLimits(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	if st, _ := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{}}); st != 422 {
		t.Errorf("empty eventos: %d, want 422", st)
	}
	many := make([]any, 1001)
	for i := range many {
		many[i] = map[string]any{}
	}
	if st, _ := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": many}); st != 422 {
		t.Errorf("1001 events: %d, want 422", st)
	}
	big := make([]byte, 1<<20+10)
	for i := range big {
		big[i] = ' '
	}
	if st, b := h.do("POST", "/v1/eventos", tok, big); st != 413 || b["codigo"] != "esquema_invalido" {
		t.Errorf("body over 1 MB: %d %v, want 413 esquema_invalido", st, b)
	}
	if st, b := h.do("POST", "/v1/eventos", tok, "x=1", "Content-Type", "text/plain"); st != 415 {
		t.Errorf("text body: %d %v, want 415", st, b)
	}
	if st, _ := h.do("POST", "/v1/eventos", tok, `{"eventos":[]`); st != 422 {
		t.Errorf("malformed JSON: %d, want 422", st)
	}
	noScope := h.token("acme", "decisiones:pedir")
	if st, _ := postEvents(h, noScope, purchase("z", "cliente-01", testStart, 1, 1)); st != 403 {
		t.Errorf("without eventos:publicar: %d, want 403", st)
	}
}

func TestAttributionAnyOrder(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	_, d := h.do("POST", "/v1/decisiones", tok, decideBody("attrib-001", nil))
	id := d["decision_id"].(string)
	ts := testStart.Format(time.RFC3339)
	redeemed := map[string]any{"event_id": "r1", "cliente_ref": "attrib-001", "ts": ts, "tipo": "CUPON_REDIMIDO", "clave": "TA", "valor": 10,
		"extra": map[string]any{"cupon_emitido_id": "cup-9", "ticket_id": "t9"}}
	received := map[string]any{"event_id": "s1", "cliente_ref": "attrib-001", "ts": ts, "tipo": "CUPON_RECIBIDO", "clave": "TA", "decision_id": id,
		"extra": map[string]any{"cupon_emitido_id": "cup-9", "caducidad": testStart.Add(72 * time.Hour).Format(time.RFC3339)}}
	if _, b := postEvents(h, tok, redeemed); b["aceptados"] != 1.0 {
		t.Fatalf("redemption first: %v", b)
	}
	if _, b := postEvents(h, tok, received); b["aceptados"] != 1.0 {
		t.Fatalf("reception second: %v", b)
	}
	got, err := h.engine.Ingester.Attribution("acme", "cup-9")
	if err != nil || got != id {
		t.Errorf("attribution of cup-9 = %q, %v; want %q", got, err, id)
	}
}

// TestEventSameContentWrittenAnotherWay: a resent event whose content is
// the same, written another way (the same instant in another offset or
// precision, a nullable field null instead of absent, members in another
// order, 10.50 for 10.5, "valor": 0 for a valor absent where absent is 0),
// counts in duplicados; other content is rejected with duplicado.
func TestEventSameContentWrittenAnotherWay(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false }) // three requests a case
	tok := h.token("acme", allScopes...)
	const ts = "2026-11-02T11:00:00Z"
	purchase := `{"event_id":"%s","cliente_ref":"cliente-01","ts":"` + ts + `","tipo":"COMPRA_CAT","clave":"abarrotes","valor":10.5,"extra":{"ticket_id":"t1","margen":2}}`
	coupon := `{"event_id":"%s","cliente_ref":"cliente-01","ts":"` + ts + `","tipo":"CUPON_RECIBIDO","clave":"TA","extra":{"cupon_emitido_id":"cup-1","caducidad":"2026-12-01T00:00:00Z"}}`
	alta := `{"event_id":"%s","cliente_ref":"cliente-01","ts":"` + ts + `","tipo":"ALTA","clave":"web"}`
	expired := `{"event_id":"%s","cliente_ref":"cliente-01","ts":"` + ts + `","tipo":"CUPON_CADUCADO","clave":"TA","extra":{"cupon_emitido_id":"cup-1"}}`
	withValor := func(ev, valor string) string {
		return strings.Replace(ev, `","tipo"`, `","valor":`+valor+`,"tipo"`, 1)
	}
	tests := []struct {
		name          string
		first, second string
		duplicate     bool // else a duplicado rejection
	}{
		{"ts in another offset", purchase, strings.Replace(purchase, ts, "2026-11-02T05:00:00-06:00", 1), true},
		{"ts as +00:00", purchase, strings.Replace(purchase, ts, "2026-11-02T11:00:00+00:00", 1), true},
		{"ts with zero fraction", purchase, strings.Replace(purchase, ts, "2026-11-02T11:00:00.000Z", 1), true},
		{"caducidad in another offset", coupon, strings.Replace(coupon, "2026-12-01T00:00:00Z", "2026-11-30T18:00:00-06:00", 1), true},
		{"decision_id null", purchase, strings.Replace(purchase, `"valor"`, `"decision_id":null,"valor"`, 1), true},
		{"extra.tienda null", purchase, strings.Replace(purchase, `"margen":2`, `"margen":2,"tienda":null`, 1), true},
		{"members reordered, 10.50", purchase, `{"extra":{"margen":2.00,"ticket_id":"t1"},"valor":10.50,"clave":"abarrotes","tipo":"COMPRA_CAT","ts":"` + ts + `","cliente_ref":"cliente-01","event_id":"%s"}`, true},
		{"optional extra empty", alta, strings.Replace(alta, `"clave":"web"`, `"clave":"web","extra":{}`, 1), true},
		{"optional extra of nulls", alta, strings.Replace(alta, `"clave":"web"`, `"clave":"web","extra":{"segmento":null}`, 1), true},
		{"valor 0 where absent is 0", alta, withValor(alta, "0"), true},
		{"valor absent where 0 was sent", withValor(alta, "0.00"), alta, true},
		{"coupon valor 0", coupon, withValor(coupon, "0"), true},
		{"coupon valor absent after -0", withValor(coupon, "-0"), coupon, true},
		{"expiry valor 0 and a null decision_id", expired, strings.Replace(withValor(expired, "0.0"), `"tipo"`, `"decision_id":null,"tipo"`, 1), true},
		{"coupon valor 5 where absent", coupon, withValor(coupon, "5"), false},
		{"another instant", purchase, strings.Replace(purchase, ts, "2026-11-02T11:00:01Z", 1), false},
		{"another valor", purchase, strings.Replace(purchase, "10.5", "10.51", 1), false},
		{"tienda set", purchase, strings.Replace(purchase, `"margen":2`, `"margen":2,"tienda":"t"`, 1), false},
		{"optional extra set", alta, strings.Replace(alta, `"clave":"web"`, `"clave":"web","extra":{"segmento":"oro"}`, 1), false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("same-%d", i)
			if st, b := h.do("POST", "/v1/eventos", tok, `{"eventos":[`+fmt.Sprintf(tt.first, id)+`]}`); st != 200 || b["aceptados"] != 1.0 {
				t.Fatalf("first delivery: %d %v", st, b)
			}
			want := map[string]any{"aceptados": 0.0, "duplicados": 1.0, "rechazados": []any{}}
			if !tt.duplicate {
				want["duplicados"] = 0.0
				want["rechazados"] = []any{map[string]any{"indice": 0.0, "event_id": id, "codigo": "duplicado", "campo": "event_id",
					"mensaje": "event_id ya procesado con otro contenido; se conserva el primero"}}
			}
			// Resent alone, and next to the first inside one request.
			_, got := h.do("POST", "/v1/eventos", tok, `{"eventos":[`+fmt.Sprintf(tt.second, id)+`]}`)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("resent (-want +got):\n%s", diff)
			}
			id += "-b"
			_, got = h.do("POST", "/v1/eventos", tok, `{"eventos":[`+fmt.Sprintf(tt.first, id)+`,`+fmt.Sprintf(tt.second, id)+`]}`)
			want["aceptados"] = 1.0
			if !tt.duplicate {
				r := want["rechazados"].([]any)[0].(map[string]any)
				r["indice"], r["event_id"] = 1.0, id
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("in one request (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEventRejectionMessages checks the mensaje of rejections an integrator
// cannot read the cause of from campo alone: a ts outside the API's range
// (an unset Go time.Time is year 1) names the tenant's window, as any other
// ts_fuera_de_rango does, not the API's range; a missing member sent under a
// name that differs only in case or accents ("valór") is named in the
// mensaje, since the two look alike.
func TestEventRejectionMessages(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	ts := testStart.Add(-time.Hour)
	tests := []struct {
		name string
		mod  func(m map[string]any)
		want rejectionMsg
	}{
		{"ts of year 1", func(m map[string]any) { m["ts"] = "0001-01-01T00:00:00Z" },
			rejectionMsg{"ts_fuera_de_rango", "ts", tsWindowMsg(testStart)}},
		{"ts before 1970", func(m map[string]any) { m["ts"] = "1969-12-31T23:59:59-06:00" },
			rejectionMsg{"ts_fuera_de_rango", "ts", tsWindowMsg(testStart)}},
		{"ts four years old", func(m map[string]any) { m["ts"] = testStart.AddDate(-4, 0, 0).Format(time.RFC3339) },
			rejectionMsg{"ts_fuera_de_rango", "ts", tsWindowMsg(testStart)}},
		{"valor with an accent", func(m map[string]any) { m["valór"] = m["valor"]; delete(m, "valor") },
			rejectionMsg{"esquema_invalido", "valor", "Field required; se recibió «valór»: los nombres de los campos van en minúsculas y sin acentos"}},
		{"Margen capitalized in extra", func(m map[string]any) {
			x := m["extra"].(map[string]any)
			x["Márgen"] = x["margen"]
			delete(x, "margen")
		}, rejectionMsg{"esquema_invalido", "extra.margen", "Field required; se recibió «Márgen»: los nombres de los campos van en minúsculas y sin acentos"}},
		{"an unrelated unknown member", func(m map[string]any) { m["valores"] = m["valor"]; delete(m, "valor") },
			rejectionMsg{"esquema_invalido", "valor", "Field required"}},
		{"a look-alike at another level", func(m map[string]any) {
			m["extra"].(map[string]any)["valór"] = 1
			delete(m, "valor")
		}, rejectionMsg{"esquema_invalido", "valor", "Field required"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := purchase(fmt.Sprintf("msg-%d", i), "cliente-01", ts, 10, 2)
			tt.mod(ev)
			st, body := postEvents(h, tok, ev)
			if st != 200 {
				t.Fatalf("status %d body %v", st, body)
			}
			var got []rejectionMsg
			for _, r := range body["rechazados"].([]any) {
				m := r.(map[string]any)
				got = append(got, rejectionMsg{fmt.Sprint(m["codigo"]), fmt.Sprint(m["campo"]), fmt.Sprint(m["mensaje"])})
			}
			if diff := cmp.Diff([]rejectionMsg{tt.want}, got); diff != "" {
				t.Errorf("rechazados (-want +got):\n%s", diff)
			}
		})
	}
}

// rejectionMsg is one rechazados item with its mensaje.
type rejectionMsg struct{ Codigo, Campo, Mensaje string }

// TestEventsBodyNotStrictJSON: a member name repeated inside one event, or
// an event nested deeper than 64, makes the whole body not strict JSON:
// one 422 json_invalid for the request and none of its events stored, as
// the README and the OpenAPI document say (the per-event rule holds for
// bodies that parse). The good event sent again alone is then new
// (aceptados 1, not duplicados).
func TestEventsBodyNotStrictJSON(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	good, err := json.Marshal(purchase("bueno", "cliente-01", testStart, 10, 3))
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	for name, bad := range map[string]string{
		"repeated member": `{"event_id":"malo","event_id":"malo2","cliente_ref":"cliente-01","ts":"` + testStart.Format(time.RFC3339) + `","tipo":"ALTA"}`,
		"nested over 64":  `{"event_id":"malo","cliente_ref":"cliente-01","ts":"` + testStart.Format(time.RFC3339) + `","tipo":"ALTA","extra":` + deep + `}`,
	} {
		st, body := h.do("POST", "/v1/eventos", tok, `{"eventos":[`+string(good)+`,`+bad+`]}`)
		detail, _ := body["detail"].([]any)
		if st != 422 || len(detail) != 1 || detail[0].(map[string]any)["type"] != "json_invalid" {
			t.Errorf("%s: %d %v, want one 422 json_invalid", name, st, body)
		}
	}
	if st, body := postEvents(h, tok, purchase("bueno", "cliente-01", testStart, 10, 3)); st != 200 || body["aceptados"] != 1.0 {
		t.Errorf("the good event alone: %d %v, want it accepted as new", st, body)
	}
}
