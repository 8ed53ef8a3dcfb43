package server

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/store"
)

// The export and the isolation probes of TestAPIModel.

// exportView is what the model compares of an export: per event its id,
// tipo, clave and ts; per decision its id, accion, caduca_en and
// estado_ejecucion; per confirmation its id and estado; the deletion's
// estado.
type exportView struct {
	Events        []string
	Decisions     []string
	Confirmations []string
	Links         []string
	Borrado       string
}

// export reads ref's export as tenant tn and compares it with the model.
func (r *modelRun) export(tn, ref string) {
	r.t.Helper()
	mt := r.m[tn]
	r.note("export %s %s", tn, ref)
	a := r.call(tn, "GET", "/v1/clientes/"+ref+"/exportacion", nil)
	if a.status != 200 || a.body["cliente_ref"] != ref || a.body["generado_en"] != mt.now.Format(time.RFC3339) {
		r.fail("export: %d %v", a.status, a.body)
	}
	want := mt.exportWant(ref)
	if d := cmp.Diff(want, exportGot(a.body)); d != "" {
		r.fail("export %s %s (-model +server):\n%s", tn, ref, d)
	}
	for _, d := range want.Decisions {
		if !strings.HasSuffix(d, " -") && !strings.HasPrefix(d, "respaldo") {
			r.seen["exported decision with its reward"]++
		}
	}
	feats, _ := a.body["caracteristicas"].(map[string]any)
	links, _ := a.body["vinculos_cupon"].([]any)
	if mt.holdsNothing(ref) && (len(feats) != 0 || len(links) != 0) {
		r.fail("export %s %s: the model holds nothing, the export holds features %v, links %v", tn, ref, feats, links)
	}
}

// holdsNothing reports whether the model holds no event and no decision of ref.
func (mt *modelTenant) holdsNothing(ref string) bool {
	for _, ev := range mt.events {
		if ev.ref == ref {
			return false
		}
	}
	for _, d := range mt.decisions {
		if d.ref == ref {
			return false
		}
	}
	return true
}

func (mt *modelTenant) exportWant(ref string) exportView {
	v := exportView{Borrado: mt.deletion[ref]}
	for id, ev := range mt.events {
		if ev.ref == ref {
			b := ev.body
			ts, _ := time.Parse(time.RFC3339, b["ts"].(string))
			extra, _ := b["extra"].(map[string]any)
			valor, _ := b["valor"].(float64)
			d, _ := b["decision_id"].(string)
			v.Events = append(v.Events, fmt.Sprintf("%s %s %s %s %s %v %s %s", id, b["tipo"], b["clave"], ts.UTC().Format(time.RFC3339),
				ref, valor, d, canon(inUTC(extra, "caducidad"))))
		}
	}
	for id, d := range mt.decisions {
		if d.ref == ref {
			reward := "-"
			if d.reward != nil {
				reward = fmt.Sprintf("%.2f", float64(*d.reward)/100)
			}
			v.Decisions = append(v.Decisions, fmt.Sprintf("%s %d %s %s %s %v", id, d.accion, d.caducaEn.Format(time.RFC3339Nano), d.estado, reward, d.sombra))
			if c := d.conf; c != nil {
				ar, motivo := "-", "-"
				if c.accionReal != nil {
					ar = fmt.Sprint(*c.accionReal)
				}
				if c.motivo != nil {
					motivo = *c.motivo
				}
				v.Confirmations = append(v.Confirmations, fmt.Sprintf("%s %s %s %s %s %s", id, c.estado, ar, motivo, c.at.Format(time.RFC3339), c.ts))
			}
		}
	}
	v.Links = mt.links(ref)
	for _, f := range mt.fallbacks {
		if f.ref == ref {
			v.Decisions = append(v.Decisions, fmt.Sprintf("respaldo %d ejecutada", f.accion))
		}
	}
	sort.Strings(v.Events)
	sort.Strings(v.Decisions)
	sort.Strings(v.Confirmations)
	return v
}

