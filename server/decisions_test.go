package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestDecideErrorDayLimits: Decide's two daily refusals are told apart:
// the tenant's quota (taken by a concurrent request after checkQuota let
// this one in) is not reported as the customer's cap.
func TestDecideErrorDayLimits(t *testing.T) {
	type got struct {
		Kind       kind
		Msg        string
		Campo      string
		RetryAfter int
	}
	for _, tc := range []struct {
		name string
		err  error
		want got
	}{
		{"tenant quota", &engine.DayLimitError{Err: engine.ErrQuota, RetryAfter: 7}, got{kindRateLimited, "cuota diaria del inquilino agotada", "", 7}},
		{"customer cap", &engine.DayLimitError{Err: engine.ErrDailyCap, RetryAfter: 9}, got{kindRateLimited, "límite de 3 decisiones por cliente_ref por día alcanzado", "cliente_ref", 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae, ok := decideError(tc.err).(*apiError)
			if !ok {
				t.Fatalf("decideError(%v) = %v, want an apiError", tc.err, decideError(tc.err))
			}
			if diff := cmp.Diff(tc.want, got{ae.kind, ae.msg, ae.campo, ae.retryAfter}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func decideBody(ref string, ctx map[string]any) map[string]any {
	if ctx == nil {
		ctx = map[string]any{"canal": "push"}
	}
	return map[string]any{"cliente_ref": ref, "contexto": ctx}
}

func noControl(s *store.Settings) { s.ControlShare = 0 }

func TestDecisionResponseShape(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, noControl)
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody("cliente-0001", nil))
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	id, _ := d["decision_id"].(string)
	if !strings.HasPrefix(id, "dacme.") || len(id) > 128 {
		t.Errorf("decision_id %q: want signed id of tenant acme", id)
	}
	for _, k := range []string{"accion", "accion_nombre", "propension", "politica_version", "explorado", "en_control", "en_respaldo", "caduca_en", "motivo"} {
		if _, ok := d[k]; !ok {
			t.Errorf("decision lacks %q: %v", k, d)
		}
	}
	for _, k := range []string{"detalle", "en_sombra"} {
		if _, ok := d[k]; ok {
			t.Errorf("decision has %q without scope or shadow: %v", k, d)
		}
	}
	if want := testStart.Add(7 * 24 * time.Hour).Format(time.RFC3339); d["caduca_en"] != want {
		t.Errorf("caduca_en = %v, want %v (7 days by the tenant clock)", d["caduca_en"], want)
	}
	if p := d["propension"].(float64); p <= 0 || p > 1 {
		t.Errorf("propension %v out of (0,1]", p)
	}
}

func TestDecisionRules(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	explain := h.token("acme", "decisiones:pedir", "explicar:leer")
	h.catalog(tok, 4)

	t.Run("acciones_permitidas", func(t *testing.T) {
		for i := 0; i < 30; i++ {
			st, d := h.do("POST", "/v1/decisiones", tok, decideBody(fmt.Sprintf("permit-%04d", i), map[string]any{"canal": "push", "acciones_permitidas": []int{2}}))
			if st != 200 {
				t.Fatalf("%d %v", st, d)
			}
			if a := d["accion"].(float64); a != 0 && a != 2 {
				t.Fatalf("accion %v not in acciones_permitidas [2] or 0", a)
			}
		}
	})
	t.Run("detalle for explicar:leer", func(t *testing.T) {
		st, d := h.do("POST", "/v1/decisiones", explain, decideBody("explain-0001", nil))
		if st != 200 {
			t.Fatalf("%d %v", st, d)
		}
		det, ok := d["detalle"].(map[string]any)
		if !ok {
			t.Fatalf("no detalle: %v", d)
		}
		rows := det["acciones"].([]any)
		if len(rows) != 5 {
			t.Errorf("detalle has %d actions, want 5 (0 and the 4 coupons)", len(rows))
		}
		// sigma_mxn is the standard error of the effect against action 0:
		// 0 for action 0, the prior's width for a coupon without data.
		for _, r := range rows {
			row := r.(map[string]any)
			if s := row["sigma_mxn"].(float64); (row["accion"] == float64(0)) != (s == 0) || s < 0 {
				t.Errorf("detalle row %v: sigma_mxn %v", row, s)
			}
		}
	})
	t.Run("reward window", func(t *testing.T) {
		_, first := h.do("POST", "/v1/decisiones", tok, decideBody("window-0001", nil))
		st, second := h.do("POST", "/v1/decisiones", tok, decideBody("window-0001", nil))
		if st != 200 {
			t.Fatalf("%d %v", st, second)
		}
		got := []any{second["decision_id"], second["accion"], second["propension"]}
		want := []any{first["decision_id"], float64(0), float64(1)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("open window answer (-want +got):\n%s", diff)
		}
		if !strings.Contains(second["motivo"].(string), "ventana de recompensa") {
			t.Errorf("motivo %q does not say the reward window is open", second["motivo"])
		}
		// detalle lists action 0, the only one an open window allows
		// (contract: on every decision, 0 included).
		_, third := h.do("POST", "/v1/decisiones", explain, decideBody("window-0001", nil))
		want0 := map[string]any{"acciones": []any{map[string]any{"accion": float64(0), "mu_mxn": float64(0), "sigma_mxn": float64(0), "probabilidad": float64(1)}}}
		if diff := cmp.Diff(want0, third["detalle"]); diff != "" {
			t.Errorf("open window detalle (-want +got):\n%s", diff)
		}
	})
	t.Run("three per customer per day", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if st, d := h.do("POST", "/v1/decisiones", tok, decideBody("cap-000001", nil)); st != 200 {
				t.Fatalf("request %d: %d %v", i+1, st, d)
			}
		}
		resp := h.raw("POST", "/v1/decisiones", tok, decideBody("cap-000001", nil))
		resp.Body.Close()
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("fourth request: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})
	t.Run("validation", func(t *testing.T) {
		st, body := h.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": "5512345678", "contexto": map[string]any{"canal": ""}, "extra": 1})
		if st != 422 {
			t.Fatalf("%d %v", st, body)
		}
		var locs []string
		for _, d := range body["detail"].([]any) {
			locs = append(locs, fmt.Sprint(d.(map[string]any)["loc"]))
		}
		want := []string{"[body cliente_ref]", "[body contexto canal]", "[body extra]"}
		if diff := cmp.Diff(want, locs); diff != "" {
			t.Errorf("422 locs (-want +got):\n%s", diff)
		}
	})
}

func TestIdempotencyKey(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	body := decideBody("idem-00001", nil)
	_, a := h.do("POST", "/v1/decisiones", tok, body, "Idempotency-Key", "k1")
	st, b := h.do("POST", "/v1/decisiones", tok, body, "Idempotency-Key", "k1")
	if st != 200 || a["decision_id"] != b["decision_id"] || a["accion"] != b["accion"] {
		t.Errorf("replay: %d %v, want the first decision %v", st, b, a)
	}
	st, c := h.do("POST", "/v1/decisiones", tok, decideBody("idem-00002", nil), "Idempotency-Key", "k1")
	if st != 409 || c["codigo"] != "idempotencia_conflicto" {
		t.Errorf("same key, other body: %d %v, want 409 idempotencia_conflicto", st, c)
	}
	// Replays do not count toward the daily cap.
	for i := 0; i < 5; i++ {
		if st, d := h.do("POST", "/v1/decisiones", tok, body, "Idempotency-Key", "k1"); st != 200 {
			t.Fatalf("replay %d: %d %v", i, st, d)
		}
	}
	// After 24 hours of the tenant clock the key is forgotten.
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(25 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	_, d := h.do("POST", "/v1/decisiones", tok, body, "Idempotency-Key", "k1")
	if d["decision_id"] == a["decision_id"] && d["accion"] != float64(0) {
		t.Errorf("key still replayed after 25h: %v", d)
	}
}

func TestConcurrentDecisionsSameCustomer(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	var wg sync.WaitGroup
	ids := make(chan string, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, d := h.do("POST", "/v1/decisiones", tok, decideBody("concurrent-1", nil))
			ids <- fmt.Sprint(d["decision_id"])
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]int{}
	for id := range ids {
		seen[id]++
	}
	if len(seen) != 1 {
		t.Errorf("16 concurrent requests for one customer created %d decisions, want 1 (one reward window): %v", len(seen), seen)
	}
	// Same Idempotency-Key concurrently: one decision, the rest replay it or get 409.
	var mu sync.Mutex
	statuses := map[int]int{}
	decisions := map[string]bool{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, d := h.do("POST", "/v1/decisiones", tok, decideBody("concurrent-2", nil), "Idempotency-Key", "same")
			mu.Lock()
			statuses[st]++
			if st == 200 {
				decisions[fmt.Sprint(d["decision_id"])] = true
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] == 0 || statuses[200]+statuses[409] != 8 || len(decisions) != 1 {
		t.Errorf("concurrent idempotent requests: statuses %v decisions %v", statuses, decisions)
	}
}

func TestShadowMode(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.Shadow = true })
	_, d := h.do("POST", "/v1/decisiones", tok, decideBody("shadow-001", nil))
	if d["en_sombra"] != true {
		t.Errorf("shadow on: en_sombra = %v, want true", d["en_sombra"])
	}
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Shadow = false; return nil }); err != nil {
		t.Fatal(err)
	}
	_, d = h.do("POST", "/v1/decisiones", tok, decideBody("shadow-002", nil))
	if _, ok := d["en_sombra"]; ok {
		t.Errorf("shadow off: en_sombra present: %v", d)
	}
}

func TestControlGroup(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0.5; s.ControlKind = "regla_actual"; s.RateLimits = false })
	inControl := 0
	for i := 0; i < 200; i++ {
		ref := fmt.Sprintf("control-%04d", i)
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil))
		if d["en_control"] == true {
			inControl++
			if d["accion"] != float64(0) || d["propension"] != float64(1) || !strings.Contains(d["motivo"].(string), "regla") {
				t.Fatalf("control decision: %v", d)
			}
		}
	}
	if inControl < 70 || inControl > 130 {
		t.Errorf("control share 0.5: %d of 200 in control", inControl)
	}
}

