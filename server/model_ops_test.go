package server

import (
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
)

// The operations of TestAPIModel (model_test.go), each with what the model
// expects of its answer.

// modelRejection is an expected item of rechazados.
type modelRejection struct {
	Indice  int
	EventID string
	Codigo  string
	Campo   string
}

// events publishes a batch of 1 to 5 items: fresh events, resends of
// accepted ones (same or altered content), repeats inside the batch and
// slightly invalid items.
func (r *modelRun) events(mt *modelTenant) {
	r.t.Helper()
	items := r.eventBatch(mt)
	r.note("eventos %s %s", mt.id, canon(items))
	p := mt.planEvents(items)
	a := r.call(mt.id, "POST", "/v1/eventos", map[string]any{"eventos": items})
	left := mt.quotaLeft(engine.QuotaEvents)
	// New events past the quota refuse the request whole; past it, only a
	// resend of accepted events is answered (contract §7: 429 before the
	// rejections).
	if left >= 0 && (p.aceptados > left || left == 0 && len(p.rejected) > 0) {
		r.expectError("events past the tenant's daily quota", a, 429, "limite_excedido")
		return
	}
	n := r.checkEvents(p, a)
	if n != p.aceptados {
		r.fail("eventos: aceptados %d, want %d (%v)", n, p.aceptados, a.body)
	}
	r.applyEvents(mt, p)
}

// eventBatch is a batch of 1 to 5 items (eventItem).
func (r *modelRun) eventBatch(mt *modelTenant) []map[string]any {
	n := 1 + r.pick(5)
	items := make([]map[string]any, 0, n)
	for range n {
		items = append(items, r.eventItem(mt, items))
	}
	return items
}

// eventPlan is what the model expects of a batch of events.
type eventPlan struct {
	aceptados, duplicados int
	rejected              []modelRejection
	pending               map[string]modelEvent // the events it accepts
}

// planEvents is the model's expectation of items: each item's defects
// first, then its event_id against the accepted events and the items
// before it.
func (mt *modelTenant) planEvents(items []map[string]any) eventPlan {
	p := eventPlan{pending: map[string]modelEvent{}}
	for i, ev := range items {
		id, _ := ev["event_id"].(string)
		if c, campo := mt.eventDefect(ev); c != "" {
			p.rejected = append(p.rejected, modelRejection{i, id, c, campo})
			continue
		}
		prev, ok := p.pending[id]
		if !ok {
			prev, ok = mt.events[id]
		}
		switch {
		case ok && sameEvent(prev.body, ev):
			p.duplicados++
		case ok:
			p.rejected = append(p.rejected, modelRejection{i, id, "duplicado", "event_id"})
		default:
			p.aceptados++
			p.pending[id] = modelEvent{ref: ev["cliente_ref"].(string), body: ev}
		}
	}
	return p
}

// checkEvents checks answer a to a batch planned as p, but for how its
// new events split between aceptados and duplicados (a batch sent twice
// at once accepts each event in one of them), and returns its aceptados.
func (r *modelRun) checkEvents(p eventPlan, a modelAnswer) int {
	r.t.Helper()
	if a.status != 200 {
		r.fail("eventos: %d %v", a.status, a.body)
	}
	var gotRej []modelRejection
	rej, _ := a.body["rechazados"].([]any)
	for _, x := range rej {
		m := x.(map[string]any)
		id, _ := m["event_id"].(string)
		campo, _ := m["campo"].(string)
		gotRej = append(gotRej, modelRejection{int(m["indice"].(float64)), id, m["codigo"].(string), campo})
	}
	acc, _ := a.body["aceptados"].(float64)
	dup, _ := a.body["duplicados"].(float64)
	if int(acc+dup) != p.aceptados+p.duplicados || int(dup) < p.duplicados {
		r.fail("eventos: aceptados %v, duplicados %v, want %d and %d", acc, dup, p.aceptados, p.duplicados)
	}
	if d := cmp.Diff(p.rejected, gotRej); d != "" {
		r.fail("eventos: rechazados (-want +got):\n%s", d)
	}
	return int(acc)
}

// applyEvents records the events p accepts.
func (r *modelRun) applyEvents(mt *modelTenant, p eventPlan) {
	for id, ev := range p.pending {
		mt.events[id] = ev
	}
	mt.quotaUsed[mt.quotaDay(engine.QuotaEvents)] += p.aceptados
	r.seen["events accepted"] += p.aceptados
	r.seen["events duplicated"] += p.duplicados
	for _, x := range p.rejected {
		r.seen["events rejected "+x.Codigo]++
	}
}

