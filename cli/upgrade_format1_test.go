package cli

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/golden"
)

// TestOpensDataDirOfRelease40b644d: the data dir of the last release of
// store format 1 (testdata/upgrade/40b644d, made by make-40b644d.sh with
// coupond at commit 40b644d, 2026-12-06), whose catalog and decision
// records know a coupon by its id alone, opens with nothing damaged and
// its model carried over: each coupon's id is its model key, so the guard
// and the send gate read as that release read them, a catalog that gives
// an id another tipo_cupon starts that coupon anew while the others keep
// what was learned of them, and the learner goes on from the stored
// model. Its decisions, deleted customers, batch job and backup carry
// over too.
func TestOpensDataDirOfRelease40b644d(t *testing.T) {
	root := copyDataDir(t, golden.Path("upgrade/40b644d"))
	dir, backup := filepath.Join(root, "data"), filepath.Join(root, "backup")
	pointRegistryAt(t, dir, backup)
	now := releaseDay(time.Date(2026, 12, 6, 17, 28, 9, 0, time.UTC)) // its batch job's creation
	checkOldGuard(t, now, dir, filepath.Join(root, "show-acme.json"))
	before := tenantUsage(t, now, dir, "acme")
	in := openEarlierRelease(t, now, dir, 1000)
	creds := map[string]credJSON{}
	for _, c := range readCreds(t, filepath.Join(root, "crm.json")) {
		creds[c.Tenant] = c
	}
	acme := in.token(creds["acme"])

	decide := func(ref string, hdr ...string) map[string]any {
		st, _, d := in.do("POST", "/v1/decisiones", acme, map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push"}}, hdr...)
		if st != 200 || d["decision_id"] == nil {
			t.Fatalf("decision for %s: %d %v", ref, st, d)
		}
		return d
	}
	// Decided with Idempotency-Key k2-25 by that release: the replay is
	// the decision of the customer's open window.
	if replay, open := decide("cli-00025", "Idempotency-Key", "k2-25"), decide("cli-00025"); replay["decision_id"] != open["decision_id"] {
		t.Errorf("replay of the earlier release's Idempotency-Key: %v, its open decision %v", replay, open)
	}
	open := decide("cli-00035") // left unconfirmed by that release
	if st, _, b := in.do("POST", "/v1/decisiones/"+open["decision_id"].(string)+"/ejecucion", acme, map[string]any{"ejecutada": true}); st != 200 {
		t.Errorf("confirmation of the earlier release's unconfirmed decision: %d %v", st, b)
	}
	for _, ref := range []string{"cli-00007", "cli-00011"} { // before and after the backup
		st, _, x := in.do("GET", "/v1/clientes/"+ref+"/exportacion", acme, nil)
		if b, _ := x["borrado"].(map[string]any); st != 200 || b["estado"] != "completado" || len(x["eventos"].([]any)) != 0 {
			t.Errorf("export of %s, deleted under the earlier release: %d %v", ref, st, x)
		}
	}
	checkOldBatchJob(t, in, acme, "lote_p7bxxy3isg3h2lgu", 69, "cli-00007", "cli-00011")
	checkRetypedCoupon(t, now, in, acme)
	checkOldModelLearns(t, now, in, before)
	checkOldBackup(t, now, dir, backup)
}

// checkRetypedCoupon: the earlier release's catalog again, but for id 3
// given another tipo_cupon: the guard's baseline of the coupon id 3 named
// is no longer shown under it (a new coupon to the model), and those of
// the coupons that keep their tipo_cupon, learned under their ids, are
// the same.
func checkRetypedCoupon(t *testing.T, now func() time.Time, in *instance, tok string) {
	t.Helper()
	baselines := func() map[int]float64 {
		var show struct {
			Guard struct {
				Baselines []struct {
					Action int     `json:"action"`
					Value  float64 `json:"value_mxn"`
				} `json:"baselines"`
			} `json:"policy_guard"`
		}
		if err := json.Unmarshal(runInAt(t, now, in.dataDir, "admin", "tenant", "show", "acme", "--json"), &show); err != nil {
			t.Fatal(err)
		}
		m := map[int]float64{}
		for _, b := range show.Guard.Baselines {
			m[b.Action] = b.Value
		}
		return m
	}
	want := baselines()
	if len(want) != 4 {
		t.Fatalf("the earlier release's guard baselines: %v, want never-send's and 3 coupons'", want)
	}
	delete(want, 3)
	catalog := map[string]any{"acciones": []map[string]any{
		{"id": 1, "nombre": "10% en abarrotes", "tipo_cupon": "PCT10_ABARROTES", "costo_envio_mxn": 0.5, "descuento_max_mxn": 50, "descuento_pct": 10, "categorias": []string{"abarrotes"}},
		{"id": 2, "nombre": "$30", "tipo_cupon": "MXN30", "costo_envio_mxn": 0.5, "descuento_max_mxn": 30, "canales": []string{"push", "email"}},
		{"id": 3, "nombre": "15% en todo", "tipo_cupon": "PCT15_TODO", "costo_envio_mxn": 0.3, "descuento_max_mxn": 40, "descuento_pct": 15},
	}}
	if st, _, b := in.do("PUT", "/v1/catalogo-acciones", tok, catalog); st != 200 {
		t.Fatalf("catalog: %d %v", st, b)
	}
	if diff := cmp.Diff(want, baselines()); diff != "" {
		t.Errorf("guard baselines after id 3 was given another coupon (-want +got):\n%s", diff)
	}
}
