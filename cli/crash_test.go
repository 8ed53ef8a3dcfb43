package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestCrashKeepsAcknowledgedEvents posts event batches to the real binary
// while killing it with SIGKILL at random moments, restarts it, and checks
// that every acknowledged batch is there exactly once (a resend is all
// duplicates) and that a batch in flight at the kill was applied whole or
// not at all (a resend is all duplicates or all accepted, never a mix).
func TestCrashKeepsAcknowledgedEvents(t *testing.T) {
	rounds := 3
	if !testing.Short() {
		rounds = 10
	}
	dataDir := t.TempDir()
	in := startServer(t, dataDir)
	defer func() { in.kill() }()
	var cred credJSON
	in.admin(nil, "tenant", "create", "crash", "--sandbox")
	in.admin(nil, "tenant", "set", "crash", "--rate-limits", "off")
	in.admin(&cred, "credential", "create", "--tenant", "crash", "--name", "pos", "--scopes", "eventos:publicar")
	rng := rand.New(rand.NewPCG(7, 7))
	type sent struct {
		body  []byte
		n     int
		acked bool
	}
	var batches []sent
	seq := 0
	makeBatch := func() ([]byte, int) {
		n := 50 + rng.IntN(200)
		evs := make([]map[string]any, n)
		for i := range evs {
			seq++
			evs[i] = map[string]any{"event_id": fmt.Sprintf("crash-%07d", seq), "cliente_ref": fmt.Sprintf("cliente-%05d", rng.IntN(500)),
				"ts": time.Now().UTC().Add(-time.Hour).Format(time.RFC3339), "tipo": "COMPRA_CAT", "clave": "abarrotes", "valor": 10.5,
				"extra": map[string]any{"ticket_id": fmt.Sprintf("t%d", seq), "margen": 3.25}}
		}
		b, _ := json.Marshal(map[string]any{"eventos": evs})
		return b, n
	}
	post := func(tok string, body []byte) (int, map[string]any, error) {
		req, _ := http.NewRequest("POST", in.url("/v1/eventos"), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m, nil
	}
	for r := 0; r < rounds; r++ {
		tok := in.token(cred)
		done := make(chan struct{})
		wait := time.Duration(20+rng.IntN(200)) * time.Millisecond
		go func() {
			time.Sleep(wait)
			in.cmd.Process.Kill()
			close(done)
		}()
		for {
			body, n := makeBatch()
			st, m, err := post(tok, body)
			acked := err == nil && st == 200
			if acked && m["aceptados"] != float64(n) {
				t.Fatalf("batch of %d acknowledged with %v", n, m)
			}
			batches = append(batches, sent{body: body, n: n, acked: acked})
			if !acked {
				break
			}
		}
		<-done
		in.cmd.Wait()
		if _, err := os.Stat(dataDir); err != nil {
			t.Fatal(err)
		}
		in.start() // recovers: removes the stale admin socket, reopens the store
	}
	tok := in.token(cred)
	acked := 0
	for i, b := range batches {
		st, m, err := post(tok, b.body)
		if err != nil || st != 200 {
			t.Fatalf("resend %d: %v %d %v", i, err, st, m)
		}
		dup, acc := int(m["duplicados"].(float64)), int(m["aceptados"].(float64))
		switch {
		case b.acked && dup != b.n:
			t.Errorf("acknowledged batch %d: resend gave %d duplicates of %d (lost events)", i, dup, b.n)
		case !b.acked && !(dup == b.n || acc == b.n):
			t.Errorf("unacknowledged batch %d half applied: %d duplicates, %d accepted of %d", i, dup, acc, b.n)
		}
		if b.acked {
			acked++
		}
	}
	t.Logf("%d rounds, %d batches acknowledged, %d in flight at a kill", rounds, acked, len(batches)-acked)
	// A kill leaves at most a torn tail in the store's log, which is not
	// damage: no damaged log is noted.
	if out, err := runAdmin(in.bin, in.dataDir, "check", "--json"); err != nil || !bytes.Contains(out, []byte(`"damaged_logs": []`)) {
		t.Errorf("admin check after the kills: %v\n%s\nwant exit 0 and no damaged log", err, out)
	}
}
