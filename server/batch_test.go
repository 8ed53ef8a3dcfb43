package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// batchTenant is a sandbox tenant without control group and without rate
// limits (the harness clock stands still, so token buckets never refill).
func batchTenant(s *store.Settings) {
	s.ControlShare = 0
	s.RateLimits = false
}

// batchHarness is a harness with tenant acme, a catalog of 3 coupons and
// campaign "camp" on push without caps; it returns a token with every scope.
func batchHarness(t *testing.T) (*harness, string) {
	h, tok := newCatalogHarness(t, 3, batchTenant)
	putCampaign(h, tok, "camp", -1)
	return h, tok
}

// putCampaign defines campaign id on push; maxEnvios < 0: no cap.
func putCampaign(h *harness, tok, id string, maxEnvios int) {
	h.t.Helper()
	body := map[string]any{"canal": "push", "descripcion": "campaña " + id}
	if maxEnvios >= 0 {
		body["max_envios"] = maxEnvios
	}
	if st, b := h.do("PUT", "/v1/campanas/"+id, tok, body); st != 200 {
		h.t.Fatalf("campaign: %d %v", st, b)
	}
}

func refs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%06d", prefix, i)
	}
	return out
}

// submit posts a batch request and returns the job id, failing on
// anything but 202.
func submit(h *harness, tok string, body map[string]any) string {
	h.t.Helper()
	st, b := h.do("POST", "/v1/lotes-decision", tok, body)
	if st != 202 {
		h.t.Fatalf("POST /v1/lotes-decision: %d %v", st, b)
	}
	return b["job_id"].(string)
}

func runJobs(h *harness) int {
	h.t.Helper()
	return h.batch.RunPending(context.Background())
}

func status(h *harness, tok, id string) map[string]any {
	h.t.Helper()
	st, b := h.do("GET", "/v1/lotes-decision/"+id, tok, nil)
	if st != 200 {
		h.t.Fatalf("status %s: %d %v", id, st, b)
	}
	return b
}

// get fetches a path and returns status, headers and the raw body.
func get(h *harness, path, tok string, hdr ...string) (int, http.Header, []byte) {
	h.t.Helper()
	resp := h.raw("GET", path, tok, nil, hdr...)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// lines parses JSON Lines.
func lines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("result line %q: %v", l, err)
		}
		out = append(out, m)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("result file does not end with a newline")
	}
	return out
}

// result downloads a completed job's lines with the bearer token.
func result(h *harness, tok, id string) []map[string]any {
	h.t.Helper()
	st, hdr, data := get(h, "/v1/lotes-decision/"+id+"/resultado", tok)
	if st != 200 {
		h.t.Fatalf("resultado %s: %d %s", id, st, data)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/x-ndjson" {
		h.t.Errorf("resultado Content-Type %q, want application/x-ndjson", ct)
	}
	return lines(h.t, data)
}

func lineRefs(ls []map[string]any) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l["cliente_ref"].(string))
	}
	sort.Strings(out)
	return out
}

// pathOf returns the path and query of an absolute URL of the harness.
func pathOf(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path, u.RawQuery
}