func TestCampaignBudgetOnline(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	if st, b := h.do("PUT", "/v1/campanas/navidad", tok, map[string]any{"canal": "push", "descripcion": "Navidad", "max_envios": 3}); st != 200 || b["campana_id"] != "navidad" {
		t.Fatalf("campaign: %d %v", st, b)
	}
	sends := 0
	var sent []string
	for i := 0; i < 60; i++ {
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(fmt.Sprintf("budget-%04d", i), map[string]any{"canal": "push", "campana_id": "navidad"}))
		if d["accion"] != float64(0) {
			sends++
			sent = append(sent, d["decision_id"].(string))
		}
	}
	if sends > 3 {
		t.Fatalf("%d sends with max_envios 3", sends)
	}
	if sends == 0 {
		t.Fatal("the seeded engine sent nothing in 60 draws, so the budget is not exercised: change the refs or the draws")
	}
	// A rejected send gives its budget back.
	if st, b := h.do("POST", "/v1/decisiones/"+sent[0]+"/ejecucion", tok, map[string]any{"ejecutada": false, "motivo_rechazo": "sin stock"}); st != 200 || b["estado_ejecucion"] != "rechazada" {
		t.Fatalf("reject: %d %v", st, b)
	}
	more := 0
	for i := 60; i < 200 && more == 0; i++ {
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(fmt.Sprintf("budget-%04d", i), map[string]any{"canal": "push", "campana_id": "navidad"}))
		if d["accion"] != float64(0) {
			more++
		}
	}
	if sends == 3 && more != 1 {
		t.Errorf("after a rejection %d new sends, want exactly 1", more)
	}
}

