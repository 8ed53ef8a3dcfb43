package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
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
	// serverPID is the measured server's process id when --url names a
	// running server (its CPU per request is read from /proc).
	serverPID     int
	dataDir       string // spawned server: data dir to use instead of a temporary one
	history       bool   // spawned server: load --customers customers of history first
	serveLogLevel string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generators against a running server (decisions, events)",
		Long: `bench drives coupond over HTTP and prints throughput and latency percentiles.

Without --client-id the bench sets up everything itself: it starts "coupond serve" in a child process
on a fresh data dir (temporary unless --bench-data-dir), creates a sandbox tenant with rate limits
off and a credential, installs a catalog and, for decisions, loads --customers customers of history
through POST /v1/eventos before measuring. --baseline measures, in the same run and with the same
generator, rates and bodies, a bare handler (decisions) or raw Pebble Sync batches (events) in
another child process, and prints both and their ratio.

With --client-id it drives the server at --url: use a sandbox tenant with rate limits off
("admin tenant set ID --rate-limits off") and a credential with the scopes the bench needs
(eventos:publicar, decisiones:pedir, decisiones:confirmar, catalogo:escribir); --server-pid lets
it read that server's CPU.`,
	}
	p := cmd.PersistentFlags()
	p.StringVar(&f.url, "url", "http://127.0.0.1:8080", "server base URL")
	p.StringVar(&f.clientID, "client-id", "", "client_id (env COUPOND_CLIENT_ID)")
	p.StringVar(&f.secret, "client-secret", "", "client_secret (env COUPOND_CLIENT_SECRET); prefer its variable, which other users cannot read in ps")
	p.DurationVar(&f.duration, "duration", 20*time.Second, "how long to send")
	p.IntVar(&f.customers, "customers", 100_000, "distinct cliente_ref to use")
	p.Uint64Var(&f.seed, "seed", 1, "random seed")
	p.IntVar(&f.serverPID, "server-pid", 0, "with --url: the server's process id, to report its CPU per request")
	p.StringVar(&f.dataDir, "bench-data-dir", "", "spawned server: data dir (default: a temporary one, removed at the end)")
	p.BoolVar(&f.history, "history", true, "spawned server: load the history of --customers customers before measuring decisions")
	p.StringVar(&f.serveLogLevel, "serve-log-level", "info", "spawned server: --log-level (its log goes to DATA_DIR/bench-serve.log)")
	p.Bool("json", false, "machine-readable output: the progress lines go to stderr, one JSON object with the figures to stdout")
	cmd.AddCommand(benchEventsCmd(&f), benchDecisionsCmd(&f), benchBatchCmd(&f), benchBareServerCmd(), benchRawPebbleCmd())
	return cmd
}

// check refuses the shared flags' values a bench cannot run with, naming
// the flag.
func (f *benchFlags) check() error {
	if f.duration <= 0 {
		return fmt.Errorf("--duration: want a positive duration such as 20s, got %s", f.duration)
	}
	return checkAtLeast(flagMin{"customers", f.customers, 1}, flagMin{"server-pid", f.serverPID, 0})
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
	return b.do(ctx, "POST", path, body, out)
}