func TestBatchStateMachine(t *testing.T) {
	h, tok := batchHarness(t)
	clientes := refs("cliente", 5)

	st, b := h.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	if st != 202 {
		t.Fatalf("create: %d %v", st, b)
	}
	id := b["job_id"].(string)
	if diff := cmp.Diff(map[string]any{"job_id": id, "estado": "en_cola", "creado_en": "2026-11-02T12:00:00Z"}, b); diff != "" {
		t.Errorf("202 body (-want +got):\n%s", diff)
	}

	s := status(h, tok, id)
	want := map[string]any{"job_id": id, "estado": "en_cola", "creado_en": "2026-11-02T12:00:00Z", "campana_id": "camp",
		"total": float64(5), "procesados": float64(0), "iniciado_en": nil, "completado_en": nil}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("queued status (-want +got):\n%s", diff)
	}

	// A second job while one is queued: 429 with Retry-After up to the
	// hour of the queued one, which holds it once completed (it said 60),
	// and that job's id in detalle.
	resp := h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	if got := busyDetalle(t, resp); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || got != id {
		t.Errorf("second job while queued: %d Retry-After %q detalle.job_id %q, want 429 with 3600 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), got, id)
	}

	// While running: en_curso with progress, and a second job is refused.
	var running []map[string]any
	h.batch.OnProgress(1, func(j batch.Job) {
		if j.Procesados != 2 {
			return
		}
		running = append(running, status(h, tok, id))
		resp := h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": clientes})
		if got := busyDetalle(t, resp); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || got != id {
			t.Errorf("second job while running: %d Retry-After %q detalle.job_id %q, want 429 with 3600 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), got, id)
		}
	})
	if n := runJobs(h); n != 1 {
		t.Fatalf("RunPending ran %d jobs, want 1", n)
	}
	h.batch.OnProgress(0, nil)
	if len(running) != 1 {
		t.Fatalf("progress hook saw %d statuses at procesados 2, want 1", len(running))
	}
	r := running[0]
	if r["estado"] != "en_curso" || r["procesados"] != float64(2) || r["total"] != float64(5) || r["iniciado_en"] != "2026-11-02T12:00:00Z" || r["completado_en"] != nil {
		t.Errorf("running status: %v", r)
	}
	if _, ok := r["resultado_url"]; ok {
		t.Errorf("running status has resultado_url: %v", r)
	}

	s = status(h, tok, id)
	if s["estado"] != "completado" || s["procesados"] != float64(5) || s["total"] != float64(5) || s["completado_en"] != "2026-11-02T12:00:00Z" {
		t.Errorf("completed status: %v", s)
	}
	if _, ok := s["error"]; ok {
		t.Errorf("completed status has error: %v", s)
	}
	wantExp := testStart.Add(time.Hour).Format(time.RFC3339)
	if s["resultado_expira_en"] != wantExp {
		t.Errorf("resultado_expira_en = %v, want %s (60 minutes, whole seconds)", s["resultado_expira_en"], wantExp)
	}
	u, _ := s["resultado_url"].(string)
	if !strings.HasPrefix(u, h.http.URL+"/v1/lotes-decision/"+id+"/descarga?") {
		t.Errorf("resultado_url %q", u)
	}
	if got := lineRefs(result(h, tok, id)); !slices.Equal(got, clientes) {
		t.Errorf("result lines for %v, want %v", got, clientes)
	}

	// Within the hour of the tenant clock: 429 with Retry-After up to the hour.
	resp = h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	if got := busyDetalle(t, resp); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || got != id {
		t.Errorf("second job within the hour: %d Retry-After %q detalle.job_id %q, want 429 with 3600 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), got, id)
	}
	advanceTenant(h, "acme", 59*time.Minute)
	resp = h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	if got := busyDetalle(t, resp); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "60" || got != id {
		t.Errorf("second job 59 min later: %d Retry-After %q detalle.job_id %q, want 429 with 60 and %s", resp.StatusCode, resp.Header.Get("Retry-After"), got, id)
	}
	advanceTenant(h, "acme", time.Minute)
	id2 := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	runJobs(h)
	if s := status(h, tok, id2); s["estado"] != "completado" {
		t.Errorf("job an hour later: %v", s)
	}

	// Unknown and foreign jobs are 404.
	if st, _ := h.do("GET", "/v1/lotes-decision/lote_nada", tok, nil); st != 404 {
		t.Errorf("unknown job: %d", st)
	}
	h.tenant("other", true, batchTenant)
	other := h.token("other", allScopes...)
	for _, p := range []string{"/v1/lotes-decision/" + id, "/v1/lotes-decision/" + id + "/resultado"} {
		if st, _, body := get(h, p, other); st != 404 || bytes.Contains(body, []byte("cliente-")) {
			t.Errorf("GET %s by another tenant: %d %s", p, st, body)
		}
	}
}

// advanceTenant moves a sandbox tenant's clock.
func advanceTenant(h *harness, tenant string, d time.Duration) {
	h.t.Helper()
	if _, err := h.db.UpdateTenant(tenant, func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil }); err != nil {
		h.t.Fatal(err)
	}
}

func TestBatchValidation(t *testing.T) {
	h, tok := batchHarness(t)
	cases := []struct {
		name string
		body any
		loc  string // a loc expected in detail
	}{
		{"both", map[string]any{"campana_id": "camp", "clientes": []string{"cliente-0001"}, "segmento": map[string]any{"todos": true}}, "body"},
		{"neither", map[string]any{"campana_id": "camp"}, "body"},
		{"both null", map[string]any{"campana_id": "camp", "clientes": nil, "segmento": nil}, "body"},
		{"no campaign", map[string]any{"clientes": []string{"cliente-0001"}}, "body.campana_id"},
		{"unknown campaign", map[string]any{"campana_id": "nope", "clientes": []string{"cliente-0001"}}, "body.campana_id"},
		{"empty clientes", map[string]any{"campana_id": "camp", "clientes": []string{}}, "body.clientes"},
		{"short cliente_ref", map[string]any{"campana_id": "camp", "clientes": []string{"abc"}}, "body.clientes.0"},
		{"unknown field", map[string]any{"campana_id": "camp", "clientes": []string{"cliente-0001"}, "prioridad": 1}, "body.prioridad"},
		{"unknown feature", map[string]any{"campana_id": "camp", "segmento": map[string]any{"<=": map[string]any{"edad": 30}}}, "body.segmento.<=.edad"},
		{"todos false", map[string]any{"campana_id": "camp", "segmento": map[string]any{"todos": false}}, "body.segmento.todos"},
		{"huge segment", map[string]any{"campana_id": "camp", "segmento": map[string]any{"y": make([]int, engine.SegmentMaxBytes/2)}}, "body.segmento"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, b := h.do("POST", "/v1/lotes-decision", tok, c.body)
			if st != 422 {
				t.Fatalf("%d %v, want 422", st, b)
			}
			var locs []string
			for _, d := range b["detail"].([]any) {
				var parts []string
				for _, p := range d.(map[string]any)["loc"].([]any) {
					parts = append(parts, fmt.Sprint(p))
				}
				locs = append(locs, strings.Join(parts, "."))
			}
			if !slices.ContainsFunc(locs, func(l string) bool {
				return strings.HasPrefix(c.loc, l) && strings.HasPrefix(l, "body") && (c.loc == "body" || l != "body")
			}) {
				t.Errorf("locs %v lack %q", locs, c.loc)
			}
		})
	}
	// A 422 is written without HTML escaping, like every answer: the
	// segment's "<=" reads as typed in loc, msg and input.
	resp := h.raw("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "segmento": map[string]any{"<=": map[string]any{"edad": 30}}})
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 422 || !bytes.Contains(raw, []byte(`"<="`)) || bytes.Contains(raw, []byte(`\u003c`)) {
		t.Errorf("422 body escapes HTML: %d %s", resp.StatusCode, raw)
	}
	// Nothing was queued by the refusals.
	if h.batch.Busy("acme") != nil {
		t.Errorf("a refused request left a job behind")
	}
	noScope := h.token("acme", "eventos:publicar")
	if st, _ := h.do("POST", "/v1/lotes-decision", noScope, map[string]any{"campana_id": "camp", "clientes": []string{"cliente-0001"}}); st != 403 {
		t.Errorf("without decisiones:pedir: %d, want 403", st)
	}
	if st, _ := h.do("POST", "/v1/lotes-decision", "", map[string]any{"campana_id": "camp", "clientes": []string{"cliente-0001"}}); st != 401 {
		t.Errorf("without token: %d, want 401", st)
	}
}

func TestBatchSegment(t *testing.T) {
	h, tok := batchHarness(t)
	recent, old := refs("reciente", 6), refs("antiguo", 4)
	var evs []map[string]any
	for i, r := range recent {
		evs = append(evs, purchase(fmt.Sprintf("r%d", i), r, testStart.Add(-time.Duration(i+1)*24*time.Hour), 200, 60))
	}
	for i, r := range old {
		evs = append(evs, purchase(fmt.Sprintf("o%d", i), r, testStart.Add(-time.Duration(60+i)*24*time.Hour), 200, 60))
	}
	if st, b := postEvents(h, tok, evs...); st != 200 || b["aceptados"] != float64(len(evs)) {
		t.Fatalf("events: %d %v", st, b)
	}
	// Known only by a decision: no history, so in no segment.
	if st, b := h.do("POST", "/v1/decisiones", tok, decideBody("sin-historia-01", nil)); st != 200 {
		t.Fatalf("decide: %d %v", st, b)
	}

	id := submit(h, tok, map[string]any{"campana_id": "camp", "segmento": map[string]any{"<=": map[string]any{"recencia_dias": 30}}})
	if s := status(h, tok, id); s["total"] != float64(0) || s["estado"] != "en_cola" {
		t.Errorf("queued segment job: %v", s)
	}
	var totals []float64
	h.batch.OnProgress(1, func(j batch.Job) {
		if j.Procesados == 1 {
			totals = append(totals, status(h, tok, id)["total"].(float64))
		}
	})
	runJobs(h)
	h.batch.OnProgress(0, nil)
	if !slices.Equal(totals, []float64{6}) {
		t.Errorf("total while running: %v, want [6] (the segment's size, once listed)", totals)
	}
	if s := status(h, tok, id); s["estado"] != "completado" || s["total"] != float64(6) || s["procesados"] != float64(6) {
		t.Errorf("segment job: %v", s)
	}
	if got := lineRefs(result(h, tok, id)); !slices.Equal(got, recent) {
		t.Errorf("recencia_dias <= 30: lines for %v, want %v", got, recent)
	}

	advanceTenant(h, "acme", time.Hour)
	id = submit(h, tok, map[string]any{"campana_id": "camp", "segmento": map[string]any{"todos": true}})
	runJobs(h)
	all := append(append([]string{}, recent...), old...)
	sort.Strings(all)
	got := result(h, tok, id)
	if refs := lineRefs(got); !slices.Equal(refs, all) {
		t.Errorf("todos: lines for %v, want %v (every customer with history)", refs, all)
	}
	// The recent customers' reward windows opened in the first job: the
	// second answers with the open decision, as online decisions do.
	for _, l := range got {
		if strings.HasPrefix(l["cliente_ref"].(string), "reciente") && !strings.Contains(l["motivo"].(string), "ventana de recompensa") {
			t.Errorf("line %v: want the open reward window's answer", l)
		}
	}

	advanceTenant(h, "acme", time.Hour)
	id = submit(h, tok, map[string]any{"campana_id": "camp", "segmento": map[string]any{"y": []any{
		map[string]any{">": map[string]any{"recencia_dias": 30}}, map[string]any{"no": map[string]any{"==": map[string]any{"frecuencia_90d": 5}}}}}})
	runJobs(h)
	if refs := lineRefs(result(h, tok, id)); !slices.Equal(refs, old) {
		t.Errorf("recencia_dias > 30: lines for %v, want %v", refs, old)
	}
}

// TestBatchResultLines checks that a line is the online decision body plus
// cliente_ref, recorded as online decisions are.
func TestBatchResultLines(t *testing.T) {
	h, tok := batchHarness(t)
	clientes := refs("linea", 50)
	sent := slices.Clone(clientes)
	slices.Reverse(sent)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": append(sent, clientes[0])}) // a repeat counts once
	runJobs(h)
	ls := result(h, tok, id)
	if len(ls) != len(clientes) {
		t.Fatalf("%d lines, want %d", len(ls), len(clientes))
	}
	keys := []string{"accion", "accion_nombre", "caduca_en", "cliente_ref", "decision_id", "en_control", "en_respaldo", "explorado", "motivo", "politica_version", "propension"}
	ids := map[string]bool{}
	for i, l := range ls {
		var got []string
		for k := range l {
			got = append(got, k)
		}
		sort.Strings(got)
		if !slices.Equal(got, keys) {
			t.Fatalf("line %d keys %v, want %v", i, got, keys)
		}
		if l["cliente_ref"] != clientes[i] {
			t.Errorf("line %d is %v, want %s (cliente_ref order)", i, l["cliente_ref"], clientes[i])
		}
		ids[l["decision_id"].(string)] = true
		if p := l["propension"].(float64); p <= 0 || p > 1 {
			t.Errorf("line %d propension %v", i, p)
		}
	}
	if len(ids) != len(ls) {
		t.Errorf("%d distinct decision ids for %d lines", len(ids), len(ls))
	}
	// Recorded as online decisions: the customer's reward window is open
	// with this decision, and it can be confirmed.
	first := ls[0]
	st, d := h.do("POST", "/v1/decisiones", tok, decideBody(clientes[0], nil))
	if st != 200 || d["decision_id"] != first["decision_id"] {
		t.Errorf("online decision after the batch: %d %v, want the batch's decision %v", st, d, first["decision_id"])
	}
	body := map[string]any{"ejecutada": true}
	if first["accion"].(float64) == 0 {
		body = map[string]any{"ejecutada": false, "motivo_rechazo": "nada que enviar"}
	}
	if st, b := h.do("POST", "/v1/decisiones/"+first["decision_id"].(string)+"/ejecucion", tok, body); st != 200 {
		t.Errorf("confirming a batch decision: %d %v", st, b)
	}

	// Shadow mode shows in the lines as online.
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error {
		t.Settings.Shadow = true
		t.ClockNow = t.ClockNow.Add(time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	id = submit(h, tok, map[string]any{"campana_id": "camp", "clientes": []string{"sombra-000001"}})
	runJobs(h)
	if l := result(h, tok, id); len(l) != 1 || l[0]["en_sombra"] != true {
		t.Errorf("shadow line: %v", l)
	}
}

// TestBatchBudgetCut checks max_envios: never more sends than the budget,
// and the sends go to the customers with the highest expected gain: the
// cut keeps them, highest first, until their decisions' send
// probabilities add up to the budget (batch.KeepTop), and names the budget
// in the motive of every other eligible customer.
func TestBatchBudgetCut(t *testing.T) {
	h, tok := batchHarness(t)
	const k = 6
	putCampaign(h, tok, "tope", k)
	rng := rand.New(rand.NewPCG(1, 2))
	clientes := refs("presupuesto", 60)
	var evs []map[string]any
	for i, r := range clientes {
		n := 1 + rng.IntN(6)
		valor := 50 + float64(rng.IntN(2000))
		for j := 0; j < n; j++ {
			ts := testStart.Add(-time.Duration(1+rng.IntN(80)) * 24 * time.Hour)
			evs = append(evs, purchase(fmt.Sprintf("p%d-%d", i, j), r, ts, valor, float64(int(valor*0.3))))
		}
	}
	for len(evs) > 0 {
		n := min(len(evs), 500)
		if st, b := postEvents(h, tok, evs[:n]...); st != 200 || len(b["rechazados"].([]any)) != 0 {
			t.Fatalf("events: %d %v", st, b)
		}
		evs = evs[n:]
	}
	// One customer opted out of push: never a send, whatever the budget.
	optout := map[string]any{"event_id": "baja-1", "cliente_ref": clientes[0], "ts": testStart.Add(-time.Hour).Format(time.RFC3339), "tipo": "BAJA", "clave": "comunicaciones", "extra": map[string]any{"canal": "push"}}
	if st, b := postEvents(h, tok, optout); st != 200 || len(b["rechazados"].([]any)) != 0 {
		t.Fatalf("opt-out: %d %v", st, b)
	}

	id := submit(h, tok, map[string]any{"campana_id": "tope", "clientes": clientes})
	// The expected gains as the job sees them (same clock and model).
	bd, err := h.engine.NewBatchDecider("acme", "probe", "tope")
	if err != nil {
		t.Fatal(err)
	}
	gains := map[string]engine.Gain{}
	var eligible []engine.Gain
	for _, r := range clientes {
		g, err := bd.SendGain(r)
		if err != nil {
			t.Fatal(err)
		}
		if g.OK {
			gains[r] = g
			eligible = append(eligible, g)
		}
	}
	bd.Close()
	if _, ok := gains[clientes[0]]; ok {
		t.Errorf("opted-out customer counted as able to receive a send")
	}
	sort.SliceStable(eligible, func(i, j int) bool { return eligible[i].Cents > eligible[j].Cents })
	kept, expected := 0, 0.0
	for kept < len(eligible) && expected < k {
		expected += eligible[kept].PSend
		kept++
	}
	if kept <= k || kept == len(eligible) || eligible[kept-1].Cents == eligible[kept].Cents {
		t.Fatalf("the cut does not test the rule: keeps %d of %d for %d sends (gains %v)", kept, len(eligible), k, eligible)
	}
	last := eligible[kept-1].Cents

	runJobs(h)
	ls := result(h, tok, id)
	if len(ls) != len(clientes) {
		t.Fatalf("%d lines, want %d", len(ls), len(clientes))
	}
	sends, cut := 0, 0
	for _, l := range ls {
		ref := l["cliente_ref"].(string)
		g, ok := gains[ref]
		outside := ok && g.Cents < last
		if outside {
			cut++
			if l["accion"].(float64) != 0 || !strings.Contains(l["motivo"].(string), "reservó a los clientes de mayor margen") {
				t.Errorf("customer %s outside the cut: accion %v, motivo %q does not name the cut", ref, l["accion"], l["motivo"])
			}
		} else if ok && strings.Contains(l["motivo"].(string), "reservó a los clientes de mayor margen") {
			t.Errorf("customer %s inside the cut (gain %v) decided as cut: %q", ref, g.Cents, l["motivo"])
		}
		if l["accion"].(float64) != 0 {
			sends++
			if !ok || g.Cents < last {
				t.Errorf("customer %s got a send with gain %v (ok %v) below the cut's last %v", ref, g.Cents, ok, last)
			}
		}
	}
	if sends > k {
		t.Errorf("%d sends, budget max_envios %d", sends, k)
	}
	if sends == 0 {
		t.Errorf("no sends at all: the top customers expect a positive gain")
	}
	if cut != len(eligible)-kept {
		t.Errorf("%d eligible customers cut, want %d", cut, len(eligible)-kept)
	}
	t.Logf("%d sends of budget %d; %d of %d eligible kept (expected sends %.2f)", sends, k, kept, len(eligible), expected)

	// The budget is spent across jobs: a second job can only use what is left.
	advanceTenant(h, "acme", time.Hour)
	id = submit(h, tok, map[string]any{"campana_id": "tope", "clientes": refs("nuevo", 30)})
	runJobs(h)
	more := 0
	for _, l := range result(h, tok, id) {
		if l["accion"].(float64) != 0 {
			more++
		}
	}
	if sends+more > k {
		t.Errorf("%d + %d sends over two jobs, budget %d", sends, more, k)
	}
}

// TestBatchBudgetZero: max_envios 0 means no sends at all.
func TestBatchBudgetZero(t *testing.T) {
	h, tok := batchHarness(t)
	putCampaign(h, tok, "cero", 0)
	id := submit(h, tok, map[string]any{"campana_id": "cero", "clientes": refs("cero", 40)})
	runJobs(h)
	for _, l := range result(h, tok, id) {
		if l["accion"].(float64) != 0 {
			t.Fatalf("send with max_envios 0: %v", l)
		}
	}
}

// TestBatchRestart: a job left en_curso by a stop ends fallido with an
// error that says why at the next start; a queued job still runs; a stop
// during a job (context cancelled) ends it fallido too.
func TestBatchRestart(t *testing.T) {
	h, tok := batchHarness(t)
	h.tenant("beta", true, batchTenant)
	btok := h.token("beta", allScopes...)
	h.catalog(btok, 2)
	putCampaign(h, btok, "camp", -1)

	crashed := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("caida", 10)})
	queued := submit(h, btok, map[string]any{"campana_id": "camp", "clientes": refs("cola", 10)})
	// The process died while the first job ran: its record says en_curso.
	var j batch.Job
	key := store.JobKey("acme", crashed)
	if err := h.db.GetJSON(key, &j); err != nil {
		t.Fatal(err)
	}
	started := testStart
	j.Estado, j.IniciadoEn = api.EstadoEnCurso, &started
	b := h.db.NewBatch()
	if err := b.SetJSON(key, &j); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if s := status(h, tok, crashed); s["estado"] != "en_curso" {
		t.Fatalf("before recovery: %v", s)
	}

	if err := h.batch.Recover(); err != nil {
		t.Fatal(err)
	}
	s := status(h, tok, crashed)
	if s["estado"] != "fallido" || !strings.Contains(fmt.Sprint(s["error"]), "reinicio") || s["completado_en"] == nil {
		t.Errorf("interrupted job after recovery: %v, want fallido with an error naming the restart", s)
	}
	if _, ok := s["resultado_url"]; ok {
		t.Errorf("failed job has resultado_url: %v", s)
	}
	if st, _, _ := get(h, "/v1/lotes-decision/"+crashed+"/resultado", tok); st != 404 {
		t.Errorf("resultado of a failed job: %d, want 404", st)
	}
	if n := runJobs(h); n != 1 {
		t.Errorf("RunPending ran %d jobs, want the queued one", n)
	}
	if s := status(h, btok, queued); s["estado"] != "completado" || s["procesados"] != float64(10) {
		t.Errorf("queued job after recovery: %v", s)
	}
	// A failed job does not hold the hourly slot.
	again := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("caida", 10)})

	// A stop in the middle of a job: the runner ends it fallido.
	ctx, cancel := context.WithCancel(context.Background())
	h.batch.OnProgress(1, func(j batch.Job) {
		if j.Procesados == 4 {
			cancel()
		}
	})
	h.batch.RunPending(ctx)
	h.batch.OnProgress(0, nil)
	s = status(h, tok, again)
	if s["estado"] != "fallido" || !strings.Contains(fmt.Sprint(s["error"]), "parada") {
		t.Errorf("job stopped midway: %v, want fallido with an error naming the stop", s)
	}
}

