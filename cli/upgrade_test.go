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

	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/internal/golden"
	"github.com/coupond/coupond/internal/syncbuf"
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
	var check struct {
		OK      bool  `json:"ok"`
		Records int   `json:"records"`
		Damaged []any `json:"damaged"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "check", "--json"), &check); err != nil {
		t.Fatal(err)
	}
	if !check.OK || check.Records < 500 || len(check.Damaged) != 0 {
		t.Fatalf("admin check of the earlier release's data dir: %+v", check)
	}

	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, addr: freeAddr(t), dataDir: dir}
	var logs syncbuf.Buffer // serve writes it while the test reads it
	served := make(chan error, 1)
	go func() {
		served <- Run(ctx, []string{"serve", "--data-dir", dir, "--addr", in.addr, "--console-addr", ""}, nil, io.Discard, &logs)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	waitFor(t, 20*time.Second, "/readyz on the earlier release's data dir", func() bool { return in.answers200("/readyz") })

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

	const job = "lote_rkpruxtew5psb4ho"
	if st, _, b := in.do("GET", "/v1/lotes-decision/"+job, tok, nil); st != 200 || b["estado"] != "completado" {
		t.Errorf("the earlier release's batch job: %d %v", st, b)
	}
	resp := apitest.Do(t, "GET", in.url("/v1/lotes-decision/"+job+"/resultado"), tok, nil)
	lines, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := bytes.Count(lines, []byte("\n")); resp.StatusCode != http.StatusOK || n != 49 || bytes.Contains(lines, []byte("cli-00007")) {
		t.Errorf("its result file: %d, %d lines (want 49: 50 customers but the deleted one)", resp.StatusCode, n)
	}

	var ev struct {
		Records int `json:"records"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "evaluate", "--tenant", "acme", "--json"), &ev); err != nil || ev.Records == 0 {
		t.Errorf("admin evaluate over the earlier release's log: %+v, %v", ev, err)
	}
	// Its model is of an earlier format: the tenant learns again from the
	// prior, and the operator is told so.
	var show struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "show", "acme", "--json"), &show); err != nil ||
		!slices.ContainsFunc(show.Warnings, func(w string) bool { return strings.Contains(w, "stored model is of an earlier format") }) {
		t.Errorf("tenant show's warnings after the upgrade: %q, %v", show.Warnings, err)
	}
	if s := logs.String(); strings.Contains(s, `"level":"error"`) || strings.Contains(s, "quarantin") {
		t.Errorf("the server logged errors or quarantined records:\n%s", s)
	}
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