func TestConfirmation(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	h.tenant("other", true, noControl)
	tok := h.token("acme", allScopes...)
	otherTok := h.token("other", allScopes...)
	h.catalog(tok, 2)
	decide := func(ref string) map[string]any {
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil))
		return d
	}
	confirm := func(tok, id string, body any) (int, map[string]any) {
		return h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, body)
	}
	d1, d2, d3 := decide("confirm-01"), decide("confirm-02"), decide("confirm-03")
	id1 := d1["decision_id"].(string)
	other := 1 + int(d2["accion"].(float64))%2
	tests := []struct {
		name   string
		id     string
		tok    string
		body   any
		status int
		want   string
	}{
		{"ejecutada", id1, tok, map[string]any{"ejecutada": true}, 200, "ejecutada"},
		{"second confirmation", id1, tok, map[string]any{"ejecutada": true}, 409, "ejecucion_ya_confirmada"},
		{"modificada", d2["decision_id"].(string), tok, map[string]any{"ejecutada": true, "accion_real": other}, 200, "modificada"},
		{"rechazada", d3["decision_id"].(string), tok, map[string]any{"ejecutada": false, "motivo_rechazo": "cliente sin saldo"}, 200, "rechazada"},
		{"altered", id1[:len(id1)-1] + "x", tok, map[string]any{"ejecutada": true}, 404, "no_encontrado"},
		{"invented", "dacme.AAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA", tok, map[string]any{"ejecutada": true}, 404, "no_encontrado"},
		{"foreign tenant", id1, otherTok, map[string]any{"ejecutada": true}, 404, "no_encontrado"},
		{"accion_real with ejecutada false", id1, tok, map[string]any{"ejecutada": false, "accion_real": 1}, 422, ""},
		{"missing ejecutada", id1, tok, map[string]any{}, 422, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, b := confirm(tt.tok, tt.id, tt.body)
			got := fmt.Sprint(b["estado_ejecucion"], b["codigo"])
			if st != tt.status || (tt.want != "" && !strings.Contains(got, tt.want)) {
				t.Errorf("status %d body %v, want %d %s", st, b, tt.status, tt.want)
			}
		})
	}
	t.Run("after caduca_en", func(t *testing.T) {
		d := decide("confirm-04")
		if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(7*24*time.Hour + time.Second); return nil }); err != nil {
			t.Fatal(err)
		}
		st, b := confirm(tok, d["decision_id"].(string), map[string]any{"ejecutada": true})
		if st != 409 || b["codigo"] != "decision_caducada" {
			t.Errorf("late confirmation: %d %v, want 409 decision_caducada", st, b)
		}
	})
}

func TestFallback(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	st, b := h.do("POST", "/v1/decisiones/respaldo", tok, map[string]any{"accion": 1, "canal": "sms", "cliente_ref": "fallback-01", "campana_id": "c1"})
	if st != 200 || len(b) != 0 {
		t.Fatalf("fallback: %d %v, want 200 {}", st, b)
	}
	// A fallback record does not open a reward window.
	_, d := h.do("POST", "/v1/decisiones", tok, decideBody("fallback-01", nil))
	if strings.Contains(fmt.Sprint(d["motivo"]), "ventana") {
		t.Errorf("fallback opened a reward window: %v", d)
	}
	if st, b := h.do("POST", "/v1/decisiones/respaldo", tok, map[string]any{"accion": 99, "canal": "sms", "cliente_ref": "fallback-02"}); st != 422 {
		t.Errorf("fallback with unknown action: %d %v, want 422", st, b)
	}
}

