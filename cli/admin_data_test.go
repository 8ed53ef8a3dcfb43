package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// filesHolding walks dir and returns every file whose raw bytes contain
// needle; zstd files (result files) are also checked decompressed, since
// compression would hide the bytes from a raw scan.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while walking (obsolete files)
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			hits = append(hits, path)
			return nil
		}
		if strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".zst.tmp") {
			if dec, err := zstd.NewReader(bytes.NewReader(data)); err == nil {
				plain, _ := io.ReadAll(dec)
				dec.Close()
				if bytes.Contains(plain, needle) {
					hits = append(hits, path+" (decompressed)")
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// setupDataTenant creates a sandbox tenant without rate limits, a credential
// with every scope, a catalog of two coupons and a campaign; it returns a
// token.
func setupDataTenant(t *testing.T, in *instance, tenant string) (credJSON, string) {
	t.Helper()
	var cred credJSON
	in.admin(nil, "tenant", "create", tenant, "--sandbox")
	in.admin(nil, "tenant", "set", tenant, "--rate-limits", "off", "--control-share", "0")
	in.admin(&cred, "credential", "create", "--tenant", tenant, "--name", "crm", "--scopes",
		"eventos:publicar,decisiones:pedir,decisiones:confirmar,campanas:escribir,catalogo:escribir,clientes:borrar,clientes:exportar")
	tok := in.token(cred)
	acciones := []map[string]any{
		{"id": 1, "nombre": "diez", "tipo_cupon": "T10", "costo_envio_mxn": 0.5, "descuento_max_mxn": 10, "descuento_pct": 10, "activa": true},
		{"id": 2, "nombre": "veinte", "tipo_cupon": "T20", "costo_envio_mxn": 0.5, "descuento_max_mxn": 20, "descuento_pct": 20, "activa": true},
	}
	if st, _, b := in.do("PUT", "/v1/catalogo-acciones", tok, map[string]any{"acciones": acciones}); st != 200 {
		t.Fatalf("catalog: %d %v", st, b)
	}
	if st, _, b := in.do("PUT", "/v1/campanas/camp1", tok, map[string]any{"canal": "push", "descripcion": "prueba"}); st != 200 {
		t.Fatalf("campaign: %d %v", st, b)
	}
	return cred, tok
}

func purchaseEvent(id, ref string, ts time.Time) map[string]any {
	return map[string]any{"event_id": id, "cliente_ref": ref, "ts": ts.UTC().Format(time.RFC3339), "tipo": "COMPRA_CAT",
		"clave": "abarrotes", "valor": 100, "extra": map[string]any{"ticket_id": "t-" + id, "margen": 25}}
}

// TestCanaryDeletion plants a unique cliente_ref in events, a decision (with
// an Idempotency-Key and a confirmation), coupon links, a batch request and
// its result file, the access log and a backup; deletes the customer; once
// the deletion is completado, scans every file of the live data dir raw (and
// result files decompressed) for the canary; then restores the older backup
// and checks that the customer does not come back.
func TestCanaryDeletion(t *testing.T) {
	dataDir := t.TempDir()
	backupDir := filepath.Join(t.TempDir(), "backup-1")
	in := startServer(t, dataDir)
	defer in.killIfRunning()
	_, tok := setupDataTenant(t, in, "acme")

	rnd := make([]byte, 8)
	rand.Read(rnd)
	canary := "Qz" + hex.EncodeToString(rnd) + "Kw"
	needle := []byte(canary)
	var shown map[string]any
	in.admin(&shown, "clock", "show", "--tenant", "acme")
	now, _ := time.Parse(time.RFC3339, shown["now"].(string))

	// Other customers, so the store, the batch and the backup hold more
	// than the canary.
	var others []map[string]any
	var otherRefs []string
	for i := 0; i < 40; i++ {
		ref := fmt.Sprintf("otro-%06d", i)
		otherRefs = append(otherRefs, ref)
		others = append(others, purchaseEvent(fmt.Sprintf("ev-otro-%d", i), ref, now.Add(-time.Duration(i+1)*time.Hour)))
	}
	if st, _, b := in.do("POST", "/v1/eventos", tok, map[string]any{"eventos": others}); st != 200 || b["aceptados"] != float64(len(others)) {
		t.Fatalf("events: %d %v", st, b)
	}

	// The canary: a decision with an Idempotency-Key, its confirmation, the
	// coupon received and redeemed, purchases.
	st, _, d := in.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": canary, "contexto": map[string]any{"canal": "push", "campana_id": "camp1"}},
		"Idempotency-Key", "idem-"+canary)
	if st != 200 {
		t.Fatalf("decision: %d %v", st, d)
	}
	decisionID := d["decision_id"].(string)
	if st, _, b := in.do("POST", "/v1/decisiones/"+decisionID+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
		t.Fatalf("confirm: %d %v", st, b)
	}
	evs := []map[string]any{
		purchaseEvent("ev-"+canary+"-1", canary, now.Add(-72*time.Hour)),
		purchaseEvent("ev-"+canary+"-2", canary, now.Add(-48*time.Hour)),
		{"event_id": "ev-" + canary + "-3", "cliente_ref": canary, "ts": now.Add(-time.Hour).Format(time.RFC3339), "tipo": "CUPON_RECIBIDO",
			"clave": "T10", "decision_id": decisionID, "extra": map[string]any{"cupon_emitido_id": "cup-" + canary, "caducidad": now.Add(240 * time.Hour).Format(time.RFC3339)}},
		{"event_id": "ev-" + canary + "-4", "cliente_ref": canary, "ts": now.Add(-30 * time.Minute).Format(time.RFC3339), "tipo": "CUPON_REDIMIDO",
			"clave": "T10", "valor": 10, "extra": map[string]any{"cupon_emitido_id": "cup-" + canary, "ticket_id": "t-red"}},
	}
	if st, _, b := in.do("POST", "/v1/eventos", tok, map[string]any{"eventos": evs}); st != 200 || b["aceptados"] != float64(len(evs)) {
		t.Fatalf("canary events: %d %v", st, b)
	}

	// A batch job naming the canary: stored request and result file.
	st, _, job := in.do("POST", "/v1/lotes-decision", tok, map[string]any{"campana_id": "camp1", "clientes": append([]string{canary}, otherRefs[:20]...)})
	if st != 202 {
		t.Fatalf("batch: %d %v", st, job)
	}
	jobID := job["job_id"].(string)
	waitFor(t, 30*time.Second, "batch job completado", func() bool {
		_, _, j := in.do("GET", "/v1/lotes-decision/"+jobID, tok, nil)
		if j["estado"] == "fallido" {
			t.Fatalf("batch job failed: %v", j)
		}
		return j["estado"] == "completado"
	})

	// An export: the access log names the canary until the deletion.
	if st, _, x := in.do("GET", "/v1/clientes/"+canary+"/exportacion", tok, nil); st != 200 || len(x["eventos"].([]any)) != 4 || len(x["decisiones"].([]any)) < 1 {
		t.Fatalf("export before deletion: %d %v", st, x)
	}
	var alog struct {
		Entries []accessView `json:"entries"`
	}
	in.admin(&alog, "access-log", "--tenant", "acme")
	if len(alog.Entries) != 1 || alog.Entries[0].Customer != canary {
		t.Fatalf("access log before deletion: %+v", alog.Entries)
	}

	// The backup (online, through the admin socket).
	var bk map[string]any
	in.admin(&bk, "backup", "--out", backupDir)
	if bk["dir"] != backupDir || bk["taken_at"] == nil {
		t.Fatalf("backup --json: %v", bk)
	}

	// The scan sees the canary where it was planted, so its silence later
	// means something.
	hits := filesHolding(t, dataDir, needle)
	var inDB, inResults bool
	for _, h := range hits {
		inDB = inDB || strings.Contains(h, string(filepath.Separator)+"db"+string(filepath.Separator))
		inResults = inResults || strings.Contains(h, "results")
	}
	if !inDB || !inResults {
		t.Fatalf("before deletion the scan should find the canary in the store and a result file; found in %v", hits)
	}
	if len(filesHolding(t, backupDir, needle)) == 0 {
		t.Fatal("the backup does not hold the canary")
	}

	// Delete and wait for completado.
	st, _, del := in.do("DELETE", "/v1/clientes/"+canary, tok, nil)
	if st != 202 || del["estado"] != "programado" || del["cliente_ref"] != canary {
		t.Fatalf("delete: %d %v", st, del)
	}
	var dels struct {
		Deletions []deletionView `json:"deletions"`
	}
	waitFor(t, 60*time.Second, "deletion completado", func() bool {
		in.admin(&dels, "deletions", "--tenant", "acme")
		return len(dels.Deletions) == 1 && dels.Deletions[0].State == "completado"
	})
	start := time.Now()
	var left []string
	for time.Since(start) < 15*time.Second { // obsolete files are removed in the background
		if left = filesHolding(t, dataDir, needle); len(left) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(left) > 0 {
		hint := ""
		for _, f := range left {
			if strings.HasSuffix(f, ".log") {
				hint = " (a *.log is a Pebble WAL: store.PurgeWAL must remove every log written before it instead of recycling it, or a recycled WAL keeps the deleted bytes)"
			}
			if strings.Contains(f, "MANIFEST") {
				hint = " (the MANIFEST records sstable boundary keys, which can name a customer until the MANIFEST rotates twice)"
			}
		}
		t.Fatalf("canary bytes still in the live data dir after the deletion completed: %v%s", left, hint)
	}

	// The export now shows only the deletion record; the access log names the
	// customer by keyed hash; the backup's ledger records the deletion by hash.
	st, _, x := in.do("GET", "/v1/clientes/"+canary+"/exportacion", tok, nil)
	if b, _ := x["borrado"].(map[string]any); st != 200 || b["estado"] != "completado" || len(x["eventos"].([]any)) != 0 || len(x["decisiones"].([]any)) != 0 {
		t.Errorf("export after deletion: %d %v", st, x)
	}
	var alog2 struct {
		Entries []accessView `json:"entries"`
	}
	in.admin(&alog2, "access-log", "--tenant", "acme")
	if len(alog2.Entries) != 2 {
		t.Errorf("access log after deletion: %d entries, want 2", len(alog2.Entries))
	}
	for _, a := range alog2.Entries {
		if a.Customer != "" || a.CustomerHash != dels.Deletions[0].CustomerHash {
			t.Errorf("access-log entry after deletion: %+v", a)
		}
	}
	ledger, err := os.ReadFile(filepath.Join(backupDir, "deletions.jsonl"))
	if err != nil || !bytes.Contains(ledger, []byte(dels.Deletions[0].CustomerHash)) || bytes.Contains(ledger, needle) {
		t.Errorf("backup ledger: %q %v (want the keyed hash, never the cliente_ref)", ledger, err)
	}
	if len(filesHolding(t, dataDir, needle)) != 0 {
		t.Fatal("the export after deletion wrote the canary back")
	}

	// Restore the older backup (server stopped): the customer stays deleted.
	in.stop()
	var res privacy.RestoreResult
	in.admin(&res, "restore", "--from", backupDir)
	if res.DeletionsReapplied < 1 || !res.Replaced {
		t.Errorf("restore --json: %+v", res)
	}
	if left := filesHolding(t, dataDir, needle); len(left) != 0 {
		t.Fatalf("canary bytes in the data dir after restoring the older backup: %v", left)
	}
	in.start()
	defer in.stop()
	tok = in.token(credFromBackup(t, in))
	st, _, x = in.do("GET", "/v1/clientes/"+canary+"/exportacion", tok, nil)
	if b, _ := x["borrado"].(map[string]any); st != 200 || b["estado"] != "completado" || len(x["eventos"].([]any)) != 0 ||
		len(x["decisiones"].([]any)) != 0 || len(x["vinculos_cupon"].([]any)) != 0 || len(x["caracteristicas"].(map[string]any)) != 0 {
		t.Errorf("export after restoring the older backup: %d %v", st, x)
	}
	// The other customers came back with the backup.
	if _, _, ox := in.do("GET", "/v1/clientes/otro-000001/exportacion", tok, nil); len(ox["eventos"].([]any)) != 1 {
		t.Errorf("other customer after restore: %v", ox)
	}
}

// credFromBackup creates a fresh credential for acme (the restored store has
// the old ones too, but the test does not keep their secrets across).
func credFromBackup(t *testing.T, in *instance) credJSON {
	t.Helper()
	var cred credJSON
	in.admin(&cred, "credential", "create", "--tenant", "acme", "--name", "after-restore", "--scopes", "clientes:exportar,eventos:publicar")
	return cred
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBackupWhileStreaming takes a backup while events stream in, restores
// it into an empty data dir and checks that every event acknowledged before
// the backup began is there.
func TestBackupWhileStreaming(t *testing.T) {
	dataDir := t.TempDir()
	backupDir := filepath.Join(t.TempDir(), "backup")
	in := startServer(t, dataDir)
	defer in.killIfRunning()
	var cred credJSON
	in.admin(nil, "tenant", "create", "flujo", "--sandbox")
	in.admin(nil, "tenant", "set", "flujo", "--rate-limits", "off")
	in.admin(&cred, "credential", "create", "--tenant", "flujo", "--name", "pos", "--scopes", "eventos:publicar")
	tok := in.token(cred)
	var shown map[string]any
	in.admin(&shown, "clock", "show", "--tenant", "flujo")
	now, _ := time.Parse(time.RFC3339, shown["now"].(string))

	type sent struct {
		body  []byte
		n     int
		acked time.Time // zero: not acknowledged
	}
	var (
		mu      sync.Mutex
		batches []sent
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				evs := make([]map[string]any, 100)
				for i := range evs {
					evs[i] = purchaseEvent(fmt.Sprintf("w%d-%06d-%03d", w, seq, i), fmt.Sprintf("cliente-%05d", (seq*100+i)%3000), now.Add(-time.Hour))
				}
				body, _ := json.Marshal(map[string]any{"eventos": evs})
				req, _ := http.NewRequest("POST", in.url("/v1/eventos"), bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				s := sent{body: body, n: len(evs)}
				if resp, err := client.Do(req); err == nil {
					var m map[string]any
					json.NewDecoder(resp.Body).Decode(&m)
					resp.Body.Close()
					if resp.StatusCode == 200 && m["aceptados"] == float64(len(evs)) {
						s.acked = time.Now()
					}
				}
				mu.Lock()
				batches = append(batches, s)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	began := time.Now()
	out, err := runAdmin(in.bin, dataDir, "backup", "--out", backupDir)
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	in.stop()

	restored := filepath.Join(t.TempDir(), "restored")
	if out, err := runAdmin(in.bin, restored, "restore", "--from", backupDir); err != nil {
		t.Fatalf("restore into an empty data dir: %v\n%s", err, out)
	}
	in2 := startServer(t, restored)
	defer in2.stop()
	tok2 := in2.token(cred) // keys and credentials come with the backup
	before, after := 0, 0
	for i, b := range batches {
		if b.acked.IsZero() {
			continue
		}
		if !b.acked.Before(began) {
			after++
			continue
		}
		before++
		st, _, m := in2.do("POST", "/v1/eventos", tok2, b.body)
		if st != 200 || m["duplicados"] != float64(b.n) {
			t.Errorf("batch %d acknowledged before the backup began: resend after restore gave %d %v (want all %d duplicates)", i, st, m, b.n)
		}
	}
	if before == 0 {
		t.Fatal("no batch was acknowledged before the backup began")
	}
	t.Logf("%d batches acknowledged before the backup began (all restored), %d during or after", before, after)
}

func TestRestoreRefusesBackupPastRetention(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	bk := filepath.Join(t.TempDir(), "bk")
	e, err := openEnv(ctx, dataDir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: time.Now(), Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
		t.Fatal(err)
	}
	// A second backup into a non-empty directory is refused.
	if _, err := runBackup(ctx, e, bk, io.Discard); err == nil {
		t.Error("backup into a non-empty directory accepted")
	}
	e.close()

	late := func() time.Time { return time.Now().Add(privacy.BackupRetention + time.Hour) }
	if _, err := runRestore(ctx, dataDir, bk, late, io.Discard); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("restore past retention: %v, want a refusal", err)
	}
	res, err := runRestore(ctx, dataDir, bk, time.Now, io.Discard)
	if err != nil || !res.Replaced {
		t.Fatalf("restore within retention: %+v %v", res, err)
	}
	// A backup whose manifest is missing (interrupted) is refused.
	os.Remove(filepath.Join(bk, "manifest.json"))
	if _, err := runRestore(ctx, dataDir, bk, time.Now, io.Discard); err == nil {
		t.Error("restore of a backup without manifest accepted")
	}
}

// TestRestoreKeepsDataAfterCompletedDeletion: a restore re-applies the
// deletions the backup's store had not finished and those of its ledger;
// a deletion the backup already shows completado is done, and what its
// customer sent after it (a returning customer) is not erased again.
func TestRestoreKeepsDataAfterCompletedDeletion(t *testing.T) {
	const ref = "vuelve-000001"
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// before runs on the live store before the backup; after, past it.
		before, after func(t *testing.T, e *env, ingest func(prefix string))
		wantEvents    int
	}{
		{"completed before the backup, customer came back", func(t *testing.T, e *env, ingest func(string)) {
			ingest("old")
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
			ingest("new")
		}, nil, 2},
		{"completed while the backup was taken, customer came back", func(t *testing.T, e *env, ingest func(string)) {
			ingest("old")
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
			ingest("new")
		}, func(t *testing.T, e *env, _ func(string)) {
			// The backup was registered before the deletion was requested
			// and checkpointed after it completed: its ledger has the
			// deletion that its store holds completado.
			rec, err := e.svc.privacy.Deletion("acme", ref)
			if err != nil || rec == nil {
				t.Fatalf("deletion record: %+v %v", rec, err)
			}
			if err := e.svc.backups.Ledger(privacy.LedgerEntry{Tenant: "acme", Hash: rec.Hash, RequestedAt: rec.SolicitadoEn, ClientID: rec.ClientID}); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"completed before the backup, customer came back, deleted again after it", func(t *testing.T, e *env, ingest func(string)) {
			ingest("old")
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
			ingest("new")
		}, func(t *testing.T, e *env, _ func(string)) {
			// The sandbox tenant's clock stood still: this deletion's
			// request time was the first one's, which the restored store
			// holds completado, and restore took it for that one.
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
		}, 0},
		{"scheduled when the backup was taken", func(t *testing.T, e *env, ingest func(string)) {
			ingest("old")
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
		}, nil, 0},
		{"requested after the backup", func(t *testing.T, e *env, ingest func(string)) {
			ingest("old")
		}, func(t *testing.T, e *env, _ func(string)) {
			if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
			e, now := sandboxEnv(t, dataDir)
			ingest := func(prefix string) {
				var evs []engine.IngestEvent
				for i := 0; i < 2; i++ {
					ev := engine.Event{ID: fmt.Sprintf("%s-%d", prefix, i), ClienteRef: ref, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
						Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t-%s-%d", prefix, i), MargenCents: 2500}
					evs = append(evs, engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)})
				}
				if res, err := e.svc.engine.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != len(evs) {
					t.Fatalf("ingest: %+v %v", res, err)
				}
			}
			tc.before(t, e, ingest)
			if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
				t.Fatal(err)
			}
			if tc.after != nil {
				tc.after(t, e, ingest)
			}
			e.close()
			if _, err := runRestore(ctx, dataDir, bk, time.Now, io.Discard); err != nil {
				t.Fatalf("restore: %v", err)
			}
			e, err := openEnv(ctx, dataDir, zerolog.Nop(), serviceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			x, err := e.svc.privacy.Export("acme", ref, "ci", "trace-1")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, ev := range x.Eventos {
				ids = append(ids, ev.EventID)
			}
			if len(ids) != tc.wantEvents {
				t.Errorf("events of the customer after the restore: %v, want %d", ids, tc.wantEvents)
			}
		})
	}
}

// TestRestoreReachesUnprocessedDeletions: a deletion acknowledged (202)
// after a backup was taken reaches the restored data even when the
// deletion worker never ran it, or ran it with a ledger it could not write
// to (the deletion owed to the backup then, and here lost too): the ledger
// is written when the deletion is requested, and restore also reads the
// deletion records of the store it replaces. When that store is gone or
// does not open, restore still works and says what it read.
func TestRestoreReachesUnprocessedDeletions(t *testing.T) {
	const ref = "borrame-000001"
	ctx := context.Background()
	unwritableLedger := func(t *testing.T, e *env, bk string) {
		ledger := filepath.Join(bk, "deletions.jsonl")
		os.Remove(ledger)
		os.Mkdir(ledger, 0o700) // a backup disk that refuses writes
		requestOnly(t, e, ref)
		// The deletion is owed to the backup; the erasure goes on.
		if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
			t.Fatalf("worker pass with an unwritable ledger: %+v %v, want 1 completed", st, err)
		}
	}
	ledgerBack := func(t *testing.T, dataDir, bk string) {
		ledger := filepath.Join(bk, "deletions.jsonl")
		os.Remove(ledger)
		if err := os.WriteFile(ledger, nil, 0o600); err != nil { // the disk is back, the entry never made it
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dataDir, "backups-owed.jsonl")); err != nil { // nor the deletion owed to it
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// after runs on the live store after the backup; damage runs on the
		// closed data dir before the restore.
		after    func(t *testing.T, e *env, bk string)
		damage   func(t *testing.T, dataDir, bk string)
		progress string // what the restore must say about the live store
	}{
		{"worker never ran, live store gone", func(t *testing.T, e *env, _ string) {
			requestOnly(t, e, ref)
		}, func(t *testing.T, dataDir, _ string) {
			if err := os.RemoveAll(filepath.Join(dataDir, "db")); err != nil {
				t.Fatal(err)
			}
		}, "re-applied; credentials revoked or rotated since the backup are not known here either (a new machine): revoke or rotate them again"},
		{"ledger unwritable, owed deletion lost", unwritableLedger, func(t *testing.T, dataDir, bk string) {
			ledgerBack(t, dataDir, bk)
		}, "1 deletion records read from the store being replaced"},
		{"ledger unwritable, an earlier restore stopped between its renames", unwritableLedger, func(t *testing.T, dataDir, bk string) {
			ledgerBack(t, dataDir, bk)
			if err := os.Rename(filepath.Join(dataDir, "db"), filepath.Join(dataDir, "db.replaced")); err != nil {
				t.Fatal(err)
			}
		}, "1 deletion records read from the store being replaced"},
		{"registry lost, worker completed", func(t *testing.T, e *env, _ string) {
			os.Remove(filepath.Join(e.dataDir, "backups.json"))
			requestOnly(t, e, ref)
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion: %+v %v", st, err)
			}
		}, nil, "1 deletion records read from the store being replaced"},
		{"live store does not open", func(t *testing.T, e *env, _ string) {
			requestOnly(t, e, ref)
		}, func(t *testing.T, dataDir, _ string) {
			manifests, _ := filepath.Glob(filepath.Join(dataDir, "db", "MANIFEST-*"))
			for _, m := range manifests {
				if err := os.WriteFile(m, []byte("not a manifest"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}, "does not open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
			e, now := sandboxEnv(t, dataDir)
			var evs []engine.IngestEvent
			for i := 0; i < 2; i++ {
				ev := engine.Event{ID: fmt.Sprintf("ev-%d", i), ClienteRef: ref, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
					Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t-%d", i), MargenCents: 2500}
				evs = append(evs, engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)})
			}
			if res, err := e.svc.engine.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != len(evs) {
				t.Fatalf("ingest: %+v %v", res, err)
			}
			if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
				t.Fatal(err)
			}
			tc.after(t, e, bk)
			e.close()
			if tc.damage != nil {
				tc.damage(t, dataDir, bk)
			}
			var progress bytes.Buffer
			if _, err := runRestore(ctx, dataDir, bk, time.Now, &progress); err != nil {
				t.Fatalf("restore: %v\n%s", err, progress.String())
			}
			if !strings.Contains(progress.String(), tc.progress) {
				t.Errorf("restore progress does not say %q about the live store:\n%s", tc.progress, progress.String())
			}
			// The re-applying of deletions, minutes on a large store, says
			// how far it is.
			if !strings.Contains(progress.String(), "\nrestore: 1/1 customer deletions re-applied\n") {
				t.Errorf("restore progress does not count the deletions re-applied:\n%s", progress.String())
			}
			e, err := openEnv(ctx, dataDir, zerolog.Nop(), serviceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			x, err := e.svc.privacy.Export("acme", ref, "ci", "trace-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(x.Eventos) != 0 {
				t.Errorf("the restored store holds %d events of a customer whose deletion was acknowledged after the backup", len(x.Eventos))
			}
		})
	}
}

// requestOnly acknowledges the deletion of ref, as DELETE does, without
// running the worker.
func requestOnly(t *testing.T, e *env, ref string) {
	t.Helper()
	if _, err := e.svc.privacy.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
}

// TestDeletionPastDamagedResultFile: a retained batch result file that
// does not decompress any more cannot be rewritten without the customer;
// the deletion still completes (contract §8), and the file goes with it:
// the job then answers as for a result past retention (no result file, no
// resultado_url, a download 404). An intact file is rewritten and kept.
func TestDeletionPastDamagedResultFile(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
		kept   bool // the file stays, without ana
	}{
		{"intact", nil, true},
		{"not zstd", func([]byte) []byte { return []byte("not a result file") }, false},
		{"cut short", func(data []byte) []byte { return data[:len(data)/2] }, false},
		{"bit flipped", func(data []byte) []byte {
			data = bytes.Clone(data)
			data[len(data)-6] ^= 0xff
			return data
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, now := sandboxEnv(t, t.TempDir())
			defer e.close()
			eng := e.svc.engine
			diezCatalog(t, eng, now)
			if _, err := eng.Campaigns.PutCampaign("acme", engine.Campaign{ID: "camp1", Canal: "push", Descripcion: "d"}, now); err != nil {
				t.Fatal(err)
			}
			j, err := e.svc.batch.Submit("acme", batch.Submission{CampanaID: "camp1", Clientes: []string{ana, beto}})
			if err != nil {
				t.Fatal(err)
			}
			if n := e.svc.batch.RunPending(ctx); n != 1 {
				t.Fatalf("batch jobs run: %d", n)
			}
			j, _ = e.svc.batch.Job("acme", j.ID)
			path, ok := e.svc.batch.ResultFile(j)
			if !ok {
				t.Fatalf("job has no result file: %+v", j)
			}
			if tc.damage != nil {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, tc.damage(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.svc.privacy.RequestDeletion("acme", ana, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st != (privacy.DeletionStats{Completed: 1}) {
				t.Fatalf("deletion pass: %+v %v, want 1 completed", st, err)
			}
			if hits := filesHolding(t, e.dataDir, []byte(ana)); len(hits) > 0 {
				t.Errorf("files still name the deleted customer: %v", hits)
			}
			j, _ = e.svc.batch.Job("acme", j.ID)
			_, has := e.svc.batch.ResultFile(j)
			_, statErr := os.Stat(path)
			if has != tc.kept || (statErr == nil) != tc.kept {
				t.Errorf("after the deletion: job has a result = %v, file there = %v (%v); want %v", has, statErr == nil, statErr, tc.kept)
			}
			if tc.kept {
				if hits := filesHolding(t, e.dataDir, []byte(beto)); len(hits) == 0 {
					t.Error("the rewritten result file lost the other customer")
				}
			}
		})
	}
}

// TestAccessLogCommandPastDamagedEntry: "admin access-log" lists the
// entries that decode, and says how many damaged ones sit in quarantine,
// instead of failing on the first it cannot decode.
func TestAccessLogCommandPastDamagedEntry(t *testing.T) {
	dataDir := t.TempDir()
	e, now := sandboxEnv(t, dataDir)
	for _, trace := range []string{"tr-1", "tr-2"} {
		if _, err := e.svc.privacy.Export("acme", "ana-00000001", "ci", trace); err != nil {
			t.Fatal(err)
		}
	}
	b := e.db.NewBatch()
	b.Set(store.AccessLogKey("acme", now.Add(-time.Hour), "tr-0"), []byte(`{"at":`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	e.close()
	out, err := runAdmin("", dataDir, "access-log", "--tenant", "acme")
	if err != nil {
		t.Fatalf("admin access-log with a damaged entry: %v\n%s", err, out)
	}
	var got struct {
		Entries []struct {
			TraceID string `json:"trace_id"`
		} `json:"entries"`
		Quarantined int `json:"quarantined_entries"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Entries) != 2 || got.Quarantined != 1 {
		t.Errorf("admin access-log: %s; want the 2 entries that decode and 1 quarantined", out)
	}
}

// TestDeletionPastDamagedJobAndDeletionRecords: a batch job record that
// does not decode does not stop a customer's deletion (the batch scrubber
// read every job with ScanJSON and failed on it, every pass), and a
// request to delete a customer whose deletion record does not decode is
// scheduled anew rather than failing (contract §8).
func TestDeletionPastDamagedJobAndDeletionRecords(t *testing.T) {
	const ana = "ana-00000001"
	ctx := context.Background()
	e, _ := sandboxEnv(t, t.TempDir())
	defer e.close()
	b := e.db.NewBatch()
	b.Set(store.JobKey("acme", "lote_damaged"), []byte(`{"id":"lote_damaged","estado":`))
	b.Set(store.DeletionKey("acme", e.svc.privacy.CustomerHash("acme", ana)), []byte(`{"estado":"progr`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	rec, err := e.svc.privacy.RequestDeletion("acme", ana, "ci")
	if err != nil || rec.Estado != privacy.DeletionScheduled {
		t.Fatalf("deletion request over a damaged deletion record: %+v %v", rec, err)
	}
	if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st != (privacy.DeletionStats{Completed: 1}) {
		t.Fatalf("deletion pass past a damaged job record: %+v %v, want 1 completed", st, err)
	}
	if q, err := e.svc.engine.Quarantine.Quarantined("acme"); err != nil || len(q) != 1 {
		t.Errorf("quarantine after the pass: %d records (%v), want the damaged job record", len(q), err)
	}
}

// sandboxEnv opens the data dir dir as admin commands do and creates the
// sandbox tenant "acme" at the real clock's now, which it returns; the
// caller closes the env.
func sandboxEnv(t *testing.T, dir string) (*env, time.Time) {
	t.Helper()
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := e.db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: now, Sandbox: true, ClockNow: now, Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	return e, now
}

// diezCatalog gives tenant acme a catalog of one coupon, "diez" (id 1, 10 %
// up to 10 MXN, 0.50 MXN a send).
func diezCatalog(t *testing.T, eng *engine.Engine, now time.Time) {
	t.Helper()
	if _, err := eng.Campaigns.ReplaceCatalog("acme", []engine.Action{{ID: 1, Nombre: "diez", TipoCupon: "T10", CostoEnvioCents: 50,
		DescuentoMaxCents: 1000, DescuentoPct: 10, Activa: true}}, now); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveStaleResultsSparesLaterFiles: a deletion removes the temporary
// result files a crash left, but not a running job's, nor the one of a job
// that started after the deletion read the jobs' states (created after the
// listing that came before that read).
func TestRemoveStaleResultsSparesLaterFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("crashed.jsonl.zst.tmp")
	write("running.jsonl.zst.tmp")
	write("done.jsonl.zst")
	temps := tempResults(dir)
	write("started-later.jsonl.zst.tmp")
	if err := removeStaleResults(dir, temps, map[string]bool{"running": true}); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"done.jsonl.zst", "running.jsonl.zst.tmp", "started-later.jsonl.zst.tmp"}
	if d := cmp.Diff(want, left); d != "" {
		t.Errorf("files left (-want +got):\n%s", d)
	}
}

// TestOfflineDeletionPastDamagedChunk: a restore re-applies deletions with
// queued batch jobs' stored requests scrubbed too (offline hooks). A
// stored chunk of customers that does not decode must not stop the
// deletion, and so the restore, every pass (contract §8); when its bytes
// name the customer it goes with the deletion, else it stays for the job.
func TestOfflineDeletionPastDamagedChunk(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	ctx := context.Background()
	e, now := sandboxEnv(t, t.TempDir())
	defer e.close()
	eng := e.svc.engine
	if _, err := eng.Campaigns.PutCampaign("acme", engine.Campaign{ID: "camp1", Canal: "push", Descripcion: "d"}, now); err != nil {
		t.Fatal(err)
	}
	j, err := e.svc.batch.Submit("acme", batch.Submission{CampanaID: "camp1", Clientes: []string{ana, beto}})
	if err != nil {
		t.Fatal(err)
	}
	// Chunk 1 of the job's request does not exist: damaged, it stands for
	// a chunk of other customers.
	keys := [][]byte{store.JobChunkKey("acme", j.ID, 0), store.JobChunkKey("acme", j.ID, 1)}
	j.Chunks = 2
	b := e.db.NewBatch()
	if err := b.SetJSON(store.JobKey("acme", j.ID), j); err != nil {
		t.Fatal(err)
	}
	b.Set(keys[0], []byte(`["`+ana+`","`+beto)) // cut short, names ana
	b.Set(keys[1], []byte(`["`+beto))           // cut short, ana not in it
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	requestOnly(t, e, ana)
	if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, true)); err != nil || st != (privacy.DeletionStats{Completed: 1}) {
		t.Fatalf("offline deletion pass past damaged chunks: %+v %v, want 1 completed", st, err)
	}
	for i, want := range []bool{false, true} {
		if has, err := e.db.Has(keys[i]); err != nil || has != want {
			t.Errorf("damaged chunk %d there = %v (%v), want %v", i, has, err, want)
		}
	}
	if hits := filesHolding(t, e.dataDir, []byte(ana)); len(hits) > 0 {
		t.Errorf("files still name the deleted customer: %v", hits)
	}
}

// dataDirSnapshot returns what a failed restore must leave as it was in
// dataDir: the bytes and mode of every file outside the store, and every
// key and value of the store (whose files Pebble may rewrite when it is
// opened, without changing what it holds). The admin audit log is left
// out: every admin command that opened the data dir, a failed one too,
// appends its line there.
func dataDirSnapshot(t *testing.T, dataDir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dataDir, path)
		if rel == "db" {
			return fs.SkipDir
		}
		if rel == auditFile {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			snap[rel] = info.Mode().String()
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		snap[rel] = info.Mode().String() + " " + hex.EncodeToString(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dataDir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Scan(nil, nil, func(k, v []byte) error {
		snap["db:"+hex.EncodeToString(k)] = hex.EncodeToString(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestFailedRestoreLeavesDataDir: a restore that fails once its staging
// store is set up (a full disk, a deletion that cannot be re-applied, an
// interruption) leaves the live data dir as it was: the store, the batch
// result files (here one of a job made after the backup, which the staging
// store does not know), the keys and the backup registry.
func TestFailedRestoreLeavesDataDir(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	ctx := context.Background()
	errDisk := errors.New("no space left on device")
	for _, tc := range []struct {
		name string
		wrap func(open privacy.OpenStaging) privacy.OpenStaging
	}{
		{"staging set up, then the disk is full", func(open privacy.OpenStaging) privacy.OpenStaging {
			return func(ctx context.Context, db *store.DB, s *store.Secrets, results string) (*privacy.Service, privacy.DeletionHooks, error) {
				if _, _, err := open(ctx, db, s, results); err != nil {
					return nil, privacy.DeletionHooks{}, err
				}
				return nil, privacy.DeletionHooks{}, errDisk
			}
		}},
		{"a deletion cannot be re-applied", func(open privacy.OpenStaging) privacy.OpenStaging {
			return func(ctx context.Context, db *store.DB, s *store.Secrets, results string) (*privacy.Service, privacy.DeletionHooks, error) {
				svc, hooks, err := open(ctx, db, s, results)
				hooks.External = func(string, string, *store.Batch) ([][]byte, bool, error) { return nil, false, errDisk }
				return svc, hooks, err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
			e, now := sandboxEnv(t, dataDir)
			eng := e.svc.engine
			diezCatalog(t, eng, now)
			if _, err := eng.Campaigns.PutCampaign("acme", engine.Campaign{ID: "camp1", Canal: "push", Descripcion: "d"}, now); err != nil {
				t.Fatal(err)
			}
			ev := engine.Event{ID: "ev-1", ClienteRef: ana, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
				Clave: "abarrotes", ValorCents: 10000, TicketID: "t-1", MargenCents: 2500}
			if res, err := eng.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
				t.Fatalf("ingest: %+v %v", res, err)
			}
			if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
				t.Fatal(err)
			}
			if _, err := e.svc.batch.Submit("acme", batch.Submission{CampanaID: "camp1", Clientes: []string{ana, beto}}); err != nil {
				t.Fatal(err)
			}
			if n := e.svc.batch.RunPending(ctx); n != 1 {
				t.Fatalf("batch jobs run: %d", n)
			}
			requestOnly(t, e, ana) // a deletion for the restore to re-apply
			e.close()
			before := dataDirSnapshot(t, dataDir)
			if results := filesHolding(t, filepath.Join(dataDir, "results"), []byte(beto)); len(results) == 0 {
				t.Fatal("setup: no result file")
			}
			open := tc.wrap(stagingOpener(dataDir, time.Now))
			_, err := privacy.NewBackups(dataDir, time.Now, zerolog.Nop()).Restore(ctx, bk, open, io.Discard)
			if err == nil {
				t.Fatal("restore succeeded; want it to fail")
			}
			if diff := cmp.Diff(before, dataDirSnapshot(t, dataDir)); diff != "" {
				t.Errorf("a failed restore (%v) changed the live data dir (-before +after):\n%s", err, diff)
			}
		})
	}
}

// TestRestoreReachesDeletionsWhileBackupMissing: a backup whose directory
// is missing when a customer is deleted (its disk unmounted) is not
// forgotten: once it is back, restoring it does not bring that customer
// back, nor one deleted after it came back; whether restored onto a new
// machine (once a later deletion found the disk back) or into the same
// data dir whose store is lost.
func TestRestoreReachesDeletionsWhileBackupMissing(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		later      bool // beto is deleted once the disk is back
		newMachine bool
	}{
		{"later deletion, restored on a new machine", true, true},
		{"later deletion, live store lost", true, false},
		{"no later deletion, live store lost", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
			e, now := sandboxEnv(t, dataDir)
			var evs []engine.IngestEvent
			for i, ref := range []string{ana, beto} {
				ev := engine.Event{ID: fmt.Sprintf("ev-%d", i), ClienteRef: ref, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
					Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t-%d", i), MargenCents: 2500}
				evs = append(evs, engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)})
			}
			if res, err := e.svc.engine.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != len(evs) {
				t.Fatalf("ingest: %+v %v", res, err)
			}
			if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
				t.Fatal(err)
			}
			deleteNow := func(ref string) {
				requestOnly(t, e, ref)
				if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
					t.Fatalf("deletion of %s: %+v %v", ref, st, err)
				}
			}
			if err := os.Rename(bk, bk+".away"); err != nil { // the backup disk is unmounted
				t.Fatal(err)
			}
			deleteNow(ana)
			if err := os.Rename(bk+".away", bk); err != nil { // and back
				t.Fatal(err)
			}
			gone := []string{ana}
			if tc.later {
				deleteNow(beto)
				gone = append(gone, beto)
			}
			e.close()
			target := dataDir
			if tc.newMachine {
				target = t.TempDir()
			} else if err := os.RemoveAll(filepath.Join(dataDir, "db")); err != nil {
				t.Fatal(err)
			}
			if _, err := runRestore(ctx, target, bk, time.Now, io.Discard); err != nil {
				t.Fatalf("restore: %v", err)
			}
			e, err := openEnv(ctx, target, zerolog.Nop(), serviceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			for _, ref := range gone {
				x, err := e.svc.privacy.Export("acme", ref, "ci", "trace-1")
				if err != nil {
					t.Fatal(err)
				}
				if len(x.Eventos) != 0 {
					t.Errorf("%s, deleted after the backup, is back after its restore (%d events)", ref, len(x.Eventos))
				}
			}
		})
	}
}

// TestServeDeliversOwedDeletions: a deletion owed to a backup whose disk
// was unmounted reaches that backup's ledger once it is back as soon as
// serve starts (and every few minutes after), not only at the next
// deletion, backup or restore, which may be long coming.
func TestServeDeliversOwedDeletions(t *testing.T) {
	const ana = "ana-00000001"
	ctx := context.Background()
	dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	e, now := sandboxEnv(t, dataDir)
	ev := engine.Event{ID: "ev-1", ClienteRef: ana, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
		Clave: "abarrotes", ValorCents: 10000, TicketID: "t-1", MargenCents: 2500}
	if res, err := e.svc.engine.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bk, bk+".away"); err != nil { // the backup disk is unmounted
		t.Fatal(err)
	}
	requestOnly(t, e, ana)
	if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
		t.Fatalf("deletion: %+v %v", st, err)
	}
	hash := []byte(e.svc.privacy.CustomerHash("acme", ana))
	e.close()
	if err := os.Rename(bk+".away", bk); err != nil { // and back
		t.Fatal(err)
	}
	ledger := filepath.Join(bk, "deletions.jsonl")
	if data, err := os.ReadFile(ledger); err != nil || len(data) != 0 {
		t.Fatalf("setup: the backup's ledger holds %q (%v) before serve; want it empty", data, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(sctx, []string{"serve", "--data-dir", dataDir, "--addr", "127.0.0.1:0", "--console-addr", ""}, nil, io.Discard, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	waitFor(t, 10*time.Second, "serve to deliver the owed deletion to the backup's ledger", func() bool {
		data, _ := os.ReadFile(ledger)
		return bytes.Contains(data, hash)
	})
}

// TestRestoreRegistersBackupBeforeSwap: the restored installation must
// feed the restored backup's ledger, or a customer deleted after the
// restore comes back when that backup is restored again. The backup was
// registered only after the restored store was swapped in: a crash or a
// registry that cannot be written in between (here backups.json is a
// directory) left the restored store live and the backup unregistered.
// Now the registration comes first: the restore fails with the data dir
// as it was.
func TestRestoreRegistersBackupBeforeSwap(t *testing.T) {
	ctx := context.Background()
	dir, data, backup := backedUpTenant(t)
	runIn(t, data, "admin", "tenant", "create", "later") // after the backup
	target := filepath.Join(dir, "new-machine")
	for _, d := range []string{data, target} {
		os.Remove(filepath.Join(d, "backups.json"))
		if err := os.MkdirAll(filepath.Join(d, "backups.json"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Into the data dir (its store replaced) and onto a new machine.
	if _, err := runRestore(ctx, data, backup, time.Now, io.Discard); err == nil {
		t.Error("restore succeeded with a registry that cannot be written")
	}
	if out := runIn(t, data, "admin", "tenant", "list"); !bytes.Contains(out, []byte("later")) {
		t.Errorf("the failed restore swapped the backup in: tenants %s", out)
	}
	if _, err := runRestore(ctx, target, backup, time.Now, io.Discard); err == nil {
		t.Error("restore onto a new machine succeeded with a registry that cannot be written")
	}
	if _, err := os.Stat(filepath.Join(target, "db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed restore onto a new machine put a store in place (stat: %v)", err)
	}
}

// TestRestoreRegistersSiblingBackups: after a restore, deletions must reach
// every backup that may hold the restored customers, not only the one
// restored: the backups of the same installation beside it (same backup
// root, same keys) are registered with it. Restored onto a new machine,
// the registry held only the restored backup, and a customer erased there
// came back when the later backup was restored. Another installation's
// backup beside them is not fed.
func TestRestoreRegistersSiblingBackups(t *testing.T) {
	const ana = "ana-00000001"
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		newMachine bool
	}{
		{"onto a new machine", true},
		{"into its data dir", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, root := t.TempDir(), t.TempDir()
			e, now := sandboxEnv(t, dataDir)
			ev := engine.Event{ID: "ev-1", ClienteRef: ana, TS: now.Add(-time.Hour), Tipo: engine.CompraCat,
				Clave: "abarrotes", ValorCents: 10000, TicketID: "t-1", MargenCents: 2500}
			if res, err := e.svc.engine.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
				t.Fatalf("ingest: %+v %v", res, err)
			}
			first, second := filepath.Join(root, "b1"), filepath.Join(root, "b2")
			for _, bk := range []string{first, second} {
				if _, err := runBackup(ctx, e, bk, io.Discard); err != nil {
					t.Fatal(err)
				}
			}
			e.close()
			other := filepath.Join(root, "other") // another installation's backup
			if err := os.Mkdir(other, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string]string{"deletions.jsonl": "", "keys.json": `{"token":"other"}`} {
				if err := os.WriteFile(filepath.Join(other, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			target := dataDir
			if tc.newMachine {
				target = t.TempDir()
			}
			if _, err := runRestore(ctx, target, first, time.Now, io.Discard); err != nil {
				t.Fatalf("restore: %v", err)
			}
			e, err := openEnv(ctx, target, zerolog.Nop(), serviceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			requestOnly(t, e, ana)
			if st, err := e.svc.privacy.ProcessDeletions(ctx, deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
				t.Fatalf("deletion after the restore: %+v %v", st, err)
			}
			hash := []byte(e.svc.privacy.CustomerHash("acme", ana))
			owed, _ := os.ReadFile(filepath.Join(target, "backups-owed.jsonl"))
			for _, bk := range []string{first, second} {
				ledger, err := os.ReadFile(filepath.Join(bk, "deletions.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(ledger, hash) && !bytes.Contains(owed, []byte(`"dir":"`+bk+`"`)) {
					t.Errorf("the deletion after the restore reached neither the ledger of %s nor the deletions owed to it", filepath.Base(bk))
				}
			}
			if ledger, _ := os.ReadFile(filepath.Join(other, "deletions.jsonl")); len(ledger) != 0 {
				t.Errorf("another installation's backup received the deletion: %s", ledger)
			}
		})
	}
}

// TestDataCommandsPrintUTC: admin deletions and admin restore print every
// time in UTC RFC 3339, text and --json, whatever zone the record or the
// manifest holds it in (a completed deletion stored with its zone's offset
// was listed with it under --json; a restore printed the manifest's).
func TestDataCommandsPrintUTC(t *testing.T) {
	dir, data, backup := backedUpTenant(t)
	plus2 := time.FixedZone("", 2*60*60)
	requested := time.Date(2026, 11, 2, 12, 0, 0, 0, plus2)
	completed := requested.Add(5 * time.Minute)
	db, err := store.Open(filepath.Join(data, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	if err := b.SetJSON(store.DeletionKey("acme", "h1"), privacy.DeletionRecord{Hash: "h1", Estado: privacy.DeletionCompleted,
		SolicitadoEn: requested, ClientID: "ci_x", CompletadoEn: &completed}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	db.Close()
	var listed struct {
		Deletions []map[string]any `json:"deletions"`
	}
	if err := json.Unmarshal(runIn(t, data, "admin", "deletions", "--tenant", "acme", "--json"), &listed); err != nil || len(listed.Deletions) != 1 {
		t.Fatalf("deletions --json: %+v %v", listed, err)
	}
	got := map[string]any{"requested_at": listed.Deletions[0]["requested_at"], "completed_at": listed.Deletions[0]["completed_at"]}
	want := map[string]any{"requested_at": "2026-11-02T10:00:00Z", "completed_at": "2026-11-02T10:05:00Z"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deletions --json times (-want +got):\n%s", diff)
	}
	if text := string(runIn(t, data, "admin", "deletions", "--tenant", "acme")); !strings.Contains(text, "2026-11-02T10:00:00Z") ||
		!strings.Contains(text, "2026-11-02T10:05:00Z") || strings.Contains(text, "+02:00") {
		t.Errorf("deletions: times not in UTC:\n%s", text)
	}

	manifest := filepath.Join(backup, privacy.ManifestFile)
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	taken, err := time.Parse(time.RFC3339Nano, m["taken_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	taken = taken.Truncate(time.Second)
	m["taken_at"] = taken.In(plus2).Format(time.RFC3339)
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var restored struct {
		TakenAt string `json:"taken_at"`
	}
	if err := json.Unmarshal(runIn(t, filepath.Join(dir, "r1"), "admin", "restore", "--from", backup, "--json"), &restored); err != nil {
		t.Fatal(err)
	}
	if want := taken.UTC().Format(time.RFC3339); restored.TakenAt != want {
		t.Errorf("restore --json taken_at = %s, want %s", restored.TakenAt, want)
	}
	if text := string(runIn(t, filepath.Join(dir, "r2"), "admin", "restore", "--from", backup)); !strings.Contains(text, "(taken at "+taken.UTC().Format(time.RFC3339)+")") {
		t.Errorf("restore: taken at not in UTC:\n%s", text)
	}
}

// TestAccessLogFilters: "admin access-log" narrows to one customer (by
// raw cliente_ref, or by keyed hash once they are deleted, which the
// operator cannot compute) and to a time range; a bad flag value is an
// error naming the flag that never echoes a --customer value.
func TestAccessLogFilters(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000001"
	dataDir := t.TempDir()
	e, _ := sandboxEnv(t, dataDir)
	for i, ref := range []string{ana, ana, beto} {
		if _, err := e.svc.privacy.Export("acme", ref, "ci", fmt.Sprintf("tr-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.privacy.RequestDeletion("acme", ana, "ci"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.svc.privacy.ProcessDeletions(t.Context(), deletionHooks(e.svc, false)); err != nil || st.Completed != 1 {
		t.Fatalf("deletion: %+v %v", st, err)
	}
	e.close()
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string // trace ids
		wantErr string
	}{
		{"all", nil, []string{"tr-0", "tr-1", "tr-2"}, ""},
		{"deleted customer, by hash", []string{"--customer", ana}, []string{"tr-0", "tr-1"}, ""},
		{"customer", []string{"--customer=" + beto}, []string{"tr-2"}, ""},
		{"until", []string{"--until", future}, []string{"tr-0", "tr-1", "tr-2"}, ""},
		{"since", []string{"--since", future}, []string{}, ""},
		{"bad customer", []string{"--customer", "ana-1"}, nil, "--customer: not a cliente_ref"},
		{"bad since", []string{"--since", "yesterday"}, nil, "--since: not an RFC 3339 time"},
		{"until before since", []string{"--since", future, "--until", "2020-01-01T00:00:00Z"}, nil, "--since must be before --until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runAdmin("", dataDir, append([]string{"access-log", "--tenant", "acme"}, tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "ana-1") {
					t.Errorf("error %v (%s), want one with %q", err, out, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got struct {
				Entries []struct {
					TraceID string `json:"trace_id"`
				} `json:"entries"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ids := []string{}
			for _, en := range got.Entries {
				ids = append(ids, en.TraceID)
			}
			if d := cmp.Diff(tc.want, ids); d != "" {
				t.Errorf("entries (-want +got):\n%s", d)
			}
		})
	}
}

// TestLabellingWarningLeavesOutHistory: "admin tenant show" warns when
// over 5 % of the coupons received carry no decision_id, counting those
// whose ts is from the tenant's creation on: a history of 30 coupons from
// before (no decision_id, coupond never decided them) raised the warning
// for good beside 20 labelled ones; 5 unlabelled coupons sent since do.
func TestLabellingWarningLeavesOutHistory(t *testing.T) {
	e, now := sandboxEnv(t, t.TempDir())
	defer e.close()
	eng := e.svc.engine
	diezCatalog(t, eng, now)
	var evs []engine.IngestEvent
	n := 0
	coupon := func(ref string, ts time.Time, decisionID string) {
		n++
		ev := engine.Event{ID: fmt.Sprintf("ev-%d", n), ClienteRef: ref, TS: ts, Tipo: engine.CuponRecibido, Clave: "diez",
			CuponEmitidoID: fmt.Sprintf("cup-%d", n), DecisionID: decisionID, Caducidad: ts.Add(7 * 24 * time.Hour)}
		evs = append(evs, engine.IngestEvent{Index: len(evs), Event: ev, Canonical: []byte(ev.ID)})
	}
	for i := range 30 {
		coupon(fmt.Sprintf("h%d", i), now.Add(-30*24*time.Hour), "")
	}
	for i := range 20 {
		ref := fmt.Sprintf("c%d", i)
		d, err := eng.Decide("acme", engine.Request{ClienteRef: ref, Canal: "push"})
		if err != nil {
			t.Fatal(err)
		}
		coupon(ref, now, d.DecisionID)
	}
	warned := func() bool {
		t.Helper()
		if res, err := eng.Ingester.Ingest("acme", evs); err != nil || len(res.Rechazados) > 0 {
			t.Fatalf("ingest: %+v, %v", res, err)
		}
		tn, _ := e.db.Tenant("acme")
		_, _, _, warnings, err := e.svc.tenantStatus(tn)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range warnings {
			if strings.Contains(w, "carry no decision_id") {
				return true
			}
		}
		return false
	}
	if warned() {
		t.Error("30 coupons from before the tenant and 20 labelled since: warned")
	}
	evs = nil
	for i := range 5 {
		coupon(fmt.Sprintf("u%d", i), now, "")
	}
	if !warned() {
		t.Error("5 unlabelled coupons of 25 since the tenant's creation: no warning")
	}
}
