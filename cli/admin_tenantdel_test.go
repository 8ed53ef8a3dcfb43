package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/store"
)

// tenantWorld is a data dir whose tenants were filled through the API of
// its env, on a fake clock.
type tenantWorld struct {
	dir    string
	clk    *clock.Fake
	e      *env
	api    *httptest.Server
	tokens map[string]string
	creds  map[string][2]string // client id and secret
	// reading counts the API requests that are reading their bodies, so
	// past authentication, and not yet answered (readingBodies).
	reading atomic.Int32
}

// readingBodies wraps h to count in reading the requests whose handler has
// begun to read the body (the server authenticates first) until it
// returns: a test that holds a body back waits on it, not on a sleep.
func readingBodies(h http.Handler, reading *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var began atomic.Bool
		r.Body = &hookedBody{ReadCloser: r.Body, hook: func() {
			if began.CompareAndSwap(false, true) {
				reading.Add(1)
			}
		}}
		defer func() {
			if began.Load() {
				reading.Add(-1)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// hookedBody calls hook before each Read.
type hookedBody struct {
	io.ReadCloser
	hook func()
}

func (f *hookedBody) Read(p []byte) (int, error) {
	f.hook()
	return f.ReadCloser.Read(p)
}

// waitReading waits until n requests are reading their bodies.
func (w *tenantWorld) waitReading(t *testing.T, n int32) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d requests authenticated and reading their bodies", n), func() bool { return w.reading.Load() >= n })
}

// newTenantWorld opens a data dir with sandbox tenants acme and beta, each
// filled through the API (fillTenantAPI).
func newTenantWorld(t *testing.T) *tenantWorld {
	t.Helper()
	w := &tenantWorld{dir: t.TempDir(), clk: clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)),
		tokens: map[string]string{}, creds: map[string][2]string{}}
	w.open(t)
	for _, tenant := range []string{"acme", "beta"} {
		w.fillTenantAPI(t, tenant)
	}
	return w
}

