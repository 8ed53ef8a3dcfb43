package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// benchTenant is the sandbox tenant a spawned server is set up with.
const benchTenant = "bench"

// benchTarget is the coupond the bench measures: one it started (spawned)
// or one given by --url.
type benchTarget struct {
	client  *benchClient
	pid     int    // the server process, 0 when unknown
	dataDir string // spawned: its data dir (admin commands go through its socket)
	child   *child
	cleanup func()
}

func (t *benchTarget) close() {
	if t.child != nil {
		t.child.stop()
	}
	if t.cleanup != nil {
		t.cleanup()
	}
}

// prepareCoupond returns the server to measure. Without --client-id it
// starts "coupond serve" on a fresh data dir in a child process, creates a
// sandbox tenant with rate limits off and a credential, installs a catalog
// and loads the history of --customers customers through the API.
func prepareCoupond(ctx context.Context, f *benchFlags, conns int, out io.Writer) (*benchTarget, error) {
	if f.clientID != "" {
		return &benchTarget{client: newBenchClient(f, conns), pid: f.serverPID}, nil
	}
	dir := f.dataDir
	cleanup := func() {}
	if dir == "" {
		d, err := os.MkdirTemp("", "coupond-bench-")
		if err != nil {
			return nil, err
		}
		dir, cleanup = d, func() { os.RemoveAll(d) }
	}
	t := &benchTarget{dataDir: dir, cleanup: cleanup}
	ok := false
	defer func() {
		if !ok {
			t.close()
		}
	}()
	admin := func(args ...string) ([]byte, error) {
		var buf, errb bytes.Buffer
		err := Run(ctx, append([]string{"admin", "--data-dir", dir}, args...), nil, &buf, &errb)
		if err != nil {
			return nil, fmt.Errorf("admin %v: %v: %s", args, err, errb.String())
		}
		return buf.Bytes(), nil
	}
	if _, err := admin("tenant", "create", benchTenant, "--sandbox"); err != nil {
		return nil, err
	}
	if _, err := admin("tenant", "set", benchTenant, "--rate-limits", "off"); err != nil {
		return nil, err
	}
	credOut, err := admin("credential", "create", "--json", "--tenant", benchTenant, "--name", "bench",
		"--scopes", "eventos:publicar,decisiones:pedir,decisiones:confirmar,catalogo:escribir,campanas:escribir")
	if err != nil {
		return nil, err
	}
	var cred struct{ ClientID, ClientSecret string }
	var raw map[string]any
	if err := json.Unmarshal(credOut, &raw); err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	cred.ClientID, _ = raw["client_id"].(string)
	cred.ClientSecret, _ = raw["client_secret"].(string)
	addr, err := freeBenchAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(dir+"/bench-serve.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	args := []string{"--data-dir", dir, "serve", "--addr", addr, "--console-addr", "", "--log-level", f.serveLogLevel}
	t.child, err = startChild(args, addr, logf, 60*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w (log in %s)", err, logf.Name())
	}
	t.pid = t.child.pid()
	sf := *f
	sf.url, sf.clientID, sf.secret = t.child.base, cred.ClientID, cred.ClientSecret
	t.client = newBenchClient(&sf, conns)
	if err := putBenchCatalog(ctx, t.client); err != nil {
		return nil, err
	}
	if f.customers > 0 && f.history {
		fmt.Fprintf(out, "loading the history of %d customers through POST /v1/eventos ...\n", f.customers)
		st, err := loadHistory(ctx, t.client, f.customers, f.seed)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "history: %d events in %.1fs (%.0f events/s acknowledged)\n", st.events, st.elapsed.Seconds(), float64(st.events)/st.elapsed.Seconds())
	}
	ok = true
	return t, nil
}

