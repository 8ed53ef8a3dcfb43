package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

type serveFlags struct {
	// now is the services' clock (app.now), not a flag.
	now func() time.Time
	// stopBound bounds each step of the shutdown (serveStopBound when 0),
	// not a flag: tests shorten it.
	stopBound                          time.Duration
	addr, baseURL, logLevel, logFormat string
	webhookAllowPrivate                bool
	holdWebhooks                       bool
	metricsTenantLabel                 bool
	featuresCacheMiB                   int
	jsonLogs                           bool
	consoleAddr                        string
	consoleTLSProxy                    bool
	diskReserve                        string
	readTimeout                        time.Duration
	maxConns                           int
	trustedProxies                     string
	proxies                            []netip.Prefix // parsed from trustedProxies by settle
	featuresCache                      int            // bytes, from featuresCacheMiB by settle (-1: none)
}

func newServeCmd(a *app) *cobra.Command {
	var f serveFlags
	cmd := leafCmd("serve", "Run the HTTP API, batch worker, learner and deletion worker", func(cmd *cobra.Command) error {
		f.now = a.now
		return serveResuming(cmd.Context(), a.dataDir, f, cmd.ErrOrStderr())
	})
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address (env COUPOND_ADDR)")
	fl.StringVar(&f.baseURL, "base-url", "", "external base URL for signed result URLs (default http://ADDR; set it when --addr has no host or 0.0.0.0 or [::], which no client can fetch; env COUPOND_BASE_URL)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error (env COUPOND_LOG_LEVEL)")
	fl.StringVar(&f.logFormat, "log-format", "json", "json, or console for humans (env COUPOND_LOG_FORMAT)")
	fl.BoolVar(&f.jsonLogs, "json", false, "machine-readable output: the log as JSON (overrides --log-format)")
	fl.StringVar(&f.consoleAddr, "console-addr", "127.0.0.1:8081", "operator console listen address, empty for none (env COUPOND_CONSOLE_ADDR); sign in with 'admin console login'")
	fl.BoolVar(&f.consoleTLSProxy, "console-tls-proxy", false, "the console is reached through a proxy that terminates TLS: mark its session cookie Secure and send Strict-Transport-Security (env COUPOND_CONSOLE_TLS_PROXY)")
	fl.BoolVar(&f.webhookAllowPrivate, "webhook-allow-private", false, "allow webhook destinations in loopback and private ranges (tests, single-network installs)")
	fl.BoolVar(&f.holdWebhooks, "hold-webhooks", false, "deliver no webhook: deliveries stay queued, to go out when serve runs without it (a restore drill; env COUPOND_HOLD_WEBHOOKS)")
	fl.BoolVar(&f.metricsTenantLabel, "metrics-tenant-label", false, "add a tenant label to the business series of /metrics (one series per tenant: few tenants only)")
	fl.IntVar(&f.featuresCacheMiB, "features-cache-mib", engine.DefaultFeaturesCache>>20, "MiB of customers' features records that ingestion keeps in memory after committing them, all tenants together (faster events; 0 keeps none); the tenants that ingested least recently give theirs first")
	fl.StringVar(&f.diskReserve, "disk-reserve", "auto", "free space kept on the data dir's disk: below it writes answer 503 almacenamiento_lleno (auto: the larger of 1GiB and 5% of the disk; sizes like 512MiB, 2GiB; 0 disables; env COUPOND_DISK_RESERVE)")
	fl.DurationVar(&f.readTimeout, "read-timeout", server.DefaultReadTimeout, "a request, body included, must arrive within this, else the connection is closed (env COUPOND_READ_TIMEOUT)")
	fl.IntVar(&f.maxConns, "max-conns", server.DefaultMaxConns, "open connections at most (capped to leave 256 of the open-file limit to the store); past it new clients wait in the kernel backlog (env COUPOND_MAX_CONNS)")
	fl.StringVar(&f.trustedProxies, "trusted-proxies", "127.0.0.1/32,::1/128", "comma-separated addresses or CIDR ranges of reverse proxies whose X-Forwarded-For names the client, for the limit on failed token requests per client address; empty trusts none (env COUPOND_TRUSTED_PROXIES)")
	return cmd
}

