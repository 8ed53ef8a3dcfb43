package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
)

// TestTenantDeleteKilledUnderLoad: serve (the real binary) is killed -9 at
// a random moment of "admin tenant delete" (through its socket) while the
// tenant's integrator and another tenant's post their traffic; after each
// restart the tenant is hidden (listed no more, its token 401), the
// deletion worker completes every deletion after its grace, "admin check"
// exits 0 and nothing of the deleted tenants is left in the store nor in
// the results dir. About two minutes: COUPOND_TENANTDEL_KILL=3 go test
// -run TestTenantDeleteKilledUnderLoad -v ./cli/ (the number of kills;
// skipped without it; COUPOND_TENANTDEL_KILL_MS bounds the kill's moment,
// 400 ms after the command by default).
func TestTenantDeleteKilledUnderLoad(t *testing.T) {
	kills := 0
	fmt.Sscan(os.Getenv("COUPOND_TENANTDEL_KILL"), &kills)
	if kills == 0 {
		t.Skip("set COUPOND_TENANTDEL_KILL to the number of kills")
	}
	maxMS := 400 // the kill comes up to this many ms after the command
	fmt.Sscan(os.Getenv("COUPOND_TENANTDEL_KILL_MS"), &maxMS)
	dataDir, err := os.MkdirTemp("/tmp", "rev53-kill-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dataDir)
	in := startServer(t, dataDir)
	defer in.killIfRunning()
	_, beta := setupDataTenant(t, in, "beta")
	var shown map[string]any
	in.admin(&shown, "clock", "show", "--tenant", "beta")
	now, _ := time.Parse(time.RFC3339, shown["now"].(string))
	tokens := map[string]string{"beta": beta}
	var victims []string
	for k := 0; k < kills; k++ {
		id := fmt.Sprintf("acme%d", k)
		victims = append(victims, id)
		_, tokens[id] = setupDataTenant(t, in, id)
		for i := 0; i < 5000; i += 500 {
			var evs []map[string]any
			for j := i; j < i+500; j++ {
				evs = append(evs, purchaseEvent(fmt.Sprintf("ev-%d", j), fmt.Sprintf("c-%s-%05d", id, j/5), now.Add(-time.Hour)))
			}
			if st, _, b := in.do("POST", "/v1/eventos", tokens[id], map[string]any{"eventos": evs}); st != 200 {
				t.Fatalf("events: %d %v", st, b)
			}
		}
	}
	stats := map[string]*trafficStats{}
	for _, id := range victims {
		stop := make(chan struct{})
		var traffic sync.WaitGroup
		for _, tenant := range []string{id, "beta"} {
			stats[tenant+" "+id] = &trafficStats{codes: map[string]int{}}
			for worker := 0; worker < 2; worker++ {
				traffic.Add(1)
				go func() {
					defer traffic.Done()
					integratorTraffic("http://"+in.addr, tokens[tenant], tenant, worker, now, stats[tenant+" "+id], stop)
				}()
			}
		}
		time.Sleep(300 * time.Millisecond)
		go runAdmin("", dataDir, "tenant", "delete", id, "--confirm", id)
		offset := time.Duration(rand.IntN(maxMS)) * time.Millisecond
		time.Sleep(offset)
		in.kill()
		close(stop)
		traffic.Wait()
		t.Logf("%s: killed %v after the delete command", id, offset)
		in.start()
		var list []tenantView
		in.admin(&list, "tenant", "list")
		listed := false
		for _, v := range list {
			listed = listed || v.Tenant == id
		}
		var ds []tenantDeletionView
		in.admin(&ds, "tenant", "deletions")
		marked, state := false, "none"
		for _, d := range ds {
			if d.Tenant == id {
				marked, state = true, d.State
			}
		}
		t.Logf("%s: after the restart, its deletion %s", id, state)
		st, _, _ := in.do("GET", "/v1/catalogo-acciones", tokens[id], nil)
		switch {
		case marked && (listed || st != 401):
			t.Errorf("%s after the restart (killed %v after the delete): listed %v, its token %d; want hidden, 401", id, offset, listed, st)
		case !marked && (!listed || st != 200):
			t.Errorf("%s after the restart (killed %v after the delete, before its mark): listed %v, its token %d; want whole", id, offset, listed, st)
		case !marked:
			t.Logf("%s: killed before the mark; deleted again", id)
			in.admin(nil, "tenant", "delete", id, "--confirm", id)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var ds []tenantDeletionView
		in.admin(&ds, "tenant", "deletions")
		done := 0
		for _, d := range ds {
			if d.State == store.TenantDeleted {
				done++
			}
		}
		if done == len(victims) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deletions not all completed after 3 minutes: %+v", ds)
		}
		time.Sleep(2 * time.Second)
	}
	in.stop()
	if out, err := runAdmin("", dataDir, "check"); err != nil {
		t.Errorf("check: %v\n%s", err, out)
	}
	e, err := openEnv(context.Background(), dataDir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	for _, id := range victims {
		for k := range recordsOf(t, e.db, id) {
			if !strings.HasPrefix(k, "\x01R") {
				table, text := store.DescribeKey(id, []byte(k))
				t.Errorf("left of %s: %s %s", id, table, text)
			}
		}
		if _, err := os.Stat(filepath.Join(dataDir, "results", id)); !os.IsNotExist(err) {
			t.Errorf("%s's result files: %v", id, err)
		}
	}
	for k, st := range stats {
		t.Logf("%s: %v", k, st.codes)
		for c, n := range st.codes {
			if strings.HasSuffix(c, " 500") || strings.HasSuffix(c, " 503") {
				t.Errorf("%s: %d answers %s", k, n, c)
			}
		}
	}
}
