package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

// benchFlags are shared by the bench subcommands.
type benchFlags struct {
	url, clientID, secret string
	duration              time.Duration
	customers             int
	seed                  uint64
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generators against a running server (decisions, events)",
		Long: `bench drives a running coupond over HTTP and prints throughput and latency percentiles.
Use a sandbox tenant with rate limits off ("admin tenant set ID --rate-limits off") and a credential
with the scopes the bench needs (eventos:publicar, decisiones:pedir, decisiones:confirmar, catalogo:escribir).`,
	}
	p := cmd.PersistentFlags()
	p.StringVar(&f.url, "url", "http://127.0.0.1:8080", "server base URL")
	p.StringVar(&f.clientID, "client-id", "", "client_id (env COUPOND_CLIENT_ID)")
	p.StringVar(&f.secret, "client-secret", "", "client_secret (env COUPOND_CLIENT_SECRET)")
	p.DurationVar(&f.duration, "duration", 20*time.Second, "how long to send")
	p.IntVar(&f.customers, "customers", 100_000, "distinct cliente_ref to use")
	p.Uint64Var(&f.seed, "seed", 1, "random seed")
	p.Bool("json", false, "machine-readable output: one JSON object on stdout")
	cmd.AddCommand(benchEventsCmd(&f), benchDecisionsCmd(&f))
	return cmd
}

type benchClient struct {
	f     *benchFlags
	http  *http.Client
	mu    sync.Mutex
	token string
	got   time.Time
}

func newBenchClient(f *benchFlags, conns int) *benchClient {
	return &benchClient{f: f, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}}
}

// bearer returns a token, renewed every 10 minutes.
func (b *benchClient) bearer(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token != "" && time.Since(b.got) < 10*time.Minute {
		return b.token, nil
	}
	body, _ := json.Marshal(map[string]string{"client_id": b.f.clientID, "client_secret": b.f.secret, "grant_type": "client_credentials"})
	req, _ := http.NewRequestWithContext(ctx, "POST", b.f.url+"/v1/token", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&tok) != nil {
		return "", fmt.Errorf("token: status %d (check --client-id/--client-secret)", resp.StatusCode)
	}
	b.token, b.got = tok.AccessToken, time.Now()
	return b.token, nil
}

func (b *benchClient) post(ctx context.Context, path string, body []byte, out any) (int, error) {
	tok, err := b.bearer(ctx)
	if err != nil {
		return 0, err
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", b.f.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// latencies collects durations and prints percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

// quantiles are the percentiles of summary in milliseconds (empty without
// samples).
func (l *latencies) quantiles() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]float64{}
	if len(l.d) == 0 {
		return out
	}
	slices.Sort(l.d)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
		out[q.name] = ms(l.d[min(len(l.d)-1, int(q.p*float64(len(l.d))))])
	}
	out["max"] = ms(l.d[len(l.d)-1])
	return out
}

func (l *latencies) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return "no samples"
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	q := func(p float64) time.Duration { return l.d[min(len(l.d)-1, int(p*float64(len(l.d))))] }
	return fmt.Sprintf("p50 %v  p95 %v  p99 %v  max %v", q(0.50).Round(time.Microsecond), q(0.95).Round(time.Microsecond),
		q(0.99).Round(time.Microsecond), l.d[len(l.d)-1].Round(time.Microsecond))
}

func benchEventsCmd(f *benchFlags) *cobra.Command {
	var conc, batch int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Post realistic batches of events and print accepted events/s and latency percentiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := newBenchClient(f, conc)
			if _, err := c.bearer(cmd.Context()); err != nil {
				return err
			}
			var accepted, requests, failures atomic.Int64
			var lat latencies
			ctx, cancel := context.WithTimeout(cmd.Context(), f.duration)
			defer cancel()
			start := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(f.seed, uint64(w)))
					for seq := 0; ctx.Err() == nil; seq++ {
						body := eventBatch(rng, w, seq, batch, f.customers)
						t0 := time.Now()
						var res struct{ Aceptados int }
						st, err := c.post(ctx, "/v1/eventos", body, &res)
						if ctx.Err() != nil {
							return
						}
						lat.add(time.Since(t0))
						requests.Add(1)
						if err != nil || st != 200 {
							failures.Add(1)
							continue
						}
						accepted.Add(int64(res.Aceptados))
					}
				}(w)
			}
			wg.Wait()
			el := time.Since(start).Seconds()
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"requests": requests.Load(), "events_per_request": batch, "failed": failures.Load(),
					"accepted": accepted.Load(), "seconds": el, "accepted_per_second": float64(accepted.Load()) / el, "latency_ms": lat.quantiles()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "events: %d requests of %d events, %d failed, %d accepted in %.1fs\naccepted events/s: %.0f\nrequest latency: %s\n",
				requests.Load(), batch, failures.Load(), accepted.Load(), el, float64(accepted.Load())/el, lat.summary())
			return nil
		},
	}
	cmd.Flags().IntVar(&conc, "concurrency", 4, "requests in flight")
	cmd.Flags().IntVar(&batch, "batch", 1000, "events per request (at most 1000)")
	return cmd
}

