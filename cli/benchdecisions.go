package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// decisionBody is the request body of arrival n: a customer drawn by a
// keyed mix of n, the same for coupond and the baseline.
func decisionBody(seed uint64, n, customers int) []byte {
	x := seed*0x9e3779b97f4a7c15 + uint64(n)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return []byte(`{"cliente_ref":"` + benchRef(int(x%uint64(customers))) + `","contexto":{"canal":"push"}}`)
}

// decisionSender returns the generator's sender for c: each worker keeps
// one connection. With confirmed non-nil, each new decision is confirmed
// on the same connection (the latency covers both calls) and its id kept
// in confirmed. A customer asked again while its reward window is open
// gets that open decision back; it is confirmed once, as an integrator
// would, not again (a second confirmation is 409 ejecucion_ya_confirmada,
// which a run longer than customers/rate seconds would count as failures).
func decisionSender(c *benchClient, seed uint64, customers int, confirmed *sync.Map) func() (func(int) (int, error), func()) {
	return func() (func(int) (int, error), func()) {
		conn := newRawConn(c.f.url)
		send := func(n int) (int, error) {
			tok, err := c.bearer(context.Background())
			if err != nil {
				return 0, err
			}
			st, body, err := conn.post("/v1/decisiones", tok, decisionBody(seed, n, customers))
			if err != nil || confirmed == nil || st != 200 {
				return st, err
			}
			var d struct {
				DecisionID string `json:"decision_id"`
			}
			if err := json.Unmarshal(body, &d); err != nil {
				return 0, err
			}
			if _, again := confirmed.LoadOrStore(d.DecisionID, struct{}{}); again {
				return st, nil
			}
			st, _, err = conn.post("/v1/decisiones/"+d.DecisionID+"/ejecucion", tok, []byte(`{"ejecutada":true}`))
			return st, err
		}
		return send, conn.close
	}
}