// putBenchCatalog installs four coupons on the push channel and campaign
// "bench" (for batch jobs).
func putBenchCatalog(ctx context.Context, c *benchClient) error {
	var acciones []map[string]any
	for i := 1; i <= 4; i++ {
		acciones = append(acciones, map[string]any{"id": i, "nombre": "cupon " + strconv.Itoa(i), "tipo_cupon": "T" + strconv.Itoa(i),
			"costo_envio_mxn": 0.5, "descuento_max_mxn": float64(25 * i), "descuento_pct": 5 * i, "activa": true})
	}
	body, _ := json.Marshal(map[string]any{"acciones": acciones})
	if st, err := c.do(ctx, "PUT", "/v1/catalogo-acciones", body, nil); err != nil || st != 200 {
		return fmt.Errorf("catalog: status %d: %v", st, err)
	}
	body, _ = json.Marshal(map[string]any{"canal": "push", "descripcion": "bench"})
	if st, err := c.do(ctx, "PUT", "/v1/campanas/bench", body, nil); err != nil || st != 200 {
		return fmt.Errorf("campaign: status %d: %v", st, err)
	}
	return nil
}

type loadStats struct {
	events  int64
	elapsed time.Duration
}

// loadHistory posts, for every customer in order, a ticket of one to three
// purchases (and one time in ten a coupon received), 250 customers a
// request with four requests in flight: about 2.1 events per customer.
func loadHistory(ctx context.Context, c *benchClient, customers int, seed uint64) (loadStats, error) {
	if _, err := c.bearer(ctx); err != nil {
		return loadStats{}, err
	}
	const chunk = 250 // at most four events each: a request stays within 1,000
	var next atomic.Int64
	var events atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	inParallel(4, func(w int) {
		rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
		for {
			from := int(next.Add(chunk)) - chunk
			if from >= customers || ctx.Err() != nil {
				return
			}
			body, n := historyBatch(rng, from, min(from+chunk, customers))
			var res struct{ Aceptados int }
			st, err := c.do(ctx, "POST", "/v1/eventos", body, &res)
			if err != nil || st != 200 {
				errOnce.Do(func() { firstErr = fmt.Errorf("history: POST /v1/eventos: status %d: %v", st, err) })
				return
			}
			_ = n
			events.Add(int64(res.Aceptados))
		}
	})
	return loadStats{events: events.Load(), elapsed: time.Since(start)}, firstErr
}

// historyBatch is one request of history for customers [from, to).
func historyBatch(rng *rand.Rand, from, to int) ([]byte, int) {
	now := time.Now().UTC()
	evs := make([]map[string]any, 0, 1000)
	for i := from; i < to; i++ {
		ref := benchRef(i)
		ticket := "h" + strconv.Itoa(i)
		ts := now.Add(-time.Duration(1+rng.IntN(60*24)) * time.Hour).Format(time.RFC3339)
		for k := 0; k < 1+rng.IntN(3); k++ {
			valor := float64(1000+rng.IntN(100000)) / 100
			evs = append(evs, map[string]any{"event_id": ticket + "-" + strconv.Itoa(k), "cliente_ref": ref, "ts": ts, "tipo": "COMPRA_CAT",
				"clave": benchCategories[rng.IntN(len(benchCategories))], "valor": valor,
				"extra": map[string]any{"ticket_id": ticket, "margen": float64(int(valor*30)) / 100, "cantidad": 1 + rng.IntN(5), "canal": "tienda"}})
		}
		if rng.IntN(10) == 0 {
			evs = append(evs, map[string]any{"event_id": ticket + "-cup", "cliente_ref": ref, "ts": ts, "tipo": "CUPON_RECIBIDO", "clave": "T1",
				"valor": 25, "extra": map[string]any{"cupon_emitido_id": ticket + "-c", "caducidad": now.Add(7 * 24 * time.Hour).Format(time.RFC3339), "canal": "push"}})
		}
	}
	body, _ := json.Marshal(map[string]any{"eventos": evs})
	return body, len(evs)
}

func benchRef(i int) string { return fmt.Sprintf("bench-cliente-%07d", i) }