// parseLogLevel reads --log-level: debug, info, warn or error, any case.
// zerolog.ParseLevel also takes trace, fatal, panic, disabled and numbers,
// which the flag refuses: "disabled", "fatal" or "7" would drop every
// error line without a word, and trace has nothing to show.
func parseLogLevel(level string) (zerolog.Level, error) {
	switch l := strings.ToLower(level); l {
	case "debug", "info", "warn", "error":
		return zerolog.ParseLevel(l)
	}
	return zerolog.Disabled, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", level)
}

// newLogger returns serve's logger writing to w at level (debug, info,
// warn or error, any case) in format (json or console); a bad value is
// an error naming its flag.
func newLogger(level, format string, w interface{ Write([]byte) (int, error) }) (zerolog.Logger, error) {
	lvl, err := parseLogLevel(level)
	if err != nil {
		return zerolog.Nop(), err
	}
	switch format {
	case "json":
	case "console":
		// Colours only on a terminal and never with NO_COLOR: log files
		// and journald get plain text.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !useColor(w)}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format: want json or console, got %q", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// The collector's settings for serve unless the environment sets GOGC or
// GOMEMLIMIT. A decision allocates about 10 KB, so at 2,000 decisions/s
// the default GOGC=100 over serve's small heap (Pebble's cache and
// memtables are outside it) ran a collection several times a second, and
// its assists sat in the answer path. Paired 60 s runs at 2,000/s: p50 2.8
// → 2.1 ms and answers under 2.5 ms server-side 71 → 80 %, for 243 → 284
// MB peak RSS; the p99 (~20 ms) did not move.
// The soft limit bounds what the larger target costs in memory: near it
// the collector runs as often as it must. It is the Go heap's share of a
// 512 MiB process: Pebble's block cache (192 MiB) and memtables live
// outside it. With 2 GiB, a batch job of 1,000,000 customers (a segment:
// the job holds every cliente_ref) grew the heap to five times its live
// size and the process to 583 MiB; with 192 MiB it peaked at 468 MiB for
// the same CPU (28.7 s against 28.2 s), and serving decisions (a heap of
// some tens of MiB) does not reach it.
const (
	serveGCPercent   = 400
	serveMemoryLimit = 192 << 20
	// backgroundProcs are the Go processors added beyond the cores for the
	// background threads: the batch runner, its scan and the learner.
	backgroundProcs = 3
)

func tuneGC(log zerolog.Logger) {
	gc, limit := os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT")
	if gc == "" {
		debug.SetGCPercent(serveGCPercent)
		gc = strconv.Itoa(serveGCPercent)
	}
	if limit == "" {
		debug.SetMemoryLimit(serveMemoryLimit)
		limit = strconv.Itoa(serveMemoryLimit>>20) + "MiB"
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// Background loops run on their own low-priority threads
		// (engine.LowPriority); a Go processor held by one that the kernel
		// has set aside must not leave decisions without one.
		runtime.GOMAXPROCS(runtime.NumCPU() + backgroundProcs)
	}
	log.Info().Str("gogc", gc).Str("gomemlimit", limit).Int("gomaxprocs", runtime.GOMAXPROCS(0)).Msg("garbage collector")
}

func serve(ctx context.Context, dataDir string, f serveFlags, logOut interface{ Write([]byte) (int, error) }) error {
	baseURLGiven := f.baseURL != ""
	if err := f.settle(dataDir); err != nil {
		return err
	}
	logBuf := newLogBuffer(logOut, 100*time.Millisecond)
	defer logBuf.Close()
	log, err := newLogger(f.logLevel, f.logFormat, logBuf)
	if err != nil {
		return err
	}
	warnBaseURL(log, f.addr, baseURLGiven)
	tuneGC(log)
	ln := inheritedListener(f.addr, log) // nil unless serve restarted itself in place
	httpCfg := server.HTTPConfig{ReadTimeout: f.readTimeout, MaxConns: capConnsToFileLimit(log, f.maxConns)}
	reserve, lock, err := waitForSpace(ctx, dataDir, f.diskReserve, f.addr, ln, httpCfg, log)
	if err != nil {
		if ctx.Err() != nil {
			log.Info().Msg("stopped while waiting for disk space")
			return nil
		}
		return err
	}
	e, err := openServeEnv(ctx, dataDir, lock, log, serviceOptions{baseURL: f.baseURL, webhookAllowPrivate: f.webhookAllowPrivate, metricsTenantLabel: f.metricsTenantLabel,
		featuresCache: f.featuresCache, trustedProxies: f.proxies, resumedAfterFullDisk: resumedAfterFullDisk(log), now: f.now,
		readTimeout: f.readTimeout})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			log.Info().Msg("stopped while waiting for the data dir")
			return nil
		}
		return err
	}
	e.db.SetReserve(reserve)
	e.db.SetResumes(resumeSupported)
	logReserve(log, reserve)
	for _, u := range e.db.Unreadable() {
		log.Error().Str("record", u).Msg("unreadable tenant or credential record left out: its requests are refused; restore it from a backup ('coupond admin check' lists it)")
	}
	logStoreLogDamage(log, e.db)
	logSwappableDataDir(log, dataDir)
	svc := e.svc
	indexHeldEvents(svc, log)
	if ln == nil {
		if ln, err = net.Listen("tcp", f.addr); err != nil {
			e.close()
			return fmt.Errorf("--addr %s: %w", f.addr, err)
		}
	}
	apiLn := ln // the socket itself, for a restart in place
	httpSrv, ln := svc.api.HTTPServer(ln, httpCfg)
	admin, stopConsole, err := startOperatorSide(ctx, dataDir, f, e)
	if err != nil {
		ln.Close()
		e.close()
		return err
	}
	httpErr := make(chan error, 1)
	go func() { httpErr <- httpSrv.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Str("data_dir", dataDir).Str("version", version).Msg("serving")

	if f.holdWebhooks {
		log.Warn().Msg("webhook deliveries are held (--hold-webhooks): they stay queued until serve runs without it")
	}
	run := &running{http: httpSrv, admin: admin, stopConsole: stopConsole, stopLoops: startServiceLoops(svc, f.holdWebhooks, log)}
	svc.ready.Store(true)
	watch := &resumeWatch{db: e.db, dataDir: dataDir, reserve: reserve, log: log}
	resume, serveErr := serveUntilStopped(ctx, httpErr, svc, watch.due, log)
	log.Info().Msg("shutting down")
	svc.ready.Store(false)
	if resume {
		return stopToResume(run, apiLn, dataDir, f.addr, watch.reason, log)
	}
	if err := stopServing(run, e, dataDir, cmp.Or(f.stopBound, serveStopBound), log); err != nil {
		return err
	}
	return serveErr
}

// indexHeldEvents writes, before serve answers, the held-event index
// entries that batches held in the abuse quarantine lack (a release before
// the index held them, or an older binary run on the data dir since), so
// that a resend of a held event is a duplicate, not held twice, and
// deletes those of events no longer held (server.IndexHeldEvents). A
// failure is logged, not fatal: such a resend is held again, as before the
// index, and the next start tries again.
func indexHeldEvents(svc *services, log zerolog.Logger) {
	done, err := svc.api.IndexHeldEvents()
	for tenant, n := range done {
		log.Info().Str("tenant", tenant).Int("written", n.Written).Int("deleted", n.Deleted).
			Msg("held-event index: indexed events held in the abuse quarantine by an earlier release, deleted entries of events no longer held")
	}
	if err != nil {
		log.Error().Err(err).Msg("held-event index: events held in the abuse quarantine by an earlier release not all indexed; a resend of one is held again until the next start indexes it")
	}
}

// stopServing stops what serve runs (running.stop, each step within
// bound), flushes the counters and closes the store, but for an admin
// command still running at bound: the store is then left open to it, for
// the process's exit to end, since closing it under the command's reads
// panics (see running.stop).
func stopServing(run *running, e *env, dataDir string, bound time.Duration, log zerolog.Logger) error {
	// A failed store (a full disk, an I/O error) can keep a loop waiting.
	adminLeft := run.stop(bound, e.db.Space().Failed, log)
	_ = os.Remove(filepath.Join(dataDir, adminSocket))
	if err := e.svc.api.Flush(); err != nil {
		log.Error().Err(err).Msg("flush counters")
	}
	if adminLeft {
		e.svc.close()
		log.Error().Msg("admin commands still running at the end of the shutdown: the store is left open to them and closed by the process's exit, " +
			"not flushed (every acknowledged write is on disk: the next start replays the write-ahead log)")
		log.Info().Msg("stopped")
		return nil
	}
	if err := e.close(); err != nil {
		log.Error().Err(err).Msg("close store")
		return err
	}
	log.Info().Msg("stopped")
	return nil
}

// serveStopBound bounds each step of serve's shutdown (the API's answers,
// the admin commands, the console, the background loops): within
// deploy/coupond.service's TimeoutStopSec of 40 s.
const serveStopBound = 20 * time.Second

// startOperatorSide starts the console (a failure is logged: the API
// serves without the operator's view) and then the admin socket, in that
// order: "admin console login" over the socket reads what startConsole sets
// (its address, or why it has none). When the socket fails it stops the
// console and returns the error.
func startOperatorSide(ctx context.Context, dataDir string, f serveFlags, e *env) (admin *http.Server, stopConsole func(context.Context) error, err error) {
	stopConsole, err = startConsole(f.consoleAddr, f.consoleTLSProxy, f.readTimeout, e)
	if err != nil {
		e.log.Error().Err(err).Msg("console not served")
		stopConsole = func(context.Context) error { return nil }
	}
	admin, err = serveAdmin(ctx, filepath.Join(dataDir, adminSocket), e)
	if err != nil {
		stopConsole(ctx)
		return nil, nil, err
	}
	return admin, stopConsole, nil
}

// settle checks serve's flags and fills the ones derived from others
// (--json is --log-format json; --base-url defaults to --addr's), and
// checks that the admin socket's path in dataDir fits a unix socket.
func (f *serveFlags) settle(dataDir string) error {
	if sock := filepath.Join(dataDir, adminSocket); len(sock) > maxSocketPath {
		return fmt.Errorf("--data-dir %s: too long for the admin socket %s (%d bytes, a unix socket's path holds %d at most): choose a shorter data dir",
			dataDir, adminSocket, len(sock), maxSocketPath)
	}
	if f.jsonLogs {
		f.logFormat = "json"
	}
	if err := f.checkListeners(); err != nil {
		return err
	}
	if f.featuresCacheMiB < 0 || f.featuresCacheMiB > 4096 {
		return fmt.Errorf("--features-cache-mib must be within 0-4096 (got %d)", f.featuresCacheMiB)
	}
	f.featuresCache = f.featuresCacheMiB << 20
	if f.featuresCache == 0 {
		f.featuresCache = -1 // engine.Config: negative keeps none
	}
	if f.baseURL == "" {
		f.baseURL = "http://" + f.addr
	} else if err := batch.CheckBaseURL(f.baseURL); err != nil {
		return fmt.Errorf("--base-url: %w", err)
	}
	proxies, err := parsePrefixes(f.trustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	f.proxies = proxies
	return nil
}

// checkListeners checks the flags of serve's listeners: --addr,
// --console-addr (empty: no console), --read-timeout and --max-conns; an
// error names the flag.
func (f *serveFlags) checkListeners() error {
	if f.readTimeout <= 0 {
		return fmt.Errorf("--read-timeout must be positive, such as 30s (got %s)", f.readTimeout)
	}
	if f.maxConns <= 0 {
		return fmt.Errorf("--max-conns must be positive (got %d)", f.maxConns)
	}
	if err := checkListenAddr("addr", f.addr); err != nil {
		return err
	}
	if f.consoleAddr == "" {
		return nil
	}
	return checkListenAddr("console-addr", f.consoleAddr)
}

// warnBaseURL warns, naming --base-url, when the base of the signed result
// links derives from an --addr no client can fetch (given: --base-url or
// COUPOND_BASE_URL was set): one without a host (":8080") or with an
// unspecified one ("0.0.0.0:8080", "[::]:8080") makes links such as
// http://:8080/v1/... It is a warning, not a refusal: such an --addr is
// a fine listener, and links matter only once a batch job completes.
func warnBaseURL(log zerolog.Logger, addr string, given bool) {
	if given {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	if ip, err := netip.ParseAddr(host); host != "" && (err != nil || !ip.IsUnspecified()) {
		return
	}
	log.Warn().Str("addr", addr).Msg("--addr " + addr + " has no host a client can reach, so the signed result links " +
		"(resultado_url) would be http://" + addr + "/..., which no one can fetch: set --base-url " +
		"(env COUPOND_BASE_URL) to the URL clients reach this server at")
}

// checkListenAddr returns an error naming flag when addr is not a listen
// address, host:port with a port number (0 picks one): a typo failed only
// once the store was open, as "listen bogus: …", and one like
// "127.0.0.1:-1" was blamed on --base-url, whose default derives from it.
func checkListenAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("--%s: want host:port such as 127.0.0.1:8080, got %q", flag, addr)
	}
	return nil
}

// storeFiles is how many open files serve keeps for the store, its logs,
// backups and result files, beside its connections.
const storeFiles = 256

// capConnsToFileLimit is --max-conns within the process's open-file limit:
// when the limit leaves fewer than storeFiles files above maxConns, the
// connections get what is left above them (at least 16), with a warning,
// so that clients cannot take the descriptors the store needs (a store
// without them fails, and serve restarts in place once they are back).
func capConnsToFileLimit(log zerolog.Logger, maxConns int) int {
	limit, ok := openFileLimit()
	capped := connsWithin(maxConns, limit, ok)
	if capped < maxConns {
		log.Warn().Uint64("open_file_limit", limit).Int("max_conns", maxConns).Int("max_conns_used", capped).
			Msg("the open-file limit leaves too little room above --max-conns for the store's files: connections capped; raise ulimit -n (LimitNOFILE) or lower --max-conns")
	}
	return capped
}

// connsWithin is maxConns capped to leave storeFiles of an open-file limit
// (known) for the store, and at least 16.
func connsWithin(maxConns int, limit uint64, known bool) int {
	if !known || limit >= uint64(maxConns)+storeFiles {
		return maxConns
	}
	if limit < storeFiles+16 {
		return min(maxConns, 16)
	}
	return min(maxConns, int(limit-storeFiles))
}

// startServiceLoops recovers the batch jobs (interrupted ones end fallido,
// queued ones run; /readyz answers 503 until this is done), then starts the
// background loops: the batch runner, webhook deliveries, the learner, the
// deletion worker and the delivery of deletions owed to backups, each on
// its own low-priority thread (engine.LowPriority: the kernel runs
// decisions first); holdWebhooks leaves out the deliveries (they stay
// queued). stop ends them and waits for them.
func startServiceLoops(svc *services, holdWebhooks bool, log zerolog.Logger) (stop func()) {
	if err := svc.batch.Recover(); err != nil {
		log.Error().Err(err).Msg("batch recovery")
	}
	bg, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loops := []func(context.Context){
		svc.batch.Run,
		func(ctx context.Context) { svc.engine.Learner.RunLearner(ctx, time.Second) },
		func(ctx context.Context) { runDeletionWorker(ctx, svc) },
		func(ctx context.Context) { svc.backups.RunOwed(ctx, owedInterval) },
	}
	if !holdWebhooks {
		loops = append(loops, svc.webhooks.Run)
	}
	for _, run := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); engine.LowPriority(); run(bg) }()
	}
	return func() { cancel(); wg.Wait() }
}

