// Package server is coupond's HTTP API: routes.go lists every route; this
// file holds the request pipeline (trace id, panic recovery, metrics and
// access log, bearer auth, scopes, tenant pause, the disk reserve's refusal
// of writes, rate limits and quotas, body limits) that wraps each handler
// and writes the answer a handler sets; errors.go is the one error writer;
// openapi.go generates the OpenAPI document (openapi.json). doc.go walks a
// decision and an event batch through all of it, stop by stop.
package server

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// Deps is what the server needs; cli builds it.
type Deps struct {
	Log     zerolog.Logger
	DB      *store.DB
	Secrets *store.Secrets
	// Now is the real clock; tenants' clocks derive from it (store.Tenant.Now).
	Now func() time.Time
	// Ready reports whether recovery is done and the store may serve.
	Ready  func() bool
	Engine *engine.Engine
	// Privacy serves the customer data rights (deletion, export). nil
	// with an Engine: one is built over DB and Engine (tests); cli passes
	// the process's one, which the deletion worker shares.
	Privacy  *privacy.Service
	Batch    *batch.Runner
	Webhooks *batch.Webhooks
	// WebhookAllowPrivate accepts webhook destinations in private ranges.
	WebhookAllowPrivate bool
	// WebhookResolve resolves a webhook's host at registration, to refuse
	// names of private addresses; nil: the system resolver.
	WebhookResolve batch.Resolver
	// MetricsTenantLabel adds a tenant label to the business series of
	// /metrics (one series per tenant: for installs with few tenants).
	MetricsTenantLabel bool
	// TrustedProxies are the peers (a reverse proxy) whose X-Forwarded-For
	// names the client that failed token requests are limited by (see
	// clientAddress); nil trusts none.
	TrustedProxies []netip.Prefix
	// SetAside, optional, lists the damaged files of the data dir set
	// aside outside the store (privacy.Backups.SetAside: backup
	// registries and lines of the owed-deletions ledger), counted in
	// coupond_quarantined_records.
	SetAside func() []string
	// BackupRegistryUnusable, optional, reports whether the backup
	// registry could not be used at its last read
	// (privacy.Backups.RegistryUnusable): coupond_backup_registry_unreadable
	// is 1 then, and 0 without it. It is called at every scrape.
	BackupRegistryUnusable func() bool
}

// Server is the HTTP handler of the API.
type Server struct {
	Deps
	log    zerolog.Logger
	tokens *tokens
	limits *limiter
	// tokenFailures limits failed token requests per source address.
	tokenFailures *limiter
	metrics       *metrics
	abuse         *abuseGuard
	router        *httprouter.Router
	// table is s.routes() as New routed it, read by unknownRoute.
	table []route
	// batchReads: one batch creation per tenant read at a time.
	batchReads bodyReads
}

// New builds the server and its routes.
func New(d Deps) *Server {
	if d.Privacy == nil && d.Engine != nil {
		d.Privacy = privacy.New(privacy.Config{DB: d.DB, Engine: d.Engine, Secrets: d.Secrets, Now: d.Now, Log: d.Log, HeldEvent: HeldEvent})
	}
	s := &Server{
		Deps:          d,
		log:           d.Log,
		tokens:        newTokens(d.Secrets.Token),
		limits:        newLimiter(),
		tokenFailures: newLimiterCap(tokenFailureAddresses),
	}
	s.metrics = newMetrics(d.DB, d.MetricsTenantLabel)
	if d.Engine != nil {
		s.metrics.addQuarantine(d.Engine.Quarantine.QuarantinedRecords, unreadableAndLogs(d.DB), d.SetAside, d.Engine.Quarantine.DamagedSeen)
	}
	s.metrics.addDiskSpace(d.DB.Space)
	s.metrics.addBackupRegistry(d.BackupRegistryUnusable)
	var quarantine quarantineFunc
	if d.Engine != nil {
		quarantine = d.Engine.Records().Quarantine
	}
	s.abuse = newAbuseGuard(DefaultAbuseConfig(), d.DB, d.Log, quarantine)
	s.abuse.onStep = func(tenant, step string) { s.metrics.with(s.metrics.escalations, tenant, step).Inc() }
	if d.Engine != nil {
		s.watchTenants()
	}
	s.router = httprouter.New()
	s.router.RedirectTrailingSlash = false
	s.router.RedirectFixedPath = false
	s.router.HandleMethodNotAllowed = false
	s.router.HandleOPTIONS = false // OPTIONS, like any unrouted method, is 404 no_encontrado
	notFound := s.wrap(route{name: "not_found", public: true, h: s.unknownRoute})
	s.router.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { notFound(w, r, nil) })
	s.table = s.routes()
	for _, rt := range s.table {
		path, h := rt.path, s.wrap(rt)
		if static, ok := shadowedStatic[rt.path]; ok {
			// httprouter cannot hold a static segment beside a parameter at the
			// same depth: route the parameter and pick the static name here.
			inner := h
			path = static.param
			h = func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
				if ps.ByName(static.name) != static.value {
					notFound(w, r, ps)
					return
				}
				inner(w, r, ps)
			}
		}
		s.router.Handle(rt.method, path, h)
		if rt.method == http.MethodGet {
			s.router.Handle(http.MethodHead, path, h) // net/http sends the headers and drops the body
		}
	}
	return s
}

