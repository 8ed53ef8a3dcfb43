package server

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The operations of TestAPIModel (model_test.go), each with what the model
// expects of its answer.

// modelRejection is an expected item of rechazados.
type modelRejection struct {
	Indice  int
	EventID string
	Codigo  string
}

// events publishes a batch of 1 to 5 items: fresh events, resends of
// accepted ones (same or altered content), repeats inside the batch and
// slightly invalid items.
func (r *modelRun) events(mt *modelTenant) {
	r.t.Helper()
	n := 1 + r.pick(5)
	items := make([]map[string]any, 0, n)
	for range n {
		items = append(items, r.eventItem(mt, items))
	}
	r.note("eventos %s %s", mt.id, canon(items))
	pending := map[string]modelEvent{}
	var wantRej []modelRejection
	aceptados, duplicados := 0, 0
	for i, ev := range items {
		id, _ := ev["event_id"].(string)
		if c := mt.eventDefect(ev); c != "" {
			wantRej = append(wantRej, modelRejection{i, id, c})
			continue
		}
		prev, ok := pending[id]
		if !ok {
			prev, ok = mt.events[id]
		}
		switch {
		case ok && canon(prev.body) == canon(ev):
			duplicados++
		case ok:
			wantRej = append(wantRej, modelRejection{i, id, "duplicado"})
		default:
			aceptados++
			pending[id] = modelEvent{ref: ev["cliente_ref"].(string), body: ev}
		}
	}
	a := r.call(mt.id, "POST", "/v1/eventos", map[string]any{"eventos": items})
	if a.status != 200 {
		r.fail("eventos: %d %v", a.status, a.body)
	}
	var gotRej []modelRejection
	rej, _ := a.body["rechazados"].([]any)
	for _, x := range rej {
		m := x.(map[string]any)
		id, _ := m["event_id"].(string)
		gotRej = append(gotRej, modelRejection{int(m["indice"].(float64)), id, m["codigo"].(string)})
	}
	got := fmt.Sprint(a.body["aceptados"], a.body["duplicados"])
	if want := fmt.Sprint(float64(aceptados), float64(duplicados)); got != want {
		r.fail("eventos: aceptados, duplicados %s, want %s (%v)", got, want, a.body)
	}
	if d := cmp.Diff(wantRej, gotRej); d != "" {
		r.fail("eventos: rechazados (-want +got):\n%s", d)
	}
	for id, ev := range pending {
		mt.events[id] = ev
	}
	r.seen["events accepted"] += aceptados
	r.seen["events duplicated"] += duplicados
	for _, x := range wantRej {
		r.seen["events rejected "+x.Codigo]++
	}
}

// eventItem returns one item of a batch, given the items before it.
func (r *modelRun) eventItem(mt *modelTenant, before []map[string]any) map[string]any {
	switch n := r.pick(20); {
	case n < 3 && len(mt.events) > 0: // resend of an accepted event
		ev := mt.events[r.pickKey(mt.events)].body
		if r.pick(2) == 0 {
			return ev
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

// validEvent is a fresh event of a random type for ref.
func (r *modelRun) validEvent(mt *modelTenant, ref string) map[string]any {
	ts := mt.now.Add(-time.Duration(r.pick(2000)) * time.Hour)
	if r.pick(4) == 0 { // any zone: stored and exported in UTC
		ts = ts.In(time.FixedZone("", -6*3600))
	}
	ev := map[string]any{"event_id": r.fresh("ev"), "cliente_ref": ref, "ts": ts.Format(time.RFC3339)}
	switch r.pick(4) {
	case 0:
		ev["tipo"], ev["clave"] = "ALTA", "web"
	case 1:
		ev["tipo"], ev["clave"] = "BAJA", []string{"comunicaciones", "cuenta"}[r.pick(2)]
	case 2:
		ev["tipo"], ev["clave"] = "CUPON_RECIBIDO", "TA"
		ev["extra"] = map[string]any{"cupon_emitido_id": r.fresh("cup"), "caducidad": mt.now.Add(240 * time.Hour).Format(time.RFC3339)}
		if d := r.someDecision(mt, ref); d != "" {
			ev["decision_id"] = d
		}
	default:
		ev["tipo"], ev["clave"], ev["valor"] = "COMPRA_CAT", "abarrotes", float64(r.pick(10000))/100
		ev["extra"] = map[string]any{"ticket_id": r.fresh("t"), "margen": float64(r.pick(3000)-500) / 100}
	}
	return ev
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
	switch r.pick(5) {
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
func (mt *modelTenant) eventDefect(ev map[string]any) string {
	if _, ok := ev["sobrante"]; ok {
		return "campo_desconocido"
	}
	if _, ok := ev["clave"]; !ok {
		return "esquema_invalido"
	}
	if ev["valor"] == 1.234 {
		return "esquema_invalido"
	}
	ts, _ := time.Parse(time.RFC3339, ev["ts"].(string))
	if ts.After(mt.now.Add(tsAhead)) || ts.Before(mt.now.Add(-tsBehind)) {
		return "ts_fuera_de_rango"
	}
	if d, ok := ev["decision_id"].(string); ok && !mt.signed(d) {
		return "esquema_invalido"
	}
	return ""
}

// signed reports whether id is one of mt's decision ids, erased ones
// included (a decision id stays signed after the decision is erased).
func (mt *modelTenant) signed(id string) bool {
	return mt.decisions[id] != nil || slices.Contains(mt.erasedIDs, id)
}
