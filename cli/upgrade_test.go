package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/internal/golden"
	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/privacy"
)

// TestOpensDataDirOfAnEarlierRelease: a data dir written by an earlier
// release (testdata/upgrade/5a91376, made by make-5a91376.sh with coupond
// at commit 5a91376) opens with nothing damaged, and everything in it is
// still served: its credential gets a token, its customers get decisions
// and exports, its deleted customer stays deleted, its finished batch job
// and result file answer, and the admin commands read it. A change to a
// stored format that older records no longer decode under fails here.
func TestOpensDataDirOfAnEarlierRelease(t *testing.T) {
	dir := copyDataDir(t, golden.Path("upgrade/5a91376"))
	now := releaseDay(time.Date(2026, 12, 3, 12, 20, 0, 0, time.UTC)) // its batch job's creation
	in := openEarlierRelease(t, now, dir, 500)

	tok := in.token(credJSON{ClientID: "ci_N4SR_SgbI4oa3H3Dt7Ze", ClientSecret: "cs_zD4dYYOXqtRtnjctQu35iYMZUcYIjFrPqcXgfQOJi6k"})
	st, _, d := in.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": "cli-00003", "contexto": map[string]any{"canal": "push"}})
	id, _ := d["decision_id"].(string)
	if st != 200 || id == "" {
		t.Fatalf("decision for a customer of the earlier release: %d %v", st, d)
	}
	if st, _, b := in.do("POST", "/v1/decisiones/"+id+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
		t.Errorf("confirmation: %d %v", st, b)
	}
	if st, _, x := in.do("GET", "/v1/clientes/cli-00005/exportacion", tok, nil); st != 200 || len(x["eventos"].([]any)) != 4 {
		t.Errorf("export of a customer with 4 purchases: %d %v", st, x)
	}
	st, _, x := in.do("GET", "/v1/clientes/cli-00007/exportacion", tok, nil)
	if b, _ := x["borrado"].(map[string]any); st != 200 || b["estado"] != "completado" || len(x["eventos"].([]any)) != 0 {
		t.Errorf("export of the customer deleted under the earlier release: %d %v", st, x)
	}

	// 50 customers but the deleted one.
	checkOldBatchJob(t, in, tok, "lote_rkpruxtew5psb4ho", 49, "cli-00007")

	var ev struct {
		Records int `json:"records"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "evaluate", "--tenant", "acme", "--json"), &ev); err != nil || ev.Records == 0 {
		t.Errorf("admin evaluate over the earlier release's log: %+v, %v", ev, err)
	}
	// Its model is of an earlier format: the tenant learns again from the
	// prior, and the operator is told so.
	var show struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "tenant", "show", "acme", "--json"), &show); err != nil ||
		!slices.ContainsFunc(show.Warnings, func(w string) bool { return strings.Contains(w, "stored model is of an earlier format") }) {
		t.Errorf("tenant show's warnings after the upgrade: %q, %v", show.Warnings, err)
	}
}

// releaseDay is the clock a test runs an earlier release's data dir on:
// it starts an hour after made, when the data dir was made, and runs at the
// real rate, so that what the data dir holds for a limited real time (a
// batch job's result file, 7 days) is there whatever day the test runs.
func releaseDay(made time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return made.Add(time.Hour + time.Since(start)) }
}

// openEarlierRelease checks that "admin check" finds at least minRecords
// records in the data dir of an earlier release, none of them damaged,
// and serves it (in process, no console, its services on the clock now)
// until the test ends; then it checks that the server logged no error and
// quarantined nothing.
func openEarlierRelease(t *testing.T, now func() time.Time, dir string, minRecords int) *instance {
	t.Helper()
	var check struct {
		OK      bool  `json:"ok"`
		Records int   `json:"records"`
		Damaged []any `json:"damaged"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "check", "--json"), &check); err != nil {
		t.Fatal(err)
	}
	if !check.OK || check.Records < minRecords || len(check.Damaged) != 0 {
		t.Fatalf("admin check of the earlier release's data dir: %+v", check)
	}

	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, addr: freeAddr(t), dataDir: dir}
	logs := &syncbuf.Buffer{} // serve writes it while the test reads it
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, now, []string{"serve", "--data-dir", dir, "--addr", in.addr, "--console-addr", ""}, nil, io.Discard, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if s := logs.String(); strings.Contains(s, `"level":"error"`) || strings.Contains(s, "quarantin") {
			t.Errorf("the server logged errors or quarantined records:\n%s", s)
		}
	})
	waitFor(t, 20*time.Second, "/readyz on the earlier release's data dir", func() bool { return in.answers200("/readyz") })
	return in
}