// TestFallbackIdempotencyKey: a fallback record repeated with its
// Idempotency-Key (a client retrying a lost answer) is stored once and
// answered 200 {} again; the key with another body is 409
// idempotencia_conflicto; a bad key is 422 at header.Idempotency-Key.
func TestFallbackIdempotencyKey(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	body := map[string]any{"accion": 1, "canal": "sms", "cliente_ref": "fallback-03"}
	for i := 0; i < 2; i++ {
		if st, b := h.do("POST", "/v1/decisiones/respaldo", tok, body, "Idempotency-Key", "r-1"); st != 200 || len(b) != 0 {
			t.Fatalf("keyed fallback %d: %d %v, want 200 {}", i+1, st, b)
		}
	}
	st, x := h.do("GET", "/v1/clientes/fallback-03/exportacion", tok, nil)
	if st != 200 {
		t.Fatalf("export: %d %v", st, x)
	}
	if n := len(x["decisiones"].([]any)); n != 1 {
		t.Errorf("keyed fallback sent twice: %d records exported, want 1", n)
	}
	other := map[string]any{"accion": 0, "canal": "sms", "cliente_ref": "fallback-03"}
	if st, b := h.do("POST", "/v1/decisiones/respaldo", tok, other, "Idempotency-Key", "r-1"); st != 409 || b["codigo"] != "idempotencia_conflicto" ||
		strings.Contains(fmt.Sprint(b["mensaje"]), "respaldo") {
		t.Errorf("same key, another body: %d %v, want 409 idempotencia_conflicto with the table's mensaje", st, b)
	}
	st, b := h.do("POST", "/v1/decisiones/respaldo", tok, body, "Idempotency-Key", strings.Repeat("k", 256))
	if st != 422 || !strings.Contains(fmt.Sprint(b["detail"]), "[header Idempotency-Key]") {
		t.Errorf("bad key: %d %v, want 422 at header.Idempotency-Key", st, b)
	}
}

// TestConfirmIdempotencyKey: a confirmation repeated with its
// Idempotency-Key (a client retrying an answer that was lost after the
// confirmation was stored) gets the stored 200 answer again and stores
// nothing more; the key with another body or another decision is 409
// idempotencia_conflicto, as is a key first used for a decision; without a
// key, or with another one, a second confirmation is 409
// ejecucion_ya_confirmada as before; after 24 hours of the tenant clock
// the key is forgotten. Without keys a retry of a confirmation that landed
// was 409 ejecucion_ya_confirmada, the same as someone else's.
func TestConfirmIdempotencyKey(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	decide := func(ref string, hdr ...string) string {
		t.Helper()
		st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil), hdr...)
		if st != 200 {
			t.Fatalf("decide %s: %d %v", ref, st, d)
		}
		return d["decision_id"].(string)
	}
	id, id2 := decide("confirm-k1"), decide("confirm-k2")
	decide("confirm-k3", "Idempotency-Key", "decision-key")
	path := func(id string) string { return "/v1/decisiones/" + id + "/ejecucion" }
	yes := map[string]any{"ejecutada": true}
	want := map[string]any{"decision_id": id, "estado_ejecucion": "ejecutada"}
	for i := 0; i < 3; i++ {
		st, b := h.do("POST", path(id), tok, yes, "Idempotency-Key", "c-1")
		if diff := cmp.Diff(want, b); st != 200 || diff != "" {
			t.Fatalf("keyed confirmation %d: %d (-want +got):\n%s", i+1, st, diff)
		}
	}
	_, x := h.do("GET", "/v1/clientes/confirm-k1/exportacion", tok, nil)
	if n := len(x["confirmaciones"].([]any)); n != 1 {
		t.Errorf("keyed confirmation sent three times: %d confirmations exported, want 1", n)
	}
	tests := []struct {
		name, id string
		body     any
		hdr      []string
		status   int
		want     string // the codigo, or where a 422 puts the fault
	}{
		{"same key, another body", id, map[string]any{"ejecutada": false, "motivo_rechazo": "otro"}, []string{"Idempotency-Key", "c-1"}, 409, "idempotencia_conflicto"},
		{"same key and body, another decision", id2, yes, []string{"Idempotency-Key", "c-1"}, 409, "idempotencia_conflicto"},
		{"a decision's key", id2, yes, []string{"Idempotency-Key", "decision-key"}, 409, "idempotencia_conflicto"},
		{"another key", id, yes, []string{"Idempotency-Key", "c-2"}, 409, "ejecucion_ya_confirmada"},
		{"no key", id, yes, nil, 409, "ejecucion_ya_confirmada"},
		{"bad key", id2, yes, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 422, "[header Idempotency-Key]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, b := h.do("POST", path(tt.id), tok, tt.body, tt.hdr...)
			if got := fmt.Sprint(b["codigo"], b["detail"]); st != tt.status || !strings.Contains(got, tt.want) {
				t.Errorf("%d %v, want %d %s", st, b, tt.status, tt.want)
			}
		})
	}
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(25 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	if st, b := h.do("POST", path(id), tok, yes, "Idempotency-Key", "c-1"); st != 409 || b["codigo"] != "ejecucion_ya_confirmada" {
		t.Errorf("key after 25 h: %d %v, want 409 ejecucion_ya_confirmada", st, b)
	}
}

