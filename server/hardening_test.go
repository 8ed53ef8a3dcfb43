package server

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAnswerHardeningHeaders checks the headers every API answer carries
// against content sniffing (X-Content-Type-Options: nosniff, whatever the
// route or status), and Cache-Control: no-store on the answers that carry
// a secret or a bearer capability: the webhook registration (its signing
// secret, shown once) and a job's status (its resultado_url downloads the
// result without a token for 60 minutes).
func TestAnswerHardeningHeaders(t *testing.T) {
	h, tok := batchHarness(t)
	rc := newReceiver(t, 0)
	st, b := h.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp", "clientes": refs("cliente", 2)})
	if st != 202 {
		t.Fatalf("create: %d %v", st, b)
	}
	job := b["job_id"].(string)
	runJobs(h)
	if s := status(h, tok, job); s["resultado_url"] == nil {
		t.Fatalf("completed job has no resultado_url: %v", s)
	}

	type hdrs struct {
		Status         int
		Nosniff, Cache string
	}
	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		want                      hdrs
	}{
		{"unknown path", "GET", "/v1/nada", "", nil, hdrs{404, "nosniff", ""}},
		{"no token", "GET", "/v1/catalogo-acciones", "", nil, hdrs{401, "nosniff", ""}},
		{"catalog", "GET", "/v1/catalogo-acciones", tok, nil, hdrs{200, "nosniff", ""}},
		{"webhook refused", "PUT", "/v1/webhooks", tok, map[string]any{"url": "ftp://x.example/h", "eventos": []string{"lote.completado"}}, hdrs{422, "nosniff", ""}},
		{"webhook registered", "PUT", "/v1/webhooks", tok, map[string]any{"url": rc.srv.URL, "eventos": []string{"lote.completado"}}, hdrs{200, "nosniff", "no-store"}},
		{"job status", "GET", "/v1/lotes-decision/" + job, tok, nil, hdrs{200, "nosniff", "no-store"}},
		{"job unknown", "GET", "/v1/lotes-decision/lote_nada", tok, nil, hdrs{404, "nosniff", ""}},
	} {
		resp := h.raw(tc.method, tc.path, tc.token, tc.body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := hdrs{resp.StatusCode, resp.Header.Get("X-Content-Type-Options"), resp.Header.Get("Cache-Control")}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: %s %s (-want +got):\n%s", tc.name, tc.method, tc.path, diff)
		}
	}
}