func exportGot(x map[string]any) exportView {
	var v exportView
	if b, ok := x["borrado"].(map[string]any); ok {
		v.Borrado, _ = b["estado"].(string)
	}
	for _, e := range list(x["eventos"]) {
		d, _ := e["decision_id"].(string)
		extra, _ := e["extra"].(map[string]any)
		v.Events = append(v.Events, fmt.Sprintf("%s %s %s %s %s %v %s %s", e["event_id"], e["tipo"], e["clave"], e["ts"],
			e["cliente_ref"], e["valor"], d, canon(inUTC(extra, "caducidad"))))
	}
	for _, d := range list(x["decisiones"]) {
		if d["en_respaldo"] == true {
			v.Decisions = append(v.Decisions, fmt.Sprintf("respaldo %v %s", d["accion"], d["estado_ejecucion"]))
			continue
		}
		reward := "-"
		if x, ok := d["recompensa_mxn"].(float64); ok {
			reward = fmt.Sprintf("%.2f", x)
		}
		v.Decisions = append(v.Decisions, fmt.Sprintf("%s %v %s %s %s %v", d["decision_id"], d["accion"], d["caduca_en"], d["estado_ejecucion"], reward, d["en_sombra"]))
	}
	for _, c := range list(x["confirmaciones"]) {
		ar, motivo := "-", "-"
		if n, ok := c["accion_real"].(float64); ok {
			ar = fmt.Sprint(n)
		}
		if m, ok := c["motivo_rechazo"].(string); ok {
			motivo = m
		}
		ts, _ := c["ts_ejecucion"].(string)
		v.Confirmations = append(v.Confirmations, fmt.Sprintf("%s %s %s %s %s %s", c["decision_id"], c["estado_ejecucion"], ar, motivo, c["confirmada_en"], ts))
	}
	for _, l := range list(x["vinculos_cupon"]) {
		d, _ := l["decision_id"].(string)
		v.Links = append(v.Links, fmt.Sprintf("%s %s %v %v %v", l["cupon_emitido_id"], d, l["recibido"], l["redimido"], l["caducado"]))
	}
	sort.Strings(v.Events)
	sort.Strings(v.Decisions)
	sort.Strings(v.Confirmations)
	sort.Strings(v.Links)
	return v
}

// links are the coupon links of ref's accepted coupon events: one per
// cupon_emitido_id, with the decision_id of its CUPON_RECIBIDO and which
// of the three events came.
func (mt *modelTenant) links(ref string) []string {
	type link struct {
		decision                     string
		recibido, redimido, caducado bool
	}
	byID := map[string]*link{}
	for _, ev := range mt.events {
		extra, _ := ev.body["extra"].(map[string]any)
		id, _ := extra["cupon_emitido_id"].(string)
		if ev.ref != ref || id == "" {
			continue
		}
		l := byID[id]
		if l == nil {
			l = &link{}
			byID[id] = l
		}
		switch ev.body["tipo"] {
		case "CUPON_RECIBIDO":
			l.recibido = true
			l.decision, _ = ev.body["decision_id"].(string)
		case "CUPON_REDIMIDO":
			l.redimido = true
		case "CUPON_CADUCADO":
			l.caducado = true
		}
	}
	var out []string
	for _, id := range sortedKeys(byID) {
		l := byID[id]
		out = append(out, fmt.Sprintf("%s %s %v %v %v", id, l.decision, l.recibido, l.redimido, l.caducado))
	}
	return out
}

