// Package client calls the coupond v1 API from Go: it gets and renews
// tokens, asks for decisions within a time budget and falls back to the
// caller's rule, confirms them, publishes events and runs batch jobs.
//
// New builds a Client from the API's base URL and a credential (client_id
// and client_secret from "coupond admin credential create"). The Client
// obtains OAuth 2.0 client-credentials tokens, caches them and renews them
// before they expire; it holds one http.Client whose connections are reused
// by every call. A Client is safe for concurrent use; make one per process
// and Close it on shutdown so queued fallback records are sent.
//
// Decide asks for an online decision within a time budget (100 ms by
// default, the API's answer time). It retries what a retry can fix (5xx,
// 409 idempotencia_conflicto, lost connections, and a 429 whose
// Retry-After fits in the budget) with the same Idempotency-Key, so the
// engine makes at most one decision per call. When the engine does not
// answer in time, the tenant is paused, or the breaker is open after
// repeated failures, Decide returns the caller's fallback action marked
// EnRespaldo and records it with POST /v1/decisiones/respaldo in the
// background. See Decide and Stats.
//
// The other methods map one endpoint each: Confirm, RecordFallback,
// PublishEvents (which splits large slices into requests the API accepts),
// campaigns, the action catalog, customer export and deletion, batch jobs
// and webhooks. VerifyWebhook checks the signature of a lote.completado
// notification.
//
// # Retries and idempotency
//
// A call is retried only where a second copy of the request cannot act
// twice: up to 4 attempts (WithRetries) with exponential backoff and full
// jitter, and a Retry-After honoured when it fits before the call's
// deadline (else the 429 or 503 is returned at once). Every call retries a
// failed token fetch (a lost connection, 429 or 5xx of the token endpoint)
// and a connection that could not be made, since nothing was sent then.
// Beyond those:
//
//   - Decide, Confirm, RecordFallback and CreateBatch send one
//     Idempotency-Key on every attempt of a call, so the server acts once
//     per call (a second call is a second decision, confirmation, record or
//     job); they retry 429, 5xx, 409 idempotencia_conflicto (an earlier
//     attempt still running) and lost connections.
//   - PublishEvents and the GET, PUT and DELETE calls (Batch, Campaign,
//     PutCampaign, Catalog, PutCatalog, ExportCustomer, DeleteCustomer,
//     RegisterWebhook, DeleteWebhook, BatchResults) retry 429, 5xx and lost
//     connections: the server stores each event_id once, and the others
//     have the same effect twice.
//
// A 401 is sent once more with a fresh token (the token may have been
// revoked); no other 4xx but those above is retried.
//
// # Timeouts
//
// Decide is bounded by its budget (WithBudget, Budget) or ctx's deadline,
// whichever is sooner, and each attempt by WithAttemptTimeout. Other calls
// are bounded by ctx's deadline or, when ctx has none, by WithTimeout
// (30 s), retries included; PublishEvents and WaitBatch apply it to each
// request, not the whole call, and BatchResults does not apply it at all:
// give its ctx a deadline.
//
// # Errors
//
// Check errors with errors.As and errors.Is:
//
//   - *Error: the API answered a status other than 2xx (the token endpoint
//     included, such as 401 no_autenticado for a wrong secret), with its
//     Status, Codigo, Campo, TraceID, the 422 items and Retry-After.
//   - ErrNoFallback: Decide had no fallback action for an engine that did
//     not answer; the error also wraps the cause below (pass it to
//     RecordFallback with Replacing).
//   - ErrBudgetExhausted, ErrBreakerOpen, or an *Error of 503
//     inquilino_pausado: why Decide answered the fallback, in
//     Decision.Causa (or wrapped with ErrNoFallback).
//   - ErrClosed: a call after Close needed a new token.
//   - ErrBatchFailed: WaitBatch saw the job fail.
//   - ErrWebhookSecret, ErrWebhookHeaders, ErrWebhookTimestamp,
//     ErrWebhookSignature: VerifyWebhook refused a notification.
//   - context.Canceled, context.DeadlineExceeded: ctx was canceled, or its
//     deadline (or WithTimeout) passed while a request or a token fetch was
//     under way. A call canceled while it waited to retry returns
//     context.Canceled wrapped with the last failure (an *Error for
//     errors.As, such as the 503 it was waiting out). Decide canceled
//     returns an error wrapping context.Canceled, to pass to
//     RecordFallback with Replacing (see Decide), and answers the
//     fallback when its time runs out.
//
// Other errors are failures of the network (such as *url.Error), an answer
// that is not the documented JSON, or bad arguments (an empty id, an option
// out of range), which name what is wrong.
//
// # One definition
//
// The answer types are the one definition of the bodies the server writes
// (those the engine or batch also speak are aliases of package api's), and
// VerifyWebhookSignature is the one Standard Webhooks verifier, which the
// server's and batch's tests check their signatures against.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// modulePath is the module this package belongs to; its version goes into
// the User-Agent.
const modulePath = "github.com/coupond/coupond"