// copyDataDir copies the data dir src into a new owner-only temporary
// directory (a checkout leaves its files 0644, which serve would fix in
// place) and returns the copy's path.
func copyDataDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// checkOldBatchJob checks that the earlier release's finished batch job
// answers completado and that its result file has lines lines, none of
// them of the deleted customers.
func checkOldBatchJob(t *testing.T, in *instance, tok, job string, lines int, deleted ...string) {
	t.Helper()
	if st, _, b := in.do("GET", "/v1/lotes-decision/"+job, tok, nil); st != 200 || b["estado"] != "completado" {
		t.Errorf("the earlier release's batch job: %d %v", st, b)
	}
	resp := apitest.Do(t, "GET", in.url("/v1/lotes-decision/"+job+"/resultado"), tok, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := bytes.Count(body, []byte("\n")); resp.StatusCode != http.StatusOK || n != lines {
		t.Errorf("its result file: %d, %d lines, want %d", resp.StatusCode, n, lines)
	}
	for _, ref := range deleted {
		if bytes.Contains(body, []byte(ref)) {
			t.Errorf("its result file names %s, deleted", ref)
		}
	}
}

// TestOpensDataDirOfRelease8407ba5: the data dir of the release of
// 2026-12-03 (testdata/upgrade/8407ba5, made by make-8407ba5.sh with
// coupond at commit 8407ba5), rich in what that release added since
// 5a91376 (a model of format 5 with its gate and guard, decisions with
// shares and affinities, shadow mode, console sessions and audit,
// Idempotency-Keys, daily quotas, an abuse step, a backup with its
// ledger), opens with
// nothing damaged and nothing started afresh: its credentials get tokens,
// its customers decisions and exports, an unconfirmed decision its
// confirmation, its learner goes on from its model, its deleted customers
// stay deleted, and its backup lists, verifies and restores.
func TestOpensDataDirOfRelease8407ba5(t *testing.T) {
	root := copyDataDir(t, golden.Path("upgrade/8407ba5"))
	dir, backup := filepath.Join(root, "data"), filepath.Join(root, "backup")
	pointRegistryAt(t, dir, backup)
	now := releaseDay(time.Date(2026, 12, 5, 11, 12, 44, 0, time.UTC)) // its batch job's creation
	before := tenantUsage(t, now, dir, "acme")
	checkOldGuard(t, now, dir, filepath.Join(root, "show-acme.json"))
	in := openEarlierRelease(t, now, dir, 1000)
	creds := map[string]credJSON{}
	for _, c := range readCreds(t, filepath.Join(root, "crm.json")) {
		creds[c.Tenant] = c
	}
	acme, tienda := in.token(creds["acme"]), in.token(creds["tienda"])

	// The day's quota use of the sandbox tenant, whose clock has not moved.
	if before.QuotaDecisions != 20 || before.QuotaEvents != 76 {
		t.Errorf("acme's quota use of its day: %+v, want the 20 decisions and 76 events of that day", before)
	}
	checkOldDecisions(t, in, acme, tienda)
	checkOldModelLearns(t, now, in, before)

	resp := apitest.Do(t, "GET", in.url("/v1/clientes/cli-00012/exportacion"), acme, nil)
	export, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export of a customer of the earlier release: %d %s", resp.StatusCode, export)
	}
	golden.JSON(t, "upgrade/8407ba5-export.json", export, cliVolatile...)
	for _, ref := range []string{"cli-00007", "cli-00011"} { // before and after the backup
		st, _, x := in.do("GET", "/v1/clientes/"+ref+"/exportacion", acme, nil)
		if b, _ := x["borrado"].(map[string]any); st != 200 || b["estado"] != "completado" || len(x["eventos"].([]any)) != 0 {
			t.Errorf("export of %s, deleted under the earlier release: %d %v", ref, st, x)
		}
	}
	// 71 customers with history but the two deleted.
	checkOldBatchJob(t, in, acme, "lote_4ppfplaajjjxu6ov", 69, "cli-00007", "cli-00011")

	var audit []struct {
		Tenant, Action, Outcome string
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "console", "audit", "--json"), &audit); err != nil ||
		len(audit) != 1 || audit[0].Tenant != "tienda" || audit[0].Action != "shadow-on" || audit[0].Outcome != "ok" {
		t.Errorf("the console's audit of the earlier release: %+v, %v", audit, err)
	}
	var shadow struct {
		Decisions int `json:"decisions"`
		Confirmed int `json:"confirmed"`
		Damaged   int `json:"damaged_records"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "shadow", "report", "--tenant", "tienda", "--json"), &shadow); err != nil ||
		shadow.Decisions != 21 || shadow.Confirmed != 20 || shadow.Damaged != 0 { // the 20 of that release, and one of this test
		t.Errorf("shadow report of the earlier release's decisions: %+v, %v", shadow, err)
	}
	var abuse struct {
		Credentials []struct {
			Level string `json:"level"`
			Steps []any  `json:"steps"`
		} `json:"credentials"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "abuse", "show", "--tenant", "acme", "--json"), &abuse); err != nil ||
		len(abuse.Credentials) != 1 || abuse.Credentials[0].Level != "aviso" || len(abuse.Credentials[0].Steps) != 1 {
		t.Errorf("the abuse step the earlier release recorded: %+v, %v", abuse, err)
	}
	checkOldBackup(t, now, dir, backup)
}