// unknownRoute answers a request no route takes: 404 no_encontrado whose
// mensaje names the method and the path and, when the path is a route, the
// methods it takes, so that a typo ("/v1/campañas", GET on a POST route)
// does not read as a missing resource. The routes are public (GET
// /v1/openapi.json); an absent resource is answered by its route, as
// "recurso no encontrado".
func (s *Server) unknownRoute(c *call) error {
	var allowed []string
	for _, rt := range s.table {
		if routeMatches(rt.path, c.r.URL.Path) && !slices.Contains(allowed, rt.method) {
			allowed = append(allowed, rt.method)
		}
	}
	msg := "ruta desconocida: " + echoString(c.r.Method) + " " + echoString(c.r.URL.Path)
	if len(allowed) > 0 {
		msg += " (esta ruta admite " + strings.Join(allowed, ", ") + ")"
	} else {
		msg += " (las rutas están en GET /v1/openapi.json)"
	}
	return &apiError{kind: kindNotFound, msg: msg}
}

// routeMatches reports whether path is one of pattern's, a route's path
// whose ":name" segments take any one non-empty segment.
func routeMatches(pattern, path string) bool {
	want, got := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(want) != len(got) {
		return false
	}
	for i, w := range want {
		if strings.HasPrefix(w, ":") && got[i] != "" || w == got[i] {
			continue
		}
		return false
	}
	return true
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// shadowedStatic maps static routes that share a depth with a parameter to
// the parameter route that carries them.
var shadowedStatic = map[string]struct{ param, name, value string }{
	"/v1/decisiones/respaldo": {"/v1/decisiones/:decision_id", "decision_id", "respaldo"},
}

// route is one API route and everything the pipeline needs to know about it.
type route struct {
	method, path string
	name         string // metrics and log label
	public       bool   // no bearer token (token endpoint, health, signed URL)
	scope        scope  // required scope, 0 for none beyond a valid token
	class        limitClass
	maxBody      int64  // > 0: the route reads a JSON body of at most this size
	quota        string // daily tenant quota checked before the body is read
	h            func(c *call) error
}

// call is one request as it goes through the pipeline.
type call struct {
	w      http.ResponseWriter
	r      *http.Request
	params httprouter.Params
	route  string
	trace  string
	start  time.Time // real time at arrival

	// Set by authentication.
	clientID string
	// tokenFor is the credential a token was issued to (POST /v1/token
	// answered 200): the request's log line names it and its tenant, as it
	// does for a call authenticated with a bearer token, without the abuse
	// guard's weighing of those calls.
	tokenFor *store.Credential
	// secretGen is the generation of the secret the token was obtained
	// with (store.Credential.SecretGen).
	secretGen uint32
	scopes    scope
	tenant    *store.Tenant
	// abuseLevel is the credential's abuse escalation step when the
	// request arrived (abuseGuard.level), read once for its checks.
	abuseLevel int
	body       []byte

	// readTimedOut: the body did not arrive within the read timeout.
	readTimedOut bool
	// codigo is the error body's codigo the request was answered with
	// (writeError; empty for a success or a 422 of violations): the
	// access log line names it, and its level follows it (accessLevel).
	codigo string
	// answer is the handler's JSON answer, which the pipeline writes when
	// the handler returns nil (a handler that streams writes w itself).
	answer answer
	// reloaded is the duplicate events of a request of events that were
	// almost all duplicates, which the abuse guard adds up (reload); the
	// pipeline reports it with the request's status.
	reloaded int
	// sent is the decision id of an answered coupon send, confirmed the id
	// of a decision confirmed: the abuse guard's unconfirmed trigger.
	sent, confirmed string
	// overQuota is the 429 of the tenant's daily quota, used up when the
	// request arrived, held back while the request may be a replay (see
	// mayReplay): it answers every refusal of the request (pastQuota).
	overQuota error
}

// answer is a handler's JSON answer: its status and body. The pipeline
// writes it (writeJSON) as it writes an error (writeError), and counts the
// decisions it answers (business.answered).
type answer struct {
	status int
	body   any
}

// now is the tenant's clock for this request.
func (c *call) now() time.Time { return c.tenant.Now(c.start) }

// statusClientGone is what the access log and the metrics record for a
// request whose client went away before the answer (nginx's 499).
const statusClientGone = 499

// StatusWriter remembers the status of the answer written through it
// (Status; 0 before anything is written) and how many bytes of its body
// were written: the access log's, and the console's.
type StatusWriter struct {
	http.ResponseWriter
	status  int
	written int64
}

// Status is the status written so far, 0 before anything.
func (w *StatusWriter) Status() int { return w.status }

func (w *StatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// NewTraceID is a random trace id of 16 hex digits: the X-Trace-Id of
// every answer (the API's and the console's).
func NewTraceID() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// accessLevel is the level of a request's access log line answered
// status with the error codigo (empty: none): warn for a 5xx, which an
// operator looks into, but info for 503 inquilino_pausado, the answer the
// operator chose by pausing the tenant (its callers keep calling: a warn
// a request would bury the warnings that need action).
func accessLevel(status int, codigo string) zerolog.Level {
	if status >= 500 && codigo != errorTable[kindPaused].codigo {
		return zerolog.WarnLevel
	}
	return zerolog.InfoLevel
}

func (s *Server) wrap(rt route) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		sw := &StatusWriter{ResponseWriter: w}
		c := &call{w: sw, r: r, params: ps, route: rt.name, trace: NewTraceID(), start: s.Now()}
		sw.Header().Set("X-Trace-Id", c.trace)
		// Every answer is what its Content-Type says: no browser may sniff a
		// JSON body that echoes tenant text into something it renders.
		sw.Header().Set("X-Content-Type-Options", "nosniff")
		defer func() {
			cut := false
			if p := recover(); p != nil {
				cut = s.recovered(sw, c, p)
			}
			d := s.Now().Sub(c.start)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			switch {
			case cut:
				status = http.StatusInternalServerError // the answer was cut short
			case c.readTimedOut:
				status = http.StatusRequestTimeout // answered 400, logged as what it was
			case r.Context().Err() != nil:
				// net/http cancels the context when the connection's
				// reader meets EOF or an error: the client went away
				// (or closed its side) before the answer.
				status = statusClientGone
			}
			s.metrics.observe(rt.name, status, d)
			ev := s.log.WithLevel(accessLevel(status, c.codigo))
			ev = ev.Str("route", rt.name).Int("status", status).Dur("latency", d).Str("trace_id", c.trace)
			if c.codigo != "" {
				ev = ev.Str("codigo", c.codigo)
			}
			if cut {
				// What the client got before the cut: the status line
				// (0: none) and the body's bytes.
				ev = ev.Str("outcome", "cortado").Int("sent_status", sw.status).Int64("bytes", sw.written)
			}
			if c.tenant != nil {
				ev = ev.Str("tenant", c.tenant.ID).Str("client_id", c.clientID)
				if c.tenant.Settings.RateLimits || !c.tenant.Sandbox {
					if c.reloaded > 0 {
						s.abuse.reload(c.tenant.ID, c.clientID, c.reloaded, c.start)
					}
					s.abuse.observe(c.tenant.ID, c.clientID, status, c.start)
					if c.sent != "" {
						s.abuse.issued(c.tenant.ID, c.clientID, c.sent, c.start)
					}
					if c.confirmed != "" {
						s.abuse.confirmed(c.tenant.ID, c.confirmed)
					}
				}
			}
			if c.tokenFor != nil {
				ev = ev.Str("tenant", c.tokenFor.Tenant).Str("client_id", c.tokenFor.ClientID)
			}
			ev.Msg("request")
			if cut {
				panic(http.ErrAbortHandler)
			}
		}()
		if smuggled(r) {
			sw.Header().Set("Connection", "close")
			s.writeError(sw, c, routeError(rt, r, errKind(kindBadRequest)))
			return
		}
		if err := s.serve(rt, c); err != nil {
			s.writeError(sw, c, s.withoutDescriptors(rt, c, err))
		} else if c.answer.body != nil {
			s.metrics.answered(c.tenant, c.answer.body)
			writeJSON(sw, c.answer.status, c.answer.body)
		}
	}
}

