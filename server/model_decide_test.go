package server

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Decisions and confirmations of TestAPIModel.

// Contract constants the model applies.
const (
	modelTTL    = 7 * 24 * time.Hour // caduca_en
	modelIdem   = 24 * time.Hour     // Idempotency-Key retention
	modelDayCap = 3                  // decisions per cliente_ref per day
)

// decisionMembers are the members of a decision answer (shadow mode off,
// no explicar:leer).
var decisionMembers = []string{"accion", "accion_nombre", "caduca_en", "decision_id", "en_control", "en_respaldo",
	"explorado", "motivo", "politica_version", "propension"}

// decideRequest is a random decision request of mt: its body, its
// Idempotency-Key ("" for none) and whether it is invalid (422).
func (r *modelRun) decideRequest(mt *modelTenant) (body map[string]any, key string, invalid bool) {
	ctx := map[string]any{"canal": "push"}
	if r.pick(3) == 0 {
		allowed := []int{}
		for _, id := range []int{1, 2, 3} {
			if r.pick(2) == 0 {
				allowed = append(allowed, id)
			}
		}
		ctx["acciones_permitidas"] = allowed
	}
	if r.pick(3) == 0 {
		ctx["campana_id"] = budgetCampaign
	}
	body = map[string]any{"cliente_ref": r.ref(mt), "contexto": ctx}
	switch r.pick(12) {
	case 2:
		body["cliente_ref"], invalid = phoneRef, true
	case 0:
		body["cliente_ref"], invalid = "corto", true
	case 1:
		body["sobrante"], invalid = true, true
	}
	if r.pick(5) < 3 {
		key = modelKeys[r.pick(len(modelKeys))]
		if rec := mt.liveKey(key); rec != nil && rec.route == "decisiones" && r.pick(2) == 0 {
			return rec.req, key, false // a retry
		}
	}
	return body, key, invalid
}

// decide requests a decision and checks the answer against, in order: a
// keyed replay or conflict, the daily cap, the open reward window, a new
// decision.
func (r *modelRun) decide(mt *modelTenant) {
	r.t.Helper()
	body, key, invalid := r.decideRequest(mt)
	r.note("decide %s key=%q %s", mt.id, key, canon(body))
	var hdr []string
	if key != "" {
		hdr = []string{"Idempotency-Key", key}
	}
	a := r.call(mt.id, "POST", "/v1/decisiones", body, hdr...)
	if invalid {
		if mt.quotaLeft(engine.QuotaDecisions) == 0 { // the quota's 429 comes before the 422 (contract §7)
			r.expectError("invalid decision request past the quota", a, 429, "limite_excedido")
			return
		}
		r.expectError("invalid decision request", a, 422, "")
		return
	}
	r.expectDecide(mt, body, key, a)
}

// expectDecide checks the answer a of a valid decision request (body,
// Idempotency-Key key) and applies it to the model.
func (r *modelRun) expectDecide(mt *modelTenant, body map[string]any, key string, a modelAnswer) {
	r.t.Helper()
	ref := body["cliente_ref"].(string)
	ident := "decisiones\x00" + canon(body)
	rec := mt.liveKey(key)
	switch {
	case rec != nil && rec.ident == ident: // answered whatever the quota and cap
		if a.status != 200 || !cmp.Equal(a.body, rec.answer) {
			r.fail("keyed replay: %d %v, want 200 %v", a.status, a.body, rec.answer)
		}
		r.seen["decision replayed"]++
		return
	case mt.quotaLeft(engine.QuotaDecisions) == 0:
		r.expectError("decision past the tenant's daily quota", a, 429, "limite_excedido")
		return
	case rec != nil:
		r.expectError("decision with a reused key", a, 409, "idempotencia_conflicto")
		return
	}
	day := ref + "\x00" + mt.now.Format(time.DateOnly)
	if mt.capped && mt.dayCount[day] >= modelDayCap {
		r.expectError("decision past the daily cap", a, 429, "limite_excedido")
		midnight := mt.now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		if ra, _ := strconv.Atoi(a.header.Get("Retry-After")); time.Duration(ra-1)*time.Second >= midnight.Sub(mt.now) {
			r.fail("daily cap: Retry-After %d past the next UTC midnight (%s away)", ra, midnight.Sub(mt.now))
		}
		return
	}
	if a.status != 200 {
		r.fail("decide: %d %v", a.status, a.body)
	}
	r.checkDecisionShape(mt, a.body)
	id := a.body["decision_id"].(string)
	if open := mt.openWindow(ref); open != nil {
		if id != open.id || a.body["accion"] != 0.0 || a.body["propension"] != 1.0 || !windowAnswer(a.body) {
			r.fail("decision inside the open window of %s: %v", open.id, a.body)
		}
		r.seen["decision in an open window"]++
	} else {
		r.newDecision(mt, ref, body, a.body)
		r.seen["new decision"]++
	}
	mt.dayCount[day]++
	mt.quotaUsed[mt.quotaDay(engine.QuotaDecisions)]++
	if key != "" {
		mt.keys[key] = &modelKey{ident: ident, route: "decisiones", req: body, ref: ref, at: mt.now, answer: a.body}
	}
}