// Defaults of the options.
const (
	DefaultBudget        = 100 * time.Millisecond
	DefaultAttempts      = 4
	DefaultTimeout       = 30 * time.Second
	DefaultFallbackQueue = 10000
	DefaultBreakerFails  = 5
	DefaultBreakerWait   = time.Second
	DefaultPollInterval  = time.Second
)

// config is what the options set.
type config struct {
	httpClient     *http.Client
	budget         time.Duration
	attemptTimeout time.Duration // 0: the rest of the budget
	attempts       int
	backoffBase    time.Duration
	backoffCap     time.Duration
	fallback       int
	hasFallback    bool
	queueSize      int
	fbRetryMin     time.Duration
	fbRetryMax     time.Duration
	breakerFails   int
	breakerWait    time.Duration
	timeout        time.Duration
	pollInterval   time.Duration
	uaSuffix       string
	scopes         []string
	clock          clock
}

// Option configures a Client.
type Option func(*config)

// WithHTTPClient makes the Client send through hc instead of its own
// http.Client (whose transport keeps up to 64 idle connections to the
// server). hc's Timeout, if any, applies on top of the budgets. The Client
// uses a copy of hc that follows no redirects (hc's CheckRedirect is not
// used, and hc is not changed): a 3xx answer is an *Error with its status.
// hc's connections are the caller's: Close leaves them open.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithBudget sets how long one Decide may take in all, retries included
// (default 100 ms). A deadline on the caller's context that comes sooner
// wins.
func WithBudget(d time.Duration) Option { return func(c *config) { c.budget = d } }

// WithAttemptTimeout bounds each attempt of Decide, so that a hung
// connection leaves time for another attempt. Default 0: an attempt may use
// the whole rest of the budget.
func WithAttemptTimeout(d time.Duration) Option { return func(c *config) { c.attemptTimeout = d } }

// WithRetries sets the attempts of one call (default 4) and the exponential
// backoff with full jitter between them: the wait before retry n is drawn
// uniformly from [0, min(max, base·2ⁿ)) (default base 5 ms, max 40 ms for
// Decide; other calls use 20 times these), and never from more than 5 s
// whatever base, max and the attempts are. A Retry-After longer than the
// drawn wait is honoured, up to MaxRetryAfter; when it would pass the
// call's deadline the call returns the 429 or 503 at once instead.
func WithRetries(attempts int, base, max time.Duration) Option {
	return func(c *config) { c.attempts, c.backoffBase, c.backoffCap = attempts, base, max }
}

// WithFallback sets the action Decide returns when the engine does not
// answer (0 sends nothing, others are catalog ids); a call's FallbackAction
// overrides it. Without a
// fallback, such calls return an error wrapping ErrNoFallback. Recording
// a fallback takes the scope decisiones:confirmar besides Decide's
// decisiones:pedir: without it every record is refused (403), counted in
// Stats().FallbackRejected, and a lost decision it replaces stays.
func WithFallback(accion int) Option {
	return func(c *config) { c.fallback, c.hasFallback = accion, true }
}