// routeError is err as rt answers it when the pipeline refuses request r
// before rt's handler runs: the token endpoint's errors are shaped as its
// handler's are (tokenError: the OAuth 2.0 members for the form only).
func routeError(rt route, r *http.Request, err error) error {
	if rt.name == "token" {
		return tokenError(r, err)
	}
	return err
}

// recovered answers a handler's panic p: 500 error_interno while nothing
// of the answer has gone out; once it has (a streamed file), the answer
// can only be cut short, and cut says the caller must do so (by panicking
// with http.ErrAbortHandler) after logging the request and counting it. A
// panic with http.ErrAbortHandler is a handler's own cut (a stream whose
// source failed, the handler logged why): a cut, with nothing more logged.
func (s *Server) recovered(sw *StatusWriter, c *call, p any) (cut bool) {
	if p == http.ErrAbortHandler {
		return true
	}
	err := fmt.Errorf("panic: %v", p)
	if sw.status == 0 {
		s.writeError(sw, c, err)
		return false
	}
	s.log.Error().Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("internal error after the answer started: answer cut short")
	return true
}

// serve runs the checks in the order of contract section 7: 401 → 403 → 503
// → 429 → 413/415 → (422 and the endpoint's rules in the handler). A
// request past the daily quota that may be a replay goes on (mayReplay):
// a replay is answered, anything else refused with the quota's 429.
func (s *Server) serve(rt route, c *call) error {
	if !rt.public {
		if err := s.authenticate(c); err != nil {
			return err
		}
		if rt.scope != 0 && c.scopes&rt.scope == 0 {
			return errMissingScope(rt.scope)
		}
		if c.tenant.Settings.Paused {
			return errPaused()
		}
		if refusesWrites(rt) && s.DB.WritesRefused() {
			sp := s.DB.Space()
			return storageFull(sp, sp.Failed)
		}
		factor := s.abuse.factor(c.abuseLevel)
		if !c.tenant.Settings.RateLimits && c.tenant.Sandbox {
			factor = 0
		}
		if factor > 0 {
			if ok, wait := s.limits.allow(c.clientID, rt.class, c.start, factor); !ok {
				return rateLimited(rt.class, factor, wait)
			}
		}
		if rt.quota != "" {
			if err := s.checkQuota(c, rt.quota); err != nil {
				if !mayReplay(c, rt.quota, err) {
					return err
				}
				c.overQuota = err
			}
		}
	}
	if rt.quota == quotaBatch {
		release, ok := s.batchReads.acquire(c.tenant.ID)
		if !ok {
			return errBatchReading()
		}
		defer release()
	}
	if rt.maxBody > 0 {
		if err := readBody(c, rt.maxBody); err != nil {
			return c.pastQuota(err)
		}
	}
	return c.pastQuota(rt.h(c))
}