// TestConfirmReplayAfterCatalogChange: a keyed confirmation repeated after
// its accion_real left the catalog gets its stored answer; a keyless
// repeat is 409 ejecucion_ya_confirmada, since a coupon of an earlier
// catalog is still one a confirmation may name (TestConfirmRetiredAction),
// and one naming an id no catalog held is 422.
func TestConfirmReplayAfterCatalogChange(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody("replay-k1", nil))
	if st != 200 {
		t.Fatalf("decide: %d %v", st, d)
	}
	id, real := d["decision_id"].(string), 2
	if d["accion"] == float64(2) {
		real = 3
	}
	path, body := "/v1/decisiones/"+id+"/ejecucion", map[string]any{"ejecutada": true, "accion_real": real}
	want := map[string]any{"decision_id": id, "estado_ejecucion": "modificada"}
	if st, b := h.do("POST", path, tok, body, "Idempotency-Key", "mod-1"); st != 200 || cmp.Diff(want, b) != "" {
		t.Fatalf("first confirmation: %d %v", st, b)
	}
	h.catalog(tok, 1) // actions 2 and 3 leave the catalog
	st, b := h.do("POST", path, tok, body, "Idempotency-Key", "mod-1")
	if diff := cmp.Diff(want, b); st != 200 || diff != "" {
		t.Errorf("replay after the catalog change: %d (-want +got):\n%s", st, diff)
	}
	if st, b := h.do("POST", path, tok, body); st != 409 || b["codigo"] != "ejecucion_ya_confirmada" {
		t.Errorf("keyless repeat after the catalog change: %d %v, want 409 ejecucion_ya_confirmada", st, b)
	}
	if st, b := h.do("POST", path, tok, map[string]any{"ejecutada": true, "accion_real": 9}); st != 422 {
		t.Errorf("keyless repeat naming an id never in a catalog: %d %v, want 422 naming accion_real", st, b)
	}
}

// TestViolationsListedAtOnce: a request wrong in its path or header and in
// its body gets one 422 that lists every violation (contract section 7).
func TestViolationsListedAtOnce(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, noControl)
	tok := h.token("acme", allScopes...)
	tests := []struct {
		name, method, path string
		body               any
		hdr                []string
		want               []string
	}{
		{"decision: header and body", "POST", "/v1/decisiones", map[string]any{"contexto": map[string]any{"canal": "push"}},
			[]string{"Idempotency-Key", strings.Repeat("k", 256)}, []string{"[header Idempotency-Key]", "[body cliente_ref]"}},
		{"fallback: both keys and body", "POST", "/v1/decisiones/respaldo", map[string]any{"accion": 0, "canal": "push"},
			[]string{"Idempotency-Key", "", "Replaces-Idempotency-Key", strings.Repeat("k", 256)},
			[]string{"[header Idempotency-Key]", "[header Replaces-Idempotency-Key]", "[body cliente_ref]"}},
		{"campaign: path and body", "PUT", "/v1/campanas/-mal", map[string]any{"canal": "push", "descripcion": "navidad", "max_envios": -1},
			nil, []string{"[path campana_id]", "[body max_envios]"}},
	}
	for _, tc := range tests {
		st, body := h.do(tc.method, tc.path, tok, tc.body, tc.hdr...)
		var locs []string
		for _, d := range body["detail"].([]any) {
			locs = append(locs, fmt.Sprint(d.(map[string]any)["loc"]))
		}
		if st != 422 || !cmp.Equal(locs, tc.want) {
			t.Errorf("%s: %d %v, want 422 at %v", tc.name, st, locs, tc.want)
		}
	}
}

// TestIdempotencyKeyValidation: a bad Idempotency-Key is a 422 at
// header.Idempotency-Key with the pydantic v2 type of the rule it breaks
// (contract §2 and §4: 1 to 255 printable ASCII characters).
func TestIdempotencyKeyValidation(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, noControl)
	for _, tc := range []struct {
		name string
		hdr  []string
		want []any // type, loc of each violation
	}{
		{"256 characters", []string{"Idempotency-Key", strings.Repeat("k", 256)}, []any{"string_too_long", []any{"header", "Idempotency-Key"}}},
		{"empty", []string{"Idempotency-Key", ""}, []any{"string_too_short", []any{"header", "Idempotency-Key"}}},
		{"not printable", []string{"Idempotency-Key", "k\u00e9y"}, []any{"string_pattern_mismatch", []any{"header", "Idempotency-Key"}}},
	} {
		st, body := h.do("POST", "/v1/decisiones", tok, decideBody("idem-key-01", nil), tc.hdr...)
		var got []any
		if detail, ok := body["detail"].([]any); ok {
			for _, v := range detail {
				v := v.(map[string]any)
				got = append(got, v["type"], v["loc"])
			}
		}
		if st != 422 {
			t.Errorf("%s: %d %v, want 422", tc.name, st, body)
		} else if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
		}
	}
	if st, d := h.do("POST", "/v1/decisiones", tok, decideBody("idem-key-01", nil), "Idempotency-Key", strings.Repeat("k", 255)); st != 200 {
		t.Errorf("255 characters: %d %v, want 200", st, d)
	}
}