// list is v as a list of objects.
func list(v any) []map[string]any {
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

// other is the tenant that is not mt.
func (r *modelRun) other(mt *modelTenant) *modelTenant {
	for _, tn := range modelTenants {
		if tn != mt.id {
			return r.m[tn]
		}
	}
	panic("one tenant")
}

// probe checks tenant isolation and the answers of unknown resources: the
// other tenant's export of mt's customers, its confirmation of mt's
// decisions, campaigns defined by one tenant read by the other, an unknown
// path.
func (r *modelRun) probe(mt *modelTenant) {
	r.t.Helper()
	o := r.other(mt)
	switch r.pick(7) {
	case 6:
		r.malformed()
	case 4:
		r.pausedProbe(mt)
	case 5:
		r.scopeProbe(mt)
	case 0:
		r.export(o.id, mt.refs[r.pick(len(mt.refs))])
	case 1:
		if len(mt.order) == 0 {
			return
		}
		id := mt.order[r.pick(len(mt.order))]
		r.note("confirm %s as %s", id, o.id)
		a := r.call(o.id, "POST", "/v1/decisiones/"+id+"/ejecucion", map[string]any{"ejecutada": true})
		r.expectError("another tenant's decision", a, 404, "no_encontrado")
	case 2:
		r.campaign(mt, o)
	default:
		r.note("unknown path %s", mt.id)
		a := r.call(mt.id, "GET", "/v1/desconocido", nil)
		r.expectError("unknown path", a, 404, "no_encontrado")
	}
}

// campaign defines a campaign in mt (or reads one there) and reads it as o.
func (r *modelRun) campaign(mt, o *modelTenant) {
	r.t.Helper()
	id := []string{"camp-1", "camp-2"}[r.pick(2)]
	if r.pick(2) == 0 {
		r.note("campaign put %s %s", mt.id, id)
		a := r.call(mt.id, "PUT", "/v1/campanas/"+id, map[string]any{"canal": "push", "descripcion": "prueba " + id, "max_envios": 10})
		c, ok := mt.campaigns[id]
		if !ok {
			c.creado = mt.now.Format(time.RFC3339)
		}
		c.actualizado = mt.now.Format(time.RFC3339)
		mt.campaigns[id] = c
		r.checkCampaign(mt, id, a)
	}
	r.note("campaign get %s %s", o.id, id)
	a := r.call(o.id, "GET", "/v1/campanas/"+id, nil)
	if _, ok := o.campaigns[id]; !ok {
		r.expectError("a campaign the tenant never defined", a, 404, "no_encontrado")
		return
	}
	r.checkCampaign(o, id, a)
}

// checkCampaign checks answer a of campaign id of mt: the stored campaign
// with its creation time and its last update (the tenant clock).
func (r *modelRun) checkCampaign(mt *modelTenant, id string, a modelAnswer) {
	r.t.Helper()
	c := mt.campaigns[id]
	want := map[string]any{"campana_id": id, "canal": "push", "descripcion": "prueba " + id, "max_envios": 10.0,
		"creado_en": c.creado, "actualizado_en": c.actualizado}
	got := map[string]any{}
	for k := range want {
		got[k] = a.body[k]
	}
	if a.status != 200 || !cmp.Equal(got, want) {
		r.fail("campaign %s of %s: %d %v, want %v", id, mt.id, a.status, a.body, want)
	}
}

// probeRequest is a random request of mt that would change or read its
// data: a decision, events, a confirmation, a deletion, an export.
func (r *modelRun) probeRequest(mt *modelTenant) (method, path string, body any) {
	ref := r.ref(mt)
	switch r.pick(5) {
	case 0:
		return "POST", "/v1/decisiones", map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push"}}
	case 1:
		return "POST", "/v1/eventos", map[string]any{"eventos": []any{r.validEvent(mt, ref)}}
	case 2:
		if len(mt.order) > 0 {
			return "POST", "/v1/decisiones/" + mt.order[r.pick(len(mt.order))] + "/ejecucion", map[string]any{"ejecutada": true}
		}
		return "GET", "/v1/catalogo-acciones", nil
	case 3:
		return "DELETE", "/v1/clientes/" + ref, nil
	}
	return "GET", "/v1/clientes/" + ref + "/exportacion", nil
}

// pausedProbe pauses mt ("admin tenant set --paused true"), sends one
// request, which must be 503 inquilino_pausado with Retry-After and change
// nothing (later steps would see a change), and resumes it.
func (r *modelRun) pausedProbe(mt *modelTenant) {
	r.t.Helper()
	method, path, body := r.probeRequest(mt)
	r.note("paused %s: %s %s %s", mt.id, method, path, canon(body))
	setPaused := func(on bool) {
		if _, err := r.h.db.UpdateTenant(mt.id, func(t *store.Tenant) error { t.Settings.Paused = on; return nil }); err != nil {
			r.fail("pause: %v", err)
		}
		r.paused = on
	}
	setPaused(true)
	a := r.call(mt.id, method, path, body)
	setPaused(false)
	r.expectError("request of a paused tenant", a, 503, "inquilino_pausado")
}

// scopeProbe sends a request with a credential that has only
// eventos:publicar: 403 sin_permiso but for events, and nothing changes.
func (r *modelRun) scopeProbe(mt *modelTenant) {
	r.t.Helper()
	method, path, body := r.probeRequest(mt)
	if path == "/v1/eventos" {
		return
	}
	r.note("scope eventos:publicar %s: %s %s %s", mt.id, method, path, canon(body))
	a := r.call(mt.id+"/eventos", method, path, body)
	r.expectError("request without its scope", a, 403, "sin_permiso")
}

// malformed sends acme a request the pipeline refuses before any handler
// rule (contract §2 and §7): a body that is not JSON (415), one over the
// size limit (413), broken JSON (422), an envelope of 1,001 events (422),
// a repeated Idempotency-Key (422). Nothing changes (later steps would
// see it).
func (r *modelRun) malformed() {
	r.t.Helper()
	ref := r.ref(r.m["acme"])
	decide := `{"cliente_ref":"` + ref + `","contexto":{"canal":"push"}}`
	var status int
	var codigo string
	var a modelAnswer
	switch r.pick(5) {
	case 0:
		r.note("malformed: decision as text/plain")
		a = r.call("acme", "POST", "/v1/decisiones", decide, "Content-Type", "text/plain")
		status, codigo = 415, "esquema_invalido"
	case 1:
		r.note("malformed: 2 MB of events")
		a = r.call("acme", "POST", "/v1/eventos", `{"eventos":["`+strings.Repeat("x", 2<<20)+`"]}`)
		status, codigo = 413, "esquema_invalido"
	case 2:
		r.note("malformed: broken JSON decision")
		a = r.call("acme", "POST", "/v1/decisiones", decide[:len(decide)-1])
		status = 422
	case 3:
		r.note("malformed: 1001 events")
		evs := make([]any, 1001)
		for i := range evs {
			evs[i] = r.validEvent(r.m["acme"], ref)
		}
		a = r.call("acme", "POST", "/v1/eventos", map[string]any{"eventos": evs})
		status = 422
	default:
		r.note("malformed: two Idempotency-Key headers")
		req, _ := http.NewRequest("POST", r.h.http.URL+"/v1/decisiones", strings.NewReader(decide))
		apitest.SetHeaders(req, true, r.tokens["acme"])
		req.Header.Add("Idempotency-Key", "k-1")
		req.Header.Add("Idempotency-Key", "k-2")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			r.fail("decision with two keys: %v", err)
		}
		a = modelAnswer{status: resp.StatusCode, header: resp.Header, body: apitest.Object(r.t, resp)}
		r.checkAnswer("POST", "/v1/decisiones", a)
		status = 422
	}
	r.expectError("malformed request", a, status, codigo)
}
