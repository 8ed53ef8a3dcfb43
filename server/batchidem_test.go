package server

import (
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/internal/apitest"
)

// batchStep is one request of a keyed batch creation scenario.
type batchStep struct {
	name    string
	advance time.Duration // tenant clock moved before the request
	run     bool          // run the queued jobs before the request
	body    any
	hdr     []string
	want    int
	codigo  string // the error's codigo, when want is not 202
	same    bool   // a 202 answers the first job (job_id, Location, whole body)
}

// TestBatchCreateIdempotencyKey: POST /v1/lotes-decision with an
// Idempotency-Key answers a repeat of the same body (however spaced)
// within 24 h with the first answer (202, same job_id and Location) and
// creates nothing, while the batch slot is taken too (a job queued, run
// within the hour); past the slot anything else is 429 before its body is
// looked at (contract §7). With the slot free, another body is 409
// idempotencia_conflicto and a new key a new job.
func TestBatchCreateIdempotencyKey(t *testing.T) {
	h, tok := batchHarness(t)
	k1, k2 := []string{"Idempotency-Key", "lote-1"}, []string{"Idempotency-Key", "lote-2"}
	bodyA := map[string]any{"campana_id": "camp", "clientes": []string{"cliente-a", "cliente-b"}}
	respaced := `{ "clientes": ["cliente-a", "cliente-b"],  "campana_id": "camp" }`
	bodyB := map[string]any{"campana_id": "camp", "clientes": []string{"cliente-c"}}
	steps := []batchStep{
		{name: "first, keyed", body: bodyA, hdr: k1, want: 202, same: true},
		{name: "unkeyed while queued", body: bodyA, want: 429, codigo: "limite_excedido"},
		{name: "replay while queued", body: bodyA, hdr: k1, want: 202, same: true},
		{name: "replay respaced", body: respaced, hdr: k1, want: 202, same: true},
		{name: "same key, another body, slot taken", body: bodyB, hdr: k1, want: 429, codigo: "limite_excedido"},
		{name: "new key, slot taken", body: bodyA, hdr: k2, want: 429, codigo: "limite_excedido"},
		{name: "key, body invalid, slot taken", body: map[string]any{"campana_id": "camp"}, hdr: k1, want: 429, codigo: "limite_excedido"},
		{name: "key, body not JSON, slot taken", body: "campana_id=camp", hdr: append([]string{"Content-Type", "text/plain"}, k1...), want: 429, codigo: "limite_excedido"},
		{name: "replay after the run, within the hour", run: true, advance: 10 * time.Minute, body: bodyA, hdr: k1, want: 202, same: true},
		{name: "same key, another body, slot free", advance: time.Hour, body: bodyB, hdr: k1, want: 409, codigo: "idempotencia_conflicto"},
		{name: "key too long", body: bodyA, hdr: []string{"Idempotency-Key", strings.Repeat("k", 256)}, want: 422},
		// 23 h 59 min after the first:
		{name: "replay a day later, slot free", advance: 22*time.Hour + 49*time.Minute, body: bodyA, hdr: k1, want: 202, same: true},
		{name: "new key, slot free", body: bodyA, hdr: k2, want: 202},
	}
	var first map[string]any
	var location string
	for _, s := range steps {
		if s.run {
			runJobs(h)
		}
		if s.advance > 0 {
			advanceTenant(h, "acme", s.advance)
		}
		resp := h.raw("POST", "/v1/lotes-decision", tok, s.body, s.hdr...)
		body := apitest.Object(t, resp)
		if resp.StatusCode != s.want || s.codigo != "" && body["codigo"] != s.codigo {
			t.Errorf("%s: %d %v, want %d %s", s.name, resp.StatusCode, body, s.want, s.codigo)
			continue
		}
		if first == nil {
			first, location = body, resp.Header.Get("Location")
		}
		if got := body["job_id"]; s.want == 202 && (got == first["job_id"]) != s.same {
			t.Errorf("%s: job_id %v, first %v: same %v, want %v", s.name, got, first["job_id"], got == first["job_id"], s.same)
		}
		if s.same && (resp.Header.Get("Location") != location || body["estado"] != "en_cola" || body["creado_en"] != first["creado_en"]) {
			t.Errorf("%s: %v Location %q, want the first answer %v %q", s.name, body, resp.Header.Get("Location"), first, location)
		}
	}
	jobs, err := h.batch.Jobs("acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Errorf("%d jobs created, want 2 (the first, the new key's)", len(jobs))
	}
}