// TestSignedURLEndsWithItsCredential: a resultado_url stops (404, as an
// expired one) when the credential whose status query minted it could no
// longer use that token: revoked, suspended, or its secret rotated and the
// grace over; a URL minted for another credential of the tenant goes on.
func TestSignedURLEndsWithItsCredential(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("cred", 4)})
	runJobs(h)
	// Each scope set is its own credential (harness.credential).
	mint := func(scopes ...string) (clientID, target string) {
		clientID, _ = h.credential("acme", scopes...)
		p, q := pathOf(t, status(h, h.token("acme", scopes...), id)["resultado_url"].(string))
		return clientID, p + "?" + q
	}
	update := func(clientID string, fn func(c *store.Credential)) {
		if _, err := h.db.UpdateCredential(clientID, func(c *store.Credential) error { fn(c); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	revoked, revokedURL := mint("decisiones:pedir")
	suspended, suspendedURL := mint("decisiones:pedir", "eventos:publicar")
	rotated, rotatedURL := mint("decisiones:pedir", "catalogo:escribir")
	_, keptURL := mint("decisiones:pedir", "campanas:escribir")
	for _, u := range []string{revokedURL, suspendedURL, rotatedURL, keptURL} {
		if st, _, _ := get(h, u, ""); st != 200 {
			t.Fatalf("fresh URL %s: %d, want 200", u, st)
		}
	}
	update(revoked, func(c *store.Credential) { c.Revoked = true })
	update(suspended, func(c *store.Credential) { c.Suspended = true })
	rotateCredential(t, h, rotated, 10*time.Minute)
	type answers struct{ Revoked, Suspended, Rotated, Kept int }
	read := func() answers {
		st := func(u string) int { s, _, _ := get(h, u, ""); return s }
		return answers{st(revokedURL), st(suspendedURL), st(rotatedURL), st(keptURL)}
	}
	if diff := cmp.Diff(answers{404, 404, 200, 200}, read()); diff != "" {
		t.Errorf("within the rotation's grace (-want +got):\n%s", diff)
	}
	h.clock.Advance(10 * time.Minute)
	if diff := cmp.Diff(answers{404, 404, 404, 200}, read()); diff != "" {
		t.Errorf("after the rotation's grace (-want +got):\n%s", diff)
	}
}

// TestSignedURLPausedTenant: a paused tenant's resultado_url answers 503
// inquilino_pausado with Retry-After and no data, as its /resultado twin
// does, once the link's own checks pass: an altered, expired or
// credential-less link stays 404. Resumed, the same link downloads again.
// It downloaded the paused tenant's result (200).
func TestSignedURLPausedTenant(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("pausa", 3)})
	runJobs(h)
	path, query := pathOf(t, status(h, tok, id)["resultado_url"].(string))
	clientID, _ := h.credential("acme", allScopes...)
	sign := func(g batch.Grant, exp time.Time) string {
		p, q := pathOf(t, h.batch.Signer.Sign(g, exp))
		return p + "?" + q
	}
	targets := []struct{ name, target, tok string }{
		{"link", path + "?" + query, ""},
		{"resultado", "/v1/lotes-decision/" + id + "/resultado", tok},
		{"altered link", path + "?" + strings.Replace(query, "&exp=", "&exp=1", 1), ""},
		{"expired link", sign(batch.Grant{Tenant: "acme", JobID: id, ClientID: clientID}, h.clock.Now().Add(-time.Second)), ""},
		{"unknown credential's link", sign(batch.Grant{Tenant: "acme", JobID: id, ClientID: "ci_nadie"}, h.clock.Now().Add(time.Hour)), ""},
	}
	type answer struct {
		Status     int
		Codigo     string
		RetryAfter string
		Data       bool
	}
	read := func() map[string]answer {
		out := map[string]answer{}
		for _, tg := range targets {
			st, hdr, body := get(h, tg.target, tg.tok)
			a := answer{Status: st, RetryAfter: hdr.Get("Retry-After"), Data: bytes.Contains(body, []byte("pausa-"))}
			if st != 200 {
				a.Codigo, _ = errorShape(t, body)["codigo"].(string)
			}
			out[tg.name] = a
		}
		return out
	}
	setPaused := func(paused bool) {
		if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.Paused = paused; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	refused := answer{Status: 404, Codigo: "no_encontrado"}
	paused := answer{Status: 503, Codigo: "inquilino_pausado", RetryAfter: "60"}
	served := answer{Status: 200, Data: true}
	setPaused(true)
	want := map[string]answer{"link": paused, "resultado": paused,
		"altered link": refused, "expired link": refused, "unknown credential's link": refused}
	if diff := cmp.Diff(want, read()); diff != "" {
		t.Errorf("paused (-want +got):\n%s", diff)
	}
	setPaused(false)
	want["link"], want["resultado"] = served, served
	if diff := cmp.Diff(want, read()); diff != "" {
		t.Errorf("resumed (-want +got):\n%s", diff)
	}
}

// TestSignedURLQueryIsDocumented: the query parameters of the
// lotes_descarga operation in the served document are exactly those of the
// resultado_url a status query gives, each required: a client (or a
// generated one) that rebuilds the URL from the document keeps every one.
func TestSignedURLQueryIsDocumented(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("doc", 2)})
	runJobs(h)
	_, rawQuery := pathOf(t, status(h, tok, id)["resultado_url"].(string))
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatal(err)
	}
	var minted, documented []string
	for k := range q {
		minted = append(minted, k+" required")
	}
	for _, v := range operationOf(loadOpenAPI(t), "GET", "/v1/lotes-decision/:job_id/descarga")["parameters"].([]any) {
		p := asObj(v)
		if p["in"] != "query" {
			continue
		}
		need := "optional"
		if p["required"] == true {
			need = "required"
		}
		documented = append(documented, fmt.Sprintf("%v %s", p["name"], need))
	}
	slices.Sort(minted)
	slices.Sort(documented)
	if diff := cmp.Diff(minted, documented); diff != "" {
		t.Errorf("query parameters of a minted resultado_url (-) and of lotes_descarga in the document (+):\n%s", diff)
	}
}

