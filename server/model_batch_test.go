package server

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"time"
)

// Batch jobs of TestAPIModel (acme only: beta's quotas would make the
// answers depend on which of them the job takes).

// batchJob creates a batch job for some of acme's customers, runs it and
// checks its lines against the model: at most one job an hour (by the
// tenant clock), a customer with an open reward window gets that window's
// decision, the others a new decision (recorded, confirmable, exported)
// within the campaign's budget.
func (r *modelRun) batchJob() {
	r.t.Helper()
	mt := r.m["acme"]
	var refs []string
	for _, ref := range mt.refs {
		if r.pick(2) == 0 {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		refs = mt.refs[:1]
	}
	body := map[string]any{"campana_id": budgetCampaign, "clientes": refs}
	r.note("batch job %s %s", mt.id, canon(body))
	a := r.call(mt.id, "POST", "/v1/lotes-decision", body)
	if mt.batchAt != nil && mt.now.Sub(*mt.batchAt) < time.Hour {
		r.expectError("a second batch job within the hour", a, 429, "limite_excedido")
		return
	}
	if a.status != 202 || a.body["estado"] != "en_cola" || a.body["creado_en"] != mt.now.Format(time.RFC3339) {
		r.fail("batch job: %d %v", a.status, a.body)
	}
	at := mt.now
	mt.batchAt = &at
	id := a.body["job_id"].(string)
	r.h.batch.RunPending(context.Background())
	st := r.call(mt.id, "GET", "/v1/lotes-decision/"+id, nil)
	if st.status != 200 || st.body["estado"] != "completado" || st.body["total"] != float64(len(refs)) {
		r.fail("batch job status: %d %v", st.status, st.body)
	}
	r.batchLines(mt, id, refs)
}

// batchLines reads job id's result and checks each line.
func (r *modelRun) batchLines(mt *modelTenant, id string, refs []string) {
	r.t.Helper()
	resp := r.h.raw("GET", "/v1/lotes-decision/"+id+"/resultado", r.tokens[mt.id], nil)
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		r.fail("batch result: %d %v %s", resp.StatusCode, err, data)
	}
	left := max(budgetSends-mt.sends(budgetCampaign), 0)
	sends := 0
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		// Every line is decided at the job's time: its reward window and
		// caduca_en follow that time.
		at := mt.now
		var d map[string]any
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			r.fail("batch result line %q: %v", l, err)
		}
		ref, _ := d["cliente_ref"].(string)
		got = append(got, ref)
		delete(d, "cliente_ref")
		r.checkDecisionShape(mt, d)
		if open := mt.openWindowAt(ref, at); open != nil {
			if d["decision_id"] != open.id || d["accion"] != 0.0 || d["propension"] != 1.0 {
				r.fail("batch line of %s inside the open window of %s: %v", ref, open.id, d)
			}
			r.seen["batch line in an open window"]++
			continue
		}
		r.batchDecision(mt, ref, at, d)
		sends += min(mt.decisions[d["decision_id"].(string)].accion, 1)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(refs)); !slices.Equal(got, want) {
		r.fail("batch result lines for %v, want %v", got, want)
	}
	if sends > left {
		r.fail("batch job: %d sends, the campaign had %d left", sends, left)
	}
}

// batchDecision records a batch line's new decision, decided at at.
func (r *modelRun) batchDecision(mt *modelTenant, ref string, at time.Time, d map[string]any) {
	r.t.Helper()
	id := d["decision_id"].(string)
	caduca := at.Add(modelTTL)
	if d["caduca_en"] != caduca.Format(time.RFC3339Nano) {
		r.fail("batch line caduca_en %v, want %s", d["caduca_en"], caduca.Format(time.RFC3339Nano))
	}
	if mt.decisions[id] != nil || slices.Contains(mt.erasedIDs, id) {
		r.fail("batch decision reuses id %s", id)
	}
	accion := int(d["accion"].(float64))
	if accion != 0 && !mt.eligible[accion] {
		r.fail("batch accion %d not an active action for push (eligible %v)", accion, mt.eligible)
	}
	mt.decisions[id] = &modelDecision{id: id, ref: ref, at: at, caducaEn: caduca, accion: accion, estado: "pendiente",
		campaign: budgetCampaign, sombra: mt.shadow}
	mt.order = append(mt.order, id)
	mt.window[ref] = id
	r.seen["batch line, new decision"]++
}