// TestIdempotentReplayDetalleFollowsScope: detalle is present only for
// credentials with scope explicar:leer (spec, Decision), a replay of an
// Idempotency-Key included: another credential of the tenant that repeats
// the request without the scope gets the decision without detalle.
func TestIdempotentReplayDetalleFollowsScope(t *testing.T) {
	h, _ := newCatalogHarness(t, 3, noControl)
	explain := h.token("acme", "decisiones:pedir", "explicar:leer")
	plain := h.token("acme", "decisiones:pedir")
	body := decideBody("replay-scope-1", nil)
	_, first := h.do("POST", "/v1/decisiones", explain, body, "Idempotency-Key", "scope-k")
	if _, ok := first["detalle"]; !ok {
		t.Fatalf("first answer, scope explicar:leer: no detalle: %v", first)
	}
	st, replay := h.do("POST", "/v1/decisiones", plain, body, "Idempotency-Key", "scope-k")
	if st != 200 || replay["decision_id"] != first["decision_id"] {
		t.Fatalf("replay: %d %v, want the first decision %v", st, replay, first["decision_id"])
	}
	if d, ok := replay["detalle"]; ok {
		t.Errorf("replay to a credential without explicar:leer carries detalle %v", d)
	}
	if _, again := h.do("POST", "/v1/decisiones", explain, body, "Idempotency-Key", "scope-k"); again["detalle"] == nil {
		t.Errorf("replay to the credential with explicar:leer lost detalle: %v", again)
	}
}

// TestConfirmDecidedActionGoneFromCatalog: accion_real equal to the decided
// action is ejecutada (contract §4), also when a catalog replaced since the
// decision no longer lists that action; an accion_real that is neither the
// decided action nor in the catalog is still 422 at body.accion_real.
func TestConfirmDecidedActionGoneFromCatalog(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	var sent []map[string]any
	for i := 0; i < 200 && len(sent) < 2; i++ {
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(fmt.Sprintf("gone-%04d", i), map[string]any{"canal": "push", "acciones_permitidas": []int{2}}))
		if d["accion"] == float64(2) {
			sent = append(sent, d)
		}
	}
	if len(sent) < 2 {
		t.Fatal("the seeded engine sent action 2 fewer than twice in 200 draws: change the refs")
	}
	// The catalog loses action 2.
	acciones := []map[string]any{
		{"id": 1, "nombre": "a", "tipo_cupon": "TA", "costo_envio_mxn": 0.5},
		{"id": 3, "nombre": "c", "tipo_cupon": "TC", "costo_envio_mxn": 0.5},
	}
	if st, b := h.do("PUT", "/v1/catalogo-acciones", tok, map[string]any{"acciones": acciones}); st != 200 {
		t.Fatalf("catalog: %d %v", st, b)
	}
	confirm := func(id string, body any) (int, string) {
		st, b := h.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, body)
		return st, fmt.Sprint(b["estado_ejecucion"], b["detail"])
	}
	tests := []struct {
		name   string
		id     string
		body   map[string]any
		status int
		want   string
	}{
		{"decided action, gone", sent[0]["decision_id"].(string), map[string]any{"ejecutada": true, "accion_real": 2}, 200, "ejecutada"},
		{"other action, never in the catalog", sent[1]["decision_id"].(string), map[string]any{"ejecutada": true, "accion_real": 9}, 422, "accion_real"},
		{"other action, in the catalog", sent[1]["decision_id"].(string), map[string]any{"ejecutada": true, "accion_real": 3}, 200, "modificada"},
	}
	for _, tt := range tests {
		if st, got := confirm(tt.id, tt.body); st != tt.status || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, st, got, tt.status, tt.want)
		}
	}
}