// TestBatchSignedURL checks the signed result URL: it works without a
// token, any alteration, expiry or another tenant's URL gives the same 404
// with no data, and a new status query gives a new URL.
func TestBatchSignedURL(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("firmado", 8)})
	runJobs(h)
	s := status(h, tok, id)
	path, query := pathOf(t, s["resultado_url"].(string))
	st, hdr, body := get(h, path+"?"+query, "")
	if st != 200 || hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("signed URL: %d %v", st, hdr)
	}
	if got := lines(t, body); len(got) != 8 {
		t.Errorf("signed URL: %d lines, want 8", len(got))
	}
	if resp := h.raw("HEAD", path+"?"+query, "", nil); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("HEAD on the signed URL: %d %v, want 200 with the GET's headers", resp.StatusCode, resp.Header)
	} else {
		resp.Body.Close()
	}
	_, _, viaToken := get(h, "/v1/lotes-decision/"+id+"/resultado", tok)
	if !bytes.Equal(body, viaToken) {
		t.Errorf("signed URL and /resultado differ")
	}

	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(v string) string {
		b := []byte(v)
		if b[len(b)-1] == 'A' {
			b[len(b)-1] = 'B'
		} else {
			b[len(b)-1] = 'A'
		}
		return string(b)
	}
	exp, _ := strconv.ParseInt(q.Get("exp"), 10, 64)
	t1, cg := "t="+q.Get("t"), "&c="+q.Get("c")+"&g="+q.Get("g")
	altered := map[string]string{
		"sig changed":                   t1 + cg + "&exp=" + q.Get("exp") + "&sig=" + flip(q.Get("sig")),
		"exp later":                     t1 + cg + "&exp=" + strconv.FormatInt(exp+3600, 10) + "&sig=" + q.Get("sig"),
		"exp earlier":                   t1 + cg + "&exp=" + strconv.FormatInt(exp-1, 10) + "&sig=" + q.Get("sig"),
		"exp padded":                    t1 + cg + "&exp=0" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"tenant changed":                "t=other" + cg + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"client changed":                t1 + "&c=ci_otro&g=" + q.Get("g") + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"generation changed":            t1 + "&c=" + q.Get("c") + "&g=1&exp=" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"tenant repeated":               query + "&t=" + q.Get("t"),
		"client repeated":               query + "&c=" + q.Get("c"),
		"exp repeated":                  query + "&exp=" + q.Get("exp"),
		"sig repeated":                  query + "&sig=" + q.Get("sig"),
		"param added":                   query + "&x=1",
		"empty pair added":              query + "&",
		"sig missing":                   t1 + cg + "&exp=" + q.Get("exp"),
		"exp missing":                   t1 + cg + "&sig=" + q.Get("sig"),
		"tenant missing":                cg[1:] + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"client missing":                t1 + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig") + "&g=" + q.Get("g"),
		"client and generation missing": t1 + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig"),
		"no query":                      "",
		"sig padded":                    t1 + cg + "&exp=" + q.Get("exp") + "&sig=" + q.Get("sig") + "=",
		"sig percent":                   t1 + cg + "&exp=" + q.Get("exp") + "&sig=" + url.QueryEscape(q.Get("sig")[:5]) + "%" + fmt.Sprintf("%02X", q.Get("sig")[5]) + q.Get("sig")[6:],
	}
	// The 404 of a job that does not exist (an unknown path names itself
	// as a route, see TestUnknownRouteNamesIt; a link says nothing more).
	_, _, notFound := get(h, "/v1/lotes-decision/lote_nada/descarga", "")
	notFoundShape := errorShape(t, notFound)
	check := func(name, path, query string) {
		t.Helper()
		target := path
		if query != "" {
			target += "?" + query
		}
		st, hdr, body := get(h, target, "")
		if st != 404 {
			t.Errorf("%s: %d, want 404", name, st)
			return
		}
		if hdr.Get("Content-Encoding") != "" || strings.Contains(hdr.Get("Content-Type"), "ndjson") || bytes.Contains(body, []byte("firmado")) || bytes.Contains(body, []byte(id)) {
			t.Errorf("%s: 404 leaks: %v %s", name, hdr, body)
		}
		if got := errorShape(t, body); !cmp.Equal(got, notFoundShape) {
			t.Errorf("%s: 404 body %s, want the same as a job that does not exist %s", name, body, notFound)
		}
	}
	for name, aq := range altered {
		check(name, path, aq)
	}
	// Another job's path with this signature.
	check("job changed", strings.Replace(path, id, "lote_otro", 1), query)

	// Another tenant's URL for this job, minted for that tenant's own active
	// credential: authentic signature, but the job is not the tenant's.
	h.tenant("other", true, batchTenant)
	otherID, _ := h.credential("other", allScopes...)
	foreign := h.batch.Signer.Sign(batch.Grant{Tenant: "other", JobID: id, ClientID: otherID, Detalle: true}, h.clock.Now().Add(time.Hour))
	fp, fq := pathOf(t, foreign)
	check("other tenant", fp, fq)

	// Expired: 60 minutes of real time.
	h.clock.Advance(time.Hour - time.Second)
	if st, _, _ := get(h, path+"?"+query, ""); st != 200 {
		t.Errorf("one second before expiry: %d, want 200", st)
	}
	h.clock.Advance(time.Second)
	check("expired", path, query)

	// A new status query gives a new, working URL.
	tok = h.token("acme", allScopes...) // tokens last 15 minutes of real time
	s2 := status(h, tok, id)
	if s2["resultado_url"] == s["resultado_url"] {
		t.Errorf("status after expiry gives the same URL")
	}
	if want := testStart.Add(2 * time.Hour).Format(time.RFC3339); s2["resultado_expira_en"] != want {
		t.Errorf("new resultado_expira_en %v, want %s", s2["resultado_expira_en"], want)
	}
	p2, q2 := pathOf(t, s2["resultado_url"].(string))
	if st, _, b2 := get(h, p2+"?"+q2, ""); st != 200 || !bytes.Equal(b2, body) {
		t.Errorf("new URL: %d", st)
	}
}