// liveKey is key's record within its retention, nil for none.
func (mt *modelTenant) liveKey(key string) *modelKey {
	rec := mt.keys[key]
	if key == "" || rec == nil || mt.now.Sub(rec.at) >= modelIdem {
		return nil
	}
	return rec
}

// openWindow is ref's decision whose reward window is open, or nil.
func (mt *modelTenant) openWindow(ref string) *modelDecision { return mt.openWindowAt(ref, mt.now) }

// openWindowAt is openWindow at time at.
func (mt *modelTenant) openWindowAt(ref string, at time.Time) *modelDecision {
	d := mt.decisions[mt.window[ref]]
	if d == nil || !at.Before(d.at.Add(mt.rewardWindow)) {
		return nil
	}
	return d
}

// checkDecisionShape checks decision d's members: decisionMembers, and
// en_sombra true while mt is in shadow mode.
func (r *modelRun) checkDecisionShape(mt *modelTenant, d map[string]any) {
	r.t.Helper()
	var got []string
	for k := range d {
		got = append(got, k)
	}
	slices.Sort(got)
	want := decisionMembers
	if mt.shadow {
		want = slices.Sorted(slices.Values(append([]string{"en_sombra"}, decisionMembers...)))
	}
	if !slices.Equal(got, want) || (mt.shadow && d["en_sombra"] != true) {
		r.fail("decision members %v (en_sombra %v), want %v", got, d["en_sombra"], want)
	}
}

// shadow switches mt's shadow mode ("admin tenant set --shadow").
func (r *modelRun) shadow(mt *modelTenant) {
	r.t.Helper()
	mt.shadow = !mt.shadow
	r.note("shadow %s %v", mt.id, mt.shadow)
	if _, err := r.h.db.UpdateTenant(mt.id, func(t *store.Tenant) error { t.Settings.Shadow = mt.shadow; return nil }); err != nil {
		r.fail("shadow: %v", err)
	}
}

// newDecision checks a new decision's answer and records it.
func (r *modelRun) newDecision(mt *modelTenant, ref string, req, d map[string]any) {
	r.t.Helper()
	id := d["decision_id"].(string)
	if mt.decisions[id] != nil || slices.Contains(mt.erasedIDs, id) {
		r.fail("new decision reuses id %s", id)
	}
	accion := int(d["accion"].(float64))
	ctx := req["contexto"].(map[string]any)
	if allowed, ok := ctx["acciones_permitidas"].([]int); ok && accion != 0 && !slices.Contains(allowed, accion) {
		r.fail("accion %d not in acciones_permitidas %v", accion, allowed)
	}
	if accion != 0 && !mt.eligible[accion] {
		r.fail("accion %d not an active action for push in the catalog %v (eligible %v)", accion, mt.catalog, mt.eligible)
	}
	camp, _ := ctx["campana_id"].(string)
	if sent := mt.sends(camp); camp != "" && sent >= budgetSends {
		if accion != 0 {
			r.fail("accion %d for campaign %s, whose %d sends are spent (%d)", accion, camp, budgetSends, sent)
		}
		r.seen["decision with its campaign's budget spent"]++
	}
	if want := mt.now.Add(modelTTL).Format(time.RFC3339); d["caduca_en"] != want {
		r.fail("caduca_en %v, want %s", d["caduca_en"], want)
	}
	if p := d["propension"].(float64); p <= 0 || p > 1 {
		r.fail("propension %v", p)
	}
	mt.decisions[id] = &modelDecision{id: id, ref: ref, at: mt.now, caducaEn: mt.now.Add(modelTTL), accion: accion, estado: "pendiente", campaign: camp, sombra: mt.shadow}
	mt.order = append(mt.order, id)
	mt.window[ref] = id
}