// refusesWrites reports whether rt is refused while the store is below its
// disk reserve (contract §8): the authenticated POST and PUT routes.
// Reads, exports and deletions go on (they use the reserve), and so does
// the token endpoint.
func refusesWrites(rt route) bool {
	return !rt.public && (rt.method == http.MethodPost || rt.method == http.MethodPut)
}

// authenticate checks the bearer token, that its credential is active and
// that the secret the token was obtained with is still accepted (a rotation
// cuts the old secret's tokens when its grace ends). Every failure gives
// the same 401, and so does a request with more than one Authorization
// header (which one a proxy in front checked cannot be known).
func (s *Server) authenticate(c *call) error {
	vals := c.r.Header.Values("Authorization")
	if len(vals) != 1 {
		return errKind(kindUnauthenticated)
	}
	h := vals[0]
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return errKind(kindUnauthenticated)
	}
	var buf [160]byte
	clientID, scopes, gen, ok := s.tokens.verify(strings.TrimSpace(h[7:]), c.start, &buf)
	if !ok {
		return errKind(kindUnauthenticated)
	}
	cred, ok := s.DB.CredentialBytes(clientID)
	if !ok || !cred.Active() || !cred.AcceptsGeneration(gen, c.start) {
		return errKind(kindUnauthenticated)
	}
	// Refused at suspension by the guard's level as by the flag, which a
	// failed write could leave unset (abuseGuard.maybeStep).
	level := s.abuse.level(cred.ClientID)
	if level >= levelSuspension {
		return errKind(kindUnauthenticated)
	}
	t, ok := s.DB.Tenant(cred.Tenant)
	if !ok {
		return errKind(kindUnauthenticated)
	}
	c.clientID, c.secretGen, c.scopes, c.tenant, c.abuseLevel = cred.ClientID, gen, scopes, t, level
	return nil
}

