package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/privacy"
)

// Requests of TestAPIModel sent at once: the same keyed decision, the
// same customer's decision, the same batch of events, confirmations of one
// decision. Whatever order the server takes them in, the answers must be
// those of some sequential order.

// modelReq is one request of a burst.
type modelReq struct {
	path string
	body any
	hdr  []string
}

// sendAll sends reqs (POST, as tenant) at once and returns their answers
// in order, each checked by checkAnswer once all are in.
func (r *modelRun) sendAll(tenant string, reqs []modelReq) []modelAnswer {
	r.t.Helper()
	out := make([]modelAnswer, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, q := range reqs {
		wg.Go(func() { out[i], errs[i] = r.send(tenant, q) })
	}
	wg.Wait()
	for i, a := range out {
		if errs[i] != nil {
			r.fail("POST %s: %v", reqs[i].path, errs[i])
		}
		r.checkAnswer("POST", reqs[i].path, a)
	}
	return out
}

// send is one POST of a burst, safe outside the test's goroutine.
func (r *modelRun) send(tenant string, q modelReq) (modelAnswer, error) {
	data, err := json.Marshal(q.body)
	if err != nil {
		return modelAnswer{}, err
	}
	req, err := http.NewRequest("POST", r.h.http.URL+q.path, bytes.NewReader(data))
	if err != nil {
		return modelAnswer{}, err
	}
	apitest.SetHeaders(req, true, r.tokens[tenant], q.hdr...)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return modelAnswer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return modelAnswer{}, err
	}
	a := modelAnswer{status: resp.StatusCode, header: resp.Header}
	if len(raw) > 0 && raw[0] == '{' {
		err = json.Unmarshal(raw, &a.body)
	}
	return a, err
}

// burst sends one kind of request several times at once.
func (r *modelRun) burst(mt *modelTenant) {
	r.t.Helper()
	switch r.pick(4) {
	case 3:
		r.burstErase()
	case 0:
		r.burstDecide(mt)
	case 1:
		r.burstEvents(r.m["acme"]) // no quota: which copy meets a quota is a race
	default:
		r.burstConfirm(mt)
	}
}

// burstDecide sends 2 to 4 identical decision requests at once, keyed or
// not. They are checked as if sequential, the one that made a new
// decision first; a keyed one may also meet its first request still
// running (409 idempotencia_conflicto).
func (r *modelRun) burstDecide(mt *modelTenant) {
	r.t.Helper()
	body := map[string]any{"cliente_ref": r.ref(mt), "contexto": map[string]any{"canal": "push"}}
	key := ""
	var hdr []string
	if r.pick(2) == 0 {
		key = modelKeys[r.pick(len(modelKeys))]
		hdr = []string{"Idempotency-Key", key}
	}
	k := 2 + r.pick(3)
	r.note("burst of %d: decide %s key=%q %s", k, mt.id, key, canon(body))
	reqs := make([]modelReq, k)
	for i := range reqs {
		reqs[i] = modelReq{"/v1/decisiones", body, hdr}
	}
	answers := r.sendAll(mt.id, reqs)
	open := ""
	if d := mt.openWindow(body["cliente_ref"].(string)); d != nil {
		open = d.id
	}
	rank := func(a modelAnswer) int { // a new decision, then other 200s, then the rest
		switch {
		case a.status == 200 && a.body["decision_id"] != open && !windowAnswer(a.body):
			return 0
		case a.status == 200:
			return 1
		case a.status == 409:
			return 3
		}
		return 2
	}
	sort.SliceStable(answers, func(i, j int) bool { return rank(answers[i]) < rank(answers[j]) })
	for _, a := range answers {
		r.note("  answer %d %v", a.status, a.body)
	}
	first := mt.liveKey(key) == nil
	for i, a := range answers {
		if key != "" && first && i > 0 && a.status == 409 && a.body["codigo"] == "idempotencia_conflicto" { // answers[0] is not a 409
			r.seen["decision while its key's first request runs"]++
			continue
		}
		r.expectDecide(mt, body, key, a)
	}
}

// burstEvents sends the same batch of events 2 or 3 times at once: each
// answer is the batch's, and each new event is accepted in exactly one.
func (r *modelRun) burstEvents(mt *modelTenant) {
	r.t.Helper()
	items := r.eventBatch(mt)
	k := 2 + r.pick(2)
	r.note("burst of %d: eventos %s %s", k, mt.id, canon(items))
	p := mt.planEvents(items)
	reqs := make([]modelReq, k)
	for i := range reqs {
		reqs[i] = modelReq{"/v1/eventos", map[string]any{"eventos": items}, nil}
	}
	total := 0
	for _, a := range r.sendAll(mt.id, reqs) {
		total += r.checkEvents(p, a)
	}
	if total != p.aceptados {
		r.fail("burst of events: %d accepted in all, want %d", total, p.aceptados)
	}
	r.applyEvents(mt, p)
}