// errorShape is an error body without its trace id.
func errorShape(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	delete(m, "trace_id")
	return m
}

// TestBatchZstd checks content negotiation: with Accept-Encoding zstd the
// stored bytes go out as they are, otherwise plain JSON Lines.
// resultPath is the path of acme's completed job id's result file.
func resultPath(t *testing.T, h *harness, id string) string {
	t.Helper()
	j, err := h.batch.Job("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	path, ok := h.batch.ResultFile(j)
	if !ok {
		t.Fatalf("job %s has no result file", id)
	}
	return path
}

func TestBatchZstd(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("zstd", 300)})
	runJobs(h)
	path := resultPath(t, h, id)
	stored, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	plain, err := dec.DecodeAll(stored, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(plain, []byte("\n")); n != 300 {
		t.Fatalf("stored file has %d lines, want 300", n)
	}
	signed := status(h, tok, id)["resultado_url"].(string)
	sp, sq := pathOf(t, signed)
	for _, target := range []struct{ name, path, tok string }{
		{"resultado", "/v1/lotes-decision/" + id + "/resultado", tok},
		{"signed", sp + "?" + sq, ""},
	} {
		for _, ae := range []string{"zstd", "gzip, zstd;q=0.5", "ZSTD"} {
			st, hdr, body := get(h, target.path, target.tok, "Accept-Encoding", ae)
			if st != 200 || hdr.Get("Content-Encoding") != "zstd" || hdr.Get("Content-Type") != "application/x-ndjson" {
				t.Errorf("%s, Accept-Encoding %q: %d %v, want zstd", target.name, ae, st, hdr)
			}
			if !bytes.Equal(body, stored) {
				t.Errorf("%s, Accept-Encoding %q: body is not the stored bytes", target.name, ae)
			}
			if hdr.Get("Content-Length") != strconv.Itoa(len(stored)) {
				t.Errorf("%s: Content-Length %q, want %d", target.name, hdr.Get("Content-Length"), len(stored))
			}
		}
		for _, ae := range []string{"", "gzip", "zstd;q=0", "*", "identity"} {
			st, hdr, body := get(h, target.path, target.tok, "Accept-Encoding", ae)
			if st != 200 || hdr.Get("Content-Encoding") != "" || hdr.Get("Content-Type") != "application/x-ndjson" {
				t.Errorf("%s, Accept-Encoding %q: %d %v, want plain", target.name, ae, st, hdr)
			}
			if !bytes.Equal(body, plain) {
				t.Errorf("%s, Accept-Encoding %q: body is not the decompressed file", target.name, ae)
			}
		}
	}
}

// TestBatchDamagedResultFile: a result file damaged on disk is answered
// 500 error_interno (with its trace id), whether the client takes zstd or
// not and wherever the damage is: the file is read whole before the status
// line. The decompressing download wrote the status line first and then
// aborted, so the client saw the connection drop with no answer at all
// (past its first 64 KiB, until the whole file was read first); a zstd
// download sent the damaged bytes as a 200; and an empty (0-byte) file,
// which no committed result is, was sent as a complete result of no lines.
// A file downloaded whole once and damaged after is read again. A job
// without lines still downloads as an empty 200.
func TestBatchDamagedResultFile(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "segmento": map[string]any{"todos": true}})
	runJobs(h)
	for _, ae := range []string{"", "zstd"} {
		if st, _, body := get(h, "/v1/lotes-decision/"+id+"/resultado", tok, "Accept-Encoding", ae); st != 200 || (ae == "" && len(body) != 0) {
			t.Errorf("job without lines, Accept-Encoding %q: %d %q, want 200 and no lines", ae, st, body)
		}
	}
	for _, tc := range []struct {
		name   string
		lines  int
		damage func([]byte) []byte
	}{
		{"not zstd", 40, func([]byte) []byte { return []byte("not a result file") }},
		{"bit flipped", 40, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"checksum", 40, func(b []byte) []byte { b[len(b)-2] ^= 0xff; return b }},
		{"empty", 40, func([]byte) []byte { return nil }},
		{"late in a large file", 2000, func(b []byte) []byte { b[len(b)*3/4] ^= 0xff; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			advanceTenant(h, "acme", time.Hour)
			id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("danado", tc.lines)})
			runJobs(h)
			if st, _, _ := get(h, "/v1/lotes-decision/"+id+"/resultado", tok, "Accept-Encoding", "zstd"); st != 200 {
				t.Fatalf("before the damage: %d, want 200", st)
			}
			path := resultPath(t, h, id)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			signed := status(h, tok, id)["resultado_url"].(string)
			sp, sq := pathOf(t, signed)
			for _, ae := range []string{"", "zstd"} {
				for _, target := range []struct{ path, tok string }{{"/v1/lotes-decision/" + id + "/resultado", tok}, {sp + "?" + sq, ""}} {
					req, _ := http.NewRequest("GET", h.http.URL+target.path, nil)
					if target.tok != "" {
						req.Header.Set("Authorization", "Bearer "+target.tok)
					}
					req.Header.Set("Accept-Encoding", ae)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Errorf("%s, Accept-Encoding %q: %v, want a 500 answer", target.path, ae, err)
						continue
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 500 {
						t.Errorf("%s, Accept-Encoding %q: %d %q, want 500", target.path, ae, resp.StatusCode, body)
						continue
					}
					if e := errorShape(t, body); e["codigo"] != "error_interno" || resp.Header.Get("X-Trace-Id") == "" {
						t.Errorf("%s, Accept-Encoding %q: %d %s, want 500 error_interno", target.path, ae, resp.StatusCode, body)
					}
					// The 500 is an ErrorV1 answer, not a result's: the
					// document lists no Cache-Control or Vary for it.
					if got := resp.Header.Values("Cache-Control"); len(got) > 0 || resp.Header.Get("Vary") != "" {
						t.Errorf("%s, Accept-Encoding %q: 500 with Cache-Control %q and Vary %q, want neither", target.path, ae, got, resp.Header.Get("Vary"))
					}
				}
			}
		})
	}
}