// confirmTarget is the decision id a confirmation names: mostly one of
// mt's, else an erased one, another tenant's, an altered or invented one.
func (r *modelRun) confirmTarget(mt *modelTenant) string {
	switch n := r.pick(10); {
	case n < 7 && len(mt.order) > 0:
		return mt.order[len(mt.order)-1-r.pick(min(len(mt.order), 4))]
	case n < 8 && len(mt.erasedIDs) > 0:
		return mt.erasedIDs[r.pick(len(mt.erasedIDs))]
	}
	return r.foreignDecision(mt)
}

// confirmBody is a random confirmation body and, for a bad one, where
// it fails: "schema" (422 before anything else) or "check" (422 of the
// members together, after a keyed replay's lookup).
func (r *modelRun) confirmBody(mt *modelTenant) (body map[string]any, invalid string) {
	switch r.pick(9) {
	case 0, 1:
		return map[string]any{"ejecutada": true}, ""
	case 2:
		at := mt.now.Add(-time.Duration(r.pick(48)) * time.Hour).In(time.FixedZone("", -3*3600))
		return map[string]any{"ejecutada": true, "ts_ejecucion": at.Format(time.RFC3339)}, ""
	case 3, 4:
		return map[string]any{"ejecutada": true, "accion_real": r.pick(6)}, "" // 5: no catalog holds it
	case 5, 6:
		return map[string]any{"ejecutada": false, "motivo_rechazo": "sin stock"}, ""
	case 7:
		ahead := mt.now.Add(time.Hour).Format(time.RFC3339) // ts_ejecucion past the tenant clock + 5 min
		return []map[string]any{{"ejecutada": false, "accion_real": 1}, {"ejecutada": true, "motivo_rechazo": "x"},
			{"ejecutada": true, "ts_ejecucion": ahead}}[r.pick(3)], "check"
	default:
		return []map[string]any{{"ejecutada": "si"}, {"ejecutada": true, "otro": 1}}[r.pick(2)], "schema"
	}
}

// confirm confirms a decision and checks the answer against, in order: a
// keyed replay or conflict, validation (422), the id (404), a first
// confirmation (409 ejecucion_ya_confirmada), the deadline (409
// decision_caducada).
func (r *modelRun) confirm(mt *modelTenant) {
	r.t.Helper()
	id := r.confirmTarget(mt)
	body, invalid := r.confirmBody(mt)
	key := ""
	if r.pick(3) == 0 {
		key = modelKeys[r.pick(len(modelKeys))]
		if rec := mt.liveKey(key); rec != nil && rec.route == "ejecucion" && r.pick(2) == 0 {
			id, body, invalid = rec.id, rec.req, "" // a retry
		}
	}
	r.note("confirm %s %s key=%q %s", mt.id, id, key, canon(body))
	var hdr []string
	if key != "" {
		hdr = []string{"Idempotency-Key", key}
	}
	a := r.call(mt.id, "POST", "/v1/decisiones/"+id+"/ejecucion", body, hdr...)
	ident := "ejecucion\x00" + id + "\x00" + canon(body)
	d := mt.decisions[id]
	if invalid == "schema" {
		r.expectError("confirmation against the schema", a, 422, "")
		return
	}
	if rec := mt.liveKey(key); rec != nil && mt.signed(id) {
		if rec.ident != ident {
			r.expectError("confirmation with a reused key", a, 409, "idempotencia_conflicto")
			return
		}
		if a.status != 200 || !cmp.Equal(a.body, rec.answer) {
			r.fail("keyed confirmation replay: %d %v, want 200 %v", a.status, a.body, rec.answer)
		}
		r.seen["confirmation replayed"]++
		return
	}
	switch {
	case invalid != "" || !mt.knownAccionReal(body):
		r.expectError("invalid confirmation", a, 422, "")
	case d == nil:
		r.expectError("confirmation of an unknown id", a, 404, "no_encontrado")
	case d.conf != nil:
		r.expectError("second confirmation", a, 409, "ejecucion_ya_confirmada")
	case mt.now.After(d.caducaEn):
		r.expectError("late confirmation", a, 409, "decision_caducada")
	default:
		r.confirmed(mt, d, body, key, ident, a)
	}
}

