package cli

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestServeHoldsWebhooks: serve --hold-webhooks delivers no webhook (a
// restore drill's server must not send the backup's pending deliveries to
// the real receiver); the delivery stays queued and goes out once serve
// runs without the flag. Without the switch the drill's server delivered
// them within seconds.
func TestServeHoldsWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: starts the server twice")
	}
	var got atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) }))
	defer receiver.Close()

	dataDir := t.TempDir()
	in := startServer(t, dataDir, "--hold-webhooks", "--webhook-allow-private")
	defer in.killIfRunning()
	_, tok := setupDataTenant(t, in, "acme")
	var hooks credJSON
	in.admin(&hooks, "credential", "create", "--tenant", "acme", "--name", "hooks", "--scopes", "webhooks:escribir")
	if st, _, b := in.do("PUT", "/v1/webhooks", in.token(hooks), map[string]any{"url": receiver.URL + "/coupond", "eventos": []string{"lote.completado"}}); st != 200 {
		t.Fatalf("webhook: %d %v", st, b)
	}
	st, _, job := in.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp1", "clientes": []string{"cliente-hold-01"}})
	if st != 202 {
		t.Fatalf("batch: %d %v", st, job)
	}
	waitFor(t, 30*time.Second, "batch job completado", func() bool {
		_, _, j := in.do("GET", "/v1/lotes-decision/"+job["job_id"].(string), tok, nil)
		return j["estado"] == "completado"
	})
	time.Sleep(3 * time.Second) // a first delivery goes out at once when not held
	if n := got.Load(); n != 0 {
		t.Fatalf("%d deliveries with --hold-webhooks, want 0", n)
	}
	in.stop()

	in = startServer(t, dataDir, "--webhook-allow-private")
	defer in.killIfRunning()
	waitFor(t, 30*time.Second, "the held delivery", func() bool { return got.Load() > 0 })
}