// stopToResume stops what serve runs, within resumeStopBound and without
// closing the failed store (its Close can wait forever), and returns the
// resumeInPlace that makes serveResuming exec the binary again with the
// API's socket apiLn, and why (reason, resumedEnv).
func stopToResume(run *running, apiLn net.Listener, dataDir, addr, reason string, log zerolog.Logger) error {
	file, err := listenerForExec(apiLn) // before the shutdown closes apiLn
	run.stop(resumeStopBound, true, log)
	_ = os.Remove(filepath.Join(dataDir, adminSocket))
	if err != nil {
		log.Error().Err(err).Msg("restart in place: the API's socket cannot be passed on")
		return fmt.Errorf("restart in place: %w", err)
	}
	return &resumeInPlace{listener: file, addr: addr, reason: reason}
}

// openServeEnv opens the data dir for serve: with lock, the data dir's
// lock that waitForSpace took after waiting for space, or, when lock is
// nil, the one waitForLock takes, waiting out an admin command or a
// restore that holds it (ctx's error if ctx ends meanwhile).
func openServeEnv(ctx context.Context, dataDir string, lock io.Closer, log zerolog.Logger, opt serviceOptions) (*env, error) {
	if lock == nil {
		var err error
		if lock, err = waitForLock(ctx, dataDir, log); err != nil {
			return nil, err
		}
	}
	return openEnvLocked(ctx, dataDir, lock, log, opt)
}