// eventItem returns one item of a batch, given the items before it.
func (r *modelRun) eventItem(mt *modelTenant, before []map[string]any) map[string]any {
	switch n := r.pick(20); {
	case n < 3 && len(mt.events) > 0: // resend of an accepted event
		ev := mt.events[r.pickKey(mt.events)].body
		switch r.pick(3) {
		case 0:
			return ev
		case 1:
			return respelled(ev)
		}
		return altered(ev)
	case n < 5 && len(before) > 0: // repeat inside the batch
		ev := before[r.pick(len(before))]
		if r.pick(2) == 0 {
			return ev
		}
		return altered(ev)
	case n < 8:
		return r.invalidEvent(mt)
	}
	return r.validEvent(mt, r.ref(mt))
}

func (r *modelRun) pickKey(m map[string]modelEvent) string {
	keys := sortedKeys(m)
	return keys[r.pick(len(keys))]
}

// altered is ev with other content under the same event_id.
func altered(ev map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range ev {
		out[k] = v
	}
	c, ok := ev["clave"].(string)
	switch {
	case !ok: // an item without clave: another ts
		ts, _ := time.Parse(time.RFC3339, ev["ts"].(string))
		out["ts"] = ts.Add(-time.Hour).Format(time.RFC3339)
	case ev["tipo"] == "BAJA":
		out["clave"] = map[string]string{"comunicaciones": "cuenta", "cuenta": "comunicaciones"}[c]
	default:
		out["clave"] = c + "-x"
	}
	return out
}

// respelled is ev with its ts written in another zone: the same instant,
// so the same content.
func respelled(ev map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range ev {
		out[k] = v
	}
	ts, _ := time.Parse(time.RFC3339, ev["ts"].(string))
	out["ts"] = ts.In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339)
	return out
}

// sameEvent reports whether a and b are the same content: the same
// members and values, ts compared as instants.
func sameEvent(a, b map[string]any) bool {
	return canon(inUTC(a, "ts")) == canon(inUTC(b, "ts"))
}

