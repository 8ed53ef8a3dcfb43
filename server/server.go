// Package server is coupond's HTTP API: routes.go lists every route; this
// file holds the request pipeline (trace id, panic recovery, metrics and
// access log, bearer auth, scopes, tenant pause, rate limits and quotas, body
// limits) that wraps each handler.
package server

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
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
	Ready    func() bool
	Engine   *engine.Engine
	Batch    *batch.Runner
	Webhooks *batch.Webhooks
	// WebhookAllowPrivate accepts webhook destinations in private ranges.
	WebhookAllowPrivate bool
}

// Server is the HTTP handler of the API.
type Server struct {
	Deps
	log     zerolog.Logger
	tokens  *tokens
	limits  *limiter
	quotas  *quotas
	metrics *metrics
	abuse   *abuseGuard
	router  *httprouter.Router
}

// New builds the server and its routes.
func New(d Deps) *Server {
	s := &Server{
		Deps:   d,
		log:    d.Log,
		tokens: newTokens(d.Secrets.Token),
		limits: newLimiter(),
		quotas: newQuotas(),
	}
	var guard guardCounts
	if d.Engine != nil {
		guard = d.Engine.GuardSummary
	}
	s.metrics = newMetrics(d.DB.Pebble, guard)
	s.abuse = newAbuseGuard(DefaultAbuseConfig(), d.DB, d.Log)
	s.router = httprouter.New()
	s.router.RedirectTrailingSlash = false
	s.router.RedirectFixedPath = false
	s.router.HandleMethodNotAllowed = false
	notFound := s.wrap(route{name: "not_found", public: true, h: func(*call) error { return errKind(kindNotFound) }})
	s.router.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { notFound(w, r, nil) })
	for _, rt := range s.routes() {
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
	scopes   scope
	tenant   *store.Tenant
	body     []byte
}

// now is the tenant's clock for this request.
func (c *call) now() time.Time { return c.tenant.Now(c.start) }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func newTraceID() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

func (s *Server) wrap(rt route) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		sw := &statusWriter{ResponseWriter: w}
		c := &call{w: sw, r: r, params: ps, route: rt.name, trace: newTraceID(), start: s.Now()}
		sw.Header().Set("X-Trace-Id", c.trace)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.writeError(sw, c, fmt.Errorf("panic: %v", p))
			}
			d := s.Now().Sub(c.start)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.observe(rt.name, status, d)
			ev := s.log.Info()
			if status >= 500 {
				ev = s.log.Warn()
			}
			ev = ev.Str("route", rt.name).Int("status", status).Dur("latency", d).Str("trace_id", c.trace)
			if c.tenant != nil {
				ev = ev.Str("tenant", c.tenant.ID).Str("client_id", c.clientID)
				if c.tenant.Settings.RateLimits || !c.tenant.Sandbox {
					s.abuse.observe(c.tenant.ID, c.clientID, status, c.start)
				}
			}
			ev.Msg("request")
		}()
		if err := s.serve(rt, c); err != nil {
			s.writeError(sw, c, err)
		}
	}
}

// serve runs the checks in the order of contract section 7: 401 → 403 → 503
// → 429 → 413/415 → (422 and the endpoint's rules in the handler).
func (s *Server) serve(rt route, c *call) error {
	if !rt.public {
		if err := s.authenticate(c); err != nil {
			return err
		}
		if rt.scope != 0 && c.scopes&rt.scope == 0 {
			return errKind(kindForbidden)
		}
		if c.tenant.Settings.Paused {
			return &apiError{kind: kindPaused, retryAfter: 60}
		}
		factor := s.abuse.factor(s.abuse.level(c.clientID))
		if !c.tenant.Settings.RateLimits && c.tenant.Sandbox {
			factor = 0
		}
		if factor > 0 {
			if ok, wait := s.limits.allow(c.clientID, rt.class, c.start, factor); !ok {
				return &apiError{kind: kindRateLimited, retryAfter: wait}
			}
		}
		if rt.quota != "" {
			if err := s.checkQuota(c, rt.quota); err != nil {
				return err
			}
		}
	}
	if rt.maxBody > 0 {
		if err := readBody(c, rt.maxBody); err != nil {
			return err
		}
	}
	return rt.h(c)
}

// authenticate checks the bearer token and that its credential is active.
// Every failure gives the same 401.
func (s *Server) authenticate(c *call) error {
	h := c.r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return errKind(kindUnauthenticated)
	}
	var buf [160]byte
	clientID, scopes, ok := s.tokens.verify(strings.TrimSpace(h[7:]), c.start, &buf)
	if !ok {
		return errKind(kindUnauthenticated)
	}
	cred, ok := s.DB.CredentialBytes(clientID)
	if !ok || !cred.Active() {
		return errKind(kindUnauthenticated)
	}
	t, ok := s.DB.Tenant(cred.Tenant)
	if !ok {
		return errKind(kindUnauthenticated)
	}
	c.clientID, c.scopes, c.tenant = cred.ClientID, scopes, t
	return nil
}

// readBody reads the request body within max bytes and checks that it is
// declared as JSON (an absent Content-Type is taken as JSON).
func readBody(c *call, max int64) error {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return errKind(kindNotJSON)
		}
	}
	if c.r.ContentLength > max {
		return errKind(kindTooLarge)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, max))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errKind(kindTooLarge)
	}
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	c.body = body
	return nil
}