// serveUntilStopped flushes the counters every 5 seconds until ctx ends or
// the HTTP server stops, and checks every resumeCheck whether serve should
// restart in place (resume: it returns true); it returns the server's
// error, if any but a close.
func serveUntilStopped(ctx context.Context, httpErr <-chan error, svc *services, resume func() bool, log zerolog.Logger) (bool, error) {
	flush := time.NewTicker(5 * time.Second)
	defer flush.Stop()
	check := time.NewTicker(resumeCheck)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-httpErr:
			if !errors.Is(err, http.ErrServerClosed) {
				return false, err
			}
			return false, nil
		case <-check.C:
			if resume() {
				return true, nil
			}
		case <-flush.C:
			flushCounters(svc, log)
		}
	}
}

// flushCounters writes the API's and the console's counters, logging a
// failure; not while the store refuses every write after a failed one
// (store.SpaceStatus.Failed, logged when it failed): two error lines every
// 5 seconds would say nothing new until serve restarts in place.
func flushCounters(svc *services, log zerolog.Logger) {
	if svc.env.db.Space().Failed {
		return
	}
	if err := svc.api.Flush(); err != nil {
		log.Error().Err(err).Msg("flush counters")
	}
	if err := svc.engine.Counters().Flush(); err != nil {
		log.Error().Err(err).Msg("flush console counters")
	}
}