// inUTC is a copy of m in which member key, when an RFC 3339 time, is in
// UTC (times are stored and exported in UTC, spec).
func inUTC(m map[string]any, key string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	if s, ok := m[key].(string); ok {
		if ts, err := time.Parse(time.RFC3339, s); err == nil {
			out[key] = ts.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// validEvent is a fresh event of a random type for ref.
func (r *modelRun) validEvent(mt *modelTenant, ref string) map[string]any {
	ts := mt.now.Add(-time.Duration(r.pick(2000)) * time.Hour)
	if r.pick(4) == 0 { // any zone: stored and exported in UTC
		ts = ts.In(time.FixedZone("", -6*3600))
	}
	ev := map[string]any{"event_id": r.fresh("ev"), "cliente_ref": ref, "ts": ts.Format(time.RFC3339)}
	switch r.pick(5) {
	case 4:
		ev["tipo"], ev["clave"], ev["valor"] = "CUPON_REDIMIDO", "TA", float64(r.pick(500))/100
		ev["extra"] = map[string]any{"cupon_emitido_id": r.couponOf(mt, ref), "ticket_id": r.fresh("t")}
		if r.pick(3) == 0 {
			ev["tipo"], ev["valor"] = "CUPON_CADUCADO", 0.0
			delete(ev["extra"].(map[string]any), "ticket_id")
		}
	case 0:
		ev["tipo"], ev["clave"] = "ALTA", "web"
	case 1:
		ev["tipo"], ev["clave"] = "BAJA", []string{"comunicaciones", "cuenta"}[r.pick(2)]
	case 2:
		ev["tipo"], ev["clave"] = "CUPON_RECIBIDO", "TA"
		ev["extra"] = map[string]any{"cupon_emitido_id": r.fresh("cup"), "caducidad": mt.now.Add(240 * time.Hour).In(ts.Location()).Format(time.RFC3339)}
		if d := r.someDecision(mt, ref); d != "" {
			ev["decision_id"] = d
		}
	default:
		ev["tipo"], ev["clave"], ev["valor"] = "COMPRA_CAT", "abarrotes", float64(r.pick(10000))/100
		ev["extra"] = map[string]any{"ticket_id": r.fresh("t"), "margen": float64(r.pick(3000)-500) / 100}
	}
	return ev
}

// couponOf is the cupon_emitido_id of a coupon ref received (an
// accepted CUPON_RECIBIDO), or of one never received.
func (r *modelRun) couponOf(mt *modelTenant, ref string) string {
	var ids []string
	for _, id := range sortedKeys(mt.events) {
		if ev := mt.events[id]; ev.ref == ref && ev.body["tipo"] == "CUPON_RECIBIDO" {
			ids = append(ids, ev.body["extra"].(map[string]any)["cupon_emitido_id"].(string))
		}
	}
	if len(ids) == 0 || r.pick(4) == 0 {
		return r.fresh("cup")
	}
	return ids[r.pick(len(ids))]
}

// someDecision is the id of one of ref's decisions, or "".
func (r *modelRun) someDecision(mt *modelTenant, ref string) string {
	var ids []string
	for _, id := range mt.order {
		if mt.decisions[id].ref == ref {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || r.pick(3) == 0 {
		return ""
	}
	return ids[r.pick(len(ids))]
}

// invalidEvent is an event with one defect (eventDefect names it).
func (r *modelRun) invalidEvent(mt *modelTenant) map[string]any {
	ev := r.validEvent(mt, r.ref(mt))
	switch r.pick(7) {
	case 5:
		ev["cliente_ref"] = phoneRef
	case 6:
		ev["tipo"], ev["clave"], ev["valor"] = "COMPRA_CAT", "abarrotes", 1.5
		ev["extra"] = map[string]any{"ticket_id": r.fresh("t"), "margen": 1.005}
	case 0:
		ev["sobrante"] = 1
	case 1:
		delete(ev, "clave")
	case 2:
		ev["ts"] = mt.now.Add(time.Hour).Format(time.RFC3339)
	case 3:
		ev["tipo"], ev["clave"], ev["valor"] = "COMPRA_CAT", "abarrotes", 1.234
		ev["extra"] = map[string]any{"ticket_id": r.fresh("t"), "margen": 1}
	default: // a decision_id of the other tenant, or none at all
		ev["tipo"], ev["clave"], ev["decision_id"] = "ALTA", "web", r.foreignDecision(mt)
		delete(ev, "extra")
		delete(ev, "valor")
	}
	return ev
}

// foreignDecision is a decision id that is not mt's: the other tenant's,
// or an altered one of mt's, or an invented one.
func (r *modelRun) foreignDecision(mt *modelTenant) string {
	for _, tn := range modelTenants {
		if o := r.m[tn]; o != mt && len(o.order) > 0 && r.pick(2) == 0 {
			return o.order[r.pick(len(o.order))]
		}
	}
	if len(mt.order) > 0 && r.pick(2) == 0 {
		return alterID(mt.order[r.pick(len(mt.order))])
	}
	return "d-inventado-0001"
}

// alterID changes one character of id, keeping the ID pattern.
func alterID(id string) string {
	b := []byte(id)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// eventDefect is the modelRejection code the model expects for ev's own
// content, "" for a well-formed event within the tenant's ts range and
// with no foreign decision_id.
func (mt *modelTenant) eventDefect(ev map[string]any) (codigo, campo string) {
	if _, ok := ev["sobrante"]; ok {
		return "campo_desconocido", "sobrante"
	}
	if _, ok := ev["clave"]; !ok {
		return "esquema_invalido", "clave"
	}
	if ev["cliente_ref"] == phoneRef {
		return "esquema_invalido", "cliente_ref"
	}
	if ev["valor"] == 1.234 {
		return "esquema_invalido", "valor"
	}
	if extra, _ := ev["extra"].(map[string]any); extra["margen"] == 1.005 {
		return "esquema_invalido", "extra.margen"
	}
	ts, _ := time.Parse(time.RFC3339, ev["ts"].(string))
	if ts.After(mt.now.Add(tsAhead)) || ts.Before(mt.now.Add(-tsBehind)) {
		return "ts_fuera_de_rango", "ts"
	}
	if d, ok := ev["decision_id"].(string); ok && !mt.signed(d) {
		return "esquema_invalido", "decision_id"
	}
	return "", ""
}

// phoneRef is a cliente_ref that looks like a telephone number (contract
// §4: rejected).
const phoneRef = "55-1234-5678"

// signed reports whether id is one of mt's decision ids, erased ones
// included (a decision id stays signed after the decision is erased).
func (mt *modelTenant) signed(id string) bool {
	return mt.decisions[id] != nil || slices.Contains(mt.erasedIDs, id)
}