// WithFallbackQueue sets how many fallback records may wait to be sent
// (default 10,000). When the queue is full, new records are dropped and
// counted in Stats().FallbackDropped.
func WithFallbackQueue(n int) Option { return func(c *config) { c.queueSize = n } }

// WithFallbackRetry sets the backoff between attempts to send a fallback
// record: full jitter from min doubling up to max (default 200 ms to 30 s).
// A Retry-After is honoured up to max.
func WithFallbackRetry(min, max time.Duration) Option {
	return func(c *config) { c.fbRetryMin, c.fbRetryMax = min, max }
}

// WithBreaker sets the circuit breaker: after fails consecutive decisions
// that failed (timeouts, lost connections, 5xx, paused tenant) it opens and
// Decide answers the fallback at once; every wait it lets one call through
// as a probe, and the first probe the engine answers closes it (default 5
// failures, 1 s). fails 0 turns the breaker off.
func WithBreaker(fails int, wait time.Duration) Option {
	return func(c *config) { c.breakerFails, c.breakerWait = fails, wait }
}

// WithTimeout bounds calls other than Decide (Close too) whose context has no deadline
// (default 30 s), retries included; for PublishEvents and WaitBatch it
// bounds each request, not the whole call. It does not bound BatchResults,
// a download of any length: give its context a deadline.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithPollInterval sets how often WaitBatch asks for a job's state
// (default 1 s).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithUserAgent appends s (such as "crm-sync/2.3") to the User-Agent.
func WithUserAgent(s string) Option { return func(c *config) { c.uaSuffix = s } }

// WithClock makes the Client read the time with now and wait with sleep
// instead of the real clock's time.Now and timers; a nil now or sleep
// keeps the real one. sleep must return nil once d has passed on the
// clock, or ctx's error as soon as ctx ends first.
//
// Every time the Client reads or waits goes through them: Decide's budget
// and its breaker's wait, backoff and Retry-After waits (an HTTP-date
// Retry-After is read as of now), WaitBatch's polls, the fallback sender's
// waits, and a token's expiry and renewal. Only network I/O is bounded by
// contexts, which run on the real clock: an attempt gets a real timeout as
// long as what is left of its budget on this clock, and a context's
// deadline counts from the moment the call reads it. Meant for tests,
// which can then pass hours of backoff, Retry-After or token life at once.
func WithClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) {
		if now != nil {
			c.clock.now = now
		}
		if sleep != nil {
			c.clock.sleep = sleep
		}
	}
}

// WithScopes asks for tokens limited to these scopes (default: all the
// credential's scopes).
func WithScopes(scopes ...string) Option { return func(c *config) { c.scopes = scopes } }

// Client calls one coupond server with one credential. It is safe for
// concurrent use.
type Client struct {
	cfg       config
	base      string // base URL without a trailing slash
	decideURL string
	hc        *http.Client
	ua        []string // User-Agent header value
	tokens    *tokenCache
	breaker   breaker
	fallbacks *fallbackQueue
	bufs      sync.Pool // *bytes.Buffer for reading answers

	decisions atomic.Int64
	respaldos atomic.Int64
	retries   atomic.Int64

	closeOnce sync.Once
	bg        sync.WaitGroup // background token fetches and the fallback sender
}