// parsePrefixes reads a comma-separated list of addresses and CIDR ranges
// ("127.0.0.1, 10.0.0.0/8, ::1"); an address is its own /32 or /128.
func parsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("want addresses or CIDR ranges, got %q", item)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// logStoreLogDamage logs the damaged store log this start's open found
// (store.FoundLogDamage), then each note an earlier open kept that admin
// check --repair has not acknowledged: an admin command run with the server
// stopped opens the store first, keeps the note and says nothing, so
// serve's log says it at every start until it is acknowledged.
func logStoreLogDamage(log zerolog.Logger, db *store.DB) {
	found := db.FoundLogDamage()
	if found != nil {
		log.Error().Str("file", found.File).Int64("offset", found.Offset).Int("lost", found.Lost).Bool("noted", found.Kept).
			Msg("store log damaged: the writes after the damage were not replayed and are lost (after a power cut they may be writes never acknowledged); those before it are kept ('coupond admin check' lists it until --repair)")
	}
	notes, err := db.LogDamage()
	if err != nil {
		log.Error().Err(err).Msg("store log damage notes unreadable ('coupond admin check' lists them)")
		return
	}
	for _, d := range notes {
		if found != nil && found.Kept && d.FoundAt.Equal(found.FoundAt) {
			continue // this start's, logged above
		}
		log.Error().Str("file", d.File).Int64("offset", d.Offset).Int("lost", d.Lost).Time("found_at", d.FoundAt).
			Msg("store log found damaged at an earlier open, not yet acknowledged: the writes after the damage were lost ('coupond admin check' lists it until --repair)")
	}
}