// readBody reads the request body within max bytes and checks that it is
// declared as JSON (an absent Content-Type is taken as JSON) and not
// compressed (encodedBody).
func readBody(c *call, max int64) error {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return errKind(kindNotJSON)
		}
	}
	if err := encodedBody(c.r); err != nil {
		return err
	}
	if c.r.ContentLength > max {
		return tooLarge(c, max)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, max))
	if err != nil {
		return bodyError(c, err)
	}
	c.body = body
	return nil
}

// tooLarge is the 413 of a body over its limit of limit bytes, declared or
// met while reading; its mensaje names the limit, so that the caller knows
// how far to cut the request. The connection is closed after the answer:
// the rest of the body may still be on its way, and net/http would
// otherwise read up to 256 KiB more of it (or wait for it until the read
// timeout) before answering, to keep the connection.
func tooLarge(c *call, limit int64) error {
	c.w.Header().Set("Connection", "close")
	return &apiError{kind: kindTooLarge, msg: fmt.Sprintf("%s de %d bytes", errorTable[kindTooLarge].msg, limit)}
}

// encodedBody refuses a request body sent with a Content-Encoding other
// than identity: 415 esquema_invalido naming the header (RFC 9110 section
// 15.5.16), since the API reads bodies as they come. Without it a gzip
// body was read as JSON (a 422 json_invalid that hid the cause) and a
// plain one labelled br was taken as it was.
func encodedBody(r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				return &apiError{kind: kindNotJSON, campo: "Content-Encoding",
					msg: "Content-Encoding no admitido: envíe el cuerpo sin comprimir"}
			}
		}
	}
	return nil
}

// bodyError classifies an error met while reading a request body. Every
// one of them is the client's doing, never a 500: over the size limit is
// 413 (tooLarge); anything else (a malformed chunked encoding, a body that ends before
// its Content-Length, a body that does not arrive within the read timeout,
// a client that went away) is 400 esquema_invalido, and the connection is
// closed after the answer since its framing can no longer be trusted.
func bodyError(c *call, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(c, mbe.Limit)
	}
	c.w.Header().Set("Connection", "close")
	c.readTimedOut = errors.Is(err, os.ErrDeadlineExceeded)
	return errKind(kindBadRequest)
}