// TestDiscountCapRefusesUnboundedCoupon: a campaign with max_descuento_mxn
// counts each send at its coupon's descuento_max_mxn, so that the cap
// holds whatever is redeemed. A percentage coupon without
// descuento_max_mxn has no bound: under such a campaign it is never sent
// (accion 0, a motivo that says why), while a coupon with a bound and a
// campaign without the cap send as before.
func TestDiscountCapRefusesUnboundedCoupon(t *testing.T) {
	h := newHarness(t)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
	tok := h.token("acme", allScopes...)
	st, body := h.do("PUT", "/v1/catalogo-acciones", tok, map[string]any{"acciones": []any{
		map[string]any{"id": 1, "nombre": "10% sin tope", "tipo_cupon": "PCT10", "costo_envio_mxn": 0.5, "descuento_pct": 10},
		map[string]any{"id": 2, "nombre": "$30", "tipo_cupon": "MXN30", "costo_envio_mxn": 0.5, "descuento_max_mxn": 30},
	}})
	if st != 200 {
		t.Fatalf("catalog: %d %v", st, body)
	}
	for id, camp := range map[string]map[string]any{
		"tope":     {"canal": "push", "descripcion": "con tope", "max_descuento_mxn": 1000},
		"sin-tope": {"canal": "push", "descripcion": "sin tope"},
	} {
		if st, body := h.do("PUT", "/v1/campanas/"+id, tok, camp); st != 200 {
			t.Fatalf("campaign %s: %d %v", id, st, body)
		}
	}
	for i, tc := range []struct {
		campana string
		allowed int
		unbound bool // the coupon is refused by the cap
	}{{"tope", 1, true}, {"tope", 2, false}, {"sin-tope", 1, false}} {
		ref := fmt.Sprintf("cliente-%08d", i)
		_, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, map[string]any{"canal": "push", "campana_id": tc.campana, "acciones_permitidas": []int{tc.allowed}}))
		motivo, _ := d["motivo"].(string)
		refused := d["accion"] == float64(0) && strings.Contains(motivo, "descuento_max_mxn")
		if refused != tc.unbound {
			t.Errorf("campaign %s, coupon %d: accion %v, motivo %q; want refused by the cap: %v", tc.campana, tc.allowed, d["accion"], motivo, tc.unbound)
		}
	}
}

// TestDecisionContextNulls: contexto's optional members campana_id and
// acciones_permitidas may be sent as null, read as absent (no campaign,
// every action of the catalog), as a client that serializes unset optional
// members as null sends them; the API spec writes the optional members of
// its other bodies as "X or null".
func TestDecisionContextNulls(t *testing.T) {
	h, _ := newCatalogHarness(t, 3, noControl)
	explain := h.token("acme", "decisiones:pedir", "explicar:leer")
	tests := []struct {
		name string
		ctx  map[string]any
	}{
		{"campana_id null", map[string]any{"canal": "push", "campana_id": nil}},
		{"acciones_permitidas null", map[string]any{"canal": "push", "acciones_permitidas": nil}},
		{"both null", map[string]any{"canal": "push", "campana_id": nil, "acciones_permitidas": nil}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, d := h.do("POST", "/v1/decisiones", explain, decideBody(fmt.Sprintf("nulls-%04d", i), tc.ctx))
			if st != 200 {
				t.Fatalf("%d %v", st, d)
			}
			var got []float64
			for _, r := range d["detalle"].(map[string]any)["acciones"].([]any) {
				got = append(got, r.(map[string]any)["accion"].(float64))
			}
			if diff := cmp.Diff([]float64{0, 1, 2, 3}, got); diff != "" {
				t.Errorf("eligible actions (-want +got): null must read as absent:\n%s", diff)
			}
		})
	}
}

// TestFallbackReplacesLostDecision: a fallback record whose
// Replaces-Idempotency-Key names the decision request whose answer was
// lost voids that decision: the customer's next request is a new
// decision, and a late confirmation of the lost one is 409
// ejecucion_ya_confirmada. A late attempt of the lost request is 409
// idempotencia_conflicto whose mensaje says a fallback record replaced it
// (not "another body or still running", which sent integrators looking
// for a body they never changed). Without the header the lost decision
// holds the reward window (the next request gets it back).
func TestFallbackReplacesLostDecision(t *testing.T) {
	h, _ := newCatalogHarness(t, 2, noControl)
	tok := h.token("acme", "decisiones:pedir", "decisiones:confirmar")
	for _, tc := range []struct {
		name, ref string
		replace   bool // the fallback names the lost request's key
	}{
		{"with the header", "replaced-001", true},
		{"without", "replaced-002", false},
	} {
		ref := tc.ref
		_, lost := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil), "Idempotency-Key", "lost-"+ref)
		var hdr []string
		if tc.replace {
			hdr = []string{"Replaces-Idempotency-Key", "lost-" + ref}
		}
		fb := map[string]any{"accion": 0, "canal": "push", "cliente_ref": ref}
		if st, b := h.do("POST", "/v1/decisiones/respaldo", tok, fb, hdr...); st != 200 {
			t.Fatalf("%s: fallback %d %v", tc.name, st, b)
		}
		_, next := h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil))
		if got := next["decision_id"] == lost["decision_id"]; got == tc.replace {
			t.Errorf("%s: next request answered with the lost decision %v, want %v", tc.name, got, !tc.replace)
		}
		st, b := h.do("POST", "/v1/decisiones/"+lost["decision_id"].(string)+"/ejecucion", tok, map[string]any{"ejecutada": true})
		if want := map[bool]int{false: 200, true: 409}[tc.replace]; st != want {
			t.Errorf("%s: confirming the lost decision: %d %v, want %d", tc.name, st, b, want)
		}
		if !tc.replace {
			continue
		}
		st, b = h.do("POST", "/v1/decisiones", tok, decideBody(ref, nil), "Idempotency-Key", "lost-"+ref)
		if st != 409 || b["codigo"] != "idempotencia_conflicto" || !strings.Contains(fmt.Sprint(b["mensaje"]), "respaldo") {
			t.Errorf("%s: a late attempt of the lost request: %d %v, want 409 idempotencia_conflicto naming the fallback record (respaldo)", tc.name, st, b)
		}
	}
}