// TestBatchResultRemovedDuringDownload: a result file that retention
// removes while a download reads it is a 404 (or, opened in time, a whole
// 200), never a 500. The download checked the file by its path and then
// opened it again: a file there at the check and gone at the open was
// answered 500 error_interno. It now opens the file once and verifies and
// sends what it opened. The file is removed and put back (two versions,
// so that each download reads it again) while downloads run: with the
// check's window a few microseconds wide, 300 downloads met it every time.
func TestBatchResultRemovedDuringDownload(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("quitado", 20)})
	runJobs(h)
	path := resultPath(t, h, id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	versions := []string{path + ".a", path + ".b"}
	for i, v := range versions {
		if err := os.WriteFile(v, data, 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(i) * time.Hour)
		if err := os.Chtimes(v, at, at); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // retention removing the file, a restore putting it back
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			os.Remove(path)
			os.Link(versions[i%2], path)
		}
	}()
	got := map[int]int{}
	for range 300 {
		st, _, body := get(h, "/v1/lotes-decision/"+id+"/resultado", tok)
		got[st]++
		if st == 200 && len(lines(t, body)) != 20 {
			t.Errorf("200 with %d lines, want 20", len(lines(t, body)))
		}
	}
	close(stop)
	<-done
	if got[500] > 0 || got[200]+got[404] != 300 {
		t.Errorf("statuses %v, want 200 and 404 only", got)
	}
}

// TestBatchResultDamagedAfterVerification: a result file verified by one
// download and damaged in place since (size and time unchanged, as a bad
// sector leaves it) is cut short by the next download, which trusts the
// verification and finds the damage while sending; the download after that
// reads the file whole again and answers 500. Every later download was cut
// short too: the verification was never forgotten.
func TestBatchResultDamagedAfterVerification(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("podrido", 2000)})
	runJobs(h)
	target := "/v1/lotes-decision/" + id + "/resultado"
	if st, _, _ := get(h, target, tok); st != 200 {
		t.Fatalf("before the damage: %d, want 200", st)
	}
	path := resultPath(t, h, id)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	data[len(data)*3/4] ^= 0xff
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		req, _ := http.NewRequest("GET", h.http.URL+target, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got = append(got, "no answer")
			continue
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			got = append(got, fmt.Sprintf("%d cut short", resp.StatusCode))
			continue
		}
		got = append(got, strconv.Itoa(resp.StatusCode))
	}
	if diff := cmp.Diff([]string{"200 cut short", "500"}, got); diff != "" {
		t.Errorf("downloads after the damage (-want +got):\n%s", diff)
	}
}

// TestBatchDroppedResultStatus: a completed job whose result file was
// dropped (DropResult: a damaged file met by a customer's deletion)
// answers as after retention: completado, no resultado_url, and no error,
// which the contract gives only to a failed job (an integrator reading
// error as failure took the job for failed). The reason stays in the
// job record, for the operator.
func TestBatchDroppedResultStatus(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("tirado", 3)})
	runJobs(h)
	j, err := h.batch.Job("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.batch.DropResult(j, "archivo de resultados dañado"); err != nil {
		t.Fatal(err)
	}
	s := status(h, tok, id)
	if s["estado"] != "completado" || s["procesados"] != float64(3) {
		t.Errorf("status after the drop: %v", s)
	}
	for _, k := range []string{"resultado_url", "resultado_expira_en", "error"} {
		if _, ok := s[k]; ok {
			t.Errorf("status after the drop has %s: %v", k, s)
		}
	}
	if j, _ := h.batch.Job("acme", id); j.Error == "" {
		t.Errorf("job record lost the reason of the drop: %+v", j)
	}
}

// TestBatchRetention: past the retention the file is removed; the job stays
// completado, without a URL (error is only for fallido).
func TestBatchRetention(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("ret", 3)})
	runJobs(h)
	path := resultPath(t, h, id)
	signed := status(h, tok, id)["resultado_url"].(string)

	h.clock.Advance(batch.ResultRetention - time.Minute)
	runJobs(h)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file removed before the retention: %v", err)
	}
	h.clock.Advance(2 * time.Minute)
	runJobs(h)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file kept past the retention: %v", err)
	}
	tok = h.token("acme", allScopes...)
	s := status(h, tok, id)
	if s["estado"] != "completado" || s["procesados"] != float64(3) || s["total"] != float64(3) {
		t.Errorf("status after retention: %v", s)
	}
	for _, k := range []string{"resultado_url", "resultado_expira_en", "error"} {
		if _, ok := s[k]; ok {
			t.Errorf("status after retention has %s: %v", k, s)
		}
	}
	if st, _, _ := get(h, "/v1/lotes-decision/"+id+"/resultado", tok); st != 404 {
		t.Errorf("resultado after retention: %d, want 404", st)
	}
	sp, sq := pathOf(t, signed)
	if st, _, _ := get(h, sp+"?"+sq, ""); st != 404 {
		t.Errorf("signed URL after retention: %d, want 404", st)
	}
}

// webhookReceiver records deliveries; the first failFirst attempts get 500.
type webhookReceiver struct {
	mu        sync.Mutex
	failFirst int
	got       []delivery
	srv       *httptest.Server
}

type delivery struct {
	hdr  http.Header
	body []byte
	ok   bool
}

func newReceiver(t *testing.T, failFirst int) *webhookReceiver {
	rc := &webhookReceiver{failFirst: failFirst}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		ok := len(rc.got) >= rc.failFirst
		rc.got = append(rc.got, delivery{r.Header.Clone(), body, ok})
		rc.mu.Unlock()
		if !ok {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *webhookReceiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

func TestBatchWebhook(t *testing.T) {
	h, tok := batchHarness(t)
	rc := newReceiver(t, 0)

	for _, bad := range []map[string]any{
		{"url": "ftp://example.com/hook", "eventos": []string{"lote.completado"}},
		{"url": rc.srv.URL, "eventos": []string{"lote.otro"}},
		{"url": rc.srv.URL},
	} {
		if st, b := h.do("PUT", "/v1/webhooks", tok, bad); st != 422 {
			t.Errorf("PUT %v: %d %v, want 422", bad, st, b)
		}
	}
	if st, _ := h.do("PUT", "/v1/webhooks", h.token("acme", "decisiones:pedir"), map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}}); st != 403 {
		t.Errorf("PUT without webhooks:escribir: %d, want 403", st)
	}
	st, reg := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}})
	if st != 200 {
		t.Fatalf("PUT /v1/webhooks: %d %v", st, reg)
	}
	secret, _ := reg["secreto"].(string)
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secreto %q", secret)
	}

	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("gancho", 7)})
	runJobs(h)
	if n := h.hooks.DeliverDue(context.Background()); n != 1 {
		t.Fatalf("DeliverDue made %d attempts, want 1", n)
	}
	got := rc.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	d := got[0]
	if err := client.VerifyWebhookSignature(secret, d.hdr, d.body, time.Now(), client.WebhookTolerance); err != nil {
		t.Errorf("independent verifier: %v (headers %v)", err, d.hdr)
	}
	if err := client.VerifyWebhookSignature(secret, d.hdr, append(bytes.TrimSuffix(slices.Clip(d.body), []byte("}")), []byte(`,"x":1}`)...), time.Now(), client.WebhookTolerance); err == nil {
		t.Errorf("verifier accepts an altered body")
	}
	if err := client.VerifyWebhookSignature("whsec_"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), d.hdr, d.body, time.Now(), client.WebhookTolerance); err == nil {
		t.Errorf("verifier accepts another secret")
	}
	if ct := d.hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var payload map[string]any
	if err := json.Unmarshal(d.body, &payload); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"tipo": "lote.completado", "job_id": id, "campana_id": "camp", "estado": "completado", "lineas": float64(7), "completado_en": "2026-11-02T12:00:00Z"}
	if diff := cmp.Diff(want, payload); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	if n := h.hooks.DeliverDue(context.Background()); n != 0 {
		t.Errorf("a delivered message was attempted again (%d)", n)
	}

	// After DELETE nothing is delivered.
	if st, b := h.do("DELETE", "/v1/webhooks", tok, nil); st != 200 || len(b) != 0 {
		t.Errorf("DELETE /v1/webhooks: %d %v, want 200 {}", st, b)
	}
	advanceTenant(h, "acme", time.Hour)
	submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("gancho", 2)})
	runJobs(h)
	h.hooks.DeliverDue(context.Background())
	if n := len(rc.deliveries()); n != 1 {
		t.Errorf("%d deliveries after DELETE, want none new", n-1)
	}
}