// confirmed checks a first confirmation's answer and records it.
func (r *modelRun) confirmed(mt *modelTenant, d *modelDecision, body map[string]any, key, ident string, a modelAnswer) {
	r.t.Helper()
	c := &modelConf{estado: "ejecutada", at: mt.now}
	if s, ok := body["ts_ejecucion"].(string); ok {
		ts, _ := time.Parse(time.RFC3339, s)
		c.ts = ts.UTC().Format(time.RFC3339)
	}
	if body["ejecutada"] == false {
		m := body["motivo_rechazo"].(string)
		c.estado, c.motivo = "rechazada", &m
	} else if n, ok := body["accion_real"].(int); ok {
		c.accionReal = &n
		if n != d.accion {
			c.estado = "modificada"
		}
	}
	want := map[string]any{"decision_id": d.id, "estado_ejecucion": c.estado}
	if a.status != 200 || !cmp.Equal(a.body, want) {
		r.fail("confirmation: %d %v, want 200 %v", a.status, a.body, want)
	}
	d.conf, d.estado = c, c.estado
	if d.reward != nil {
		r.seen["confirmation after the reward was final"]++
	}
	r.seen["confirmation "+c.estado]++
	if key != "" {
		mt.keys[key] = &modelKey{ident: ident, route: "ejecucion", id: d.id, req: body, ref: d.ref, at: mt.now, answer: a.body}
	}
}

// putCatalog replaces mt's catalog with actions 1..n.
func (r *modelRun) putCatalog(tn string, n int) {
	r.t.Helper()
	var acciones []map[string]any
	eligible := map[int]bool{}
	for i := 1; i <= n; i++ {
		a := map[string]any{"id": i, "nombre": fmt.Sprintf("cupon%d", i), "tipo_cupon": fmt.Sprintf("T%d", i),
			"costo_envio_mxn": 0.5, "descuento_max_mxn": float64(10 * i), "descuento_pct": 10, "activa": true}
		switch r.pick(6) {
		case 0:
			a["activa"] = false
		case 1:
			a["canales"] = []string{"sms"}
		case 2:
			a["canales"] = []string{"sms", "push"}
		}
		canales, ok := a["canales"].([]string)
		eligible[i] = a["activa"] == true && (!ok || slices.Contains(canales, "push"))
		acciones = append(acciones, a)
	}
	r.note("catalog %s %s", tn, canon(acciones))
	a := r.call(tn, "PUT", "/v1/catalogo-acciones", map[string]any{"acciones": acciones})
	mt := r.m[tn]
	if a.status != 200 || a.body["version"] != float64(mt.version+1) {
		r.fail("catalog put: %d %v, want version %d", a.status, a.body, mt.version+1)
	}
	mt.version++
	mt.eligible = eligible
	mt.catalog = mt.catalog[:0]
	mt.held = max(mt.held, n)
	for i := 1; i <= n; i++ {
		mt.catalog = append(mt.catalog, i)
	}
}

// catalogStep reads the catalog, or replaces it, or sends a bad one.
func (r *modelRun) catalogStep(mt *modelTenant) {
	r.t.Helper()
	switch r.pick(3) {
	case 0:
		r.putCatalog(mt.id, 2+r.pick(3))
	case 1:
		r.note("catalog %s with id 0", mt.id)
		a := r.call(mt.id, "PUT", "/v1/catalogo-acciones", map[string]any{"acciones": []map[string]any{{"id": 0, "nombre": "x", "tipo_cupon": "T",
			"costo_envio_mxn": 0.5, "descuento_max_mxn": 1, "descuento_pct": 10, "activa": true}}})
		r.expectError("catalog with id 0", a, 422, "")
	default:
		r.note("catalog get %s", mt.id)
		a := r.call(mt.id, "GET", "/v1/catalogo-acciones", nil)
		var ids []int
		acc, _ := a.body["acciones"].([]any)
		for _, x := range acc {
			ids = append(ids, int(x.(map[string]any)["id"].(float64)))
		}
		if a.status != 200 || a.body["version"] != float64(mt.version) || !slices.Equal(ids, mt.catalog) {
			r.fail("catalog get: %d %v, want version %d ids %v", a.status, a.body, mt.version, mt.catalog)
		}
	}
}