// burstConfirm sends 2 or 3 different confirmations of one decision at
// once: one wins, the others are second confirmations.
func (r *modelRun) burstConfirm(mt *modelTenant) {
	r.t.Helper()
	if len(mt.order) == 0 {
		return
	}
	d := mt.decisions[mt.order[len(mt.order)-1-r.pick(min(len(mt.order), 3))]]
	other := 1
	if d.accion == 1 {
		other = 2
	}
	bodies := []map[string]any{{"ejecutada": true}, {"ejecutada": false, "motivo_rechazo": "sin stock"}, {"ejecutada": true, "accion_real": other}}
	bodies = bodies[:2+r.pick(2)]
	r.note("burst of %d: confirm %s %s %s", len(bodies), mt.id, d.id, canon(bodies))
	reqs := make([]modelReq, len(bodies))
	for i, b := range bodies {
		reqs[i] = modelReq{"/v1/decisiones/" + d.id + "/ejecucion", b, nil}
	}
	answers := r.sendAll(mt.id, reqs)
	if d.conf != nil || mt.now.After(d.caducaEn) {
		for _, a := range answers {
			if d.conf != nil {
				r.expectError("second confirmation", a, 409, "ejecucion_ya_confirmada")
			} else {
				r.expectError("late confirmation", a, 409, "decision_caducada")
			}
		}
		return
	}
	won := -1
	for i, a := range answers {
		if a.status == 200 && won < 0 {
			won = i
			continue
		}
		r.expectError("confirmation beaten by another", a, 409, "ejecucion_ya_confirmada")
	}
	if won < 0 {
		r.fail("no confirmation of the burst won")
	}
	r.confirmed(mt, d, bodies[won], "", "", answers[won])
}

// windowAnswer reports whether decision d is the answer of an open reward
// window: its reason says so (spec, Reward window).
func windowAnswer(d map[string]any) bool {
	m, _ := d["motivo"].(string)
	return strings.Contains(m, "ventana de recompensa")
}

// burstErase deletes one of acme's customers and runs the deletion pass
// while a batch of the customer's events and a decision for them arrive.
// Either may come before the erasure (and be erased) or after (and stay),
// but a batch stays or goes whole, and whatever stays is exported as the
// model then holds it (features and links included: checked by export).
func (r *modelRun) burstErase() {
	r.t.Helper()
	mt := r.m["acme"] // no daily cap: the decision is always answered
	ref := r.ref(mt)
	r.deleteCliente(mt, ref)
	items := []map[string]any{r.validEvent(mt, ref), r.validEvent(mt, ref)}
	body := map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push"}}
	r.note("burst: deletion pass, eventos %s %s, decide %s", mt.id, canon(items), canon(body))
	p := mt.planEvents(items)
	want := r.scheduled()
	pass := make(chan error, 1)
	go func() {
		stats, err := r.h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{})
		if err == nil && (stats.Completed != want || stats.Failed != 0) {
			err = fmt.Errorf("%+v, want %d completed", stats, want)
		}
		pass <- err
	}()
	answers := r.sendAll(mt.id, []modelReq{{"/v1/eventos", map[string]any{"eventos": items}, nil}, {"/v1/decisiones", body, nil}})
	if err := <-pass; err != nil {
		r.fail("deletion pass: %v", err)
	}
	if n := r.checkEvents(p, answers[0]); n != p.aceptados {
		r.fail("eventos: %d accepted, want %d", n, p.aceptados)
	}
	d := answers[1]
	if d.status != 200 {
		r.fail("decide: %d %v", d.status, d.body)
	}
	r.eraseScheduled()
	r.settleErase(mt, ref, p, d.body)
	r.export(mt.id, ref)
}

// settleErase reads ref's export after burstErase and takes into the
// model what of the burst stayed: the batch's events (all or none) and a
// new decision.
func (r *modelRun) settleErase(mt *modelTenant, ref string, p eventPlan, d map[string]any) {
	r.t.Helper()
	a := r.call(mt.id, "GET", "/v1/clientes/"+ref+"/exportacion", nil)
	held := map[string]bool{}
	for _, e := range list(a.body["eventos"]) {
		held[e["event_id"].(string)] = true
	}
	for _, e := range list(a.body["decisiones"]) {
		held[e["decision_id"].(string)] = true
	}
	stayed := 0
	for id := range p.pending {
		if held[id] {
			stayed++
		}
	}
	switch stayed {
	case len(p.pending):
		r.applyEvents(mt, p)
		r.seen["burst erase: events after the erasure"]++
	case 0:
		r.seen["burst erase: events erased"]++
	default:
		r.fail("burst erase: %d of the batch's %d events stayed", stayed, len(p.pending))
	}
	if id := d["decision_id"].(string); held[id] {
		if windowAnswer(d) {
			r.fail("burst erase: the export holds %s, the answer of a window the erasure closed", id)
		}
		r.newDecision(mt, ref, map[string]any{"contexto": map[string]any{}}, d)
		r.seen["burst erase: decision after the erasure"]++
	}
}

// scheduled counts the deletions of both tenants still programado.
func (r *modelRun) scheduled() int {
	n := 0
	for _, tn := range modelTenants {
		for _, st := range r.m[tn].deletion {
			if st == privacy.DeletionScheduled {
				n++
			}
		}
	}
	return n
}

// eraseScheduled applies a deletion pass to the model: every programado
// customer's data is erased and the deletion completado.
func (r *modelRun) eraseScheduled() {
	for _, tn := range modelTenants {
		mt := r.m[tn]
		for ref, st := range mt.deletion {
			if st == privacy.DeletionScheduled {
				mt.erase(ref)
				mt.deletion[ref] = privacy.DeletionCompleted
			}
		}
	}
}