// TestSegmentValueErrorsWorded: a segment's value_error reads as every
// other value_error of the API, pydantic v2's "Value error, …" (the
// request-level one of the same body, "envíe exactamente uno de clientes o
// segmento", already did); the segment's came without the prefix.
func TestSegmentValueErrorsWorded(t *testing.T) {
	h, tok := batchHarness(t)
	for _, tt := range []struct {
		name string
		seg  any
		want map[string]any
	}{
		{"unknown feature", map[string]any{"<=": map[string]any{"edad": 30}}, map[string]any{
			"loc": []any{"body", "segmento", "<="}, "type": "value_error", "msg": "Value error, característica desconocida: edad", "input": map[string]any{"edad": float64(30)}}},
		{"todos false", map[string]any{"todos": false}, map[string]any{
			"loc": []any{"body", "segmento", "todos"}, "type": "value_error", "msg": "Value error, todos solo admite true", "input": false}},
	} {
		st, b := h.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "segmento": tt.seg})
		if diff := cmp.Diff(map[string]any{"detail": []any{tt.want}}, b); st != 422 || diff != "" {
			t.Errorf("%s: %d (-want +got):\n%s", tt.name, st, diff)
		}
	}
}

// TestSegmentTooShortCtx: an empty "y" or "o" of a segment is too_short
// with pydantic v2's ctx (field_type, min_length, actual_length), as every
// other too_short of the API and the OpenAPI document's
// x-validation-error-types say; the segment's came without ctx.
func TestSegmentTooShortCtx(t *testing.T) {
	h, tok := batchHarness(t)
	for _, tt := range []struct {
		seg any
		loc []any
	}{
		{map[string]any{"y": []any{}}, []any{"body", "segmento", "y"}},
		{map[string]any{"no": map[string]any{"o": []any{}}}, []any{"body", "segmento", "no", "o"}},
	} {
		st, b := h.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "segmento": tt.seg})
		want := map[string]any{"detail": []any{map[string]any{"loc": tt.loc, "type": "too_short",
			"msg": "List should have at least 1 item after validation, not 0", "input": []any{},
			"ctx": map[string]any{"field_type": "List", "min_length": float64(1), "actual_length": float64(0)}}}}
		if diff := cmp.Diff(want, b); st != 422 || diff != "" {
			t.Errorf("segmento %v: %d (-want +got):\n%s", tt.seg, st, diff)
		}
	}
}

// TestWebhookURLBadPort: a URL whose port is out of range is 422 on
// body.url saying so. It was told "private, loopback, link-local or
// metadata destination, or unresolvable", even with private destinations
// allowed, which sent the integrator looking at the wrong thing.
func TestWebhookURLBadPort(t *testing.T) {
	h, tok := batchHarness(t)
	for _, u := range []string{"http://127.0.0.1:0/hook", "http://127.0.0.1:65536/hook", "https://hooks.example.com:99999/x"} {
		st, b := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": u, "eventos": []string{"lote.completado"}})
		want := map[string]any{"detail": []any{map[string]any{"loc": []any{"body", "url"}, "type": "url_parsing",
			"msg": "Input should be a valid URL, invalid port number", "input": u, "ctx": map[string]any{"error": "invalid port number"}}}}
		if diff := cmp.Diff(want, b); st != 422 || diff != "" {
			t.Errorf("PUT url %s: %d (-want +got):\n%s", u, st, diff)
		}
	}
}

// TestWebhookDestinationAtRegistration: without --webhook-allow-private,
// PUT /v1/webhooks refuses a destination in the ranges the contract names
// (loopback, private, link-local, metadata), directly or through the
// addresses its name resolves to, with 422 on body.url (contract §7). A
// name that does not resolve (yet, or from where coupond runs) is none of
// those: it is registered, and every delivery attempt checks the
// destination again. It was refused as "unresolvable", so registering a
// public URL failed wherever coupond's DNS could not see it.
func TestWebhookDestinationAtRegistration(t *testing.T) {
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "hooks.example.com":
			return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
		case "internal.example.com":
			return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
		case "empty.example.com":
			return nil, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	h := newHarnessWith(t, func(d *Deps) { d.WebhookAllowPrivate, d.WebhookResolve = false, resolve })
	h.tenant("acme", true, nil)
	tok := h.token("acme", allScopes...)
	for _, tt := range []struct {
		url  string
		want int
	}{
		{"https://hooks.example.com/coupond", 200},
		{"https://93.184.215.14/coupond", 200},
		{"https://nxdomain.example.com/coupond", 200},
		{"https://empty.example.com/coupond", 200},
		{"http://127.0.0.1:9999/hook", 422},
		{"http://localhost/hook", 422},
		{"http://10.0.0.1/hook", 422},
		{"http://169.254.169.254/latest", 422},
		{"http://[::1]/hook", 422},
		{"http://127.1/hook", 422},
		{"http://0x7f000001/hook", 422},
		{"https://internal.example.com/hook", 422},
	} {
		st, b := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": tt.url, "eventos": []string{"lote.completado"}})
		if st != tt.want {
			t.Errorf("PUT url %s: %d %v, want %d", tt.url, st, b, tt.want)
			continue
		}
		if st == 200 {
			if diff := cmp.Diff(tt.url, b["url"]); diff != "" {
				t.Errorf("PUT url %s: url (-want +got):\n%s", tt.url, diff)
			}
			continue
		}
		want := map[string]any{"detail": []any{map[string]any{"loc": []any{"body", "url"}, "type": "url_parsing",
			"msg": "URL no admitida: destino privado, de loopback, link-local o de metadatos", "input": tt.url,
			"ctx": map[string]any{"error": "destino privado, de loopback, link-local o de metadatos"}}}}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("PUT url %s (-want +got):\n%s", tt.url, diff)
		}
	}
}

// TestWebhookURLWithCredentials: a URL carrying user information is 422 on
// body.url, and the error's input masks the password: it was registered,
// stored in clear and echoed in the answer and the console.
func TestWebhookURLWithCredentials(t *testing.T) {
	h, tok := batchHarness(t)
	for _, tt := range []struct{ url, input string }{
		{"https://hook:s3cr3t@example.com/in", "https://hook:xxxxx@example.com/in"},
		{"https://hook@example.com/in", "https://hook@example.com/in"},
	} {
		st, b := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": tt.url, "eventos": []string{"lote.completado"}})
		want := map[string]any{"detail": []any{map[string]any{"loc": []any{"body", "url"}, "type": "url_parsing",
			"msg": "URL no admitida: no debe llevar usuario ni contraseña; cada entrega va firmada con el secreto", "input": tt.input,
			"ctx": map[string]any{"error": "no debe llevar usuario ni contraseña; cada entrega va firmada con el secreto"}}}}
		if diff := cmp.Diff(want, b); st != 422 || diff != "" {
			t.Errorf("PUT url %s: %d (-want +got):\n%s", tt.url, st, diff)
		}
	}
}