// knownAccionReal reports whether the confirmation body's accion_real, if
// any, is 0 or a coupon some catalog of the tenant held, its decision's
// candidates and own action among them (contract §4: the caller may have
// sent it before the catalog changed).
func (mt *modelTenant) knownAccionReal(body map[string]any) bool {
	n, ok := body["accion_real"].(int)
	return !ok || n <= mt.held
}

// budgetCampaign is the campaign, defined in both tenants at the start,
// whose budget of budgetSends sends the model follows.
const (
	budgetCampaign = "camp-b"
	budgetSends    = 1
)

// sends is what campaign camp's budget counts (contract §7): decisions
// with accion ≠ 0, but a rechazada one and an expired unconfirmed one
// give their send back, and a modificada one counts accion_real's.
func (mt *modelTenant) sends(camp string) int {
	n := 0
	for _, d := range mt.decisions {
		if d.campaign != camp {
			continue
		}
		switch {
		case d.conf == nil && mt.now.After(d.caducaEn):
		case d.conf == nil:
			n += min(d.accion, 1)
		case d.conf.estado == "rechazada":
		case d.conf.estado == "modificada":
			n += min(*d.conf.accionReal, 1)
		default:
			n += min(d.accion, 1)
		}
	}
	return n
}

// defineBudget defines budgetCampaign in tenant tn.
func (r *modelRun) defineBudget(tn string) {
	r.t.Helper()
	r.note("campaign put %s %s", tn, budgetCampaign)
	a := r.call(tn, "PUT", "/v1/campanas/"+budgetCampaign, map[string]any{"canal": "push", "descripcion": "presupuesto", "max_envios": budgetSends})
	if a.status != 200 {
		r.fail("campaign put: %d %v", a.status, a.body)
	}
}

// fallback records a fallback decision (the caller applied its own rule):
// it opens no reward window and counts toward no cap; the export shows it.
func (r *modelRun) fallback(mt *modelTenant) {
	r.t.Helper()
	ref := r.ref(mt)
	body := map[string]any{"accion": r.pick(6), "canal": "push", "cliente_ref": ref} // 5: no catalog holds it
	key := ""
	if r.pick(2) == 0 {
		key = modelKeys[r.pick(len(modelKeys))]
		if rec := mt.liveKey(key); rec != nil && rec.route == "respaldo" && r.pick(2) == 0 {
			body, ref = rec.req, rec.ref
		}
	}
	r.note("fallback %s key=%q %s", mt.id, key, canon(body))
	var hdr []string
	if key != "" {
		hdr = []string{"Idempotency-Key", key}
	}
	a := r.call(mt.id, "POST", "/v1/decisiones/respaldo", body, hdr...)
	ident := "respaldo\x00" + canon(body)
	if rec := mt.liveKey(key); rec != nil {
		if rec.ident != ident {
			r.expectError("fallback with a reused key", a, 409, "idempotencia_conflicto")
			return
		}
		if a.status != 200 || len(a.body) != 0 {
			r.fail("keyed fallback replay: %d %v", a.status, a.body)
		}
		r.seen["fallback replayed"]++
		return
	}
	accion := body["accion"].(int)
	if accion > mt.held { // a coupon an earlier catalog held is stored (a record queued across a catalog change)
		r.expectError("fallback with an unknown action", a, 422, "")
		return
	}
	if a.status != 200 || len(a.body) != 0 {
		r.fail("fallback: %d %v", a.status, a.body)
	}
	r.seen["fallback recorded"]++
	mt.fallbacks = append(mt.fallbacks, modelFallback{ref: ref, accion: accion})
	if key != "" {
		mt.keys[key] = &modelKey{ident: ident, route: "respaldo", req: body, ref: ref, at: mt.now, answer: a.body}
	}
}

// The daily quotas of beta (operator settings; acme has none).
const (
	betaQuotaDecisions = 8
	betaQuotaEvents    = 30
)

// quotaDay names the count of kind for the tenant clock's UTC day.
func (mt *modelTenant) quotaDay(kind string) string {
	return kind + "\x00" + mt.now.UTC().Format(time.DateOnly)
}

// quotaLeft is what the tenant's daily quota of kind has left today; -1
// for no quota.
func (mt *modelTenant) quotaLeft(kind string) int {
	q := mt.quota[kind]
	if q == 0 {
		return -1
	}
	return max(q-mt.quotaUsed[mt.quotaDay(kind)], 0)
}
