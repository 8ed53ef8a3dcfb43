package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store"
)

// scrape returns the /metrics text.
func scrape(t *testing.T, h *harness) string {
	t.Helper()
	resp := h.raw("GET", "/metrics", "", nil)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(data)
}

// sample returns the value of the series written exactly as line (name
// and labels), or "" if absent.
func sample(text, series string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// businessRun drives a tenant through decisions, a fallback record, a batch
// job with a webhook and a learner backlog, with the observers installed as
// cli installs them.
func businessRun(t *testing.T, h *harness) (before, after string) {
	t.Helper()
	obs, learned := h.srv.Observers()
	h.batch.Observe(obs)
	h.hooks.Observe(obs)
	h.engine.Learner.ObserveLearn(learned)

	h.tenant("acme", true, batchTenant)
	tok := h.token("acme", allScopes...)
	h.catalog(tok, 3)
	putCampaign(h, tok, "camp", -1)
	for _, ref := range refs("online", 5) {
		if st, body := h.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push"}}); st != 200 {
			t.Fatalf("decision: %d %v", st, body)
		}
	}
	// Asked again, a customer's open reward window answers: no new decision.
	if st, body := h.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": refs("online", 1)[0], "contexto": map[string]any{"canal": "push"}}); st != 200 || !strings.HasPrefix(fmt.Sprint(body["motivo"]), api.MotivoVentanaAbierta) {
		t.Fatalf("decision again: %d %v, want the open window's answer", st, body)
	}
	if st, body := h.do("POST", "/v1/decisiones/respaldo", tok, map[string]any{"accion": 2, "canal": "push", "cliente_ref": "respaldo-0001"}); st != 200 {
		t.Fatalf("respaldo: %d %v", st, body)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer receiver.Close()
	if st, body := h.do("PUT", "/v1/webhooks", tok, map[string]any{"url": receiver.URL, "eventos": []string{"lote.completado"}}); st != 200 {
		t.Fatalf("webhook: %d %v", st, body)
	}
	submit(h, tok, map[string]any{"campana_id": "camp", "clientes": refs("lote", 4)})
	runJobs(h)
	h.hooks.DeliverDue(context.Background())

	// Past every reward window: the rewards are due, not yet folded.
	if _, err := h.db.UpdateTenant("acme", func(t *store.Tenant) error {
		t.ClockNow = t.ClockNow.Add(t.Settings.RewardWindow + t.Settings.RewardGrace + time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before = scrape(t, h)
	for {
		st, err := h.engine.Learner.Learn("acme")
		if err != nil {
			t.Fatal(err)
		}
		if st.Folded+st.Unconfirmed+st.Modified+st.Control+st.Released == 0 {
			break
		}
	}
	return before, scrape(t, h)
}

// TestBusinessMetrics: /metrics carries the business series with their
// values, without a tenant label unless the operator asks for one, and
// promtool accepts the exposition.
func TestBusinessMetrics(t *testing.T) {
	h := newHarness(t)
	before, after := businessRun(t, h)

	sum := func(text, series string) int {
		var v float64
		fmt.Sscan(sample(text, series), &v)
		return int(v)
	}
	checks := []struct {
		name string
		got  int
		want int
	}{
		{"online decisions", sumSource(after, "online"), 6}, // 5 and one answer naming an open window
		{"respaldo decisions", sumSource(after, "respaldo"), 1},
		{"batch decisions", sumSource(after, "batch"), 4},
		{"fallback records", sum(after, `coupond_decisions_total{action="2",outcome="fallback",source="respaldo"}`), 1},
		{"open window answers", sum(after, `coupond_decisions_total{action="0",outcome="window_open",source="online"}`), 1},
		{"batch jobs completed", sum(after, `coupond_batch_jobs_total{estado="completado"}`), 1},
		{"batch lines", sum(after, `coupond_batch_lines_total`), 4},
		{"webhooks delivered", sum(after, `coupond_webhook_deliveries_total{outcome="delivered"}`), 1},
		{"rewards pending before the learner", sum(before, `coupond_learner_rewards_pending`), 9}, // 5 online + 4 batch; fallback records are not learned from
		{"rewards pending after", sum(after, `coupond_learner_rewards_pending`), 0},
		{"rewards closed unconfirmed", sum(after, `coupond_rewards_not_learned_total{reason="unconfirmed"}`), 9},
		{"rewards folded", sum(after, `coupond_rewards_folded_total`), 0},
		{"escalations", sum(after, `coupond_abuse_escalations_total{step="aviso"}`), 0},
		{"policy guards active", sum(after, `coupond_policy_guard_active`), 0},
		{"policy guard switches", sum(after, `coupond_policy_guard_switches`), 0},
		{"send gates open", sum(after, `coupond_policy_gate_open`), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
	if lag := sample(before, "coupond_learner_lag_seconds"); lag == "" || lag == "0" {
		t.Errorf("learner lag before the learner ran: %q, want > 0", lag)
	}
	if lag := sample(after, "coupond_learner_lag_seconds"); lag != "0" {
		t.Errorf("learner lag after: %q, want 0", lag)
	}
	for _, name := range []string{"coupond_rewards_folded_total", "coupond_abuse_escalations_total", "coupond_abuse_quarantined_requests",
		"coupond_policy_guard_active", "coupond_policy_guard_switches", "coupond_policy_value_mxn",
		"coupond_policy_gate_open", "coupond_policy_value_vs_baseline"} {
		if !strings.Contains(after, "# HELP "+name+" ") {
			t.Errorf("%s: no HELP line", name)
		}
	}
	if strings.Contains(after, `tenant="acme"`) {
		t.Error("a tenant label without --metrics-tenant-label")
	}
	promtoolCheckMetrics(t, after)

	// With the tenant label.
	h2 := newHarnessWith(t, func(d *Deps) { d.MetricsTenantLabel = true })
	_, after2 := businessRun(t, h2)
	for _, want := range []string{`coupond_batch_lines_total{tenant="acme"} 4`, `coupond_learner_rewards_pending{tenant="acme"} 0`, `coupond_policy_guard_active{tenant="acme"} 0`} {
		if !strings.Contains(after2, want) {
			t.Errorf("with --metrics-tenant-label: no %s", want)
		}
	}
	promtoolCheckMetrics(t, after2)
}

var sourceRE = regexp.MustCompile(`^coupond_decisions_total\{action="\d+",outcome="(explored|exploited|control|fallback|window_open)",source="([a-z]+)"\} (\d+)$`)

// sumSource sums coupond_decisions_total of one source, checking every
// series' labels on the way.
func sumSource(text, source string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if m := sourceRE.FindStringSubmatch(l); m != nil && m[2] == source {
			var v float64
			fmt.Sscan(m[3], &v)
			n += int(v)
		}
	}
	return n
}

// promtool finds promtool; without it the test fails in CI (CI=true) and
// is skipped elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (CI=true): .ci/run installs it (apt-get install prometheus)")
		}
		t.Skip("promtool not found: apt-get install prometheus (Debian) to run this check")
	}
	return p
}

func promtoolCheckMetrics(t *testing.T, text string) {
	t.Helper()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestAlertRules: the example alerting rules load and their unit tests
// (deploy/prometheus/coupond-rules_test.yml) pass; every series they name
// is served by coupond.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join("..", "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "coupond-rules.yml"}, {"test", "rules", "coupond-rules_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, "coupond-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.tenant("acme", true, func(*store.Settings) {})
	scrape(t, h) // a request before, for coupond_http_*
	served := scrape(t, h)
	for _, name := range regexp.MustCompile(`coupond_[a-z_]+`).FindAll(rules, -1) {
		n := string(name)
		if !strings.Contains(served, "# TYPE "+n+" ") {
			t.Errorf("the rules name %s, which /metrics does not serve", n)
		}
	}
}

// TestTenantCountersStartAtZero: with --metrics-tenant-label, a tenant's
// counters of known label values are served at 0 before their first event,
// as they are without the label: increase() over a series born at 1 is
// empty, so CoupondWebhookGivenUp would miss a tenant's first webhook
// given up.
func TestTenantCountersStartAtZero(t *testing.T) {
	for _, label := range []bool{false, true} {
		h := newHarnessWith(t, func(d *Deps) { d.MetricsTenantLabel = label })
		h.tenant("acme", false, nil)
		scrape(t, h)
		text := scrape(t, h)
		tenant := ""
		if label {
			tenant = `,tenant="acme"`
		}
		for _, series := range []string{
			`coupond_webhook_deliveries_total{outcome="given_up"` + tenant + `}`,
			`coupond_batch_jobs_total{estado="fallido"` + tenant + `}`,
			`coupond_abuse_escalations_total{step="suspension"` + tenant + `}`,
			`coupond_rewards_not_learned_total{reason="unconfirmed"` + tenant + `}`,
		} {
			if got := sample(text, series); got != "0" {
				t.Errorf("label %v: %s = %q, want 0", label, series, got)
			}
		}
		if label {
			for _, name := range []string{"coupond_rewards_folded_total", "coupond_batch_lines_total"} {
				if got := sample(text, name+`{tenant="acme"}`); got != "0" {
					t.Errorf("%s{tenant=acme} = %q, want 0", name, got)
				}
			}
		}
	}
}