var benchCategories = []string{"abarrotes", "bebidas", "limpieza", "lacteos", "panaderia", "farmacia", "electronica", "ropa"}

// eventBatch builds one request of realistic events: purchases per
// category of a ticket, coupons received and redeemed.
func eventBatch(rng *rand.Rand, worker, seq, n, customers int) []byte {
	now := time.Now().UTC()
	evs := make([]map[string]any, 0, n)
	for len(evs) < n {
		ref := fmt.Sprintf("bench-cliente-%07d", rng.IntN(customers))
		ticket := fmt.Sprintf("w%d-s%d-t%d", worker, seq, len(evs))
		ts := now.Add(-time.Duration(rng.IntN(90*24)) * time.Hour).Format(time.RFC3339)
		for k := 0; k < 1+rng.IntN(3) && len(evs) < n; k++ {
			valor := float64(1000+rng.IntN(100000)) / 100
			evs = append(evs, map[string]any{"event_id": fmt.Sprintf("%s-%d", ticket, k), "cliente_ref": ref, "ts": ts, "tipo": "COMPRA_CAT",
				"clave": benchCategories[rng.IntN(len(benchCategories))], "valor": valor,
				"extra": map[string]any{"ticket_id": ticket, "margen": float64(int(valor*30)) / 100, "cantidad": 1 + rng.IntN(5), "canal": "tienda"}})
		}
		if rng.IntN(10) == 0 && len(evs) < n {
			evs = append(evs, map[string]any{"event_id": ticket + "-cup", "cliente_ref": ref, "ts": ts, "tipo": "CUPON_RECIBIDO", "clave": "DESC10",
				"valor": 50, "extra": map[string]any{"cupon_emitido_id": ticket + "-c", "caducidad": now.Add(7 * 24 * time.Hour).Format(time.RFC3339), "canal": "push"}})
		}
	}
	body, _ := json.Marshal(map[string]any{"eventos": evs})
	return body
}

func benchDecisionsCmd(f *benchFlags) *cobra.Command {
	var rate, workers int
	var confirm bool
	cmd := &cobra.Command{
		Use:   "decisions",
		Short: "Open-loop decision load at a fixed arrival rate; latency from the intended send time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rate <= 0 {
				return fmt.Errorf("--rate: want > 0")
			}
			c := newBenchClient(f, workers)
			if _, err := c.bearer(cmd.Context()); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.duration)
			defer cancel()
			type job struct {
				at  time.Time
				ref string
			}
			jobs := make(chan job, rate*2)
			var lat latencies
			var ok, failed, dropped atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range jobs {
						body, _ := json.Marshal(map[string]any{"cliente_ref": j.ref, "contexto": map[string]any{"canal": "push"}})
						var d struct {
							DecisionID string `json:"decision_id"`
						}
						st, err := c.post(context.Background(), "/v1/decisiones", body, &d)
						lat.add(time.Since(j.at)) // from the intended send time: queueing is not hidden
						if err != nil || st != 200 {
							failed.Add(1)
							continue
						}
						ok.Add(1)
						if confirm {
							c.post(context.Background(), "/v1/decisiones/"+d.DecisionID+"/ejecucion", []byte(`{"ejecutada":true}`), nil)
						}
					}
				}()
			}
			rng := rand.New(rand.NewPCG(f.seed, 7))
			// preciseSleep blocks this goroutine's thread, which keeps its P
			// while it sleeps: one more P keeps the workers on every core.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1))
			start := time.Now()
			interval := time.Second / time.Duration(rate)
			n := 0
			for ctx.Err() == nil {
				at := start.Add(time.Duration(n) * interval)
				if d := time.Until(at); d > 0 {
					preciseSleep(d)
				}
				select {
				case jobs <- job{at: at, ref: fmt.Sprintf("bench-cliente-%07d", rng.IntN(f.customers))}:
				default:
					dropped.Add(1) // the generator never waits: an overloaded server shows as drops
				}
				n++
			}
			close(jobs)
			wg.Wait()
			el := time.Since(start).Seconds()
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"target_per_second": rate, "seconds": el, "ok": ok.Load(), "failed": failed.Load(),
					"dropped": dropped.Load(), "decisions_per_second": float64(ok.Load()) / el, "latency_ms": lat.quantiles()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "decisions: target %d/s for %.0fs; %d ok, %d failed, %d dropped by the generator\nthroughput: %.0f decisions/s\nlatency from intended send: %s\n",
				rate, el, ok.Load(), failed.Load(), dropped.Load(), float64(ok.Load())/el, lat.summary())
			return nil
		},
	}
	cmd.Flags().IntVar(&rate, "rate", 2000, "arrivals per second")
	cmd.Flags().IntVar(&workers, "workers", 64, "requests in flight at most")
	cmd.Flags().BoolVar(&confirm, "confirm", false, "confirm each decision (adds an /ejecucion call)")
	return cmd
}
