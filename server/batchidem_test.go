package server

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/store"
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

// TestKeyInFlightPastLimit: a keyed request whose first request still
// runs, past the batch slot or the daily quota that first request took,
// is 409 idempotencia_conflicto (retried soon, then answered with the
// first answer), not the slot's or quota's 429, whose Retry-After (up to
// an hour, or to midnight) would lose that answer; once the first ends it
// is its replay. Anything else past the limit stays 429.
func TestKeyInFlightPastLimit(t *testing.T) {
	key := []string{"Idempotency-Key", "k1"}
	for _, tc := range []struct {
		name, path string
		settings   func(*store.Settings)
		body       map[string]any
		ok         int
	}{
		{"batch slot", "/v1/lotes-decision", batchTenant, map[string]any{"campana_id": "camp", "clientes": []string{"cliente-a"}}, 202},
		{"decision quota", "/v1/decisiones", func(s *store.Settings) { batchTenant(s); s.QuotaDecisionsDay = 1 }, decideBody("cliente-ana", nil), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, tok := newCatalogHarness(t, 3, tc.settings)
			putCampaign(h, tok, "camp", -1)
			post := func(hdr ...string) (int, map[string]any) {
				resp := h.raw("POST", tc.path, tok, tc.body, hdr...)
				return resp.StatusCode, apitest.Object(t, resp)
			}
			st, first := post(key...)
			if st != tc.ok {
				t.Fatalf("first: %d %v", st, first)
			}
			// The first request still runs: it holds its key and its
			// answer is not stored yet (a stored answer is a replay even
			// while the key is held). Its record is set aside until the
			// first request "ends".
			stored, err := h.db.Idempotency("acme", "k1")
			if err != nil {
				t.Fatal(err)
			}
			setRecord := func(rec []byte) {
				b := h.db.NewBatch()
				defer b.Close()
				if rec == nil {
					b.Delete(store.IdempotencyKey("acme", "k1"))
				} else {
					b.SetIdempotency("acme", "k1", rec)
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			setRecord(nil)
			claim, err := h.engine.KeyClaims.Claim("acme", h.clock.Now(), engine.Idempotency{Key: "k1"})
			if err != nil {
				t.Fatal(err)
			}
			type answer struct {
				Status int
				Codigo any
			}
			var got []answer
			for _, hdr := range [][]string{key, nil} {
				st, body := post(hdr...)
				got = append(got, answer{st, body["codigo"]})
			}
			setRecord(stored)
			claim.Release()
			st, again := post(key...)
			got = append(got, answer{st, nil})
			want := []answer{{409, "idempotencia_conflicto"}, {429, "limite_excedido"}, {tc.ok, nil}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers (keyed in flight, unkeyed, keyed once ended) (-want +got):\n%s", diff)
			}
			for _, f := range []string{"job_id", "decision_id"} {
				if again[f] != first[f] {
					t.Errorf("after the first ended: %s %v, want the first's %v", f, again[f], first[f])
				}
			}
		})
	}
}