// check names the first option whose values are out of range.
func (c *config) check() error {
	for _, r := range []struct {
		bad  bool
		what string
	}{
		{c.budget <= 0, "WithBudget: the budget must be positive"},
		{c.hasFallback && c.fallback < 0, "WithFallback: the action must be 0 (nothing) or a catalog id"},
		{c.attemptTimeout < 0, "WithAttemptTimeout: the timeout must not be negative"},
		{c.attempts < 1 || c.backoffBase < 0 || c.backoffCap < c.backoffBase, "WithRetries: at least 1 attempt, and 0 <= base <= max"},
		{c.queueSize < 1, "WithFallbackQueue: the queue must hold at least 1 record"},
		{c.fbRetryMin <= 0 || c.fbRetryMax < c.fbRetryMin, "WithFallbackRetry: 0 < min <= max"},
		{c.breakerFails < 0 || c.breakerWait <= 0, "WithBreaker: fails >= 0 and a positive wait"},
		{c.timeout <= 0, "WithTimeout: the timeout must be positive"},
		{c.pollInterval <= 0, "WithPollInterval: the interval must be positive"},
	} {
		if r.bad {
			return errors.New("coupond: option out of range: " + r.what)
		}
	}
	return nil
}

// New returns a Client for the API at baseURL (such as
// "https://coupond.example.com" or "https://gw.example.com/coupond"; the
// /v1 paths are added, so it has no user, password, query or fragment)
// with the credential clientID and clientSecret. It starts the goroutine that sends
// fallback records; Close stops it. New does not call the server: a first
// token is fetched by the first call (or by Warm).
func New(baseURL, clientID, clientSecret string, opts ...Option) (*Client, error) {
	u, err := checkBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if clientID == "" || clientSecret == "" {
		return nil, errors.New("coupond: clientID and clientSecret are required")
	}
	cfg := config{
		budget: DefaultBudget, attempts: DefaultAttempts, backoffBase: 5 * time.Millisecond, backoffCap: 40 * time.Millisecond,
		queueSize: DefaultFallbackQueue, fbRetryMin: 200 * time.Millisecond, fbRetryMax: 30 * time.Second,
		breakerFails: DefaultBreakerFails, breakerWait: DefaultBreakerWait, timeout: DefaultTimeout, pollInterval: DefaultPollInterval,
		clock: clock{now: time.Now, sleep: timerSleep},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(u.String(), "/")
	c := &Client{cfg: cfg, base: base, decideURL: base + "/v1/decisiones", hc: noRedirects(cfg.httpClient),
		ua: []string{userAgent(cfg.uaSuffix)}}
	c.tokens = newTokenCache(base+"/v1/token", clientID, clientSecret, cfg.scopes, c.hc, c.ua[0], &c.bg, cfg.clock.now)
	c.breaker = breaker{threshold: cfg.breakerFails, wait: cfg.breakerWait}
	c.fallbacks = newFallbackQueue(c, cfg.queueSize)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.fallbacks.run()
	}()
	return c, nil
}

// checkBaseURL parses baseURL, which must be an absolute http or https
// URL with a host and without a user, password, query or fragment (the
// /v1 paths are appended to it, and the credential goes in headers). Its
// errors never show a password: one that does not parse is not quoted.
func checkBaseURL(baseURL string) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		return nil, fmt.Errorf("coupond: base URL must be an absolute http or https URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("coupond: base URL %q must be an absolute http or https URL", u.Redacted())
	case u.User != nil:
		return nil, fmt.Errorf("coupond: base URL %q must be without a user or password", u.Redacted())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("coupond: base URL %q must be without a query or fragment", u.Redacted())
	}
	return u, nil
}

// noRedirects returns the http.Client the Client sends through: a shallow
// copy of hc (the caller's, left as it is), or a new one with newTransport
// if hc is nil, that follows no redirect. A 3xx is returned as it is, so
// neither a token nor a client secret is ever sent where the base URL
// does not point.
func noRedirects(hc *http.Client) *http.Client {
	var cp http.Client
	if hc != nil {
		cp = *hc
	} else {
		cp.Transport = newTransport()
	}
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// newTransport is the transport of the Client's own http.Client: enough
// idle connections per host for concurrent decisions, idle ones closed
// before the server's 120 s keep-alive limit, bounded dial and TLS times.
func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          128,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Version is the version of this library as the Go toolchain recorded it
// ("(devel)" inside the coupond module itself).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return "(devel)"
}