// TestBatchWebhookRetry: a receiver that fails the first attempt gets the
// same message again after the backoff (within 10 seconds), also from a
// restarted process: the retry queue is durable.
func TestBatchWebhookRetry(t *testing.T) {
	h, tok := batchHarness(t)
	rc := newReceiver(t, 2)
	st, reg := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}})
	if st != 200 {
		t.Fatalf("PUT /v1/webhooks: %d %v", st, reg)
	}
	secret := reg["secreto"].(string)
	submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("reintento", 3)})
	runJobs(h)
	ctx := context.Background()
	if n := h.hooks.DeliverDue(ctx); n != 1 {
		t.Fatalf("first pass: %d attempts, want 1", n)
	}
	if n := h.hooks.DeliverDue(ctx); n != 0 {
		t.Errorf("retry attempted before its backoff (%d)", n)
	}
	h.clock.Advance(10 * time.Second) // the first retry comes within 10 s
	if n := h.hooks.DeliverDue(ctx); n != 1 {
		t.Fatalf("second pass: %d attempts, want 1", n)
	}
	// A restart: a new webhook service over the same store finds the retry.
	restarted := batch.NewWebhooks(h.db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: true}), h.srv.log, h.clock.Now, 99)
	if n := restarted.DeliverDue(ctx); n != 0 {
		t.Errorf("second retry attempted before its backoff (%d)", n)
	}
	h.clock.Advance(36 * time.Second) // second retry: 30 s ± 20 %
	if n := restarted.DeliverDue(ctx); n != 1 {
		t.Fatalf("after restart: %d attempts, want 1", n)
	}
	got := rc.deliveries()
	if len(got) != 3 || got[0].ok || got[1].ok || !got[2].ok {
		t.Fatalf("deliveries %d, want two failures then a success", len(got))
	}
	for i, d := range got {
		if err := client.VerifyWebhookSignature(secret, d.hdr, d.body, time.Now(), client.WebhookTolerance); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
		if d.hdr.Get("webhook-id") != got[0].hdr.Get("webhook-id") || !bytes.Equal(d.body, got[0].body) {
			t.Errorf("attempt %d is not the same message", i+1)
		}
	}
	h.clock.Advance(48 * time.Hour)
	if n := restarted.DeliverDue(ctx) + h.hooks.DeliverDue(ctx); n != 0 {
		t.Errorf("%d attempts after a success", n)
	}
}

// Keep the engine import for SendGain's types.
var _ = engine.ErrNoCampaign

// TestBatchWebhookBackoff: against a receiver that always fails, attempts
// follow an exponential backoff (first retry within 10 s, each wait longer)
// for at least 24 hours, then stop; the queue is empty afterwards.
func TestBatchWebhookBackoff(t *testing.T) {
	h, tok := batchHarness(t)
	rc := newReceiver(t, 1000)
	if st, b := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}}); st != 200 {
		t.Fatalf("PUT /v1/webhooks: %d %v", st, b)
	}
	submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("espera", 2)})
	runJobs(h)
	ctx := context.Background()
	lo, hi := store.WebhookQueueSpan("acme")
	nextDue := func() (time.Time, bool) {
		var due time.Time
		found := false
		h.db.Scan(lo, hi, func(k, _ []byte) error {
			if at, _, ok := store.ParseWebhookDeliveryKey("acme", k); ok {
				due, found = at, true
			}
			return store.ErrStop
		})
		return due, found
	}
	var attempts []time.Time
	for i := 0; i < 20; i++ {
		due, ok := nextDue()
		if !ok {
			break
		}
		if now := h.clock.Now(); due.After(now) {
			h.clock.Advance(due.Sub(now))
		}
		if n := h.hooks.DeliverDue(ctx); n != 1 {
			t.Fatalf("attempt %d: DeliverDue made %d attempts", i+1, n)
		}
		attempts = append(attempts, h.clock.Now())
	}
	if len(attempts) < 2 || len(rc.deliveries()) != len(attempts) {
		t.Fatalf("%d attempts, %d received", len(attempts), len(rc.deliveries()))
	}
	if _, ok := nextDue(); ok {
		t.Errorf("message still queued after %d attempts", len(attempts))
	}
	if first := attempts[1].Sub(attempts[0]); first > 10*time.Second {
		t.Errorf("first retry after %v, want within 10 s", first)
	}
	for i := 2; i < len(attempts); i++ {
		if attempts[i].Sub(attempts[i-1]) < attempts[i-1].Sub(attempts[i-2])*6/10 {
			t.Errorf("wait %d (%v) much shorter than the one before (%v)", i, attempts[i].Sub(attempts[i-1]), attempts[i-1].Sub(attempts[i-2]))
		}
	}
	if span := attempts[len(attempts)-1].Sub(attempts[0]); span < 24*time.Hour {
		t.Errorf("retries span %v, want at least 24 hours", span)
	}
	t.Logf("%d attempts over %v", len(attempts), attempts[len(attempts)-1].Sub(attempts[0]))
}

// TestBatchLinesShareTheJobTime: every line of a job is decided at the
// tenant clock's time when the job ran, so a purchase stamped with that
// time (a sandbox clock stands still: the README's walkthrough stamps
// events with it) is in every line's reward window, as it is in an online
// decision's. Lines were decided at T + i µs, and only the first line's
// reward counted the purchase.
func TestBatchLinesShareTheJobTime(t *testing.T) {
	h, tok := batchHarness(t)
	clientes := refs("linea", 3)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": clientes})
	if runJobs(h) != 1 || status(h, tok, id)["estado"] != "completado" {
		t.Fatalf("job %s: %v", id, status(h, tok, id))
	}
	for i, ref := range clientes {
		h.acceptEvents(tok, purchaseAt(fmt.Sprint("compra-", i), ref, testStart))
	}
	if _, err := h.db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.ClockNow = testStart.Add(31 * 24 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := h.engine.Learner.Learn("acme"); err != nil {
		t.Fatal(err)
	}
	type line struct {
		CreadaEn   string
		Recompensa any
	}
	var got, want []line
	for _, ref := range clientes {
		_, x := h.do("GET", "/v1/clientes/"+ref+"/exportacion", tok, nil)
		d := x["decisiones"].([]any)[0].(map[string]any)
		got = append(got, line{d["creada_en"].(string), d["recompensa_mxn"]})
		reward := 30.25 // the purchase's margin, less a coupon's sending cost when one was sent
		if d["accion"] != 0.0 {
			reward -= 0.5
		}
		want = append(want, line{testStart.Format(time.RFC3339Nano), reward})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the job's lines (-want +got):\n%s", diff)
	}
}

// TestKeyRotationVoidsTokensAndLinks: once the token and URL keys are
// replaced in a running server (coupond admin keys rotate), a token and a
// resultado_url signed before are refused (401 no_autenticado; 404 as a
// link that expired) and each integrator recovers alone: its credential
// gets a new token, and the job's status a link signed with the new key.
func TestKeyRotationVoidsTokensAndLinks(t *testing.T) {
	h, tok := batchHarness(t)
	id := submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("rot", 3)})
	runJobs(h)
	oldPath, oldQuery := pathOf(t, status(h, tok, id)["resultado_url"].(string))
	oldLink := oldPath + "?" + oldQuery
	h.srv.SetTokenKey(bytes.Repeat([]byte{0xa1}, 32))
	if err := h.batch.Signer.SetKey(bytes.Repeat([]byte{0xa2}, 32)); err != nil {
		t.Fatal(err)
	}
	type answers struct {
		OldToken  int
		Codigo    any
		OldLink   int
		NewToken  int
		FreshLink int
	}
	var got answers
	var body map[string]any
	got.OldToken, body = h.do("GET", "/v1/lotes-decision/"+id, tok, nil)
	got.Codigo = body["codigo"]
	got.OldLink, _, _ = get(h, oldLink, "")
	fresh := h.token("acme", allScopes...)
	var s map[string]any
	got.NewToken, s = h.do("GET", "/v1/lotes-decision/"+id, fresh, nil)
	if u, ok := s["resultado_url"].(string); ok {
		p, q := pathOf(t, u)
		got.FreshLink, _, _ = get(h, p+"?"+q, "")
	}
	if diff := cmp.Diff(answers{401, "no_autenticado", 404, 200, 200}, got); diff != "" {
		t.Errorf("after the rotation (-want +got):\n%s", diff)
	}
}

// busyDetalle reads and closes the body of a refused batch creation and
// returns its detalle.job_id, "" when it has none.
func busyDetalle(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var body struct {
		Detalle map[string]any `json:"detalle"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Errorf("429 body: %v", err)
	}
	id, _ := body.Detalle["job_id"].(string)
	return id
}