// TestConfirmRetiredAction: a coupon the caller sent before a catalog
// change can be confirmed after it. accion_real naming one of the
// decision's candidates, or any coupon of an earlier catalog (its id
// gone from the catalog since), or one put "activa": false, is modificada;
// an id no catalog of the tenant ever held is still 422 at
// body.accion_real. Before, only the decided action and the actions of
// the current catalog were accepted: a candidate retired since was 422.
func TestConfirmRetiredAction(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, func(s *store.Settings) { s.ControlShare = 0; s.RateLimits = false })
	decide := func(ref string, allowed []int) map[string]any {
		st, d := h.do("POST", "/v1/decisiones", tok, decideBody(ref, map[string]any{"canal": "push", "acciones_permitidas": allowed}))
		if st != 200 {
			t.Fatalf("decision %s: %d %v", ref, st, d)
		}
		return d
	}
	var withCandidate map[string]any // decided 1 with 2 among its candidates
	for i := 0; i < 200 && withCandidate == nil; i++ {
		if d := decide(fmt.Sprintf("cand-%04d", i), []int{1, 2}); d["accion"] == float64(1) {
			withCandidate = d
		}
	}
	if withCandidate == nil {
		t.Fatal("the seeded engine never decided action 1 over 2 in 200 draws: change the refs")
	}
	others := []map[string]any{decide("other-0001", []int{1}), decide("other-0002", []int{1}), decide("other-0003", []int{1})}
	// Action 2 leaves the catalog, action 3 stays inactive.
	acciones := []map[string]any{
		{"id": 1, "nombre": "a", "tipo_cupon": "TA", "costo_envio_mxn": 0.5},
		{"id": 3, "nombre": "c", "tipo_cupon": "TC", "costo_envio_mxn": 0.5, "activa": false},
	}
	if st, b := h.do("PUT", "/v1/catalogo-acciones", tok, map[string]any{"acciones": acciones}); st != 200 {
		t.Fatalf("catalog: %d %v", st, b)
	}
	tests := []struct {
		name   string
		d      map[string]any
		real   int
		status int
		want   string
	}{
		{"a candidate of the decision, retired", withCandidate, 2, 200, "modificada"},
		{"no candidate, retired", others[0], 2, 200, "modificada"},
		{"inactive", others[1], 3, 200, "modificada"},
		{"never in a catalog", others[2], 9, 422, "accion_real"},
	}
	for _, tt := range tests {
		st, b := h.do("POST", "/v1/decisiones/"+tt.d["decision_id"].(string)+"/ejecucion", tok, map[string]any{"ejecutada": true, "accion_real": tt.real})
		if got := fmt.Sprint(b["estado_ejecucion"], b["detail"]); st != tt.status || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, st, got, tt.status, tt.want)
		}
	}
}

// TestFallbackRetiredAction: a fallback record names the coupon the
// caller's rule sent, and the client library sends the records it queued
// once the engine answers again, maybe after a catalog change: a record
// naming a coupon an earlier catalog held is stored (200 {}) as one naming
// a coupon of the catalog, one stored before its coupon left is still
// exported, and an id no catalog held is 422 at body.accion. Before, the
// queued record of a retired coupon was 422 and lost.
func TestFallbackRetiredAction(t *testing.T) {
	h, tok := newCatalogHarness(t, 3, noControl)
	fallback := func(ref string, accion int) (int, map[string]any) {
		return h.do("POST", "/v1/decisiones/respaldo", tok, map[string]any{"accion": accion, "canal": "sms", "cliente_ref": ref})
	}
	if st, b := fallback("fallback-before", 2); st != 200 {
		t.Fatalf("fallback before the catalog change: %d %v", st, b)
	}
	h.catalog(tok, 1) // actions 2 and 3 leave the catalog
	tests := []struct {
		ref    string
		accion int
		status int
	}{
		{"fallback-after", 2, 200},
		{"fallback-never", 9, 422},
	}
	for _, tt := range tests {
		st, b := fallback(tt.ref, tt.accion)
		if st != tt.status || st == 422 && !strings.Contains(fmt.Sprint(b["detail"]), "[body accion]") {
			t.Errorf("%s: %d %v, want %d", tt.ref, st, b, tt.status)
		}
	}
	for _, ref := range []string{"fallback-before", "fallback-after"} {
		st, x := h.do("GET", "/v1/clientes/"+ref+"/exportacion", tok, nil)
		ds, _ := x["decisiones"].([]any)
		if st != 200 || len(ds) != 1 {
			t.Errorf("export of %s: %d %v, want its fallback record", ref, st, x)
			continue
		}
		if d := ds[0].(map[string]any); d["accion"] != float64(2) || d["en_respaldo"] != true {
			t.Errorf("export of %s: %v, want accion 2 en_respaldo", ref, d)
		}
	}
}