func userAgent(suffix string) string {
	ua := "coupond-go/" + Version() + " " + runtime.Version()
	if suffix != "" {
		ua += " " + suffix
	}
	return ua
}

// SetSecret makes the Client ask for its tokens with secret from now on,
// so that a long-running process takes a rotated secret (coupond admin
// credential rotate) without a restart: set it within the rotation's
// grace. The token in use stays until it is renewed or refused; a fetch
// already under way finishes with the secret it started with. An empty
// secret is refused.
func (c *Client) SetSecret(secret string) error {
	if secret == "" {
		return errors.New("coupond: SetSecret: the secret is empty")
	}
	c.tokens.setSecret(secret)
	return nil
}

// Warm fetches a token now, so that the first Decide does not spend its
// budget on it. Calling it is optional. A fetch that failed for a cause a
// retry can fix (a lost connection, 429 or 5xx of the token endpoint) is
// retried as every call retries it, within ctx's deadline or WithTimeout;
// a refused credential (401 no_autenticado) is returned at once.
func (c *Client) Warm(ctx context.Context) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.retry(ctx, 20, retrySafe, func() error {
		_, err := c.tokens.get(ctx)
		return err
	})
}

// Close stops the fallback sender after it has sent what is queued (a
// record waiting to be retried, such as one a paused tenant refused, is
// tried again at once), or
// when ctx ends (when ctx has no deadline, after WithTimeout, 30 s by
// default, as for the other calls: a server that is down cannot hold a
// shutdown); records still queued then are counted in
// Stats().FallbackDropped and ctx's error is returned. Then the Client
// fetches no more tokens; a token fetch under way is waited for until ctx
// ends. Calls after Close go on with the token the Client holds (Decide's
// fallback records are dropped); one that needs a new token returns an
// error wrapping ErrClosed, at once and without retries. Last it closes
// the idle connections of the Client's own transport; a transport passed
// with WithHTTPClient may be shared, and is left alone.
func (c *Client) Close(ctx context.Context) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var err error
	c.closeOnce.Do(func() {
		err = c.fallbacks.close(ctx) // its records may need a token
		c.tokens.close()             // no bg.Add from here on
		done := make(chan struct{})
		go func() {
			c.bg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
		if c.cfg.httpClient == nil {
			c.hc.CloseIdleConnections()
		}
	})
	return err
}

// Stats are counters of a Client since New.
type Stats struct {
	Decisions int64 // Decide calls the engine answered
	Fallbacks int64 // Decide calls answered with the fallback action
	Retries   int64 // attempts of Decide beyond the first

	BreakerOpen     bool  // the breaker is open (or probing) now
	BreakerOpenings int64 // times the breaker opened

	FallbackQueued   int64 // fallback records put in the queue
	FallbackSent     int64 // fallback records the server accepted
	FallbackRejected int64 // fallback records the server refused with a 4xx a retry cannot fix (such as an action no catalog of the tenant held, or 403 for a credential without decisiones:confirmar)
	FallbackDropped  int64 // fallback records never sent: the queue was full, or still queued at Close
	FallbackPending  int64 // fallback records waiting now
}

// Stats returns the counters now.
func (c *Client) Stats() Stats {
	open, openings := c.breaker.state()
	q := c.fallbacks
	return Stats{
		Decisions: c.decisions.Load(), Fallbacks: c.respaldos.Load(), Retries: c.retries.Load(),
		BreakerOpen: open, BreakerOpenings: openings,
		FallbackQueued: q.queued.Load(), FallbackSent: q.sent.Load(), FallbackRejected: q.rejected.Load(),
		FallbackDropped: q.dropped.Load(), FallbackPending: q.pending.Load(),
	}
}

// withTimeout gives ctx the Client's default timeout unless it has a
// deadline already.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.timeout)
}