// open opens the world's env and an API server over it.
func (w *tenantWorld) open(t *testing.T) {
	t.Helper()
	e, err := openEnv(context.Background(), w.dir, zerolog.Nop(), serviceOptions{now: w.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.e, w.api = e, httptest.NewServer(readingBodies(e.svc.api, &w.reading))
	t.Cleanup(w.close)
}

// close closes the API server and the env (every write was synced: as a
// kill -9 would leave the data dir).
func (w *tenantWorld) close() {
	if w.e == nil {
		return
	}
	w.api.Close()
	w.e.close()
	w.e = nil
}

// call sends a request as tenant and returns its status and JSON body.
func (w *tenantWorld) call(t *testing.T, method, path, token string, body any, hdr ...string) (int, map[string]any) {
	t.Helper()
	resp := apitest.Do(t, method, w.api.URL+path, token, body, hdr...)
	return resp.StatusCode, apitest.Object(t, resp)
}

// token trades tenant's credential for a token.
func (w *tenantWorld) token(t *testing.T, tenant string) (int, string) {
	t.Helper()
	c := w.creds[tenant]
	st, b := w.call(t, "POST", "/v1/token", "", map[string]string{"client_id": c[0], "client_secret": c[1], "grant_type": "client_credentials"})
	tok, _ := b["access_token"].(string)
	return st, tok
}

// fillTenantAPI creates tenant and gives it, through the API, a catalog, a
// campaign, events of five customers, a confirmed decision with an
// Idempotency-Key, a completed batch job (its stored request and result
// file), an export (the access log) and a completed customer deletion.
func (w *tenantWorld) fillTenantAPI(t *testing.T, tenant string) {
	t.Helper()
	now := w.clk.Now()
	s := store.DefaultSettings()
	s.RateLimits, s.ControlShare = false, 0
	if err := w.e.db.CreateTenant(&store.Tenant{ID: tenant, CreatedAt: now, Sandbox: true, ClockNow: now, Settings: s}); err != nil {
		t.Fatal(err)
	}
	c, secret, err := w.e.createCredential(tenant, "crm", scopeList())
	if err != nil {
		t.Fatal(err)
	}
	w.creds[tenant] = [2]string{c.ClientID, secret}
	st, tok := w.token(t, tenant)
	if st != 200 {
		t.Fatalf("token: %d", st)
	}
	w.tokens[tenant] = tok
	must := func(want int, method, path string, body any, hdr ...string) map[string]any {
		t.Helper()
		st, b := w.call(t, method, path, tok, body, hdr...)
		if st != want {
			t.Fatalf("%s %s: %d %v", method, path, st, b)
		}
		return b
	}
	must(200, "PUT", "/v1/catalogo-acciones", map[string]any{"acciones": []map[string]any{
		{"id": 1, "nombre": "diez", "tipo_cupon": "T10", "costo_envio_mxn": 0.5, "descuento_max_mxn": 10, "descuento_pct": 10, "activa": true}}})
	must(200, "PUT", "/v1/campanas/camp1", map[string]any{"canal": "push", "descripcion": "prueba"})
	var refs []string
	var evs []map[string]any
	for i := 0; i < 5; i++ {
		ref := fmt.Sprintf("c-%s-%05d", tenant, i)
		refs = append(refs, ref)
		evs = append(evs, purchaseEvent(fmt.Sprintf("ev-%s-%d", tenant, i), ref, now.Add(-time.Duration(i+1)*time.Hour)))
	}
	must(200, "POST", "/v1/eventos", map[string]any{"eventos": evs})
	d := must(200, "POST", "/v1/decisiones", map[string]any{"cliente_ref": refs[0], "contexto": map[string]any{"canal": "push", "campana_id": "camp1"}},
		"Idempotency-Key", "idem-"+tenant)
	must(200, "POST", "/v1/decisiones/"+d["decision_id"].(string)+"/ejecucion", map[string]any{"ejecutada": true})
	job := must(202, "POST", "/v1/lotes-decision", map[string]any{"campana_id": "camp1", "clientes": refs[1:]})
	if n := w.e.svc.batch.RunPending(context.Background()); n != 1 {
		t.Fatalf("batch jobs run: %d", n)
	}
	if b := must(200, "GET", "/v1/lotes-decision/"+job["job_id"].(string), nil); b["estado"] != "completado" {
		t.Fatalf("batch job: %v", b)
	}
	must(200, "GET", "/v1/clientes/"+refs[2]+"/exportacion", nil)
	must(202, "DELETE", "/v1/clientes/"+refs[4], nil)
	if st, err := w.e.svc.privacy.ProcessDeletions(context.Background(), deletionHooks(w.e.svc, false)); err != nil || st.Completed != 1 {
		t.Fatalf("customer deletion: %+v %v", st, err)
	}
	if err := w.e.svc.engine.Counters().Flush(); err != nil {
		t.Fatal(err)
	}
}

// plantEveryKind stores a record of every kind tenant does not hold yet
// (kindKeys), so that the deletion meets every table.
func plantEveryKind(t *testing.T, db *store.DB, tenant string) {
	t.Helper()
	held := map[store.Kind]bool{}
	lo, hi := store.TenantSpan(tenant)
	if err := db.Scan(lo, hi, func(k, _ []byte) error {
		held[store.KindOf(tenant, k)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	defer b.Close()
	planted := 0
	for _, k := range store.Kinds() {
		if !held[k] {
			b.Set(kindKeyOf(t, tenant, k), []byte("planted record of "+tenant))
			planted++
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d kinds held through the API, %d planted", tenant, len(store.Kinds())-planted, planted)
}

// kindKeyOf is a key of tenant of kind k, for the kinds the API filling
// may leave empty; a kind it does not know fails the test (a new table:
// add its key here).
func kindKeyOf(t *testing.T, tenant string, k store.Kind) []byte {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	keys := map[store.Kind][]byte{
		store.KindEvent: store.EventKey(tenant, "p-1"), store.KindCustomerEvent: store.CustomerEventKey(tenant, "p-ana", t0, "p-1"),
		store.KindFeatures: store.FeaturesKey(tenant, "p-ana"), store.KindDecision: store.DecisionKey(tenant, "p-1"),
		store.KindCustomerDecision: store.CustomerDecisionKey(tenant, "p-ana", t0, "p-1"), store.KindAttribution: store.AttributionKey(tenant, "p-cup"),
		store.KindIdempotency: store.IdempotencyKey(tenant, "p-idem"), store.KindCatalog: store.CatalogKey(tenant),
		store.KindCampaign: store.CampaignKey(tenant, "p-camp"), store.KindBudget: store.BudgetKey(tenant, "p-camp"),
		store.KindModel: store.ModelKey(tenant, 9), store.KindRewardQueue: store.RewardQueueKey(tenant, t0, "r", "p-1"),
		store.KindJob: store.JobKey(tenant, "p-job"), store.KindJobChunk: store.JobChunkKey(tenant, "p-job", 0),
		store.KindWebhook: store.WebhookKey(tenant), store.KindWebhookQueue: store.WebhookDeliveryKey(tenant, t0, "p-wh"),
		store.KindDaily: store.QuotaKey(tenant, "2026-03-04", "p"), store.KindDeletion: store.DeletionKey(tenant, "p-h"),
		store.KindDeletionQueue: store.DeletionQueueKey(tenant, t0, "p-h"), store.KindAccessLog: store.AccessLogKey(tenant, t0, "p-tr"),
		store.KindQuality: store.QualityKey(tenant), store.KindAbuse: store.AbuseKey(tenant, "p-ci"),
		store.KindQuarantine: store.QuarantineKey(tenant, t0, "p-tr"), store.KindCustomerState: store.CustomerStateKey(tenant, "p-ana"),
		store.KindHourly: store.HourlyKey(tenant, 1), store.KindDamaged: store.DamagedKey(tenant, store.EventKey(tenant, "p-2")),
		store.KindHeldEvent: store.HeldEventKey(tenant, "p-1"),
	}
	if k == store.KindMeta {
		lo, _ := store.CustomerStateSpan(tenant) // 'M' "cust": a meta key of another name
		return append(lo[:len(lo)-5:len(lo)-5], "other\x00"...)
	}
	key, ok := keys[k]
	if !ok {
		t.Fatalf("kind %d has no key in kindKeyOf: add one", k)
	}
	return key
}

// namesTenant reports whether the key or value belongs to tenant: its key
// space, or a global record naming it (its tenant record, a credential,
// an audit entry, its tombstone).
func namesTenant(tenant string, k, v []byte) bool {
	return bytes.Contains(k, []byte(tenant)) || bytes.Contains(v, []byte(`"tenant":"`+tenant+`"`))
}

// recordsOf is every record of the store that belongs to tenant.
func recordsOf(t *testing.T, db *store.DB, tenant string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := db.Scan(nil, nil, func(k, v []byte) error {
		if namesTenant(tenant, k, v) {
			out[string(k)] = string(v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// runCode runs coupond in process on dir and returns its exit code,
// stdout and stderr.
func runCode(t *testing.T, now func() time.Time, dir string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), now, append(args, "--data-dir", dir), strings.NewReader(""), &out, &errOut)
	return ExitCode(err), out.String(), errOut.String()
}

// TestTenantDeleteCommand: "admin tenant delete" (serve stopped) refuses
// without --confirm repeating the id (exit 2), then removes everything of
// the tenant, a record of every kind included, from the store's tables
// and its result files, leaves the other tenant's records byte for byte,
// and refuses the tenant's token (401), keeps a tombstone and an audit
// line, and "admin check" is clean after.
func TestTenantDeleteCommand(t *testing.T) {
	w := newTenantWorld(t)
	plantEveryKind(t, w.e.db, "acme")
	// Planted records do not decode: check would list them. The real
	// ones' check is below, on a deletion with none planted.
	betaBefore := recordsOf(t, w.e.db, "beta")
	acmeBefore := recordsOf(t, w.e.db, "acme")
	w.close()
	if len(acmeBefore) < len(store.Kinds()) {
		t.Fatalf("acme holds %d records before its deletion", len(acmeBefore))
	}
	if hits := filesHolding(t, filepath.Join(w.dir, "results", "acme"), []byte("c-acme-")); len(hits) == 0 {
		t.Fatal("acme has no result file naming its customers before its deletion")
	}

	t.Setenv("COUPOND_CONFIRM", "acme") // a confirmation is typed, never read from the environment
	for _, args := range [][]string{{}, {"--confirm", "acm"}, {"--confirm", "beta"}} {
		code, _, stderr := runCode(t, w.clk.Now, w.dir, append([]string{"admin", "tenant", "delete", "acme"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--confirm must repeat its id (--confirm acme)") {
			t.Errorf("delete acme %v: exit %d, stderr %q; want exit 2 saying --confirm must repeat the id", args, code, stderr)
		}
	}
	code, out, stderr := runCode(t, w.clk.Now, w.dir, "admin", "tenant", "delete", "acme", "--confirm", "acme", "--json")
	if code != 0 {
		t.Fatalf("delete: exit %d\n%s%s", code, out, stderr)
	}
	var d tenantDeletionView
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.State != store.TenantDeleted || d.Tenant != "acme" {
		t.Fatalf("delete --json: %+v %v\n%s", d, err, out)
	}

	w.open(t)
	if left := recordsOf(t, w.e.db, "acme"); len(left) != 1 {
		for k := range left {
			table, text := store.DescribeKey("acme", []byte(k))
			t.Errorf("left of acme: %s %s", table, text)
		}
	}
	if diff := cmp.Diff(betaBefore, recordsOf(t, w.e.db, "beta")); diff != "" {
		t.Errorf("beta's records changed (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "results", "acme")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("acme's result files: %v; want them gone", err)
	}
	if hits := filesHolding(t, w.dir, []byte("c-acme-")); len(hits) > 0 {
		t.Errorf("files of the data dir still name acme's customers: %v", hits)
	}
	if st, _ := w.call(t, "GET", "/v1/catalogo-acciones", w.tokens["acme"], nil); st != 401 {
		t.Errorf("acme's token after its deletion: %d, want 401", st)
	}
	if st, _ := w.call(t, "GET", "/v1/catalogo-acciones", w.tokens["beta"], nil); st != 200 {
		t.Errorf("beta's token after acme's deletion: %d, want 200", st)
	}
	w.close()
	var list []tenantView
	if err := json.Unmarshal(runInAt(t, w.clk.Now, w.dir, "admin", "tenant", "list", "--json"), &list); err != nil || len(list) != 1 || list[0].Tenant != "beta" {
		t.Errorf("tenant list after the deletion: %+v %v", list, err)
	}
	audit, _, err := readAudit(filepath.Join(w.dir, auditFile))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, a.Via+": "+strings.Join(a.Args, " "))
	}
	want := []string{"direct: admin tenant delete acme --confirm acme --json --data-dir " + w.dir,
		"direct: admin tenant list --json --data-dir " + w.dir}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admin audit log (-want +got):\n%s", diff)
	}
}

// TestTenantDeleteCheckClean: after a tenant's deletion "admin check" finds
// nothing wrong (exit 0) and the tenant's id may be created again, empty.
func TestTenantDeleteCheckClean(t *testing.T) {
	w := newTenantWorld(t)
	w.close()
	if code, out, stderr := runCode(t, w.clk.Now, w.dir, "admin", "tenant", "delete", "acme", "--confirm", "acme"); code != 0 ||
		!strings.Contains(out, "tenant acme deleted") {
		t.Fatalf("delete: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := runCode(t, w.clk.Now, w.dir, "admin", "check"); code != 0 {
		t.Errorf("check after the deletion: exit %d\n%s%s", code, out, stderr)
	}
	runInAt(t, w.clk.Now, w.dir, "admin", "tenant", "create", "acme")
	code, out, _ := runCode(t, w.clk.Now, w.dir, "admin", "tenant", "deletions", "--json")
	var ds []tenantDeletionView
	if code != 0 || json.Unmarshal([]byte(out), &ds) != nil || len(ds) != 1 || ds[0].State != store.TenantDeleted || ds[0].By == "" {
		t.Errorf("tenant deletions: exit %d %s", code, out)
	}
}

// TestTenantDeleteInServe: inside serve (the sweep waits its grace) the
// tenant's tokens answer 401 as soon as the deletion returns, its records
// are erased, and the worker's pass after the grace completes it.
func TestTenantDeleteInServe(t *testing.T) {
	w := newTenantWorld(t)
	hooks := deletionHooks(w.e.svc, false)
	d, err := w.e.svc.privacy.DeleteTenant(context.Background(), "acme", "uid 1", hooks)
	if err != nil || d.State != store.TenantErased {
		t.Fatalf("delete: %+v %v; want it erased, its sweep waiting", d, err)
	}
	if st, _ := w.call(t, "GET", "/v1/catalogo-acciones", w.tokens["acme"], nil); st != 401 {
		t.Errorf("acme's token after its deletion: %d, want 401", st)
	}
	if st, _ := w.token(t, "acme"); st != 401 {
		t.Errorf("acme's credential asks a token after its deletion: %d, want 401", st)
	}
	if left := recordsOf(t, w.e.db, "acme"); len(left) != 1 {
		t.Errorf("erased, acme still has %d records", len(left)-1)
	}
	if _, err := w.e.svc.privacy.ProcessDeletions(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.e.db.TenantDeletionOf("acme"); d.State != store.TenantErased {
		t.Errorf("within the grace: %s, want erased", d.State)
	}
	w.clk.Advance(tenantSweepGrace)
	if _, err := w.e.svc.privacy.ProcessDeletions(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.e.db.TenantDeletionOf("acme"); d.State != store.TenantDeleted {
		t.Errorf("after the grace: %s, want deleted", d.State)
	}
}

// TestTenantDeleteResumes: a deletion cut short (the process killed after
// the mark, or after the erasure) leaves the tenant hidden, and the
// deletion worker's first pass after the start completes it.
func TestTenantDeleteResumes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(t *testing.T, db *store.DB, now time.Time)
	}{
		{"killed after the mark", func(t *testing.T, db *store.DB, now time.Time) {
			if _, err := db.MarkTenantDeleting("acme", "uid 1", now); err != nil {
				t.Fatal(err)
			}
		}},
		{"killed after the erasure", func(t *testing.T, db *store.DB, now time.Time) {
			if _, err := db.MarkTenantDeleting("acme", "uid 1", now); err != nil {
				t.Fatal(err)
			}
			if _, err := db.EraseTenant("acme", now); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTenantWorld(t)
			tc.cut(t, w.e.db, w.clk.Now())
			w.close()
			w.open(t)
			if _, ok := w.e.db.Tenant("acme"); ok {
				t.Error("after the restart, the tenant being deleted is listed")
			}
			if st, _ := w.call(t, "GET", "/v1/catalogo-acciones", w.tokens["acme"], nil); st != 401 {
				t.Errorf("after the restart, acme's token: %d, want 401", st)
			}
			w.clk.Advance(tenantSweepGrace)
			if _, err := w.e.svc.privacy.ProcessDeletions(context.Background(), deletionHooks(w.e.svc, false)); err != nil {
				t.Fatal(err)
			}
			if d, _ := w.e.db.TenantDeletionOf("acme"); d == nil || d.State != store.TenantDeleted {
				t.Errorf("after the worker's pass: %+v, want deleted", d)
			}
			if left := recordsOf(t, w.e.db, "acme"); len(left) != 1 {
				t.Errorf("after the worker's pass, acme still has %d records", len(left)-1)
			}
			if _, err := os.Stat(filepath.Join(w.dir, "results", "acme")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("acme's result files: %v; want them gone", err)
			}
		})
	}
}

// TestRestoreKeepsTenantDeleted: a backup taken before a tenant's deletion,
// restored, does not bring the tenant back, whether the deletion reaches
// the restore through the backup's ledger (the store it replaces gone) or
// through the tombstone of the store it replaces (no ledger written); the
// other tenant comes back whole. A tenant created again after the deletion
// and backed up since is kept by a restore of that backup.
func TestRestoreKeepsTenantDeleted(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		ledger     bool // the deletion written to the backup's ledger
		dropLive   bool // the store being replaced is gone
		recreate   bool // acme created again and backed up after its deletion
		restoreOld bool // the backup taken before the deletion restored, not the one after
		wantAcme   bool
		acmeTokens bool
	}{
		{name: "through the ledger", ledger: true, dropLive: true},
		{name: "through the replaced store's tombstone", ledger: false},
		{name: "created again since", ledger: true, recreate: true, wantAcme: true},
		{name: "created again, the backup before the deletion restored", ledger: true, recreate: true, restoreOld: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTenantWorld(t)
			bk := filepath.Join(t.TempDir(), "bk")
			if _, err := runBackup(ctx, w.e, bk, io.Discard); err != nil {
				t.Fatal(err)
			}
			betaBefore := recordsOf(t, w.e.db, "beta")
			hooks := deletionHooks(w.e.svc, false)
			hooks.Tenant.Grace = 0
			if !tc.ledger {
				hooks.Ledger = nil
			}
			if _, err := w.e.svc.privacy.DeleteTenant(ctx, "acme", "uid 1", hooks); err != nil {
				t.Fatal(err)
			}
			if tc.recreate {
				w.clk.Advance(time.Hour)
				w.fillTenantAPI(t, "acme")
				bk2 := filepath.Join(t.TempDir(), "bk2")
				if _, err := runBackup(ctx, w.e, bk2, io.Discard); err != nil {
					t.Fatal(err)
				}
				if !tc.restoreOld {
					bk = bk2
				}
			}
			w.close()
			if tc.dropLive {
				if err := os.RemoveAll(filepath.Join(w.dir, "db")); err != nil {
					t.Fatal(err)
				}
			}
			res, err := runRestore(ctx, w.dir, bk, w.clk.Now, io.Discard)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if want := map[bool]int{true: 0, false: 1}[tc.wantAcme]; res.TenantDeletionsReapplied != want {
				t.Errorf("restore's tenant_deletions_reapplied: %d, want %d", res.TenantDeletionsReapplied, want)
			}
			w.open(t)
			_, hasAcme := w.e.db.Tenant("acme")
			if hasAcme != tc.wantAcme {
				t.Errorf("restored, tenant acme listed: %v, want %v", hasAcme, tc.wantAcme)
			}
			if !tc.wantAcme {
				if left := recordsOf(t, w.e.db, "acme"); len(left) != 1 {
					t.Errorf("restored, acme has %d records (its tombstone aside)", len(left)-1)
				}
				if st, _ := w.call(t, "GET", "/v1/catalogo-acciones", w.tokens["acme"], nil); st != 401 {
					t.Errorf("restored, acme's token: %d, want 401", st)
				}
			}
			if got := recordsOf(t, w.e.db, "beta"); !tc.recreate && len(got) != len(betaBefore) {
				t.Errorf("restored, beta has %d records, %d before", len(got), len(betaBefore))
			}
		})
	}
}

// TestMeasureTenantDelete times "admin tenant delete" (serve stopped) of a
// tenant of eventsPer events (10 per customer) on a store holding two other
// tenants as large: COUPOND_MEASURE_TENANTDEL=100000 go test -run
// TestMeasureTenantDelete -v ./cli/ (skipped without it).
func TestMeasureTenantDelete(t *testing.T) {
	eventsPer := 0
	fmt.Sscan(os.Getenv("COUPOND_MEASURE_TENANTDEL"), &eventsPer)
	if eventsPer == 0 {
		t.Skip("set COUPOND_MEASURE_TENANTDEL to the events of each tenant")
	}
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC))
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, tenant := range []string{"acme", "beta", "gamma"} {
		now := clk.Now()
		createTenantWithEvents(t, e, tenant, now, eventsPer)
	}
	e.close()
	size := func() int64 { n, _ := dirSizeOf(filepath.Join(dir, "db")); return n }
	before := size()
	t.Logf("built 3 tenants of %d events in %v; store %.1f MB", eventsPer, time.Since(start).Round(time.Second), float64(before)/1e6)
	start = time.Now()
	code, out, stderr := runCode(t, clk.Now, dir, "admin", "tenant", "delete", "acme", "--confirm", "acme")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("delete: exit %d %s %s", code, out, stderr)
	}
	t.Logf("admin tenant delete acme (%d events): %v, store %.1f MB → %.1f MB", eventsPer, took.Round(time.Millisecond), float64(before)/1e6, float64(size())/1e6)
}

// dirSizeOf is the bytes of the regular files under dir.
func dirSizeOf(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// TestTenantDeleteThroughServe: "admin tenant delete" through a running
// serve's socket refuses the tenant's token at once (401, the other
// tenant's still served) and erases it, the sweep left to the worker; a
// kill -9 then leaves it hidden after the restart, and "admin check" is
// clean.
func TestTenantDeleteThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs serve")
	}
	dataDir := t.TempDir()
	in := startServer(t, dataDir)
	defer in.killIfRunning()
	_, acme := setupDataTenant(t, in, "acme")
	_, beta := setupDataTenant(t, in, "beta")
	var shown map[string]any
	in.admin(&shown, "clock", "show", "--tenant", "acme")
	now, _ := time.Parse(time.RFC3339, shown["now"].(string))
	for _, tok := range []string{acme, beta} {
		evs := []map[string]any{purchaseEvent("ev-1", "c-00000001", now.Add(-time.Hour)), purchaseEvent("ev-2", "c-00000002", now.Add(-time.Hour))}
		if st, _, b := in.do("POST", "/v1/eventos", tok, map[string]any{"eventos": evs}); st != 200 {
			t.Fatalf("events: %d %v", st, b)
		}
	}
	if out, err := runAdmin("", dataDir, "tenant", "delete", "acme"); ExitCode(err) != 2 {
		t.Fatalf("delete without --confirm: %v %s", err, out)
	}
	var d tenantDeletionView
	in.admin(&d, "tenant", "delete", "acme", "--confirm", "acme")
	if d.State != store.TenantErased {
		t.Errorf("through serve: %+v; want erased, its sweep a minute later", d)
	}
	if st, _, _ := in.do("GET", "/v1/catalogo-acciones", acme, nil); st != 401 {
		t.Errorf("acme's token after its deletion: %d, want 401", st)
	}
	if st, _, _ := in.do("GET", "/v1/catalogo-acciones", beta, nil); st != 200 {
		t.Errorf("beta's token after acme's deletion: %d, want 200", st)
	}
	in.kill()
	in.start()
	var list []tenantView
	in.admin(&list, "tenant", "list")
	if len(list) != 1 || list[0].Tenant != "beta" {
		t.Errorf("tenant list after the restart: %+v", list)
	}
	if st, _, _ := in.do("GET", "/v1/catalogo-acciones", acme, nil); st != 401 {
		t.Errorf("acme's token after the restart: %d, want 401", st)
	}
	if out, err := runAdmin("", dataDir, "check"); err != nil {
		t.Errorf("check: %v\n%s", err, out)
	}
	audit, _, err := readAudit(filepath.Join(dataDir, auditFile))
	found := false
	for _, a := range audit {
		found = found || strings.HasPrefix(strings.Join(a.Args, " "), "admin tenant delete acme --confirm acme")
	}
	if err != nil || !found {
		t.Errorf("admin audit log: %v; want the deletion's line among %+v", err, audit)
	}
}

// TestTenantCreateWhileDeleting: "admin tenant create" of an id still being
// deleted says so (exit 1), not that the tenant exists, and a live
// tenant's id is still "already exists".
func TestTenantCreateWhileDeleting(t *testing.T) {
	w := newTenantWorld(t)
	if _, err := w.e.db.MarkTenantDeleting("acme", "uid 1", w.clk.Now()); err != nil {
		t.Fatal(err)
	}
	w.close()
	for _, tc := range []struct{ id, want string }{
		{"acme", `tenant "acme" is being deleted (deleting): its id can be taken again once 'admin tenant deletions' shows it deleted`},
		{"beta", `tenant "beta" already exists`},
	} {
		err := run(context.Background(), w.clk.Now, []string{"admin", "tenant", "create", tc.id, "--data-dir", w.dir},
			strings.NewReader(""), io.Discard, io.Discard)
		if code := ExitCode(err); code != 1 {
			t.Errorf("create %s: exit %d, want 1", tc.id, code)
		}
		if diff := cmp.Diff(tc.want, fmt.Sprint(err)); diff != "" {
			t.Errorf("create %s (-want +got):\n%s", tc.id, diff)
		}
	}
}

// createTenantWithEvents creates the sandbox tenant in e's store, made at
// now, and ingests n purchases for it (ten a customer, 1,000 a request).
func createTenantWithEvents(t *testing.T, e *env, tenant string, now time.Time, n int) {
	t.Helper()
	if err := e.db.CreateTenant(&store.Tenant{ID: tenant, CreatedAt: now, Sandbox: true, ClockNow: now, Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		evs := make([]engine.IngestEvent, 0, 1000)
		for j := i; j < i+1000 && j < n; j++ {
			ev := engine.Event{ID: fmt.Sprintf("ev-%d", j), ClienteRef: fmt.Sprintf("c-%s-%06d", tenant, j/10), TS: now.Add(-time.Duration(j%1000) * time.Minute),
				Tipo: engine.CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t%d", j), MargenCents: 2500}
			evs = append(evs, engine.IngestEvent{Index: len(evs), Event: ev, Canonical: []byte(ev.ID)})
		}
		if res, err := e.svc.engine.Ingester.Ingest(tenant, evs); err != nil || res.Aceptados != len(evs) {
			t.Fatalf("ingest: %+v %v", res, err)
		}
	}
}