// pointRegistryAt points every backup of the data dir's registry (and of
// its copy, when the release kept one) at backup: the fixture's registry
// names the directory make-8407ba5.sh took it in, as an operator who moves
// a data dir and its backups edits it.
func pointRegistryAt(t *testing.T, dir, backup string) {
	t.Helper()
	pointRegistryFileAt(t, filepath.Join(dir, "backups.json"), backup)
	if _, err := os.Stat(filepath.Join(dir, "backups.copy.json")); err == nil {
		pointRegistryFileAt(t, filepath.Join(dir, "backups.copy.json"), backup)
	}
}

// pointRegistryFileAt points every backup of the registry file path at
// backup.
func pointRegistryFileAt(t *testing.T, path, backup string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		Backups []map[string]any `json:"backups"`
	}
	if err := json.Unmarshal(data, &reg); err != nil || len(reg.Backups) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	for _, b := range reg.Backups {
		b["dir"] = backup
	}
	if data, err = json.Marshal(reg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// readCreds reads the credentials make-8407ba5.sh saved.
func readCreds(t *testing.T, path string) []credJSON {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var creds []credJSON
	if err := json.Unmarshal(data, &creds); err != nil {
		t.Fatal(err)
	}
	return creds
}

// oldUsage is what "admin tenant show --json" says of a tenant's model and
// quota use.
type oldUsage struct {
	PolicyVersion  string   `json:"policy_version"`
	RewardsLearned int      `json:"rewards_learned"`
	QuotaDecisions int      `json:"quota_decisions_today"`
	QuotaEvents    int      `json:"quota_events_today"`
	Warnings       []string `json:"-"`
}

func tenantUsage(t *testing.T, now func() time.Time, dir, tenant string) oldUsage {
	t.Helper()
	var show struct {
		Usage    oldUsage `json:"usage"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "tenant", "show", tenant, "--json"), &show); err != nil {
		t.Fatal(err)
	}
	show.Usage.Warnings = show.Warnings
	return show.Usage
}

// checkOldDecisions: a customer of the earlier release gets a decision and
// its confirmation; its unconfirmed decision (answered again while its
// reward window is open) is confirmed, a confirmed one refused again; an
// Idempotency-Key of that release replays its decision; the tenant in
// shadow mode stays in it.
func checkOldDecisions(t *testing.T, in *instance, acme, tienda string) {
	t.Helper()
	decide := func(tok, ref string, hdr ...string) (int, map[string]any) {
		st, _, d := in.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": ref, "contexto": map[string]any{"canal": "push"}}, hdr...)
		return st, d
	}
	confirm := func(id string) (int, map[string]any) {
		st, _, b := in.do("POST", "/v1/decisiones/"+id+"/ejecucion", acme, map[string]any{"ejecutada": true})
		return st, b
	}
	st, d := decide(acme, "cli-00003")
	if id, _ := d["decision_id"].(string); st != 200 || id == "" {
		t.Fatalf("decision for a customer of the earlier release: %d %v", st, d)
	} else if st, b := confirm(id); st != 200 {
		t.Errorf("its confirmation: %d %v", st, b)
	}
	// Decided with Idempotency-Key k2-25 by that release: the replay is
	// that answer, not the open window's (propensity 1, another motivo).
	st, replay := decide(acme, "cli-00025", "Idempotency-Key", "k2-25")
	if _, open := decide(acme, "cli-00025"); st != 200 || replay["decision_id"] == nil || replay["decision_id"] != open["decision_id"] ||
		replay["propension"] == 1.0 || replay["motivo"] == open["motivo"] {
		t.Errorf("replay of the earlier release's Idempotency-Key: %d %v, its open decision %v", st, replay, open)
	}
	if _, open := decide(acme, "cli-00030"); open["propension"] != 1.0 {
		t.Errorf("cli-00030's open decision of the earlier release: %v", open)
	} else if st, b := confirm(open["decision_id"].(string)); st != 200 || b["estado_ejecucion"] != "ejecutada" {
		t.Errorf("confirmation of the earlier release's unconfirmed decision: %d %v", st, b)
	}
	if _, open := decide(acme, "cli-00020"); open["decision_id"] == nil {
		t.Errorf("cli-00020's open decision of the earlier release: %v", open)
	} else if st, b := confirm(open["decision_id"].(string)); st != 409 || b["codigo"] != "ejecucion_ya_confirmada" {
		t.Errorf("second confirmation of a decision the earlier release confirmed: %d %v", st, b)
	}
	if st, d := decide(tienda, "cli-00025"); st != 200 || d["en_sombra"] != true {
		t.Errorf("decision of the tenant the earlier release's console put in shadow mode: %d %v", st, d)
	}
}

// checkOldModelLearns: the tenant's model of the earlier release (format
// 5), which "admin tenant show" read before serve started (before), is
// the one serve loads, not the prior, and the learner goes on from it once
// the clock closes the reward windows of its last decisions: it learns
// rewards on top of the ones it had (a model started afresh would count
// the new ones alone, fewer).
func checkOldModelLearns(t *testing.T, now func() time.Time, in *instance, before oldUsage) {
	t.Helper()
	if got := tenantUsage(t, now, in.dataDir, "acme"); got.PolicyVersion != before.PolicyVersion {
		t.Fatalf("serve's model of acme: %+v, want the stored %s", got, before.PolicyVersion)
	}
	runInAt(t, now, in.dataDir, "admin", "clock", "advance", "--tenant", "acme", "--by", "31d")
	var after oldUsage
	waitFor(t, 30*time.Second, "the learner to fold the rewards of the earlier release's last decisions", func() bool {
		after = tenantUsage(t, now, in.dataDir, "acme")
		return after.PolicyVersion != before.PolicyVersion
	})
	if after.RewardsLearned <= before.RewardsLearned || !slices.Equal(after.Warnings, before.Warnings) {
		t.Errorf("acme's model after the learner's pass: %+v, want more than the %d rewards it had", after, before.RewardsLearned)
	}
}

// guardView is what "admin tenant show --json" says of the model's guard
// and send gate in both releases (later ones add members, and write a
// missing standard error as null rather than -1).
type guardView struct {
	Usage struct {
		PolicyVersion  string `json:"policy_version"`
		RewardsLearned int    `json:"rewards_learned"`
	} `json:"usage"`
	Warnings []string `json:"warnings"`
	Guard    struct {
		Active           bool    `json:"active"`
		Switches         int     `json:"switches"`
		PolicyValue      float64 `json:"policy_value_mxn"`
		EffectiveRewards float64 `json:"effective_rewards"`
		Baselines        []struct {
			Action int     `json:"action"`
			Value  float64 `json:"value_mxn"`
			Diff   float64 `json:"policy_diff_mxn"`
			SE     float64 `json:"standard_error_mxn"`
		} `json:"baselines"`
		Gate struct {
			State string  `json:"state"`
			Diff  float64 `json:"diff_mxn"`
			N     float64 `json:"effective_decisions"`
			Bands []struct {
				Tickets string  `json:"tickets_per_year"`
				State   string  `json:"state"`
				Diff    float64 `json:"diff_mxn"`
				N       float64 `json:"effective_decisions"`
				Share   float64 `json:"sending_share"`
			} `json:"bands"`
		} `json:"gate"`
	} `json:"policy_guard"`
}

// checkOldGuard: the stored model's guard and send gate, with the tests
// the earlier release's learner filled, read as that release read them
// (oldShow: its "admin tenant show acme --json").
func checkOldGuard(t *testing.T, now func() time.Time, dir, oldShow string) {
	t.Helper()
	data, err := os.ReadFile(oldShow)
	if err != nil {
		t.Fatal(err)
	}
	var want, got guardView
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if want.Guard.Gate.N == 0 || want.Usage.RewardsLearned == 0 {
		t.Fatalf("%s: the earlier release's model has no rewards or no gate test to compare", oldShow)
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "tenant", "show", "acme", "--json"), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("acme's model read at HEAD differs from the earlier release's reading (-old +head):\n%s", diff)
	}
}

// checkOldBackup: the earlier release's backup (its ledger holds the
// deletion of cli-00011, after it) lists and verifies, and restores into a
// fresh data dir with both deletions applied, on the release's day (now),
// within the backup's retention (30 days from when make-8407ba5.sh took
// it).
func checkOldBackup(t *testing.T, now func() time.Time, dir, backup string) {
	t.Helper()
	var list struct {
		Backups []privacy.BackupInfo `json:"backups"`
	}
	if err := json.Unmarshal(runInAt(t, now, dir, "admin", "backups", "--verify", "--json"), &list); err != nil || len(list.Backups) != 1 {
		t.Fatalf("admin backups of the earlier release: %+v, %v", list, err)
	}
	b := list.Backups[0]
	if b.Dir != backup || b.State != privacy.BackupComplete || b.LedgerEntries != 1 || b.OwedDeletions != 0 {
		t.Errorf("the earlier release's backup: %+v, want %s with its ledger's deletion", b, privacy.BackupComplete)
	}
	target := filepath.Join(t.TempDir(), "restored")
	within := func() time.Time { return b.TakenAt.Add(time.Hour) }
	res, err := runRestore(context.Background(), target, backup, within, io.Discard)
	if err != nil || res.DeletionsReapplied < 1 {
		t.Fatalf("restore of the earlier release's backup: %+v, %v", res, err)
	}
	var check struct {
		OK      bool `json:"ok"`
		Records int  `json:"records"`
	}
	if err := json.Unmarshal(runInAt(t, now, target, "admin", "check", "--json"), &check); err != nil || !check.OK || check.Records < 1000 {
		t.Errorf("admin check of the restored store: %+v, %v", check, err)
	}
	var dels struct {
		Deletions []struct {
			State string `json:"state"`
		} `json:"deletions"`
	}
	if err := json.Unmarshal(runInAt(t, now, target, "admin", "deletions", "--tenant", "acme", "--json"), &dels); err != nil ||
		len(dels.Deletions) != 2 || dels.Deletions[0].State != "completado" || dels.Deletions[1].State != "completado" {
		t.Errorf("deletions of the restored store: %+v, %v", dels, err)
	}
}