// do sends one authenticated request; out, when not nil, receives a 200's
// JSON body.
func (b *benchClient) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	tok, err := b.bearer(ctx)
	if err != nil {
		return 0, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, b.f.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode/100 == 2 {
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
	var rate float64
	var baseline bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Post realistic batches of events and print accepted events/s and latency percentiles",
		Long: `events posts batches of --batch realistic events with --concurrency requests in flight for
--duration and prints the events acknowledged per second (each acknowledged request is committed with
Sync) and the request latency. --baseline writes the same records (key and JSON body of each event)
with raw Pebble Sync batches of the same size and concurrency in a child process, and prints both and
their ratio. --rate caps the requests sent per second (all workers together), e.g. to play a tenant
that keeps within its rate limit beside another bench.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAtLeast(flagMin{"concurrency", conc, 1}, flagMin{"batch", batch, 1}); err != nil {
				return err
			}
			if err := checkAtMost(flagMax{"concurrency", conc, benchMaxInFlight}); err != nil {
				return err
			}
			if rate < 0 {
				return fmt.Errorf("--rate: must be 0 (no cap) or more, got %g", rate)
			}
			if rate > benchMaxRate { // above 10⁹ the ticker's interval is 0: NewTicker panics
				return fmt.Errorf("--rate: want at most %d a second, got %g", benchMaxRate, rate)
			}
			if batch > 1000 {
				return fmt.Errorf("--batch: a request holds at most 1000 events, got %d", batch)
			}
			if err := f.check(); err != nil {
				return err
			}
			out := benchOut(cmd)
			hf := *f
			hf.history = false
			t, err := prepareCoupond(cmd.Context(), &hf, conc, out)
			if err != nil {
				return err
			}
			defer t.close()
			if _, err := t.client.bearer(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(out, "load average before: %s; %d cores\n", loadavg(), numCPU())
			summary, accepted := postEventLoad(cmd.Context(), t, f, eventLoad{conc, batch, rate}, out)
			if err := interrupted(cmd.Context()); err != nil {
				return err
			}
			if !baseline {
				return benchJSON(cmd, summary)
			}
			raw, err := runRawPebble(cmd.Context(), f, conc, batch)
			if err != nil {
				return err
			}
			summary["raw_pebble_per_second"] = raw.rate()
			fmt.Fprintf(out, "raw Pebble Sync batches of the same records (child process): %d events in %.1fs: %.0f events/s\n", raw.Events, raw.Seconds, raw.rate())
			fmt.Fprintf(out, "\n| | events/s (Sync) |\n|---|---|\n| coupond POST /v1/eventos | %.0f |\n| raw Pebble | %.0f |\n| coupond / raw | %.0f %% |\n",
				accepted, raw.rate(), 100*accepted/raw.rate())
			fmt.Fprintf(out, "load average after: %s\n", loadavg())
			return benchJSON(cmd, summary)
		},
	}
	cmd.Flags().IntVar(&conc, "concurrency", 4, "requests in flight")
	cmd.Flags().IntVar(&batch, "batch", 1000, "events per request (at most 1000)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "requests per second at most, all workers together (0: as fast as the server answers)")
	cmd.Flags().BoolVar(&baseline, "baseline", false, "also write the same records with raw Pebble Sync batches in a child process")
	return cmd
}

// eventLoad is the shape of bench events' load: requests in flight, events
// per request and, when above 0, requests per second at most.
type eventLoad struct {
	conc, batch int
	rate        float64
}

// postEventLoad posts batches of l.batch events to t with l.conc requests
// in flight (at most l.rate a second, when set) for f.duration, prints the
// figures and returns them as the summary of --json, and the accepted
// events per second.
func postEventLoad(ctx context.Context, t *benchTarget, f *benchFlags, l eventLoad, out io.Writer) (summary map[string]any, rate float64) {
	conc, batch := l.conc, l.batch
	var accepted, requests, failures atomic.Int64
	var lat latencies
	ctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	cpu0, gen0 := readCPU(t.pid), readCPU(os.Getpid())
	start := time.Now()
	run := strconv.FormatInt(start.UnixNano(), 36)
	var tick <-chan time.Time
	if l.rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
		defer tk.Stop()
		tick = tk.C
	}
	inParallel(conc, func(w int) {
		tmpls := eventTemplates(f.seed, run, w, batch, f.customers)
		for seq := 0; ctx.Err() == nil; seq++ {
			if tick != nil {
				select {
				case <-tick:
				case <-ctx.Done():
					return
				}
			}
			body := fillSeq(tmpls[seq%len(tmpls)], seq)
			t0 := time.Now()
			var res struct{ Aceptados int }
			st, err := t.client.post(ctx, "/v1/eventos", body, &res)
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
	})
	el := time.Since(start).Seconds()
	cpu, gen := readCPU(t.pid).minus(cpu0), readCPU(os.Getpid()).minus(gen0)
	rate = float64(accepted.Load()) / el
	fmt.Fprintf(out, "coupond events: %d requests of %d events, %d failed, %d accepted in %.1fs\naccepted events/s: %.0f\nrequest latency: %s\n",
		requests.Load(), batch, failures.Load(), accepted.Load(), el, rate, lat.summary())
	if cpu.known && accepted.Load() > 0 {
		fmt.Fprintf(out, "server CPU: %.2f µs per event (%.2f cores); generator %.2f cores\n", float64(cpu.cpu)/1e3/float64(accepted.Load()), cpu.cpu.Seconds()/el, gen.cpu.Seconds()/el)
	}
	return map[string]any{"requests": requests.Load(), "events_per_request": batch, "failed": failures.Load(),
		"accepted": accepted.Load(), "seconds": el, "accepted_per_second": rate}, rate
}

var benchCategories = []string{"abarrotes", "bebidas", "limpieza", "lacteos", "panaderia", "farmacia", "electronica", "ropa"}

// eventTemplates are a worker's request bodies, made before the clock
// starts so that the generator spends its time sending: eight batches whose
// ticket and event ids hold a placeholder that fillSeq replaces with the
// request's sequence number (every request's ids are new). The ids start
// with run, a tag of the bench run: without it a second run against the
// same tenant, or two runs at once (two publishers), sent the first one's
// event_ids with other content, refused as duplicado and left out of the
// accepted events/s.
func eventTemplates(seed uint64, run string, worker, n, customers int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, uint64(worker)))
	out := make([][]byte, 8)
	for i := range out {
		out[i] = eventBatch(rng, run, worker, seqPlaceholder, n, customers)
	}
	return out
}

// seqPlaceholder stands for the sequence number in a template's ids.
const seqPlaceholder = -99999999

var seqPlaceholderText = []byte(strconv.Itoa(seqPlaceholder))

// fillSeq returns tmpl with the placeholder replaced by seq (9 digits, the
// placeholder's length).
func fillSeq(tmpl []byte, seq int) []byte {
	return bytes.ReplaceAll(tmpl, seqPlaceholderText, fmt.Appendf(nil, "%09d", seq%1_000_000_000))
}

// eventBatch builds one request of realistic events: purchases per
// category of a ticket, coupons received and redeemed.
func eventBatch(rng *rand.Rand, run string, worker, seq, n, customers int) []byte {
	now := time.Now().UTC()
	evs := make([]map[string]any, 0, n)
	for len(evs) < n {
		ref := fmt.Sprintf("bench-cliente-%07d", rng.IntN(customers))
		ticket := fmt.Sprintf("%s-w%d-s%d-t%d", run, worker, seq, len(evs))
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

// interrupted is the error of a bench whose context ended (Ctrl-C) before
// its run did: the figures printed are of a partial run, so it must not
// exit 0 as if measured.
func interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: the figures above are of a partial run: %w", err)
	}
	return nil
}

// benchOut is where a bench command writes its human lines: stdout, or
// stderr under --json (stdout then holds one JSON value).
func benchOut(cmd *cobra.Command) io.Writer {
	if jsonFlag(cmd) {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

// benchJSON prints v on stdout under --json, else nothing.
func benchJSON(cmd *cobra.Command, v any) error {
	if !jsonFlag(cmd) {
		return nil
	}
	return printJSON(cmd.OutOrStdout(), v)
}