func benchDecisionsCmd(f *benchFlags) *cobra.Command {
	db := &decisionBench{f: f}
	cmd := &cobra.Command{
		Use:   "decisions",
		Short: "Open-loop decision load at fixed arrival rates; latency from the scheduled send time",
		Long: `decisions sends POST /v1/decisiones at a fixed arrival rate (open loop: the generator never waits
for answers, and latency is measured from each request's scheduled send time, so queueing is not hidden)
for --duration at each of --rates, and prints p50/p95/p99, the achieved rate, the server's CPU per
request (from /proc/PID/stat) and the generator's own CPU per request. "behind" counts arrivals the
generator itself sent more than 1 ms late: when it is high the generator, not only the server, was
saturated. --baseline measures a bare handler in a child process at the same rates, interleaved
step by step with coupond, and prints the ratios. --baseline also measures the floor: the same bare
handler that also commits each decision (a fresh key, about 350 bytes) to raw Pebble with Sync before
answering, on the disk of coupond's data dir — the least any service that makes an acknowledged
decision durable must do here; its ratios are printed beside the bare handler's. --during batch|learner runs a 100,000-customer batch
job, or the learner over a backlog, during each coupond step (the server CPU per request then includes
that work).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return db.run(cmd) },
	}
	fl := cmd.Flags()
	fl.IntVar(&db.rate, "rate", 2000, "arrivals per second (one step)")
	fl.StringVar(&db.rates, "rates", "", "a sweep of arrival rates, e.g. 500,1000,2000,4000,8000 (overrides --rate)")
	fl.IntVar(&db.workers, "workers", 64, "requests in flight at most")
	fl.BoolVar(&db.confirm, "confirm", false, "confirm each new decision, once (adds an /ejecucion call; an open decision returned again is not confirmed twice)")
	fl.BoolVar(&db.baseline, "baseline", false, "also measure, in child processes, a bare handler (httprouter, HMAC bearer check, JSON decode and encode) and the floor (the same handler committing each decision to raw Pebble with Sync)")
	fl.StringVar(&db.during, "during", "", "background work during each coupond step: batch (a batch job of --batch-size customers) or learner (fold a backlog)")
	fl.IntVar(&db.batchSize, "batch-size", 100_000, "--during batch: customers in the batch job")
	fl.StringVar(&db.profile, "cpuprofile", "", "spawned server: take a CPU profile of each coupond step into FILE.RATE (admin debug pprof)")
	fl.DurationVar(&db.warmup, "warmup", 2*time.Second, "unrecorded load before the first step, per target")
	return cmd
}

// decisionBench is one run of "bench decisions": its flags.
type decisionBench struct {
	f                        *benchFlags
	rate, workers, batchSize int
	rates, during, profile   string
	confirm, baseline        bool
	warmup                   time.Duration
	// confirmed holds the decision ids confirmed so far, over every step
	// (they share one server and its open reward windows).
	confirmed sync.Map
}

// confirmedFor is the set decisionSender confirms into: nil (no
// confirmations) without --confirm or for the baselines, which have no
// /ejecucion.
func (db *decisionBench) confirmedFor(isCoupond bool) *sync.Map {
	if !db.confirm || !isCoupond {
		return nil
	}
	return &db.confirmed
}

// benchMaxRate is the highest arrival rate a step may ask for (a second
// over 10⁹ made openLoop's interval 0 and divided by it; the queue holds
// two seconds of arrivals), and benchMaxInFlight the most requests in
// flight (--workers, --concurrency: a goroutine and a connection each).
// One generator sends far less than either.
const (
	benchMaxRate     = 1_000_000
	benchMaxInFlight = 10_000
)

// rateList returns the arrival rates of the steps, checking the flags.
func (db *decisionBench) rateList() ([]int, error) {
	list := []int{db.rate}
	if db.rates != "" {
		var err error
		if list, err = parseRates(db.rates); err != nil {
			return nil, err
		}
	}
	if db.rate <= 0 {
		return nil, fmt.Errorf("--rate: want > 0")
	}
	if err := checkAtMost(flagMax{"rate", db.rate, benchMaxRate}); err != nil {
		return nil, err
	}
	for _, r := range list {
		if r > benchMaxRate {
			return nil, fmt.Errorf("--rates: want at most %d a second, got %d", benchMaxRate, r)
		}
	}
	if db.during != "" && db.during != "batch" && db.during != "learner" {
		return nil, fmt.Errorf("--during: want batch or learner, got %q", db.during)
	}
	return list, nil
}

// checkFlags refuses the flags out of their range, naming them.
func (db *decisionBench) checkFlags() error {
	if err := db.f.check(); err != nil {
		return err
	}
	if err := checkAtLeast(flagMin{"workers", db.workers, 1}, flagMin{"batch-size", db.batchSize, 1}); err != nil {
		return err
	}
	if err := checkAtMost(flagMax{"workers", db.workers, benchMaxInFlight}); err != nil {
		return err
	}
	if db.warmup < 0 {
		return fmt.Errorf("--warmup: want 0 or a positive duration, got %s", db.warmup)
	}
	return nil
}

// run measures coupond (and the baseline, with --baseline) at each rate,
// interleaved step by step, and prints the steps and the table.
func (db *decisionBench) run(cmd *cobra.Command) error {
	if err := db.checkFlags(); err != nil {
		return err
	}
	f, out := db.f, benchOut(cmd)
	list, err := db.rateList()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	t, err := prepareCoupond(ctx, f, db.workers, out)
	if err != nil {
		return err
	}
	defer t.close()
	if db.during != "" && t.child == nil {
		return fmt.Errorf("--during needs a server started by the bench (no --client-id)")
	}
	if _, err := t.client.bearer(ctx); err != nil {
		return err
	}
	targets := []decisionTarget{{name: "coupond", client: t.client, pid: t.pid}}
	if db.baseline {
		b, err := startBaseline(f, db.workers, "")
		if err != nil {
			return err
		}
		defer b.child.stop()
		targets = append(targets, b)
	}
	if db.baseline { // the floor
		parent := os.TempDir() // beside coupond's data dir: the same disk
		if t.dataDir != "" {
			parent = filepath.Dir(t.dataDir)
		}
		dir, err := os.MkdirTemp(parent, "coupond-floor-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b, err := startBaseline(f, db.workers, dir)
		if err != nil {
			return err
		}
		defer b.child.stop()
		targets = append(targets, b)
	}
	fmt.Fprintf(out, "load average before: %s; %d cores; %s per step; %d requests in flight at most; customers %d\n",
		loadavg(), numCPU(), f.duration, db.workers, f.customers)
	for _, tg := range targets { // connections and first-touch costs outside the figures
		openLoop{rate: list[0], duration: db.warmup, workers: db.workers, sender: decisionSender(tg.client, f.seed+99, f.customers, nil)}.run(ctx, 0)
	}
	results := make([][]stepResult, len(targets))
	var notes []string
	for si, r := range list {
		for ti, tg := range targets {
			res, stepNotes := db.step(ctx, t, tg, ti == 0, si, r)
			notes = append(notes, stepNotes...)
			results[ti] = append(results[ti], res)
			printStep(out, tg.name, &res)
		}
	}
	fmt.Fprintf(out, "\nload average after: %s\n", loadavg())
	for _, n := range notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	printDecisionTable(out, targets, results)
	if err := interrupted(ctx); err != nil {
		return err
	}
	return benchJSON(cmd, decisionSummary(targets, results))
}

// step measures target tg at rate r (the si-th rate). On coupond itself
// the step also runs the --during work and takes the --cpuprofile; notes
// say how those went.
func (db *decisionBench) step(ctx context.Context, t *benchTarget, tg decisionTarget, isCoupond bool, si, r int) (stepResult, []string) {
	f := db.f
	var notes []string
	var bg *background
	if isCoupond && db.during != "" {
		bg = startBackground(ctx, t, db.during, db.batchSize, f.customers)
	}
	var prof chan error
	if isCoupond && db.profile != "" && t.dataDir != "" {
		prof = make(chan error, 1)
		secs := strconv.Itoa(max(1, int(f.duration.Seconds())-1))
		go func() {
			prof <- benchAdmin(ctx, t, "debug", "pprof", "--kind", "cpu", "--seconds", secs, "--out", fmt.Sprintf("%s.%d", db.profile, r))
		}()
	}
	g := openLoop{rate: r, duration: f.duration, workers: db.workers, sender: decisionSender(tg.client, f.seed+uint64(si), f.customers, db.confirmedFor(isCoupond))}
	fs0, known0 := scrapeFsyncs(tg.client.f.url)
	res := g.run(ctx, tg.pid)
	if fs1, known1 := scrapeFsyncs(tg.client.f.url); known0 && known1 {
		res.fsyncs = int64(fs1 - fs0)
	}
	if prof != nil {
		if err := <-prof; err != nil {
			notes = append(notes, fmt.Sprintf("%d/s: cpu profile: %v", r, err))
		}
	}
	if bg != nil {
		notes = append(notes, fmt.Sprintf("%d/s during %s: %s", r, db.during, bg.finish()))
	}
	return res, notes
}

type decisionTarget struct {
	name   string
	client *benchClient
	pid    int
	child  *child
}

// startBaseline starts the bare handler in a child process; with syncDir
// it is the floor, which commits each decision there with Sync.
func startBaseline(f *benchFlags, conns int, syncDir string) (decisionTarget, error) {
	addr, err := freeBenchAddr()
	if err != nil {
		return decisionTarget{}, err
	}
	args, name := []string{"bench", "bare-server", "--addr", addr}, "baseline"
	if syncDir != "" {
		args, name = append(args, "--sync-dir", syncDir), "floor"
	}
	c, err := startChild(args, addr, io.Discard, 30*time.Second)
	if err != nil {
		return decisionTarget{}, err
	}
	bf := *f
	bf.url, bf.clientID, bf.secret = c.base, "bench-"+name, "-"
	return decisionTarget{name: name, client: newBenchClient(&bf, conns), pid: c.pid(), child: c}, nil
}

// scrapeFsyncs reads coupond_store_wal_fsyncs_total from the server's
// /metrics; the baseline has none.
func scrapeFsyncs(base string) (float64, bool) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "coupond_store_wal_fsyncs_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n, err == nil
		}
	}
	return 0, false
}

func printStep(w io.Writer, name string, r *stepResult) {
	fmt.Fprintf(w, "%-8s %6d/s: p50 %s  p95 %s  p99 %s  max %s ms | %.0f/s ok, %d failed, %d dropped, %d behind (max %s ms) | server %s µs/req, generator %s µs/req\n",
		name, r.rate, ms(r.q(0.50)), ms(r.q(0.95)), ms(r.q(0.99)), ms(r.q(1)), r.achieved(), r.failed, r.dropped, r.behind, ms(r.maxBehind),
		usPerReq(r.cpuPerReq(r.server)), usPerReq(r.cpuPerReq(r.gen)))
	if r.fsyncs > 0 && r.ok > 0 {
		fmt.Fprintf(w, "%-8s %6d/s: %d WAL fsyncs for %d decisions answered: %.2f decisions per fsync (group commit)\n", name, r.rate, r.fsyncs, r.ok, float64(r.ok)/float64(r.fsyncs))
	}
}

// held reports whether a step kept up: every arrival answered 200 at the
// rate, and the p99 within bound.
func held(r *stepResult, bound time.Duration) bool {
	return r.failed == 0 && r.dropped == 0 && r.achieved() >= 0.95*float64(r.rate) && r.q(0.99) <= bound
}

// printDecisionTable prints one row per rate: coupond's figures, then for
// each other target (the bare baseline, the floor) its figures and
// coupond's p99 and CPU ratios to it.
func printDecisionTable(w io.Writer, targets []decisionTarget, results [][]stepResult) {
	fmt.Fprintln(w)
	head := "| rate/s | coupond p50 / p95 / p99 ms | achieved/s | server CPU µs/req |"
	sep := "|---|---|---|---|"
	for _, tg := range targets[1:] {
		head += fmt.Sprintf(" %s p50 / p95 / p99 ms | achieved/s | server CPU µs/req | p99 ratio | CPU ratio |", tg.name)
		sep += "---|---|---|---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for i := range results[0] {
		a := &results[0][i]
		line := fmt.Sprintf("| %d | %s / %s / %s | %.0f | %s |", a.rate, ms(a.q(.5)), ms(a.q(.95)), ms(a.q(.99)), a.achieved(), usPerReq(a.cpuPerReq(a.server)))
		for ti := 1; ti < len(targets); ti++ {
			b := &results[ti][i]
			line += fmt.Sprintf(" %s / %s / %s | %.0f | %s | %s | %s |", ms(b.q(.5)), ms(b.q(.95)), ms(b.q(.99)), b.achieved(), usPerReq(b.cpuPerReq(b.server)),
				ratio(float64(a.q(.99)), float64(b.q(.99))), ratio(float64(a.cpuPerReq(a.server)), float64(b.cpuPerReq(b.server))))
		}
		fmt.Fprintln(w, line)
	}
	for _, bound := range []time.Duration{2 * time.Millisecond, 10 * time.Millisecond} {
		line := fmt.Sprintf("highest rate with p99 ≤ %v:", bound)
		for ti, tg := range targets {
			best := "none"
			for i := range results[ti] {
				if held(&results[ti][i], bound) {
					best = strconv.Itoa(results[ti][i].rate) + "/s"
				}
			}
			line += fmt.Sprintf(" %s %s", tg.name, best)
			if ti < len(targets)-1 {
				line += ","
			}
		}
		fmt.Fprintln(w, line)
	}
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// decisionSummary is bench decisions' --json value: per target, per step,
// the figures printStep shows.
func decisionSummary(targets []decisionTarget, results [][]stepResult) map[string]any {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	out := map[string]any{}
	for ti, tg := range targets {
		var steps []map[string]any
		for i := range results[ti] {
			r := &results[ti][i]
			steps = append(steps, map[string]any{"rate": r.rate, "achieved_per_second": r.achieved(), "ok": r.ok,
				"failed": r.failed, "dropped": r.dropped, "behind": r.behind,
				"p50_ms": ms(r.q(0.50)), "p95_ms": ms(r.q(0.95)), "p99_ms": ms(r.q(0.99)),
				"server_cpu_us_per_request": float64(r.cpuPerReq(r.server)) / 1e3, "wal_fsyncs": r.fsyncs})
		}
		out[tg.name] = steps
	}
	return out
}
