// Package console is coupond's operator console: a small web application
// served by "coupond serve" on its own listener (--console-addr), apart
// from the API. It shows whether each tenant's loop is healthy (decisions,
// confirmations, rewards, proof against baselines, errors, abuse steps,
// jobs) and runs the operator's actions through the same code as
// "coupond admin". Everything it serves is rendered on the server from
// embedded templates: no script, no CDN, no font, works offline.
//
// Every route but the sign-in page needs a session (see auth.go); without
// one the answer is 401 with a page that says how to sign in, and no data.
// State-changing requests are POSTs carrying the session's CSRF token; each
// action asks for confirmation and is written to the console's operator
// audit log with the session that did it.
package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// Deps is what the console needs; cli builds it.
type Deps struct {
	Log      zerolog.Logger
	DB       *store.DB
	Engine   *engine.Engine
	API      *server.Server // abuse states and quarantine
	Batch    *batch.Runner
	Webhooks *batch.Webhooks
	// Now is the real clock.
	Now func() time.Time
	// Admin runs a "coupond admin" command line (args start with "admin")
	// against the live services and writes its output to out: the console's
	// actions are exactly the operator's commands.
	Admin func(ctx context.Context, args []string, out io.Writer) error
	// Warnings are a tenant's open warnings, as "admin tenant show" lists them.
	Warnings func(t *store.Tenant) ([]string, error)
	// Guard is the engine's baseline guard state of a tenant, when the
	// engine has one (optional).
	Guard func(tenant string) (GuardState, bool)
	// Backups lists the registered backups as "admin backups" does
	// (without --verify), for the tenants page (optional: nil shows no
	// backup line).
	Backups func(ctx context.Context) (*privacy.BackupList, error)
	// Space is the store's free-space state (optional: nil reads DB.Space).
	Space func() store.SpaceStatus
	// Secure marks the session cookie Secure, and sends
	// Strict-Transport-Security, even when the request did not arrive over
	// TLS (TLS terminated in front of the console).
	Secure bool
}

// Console is the console's http.Handler.
type Console struct {
	d Deps // as New was given them

	mux *http.ServeMux
	// notFound answers a request for no console page: 401 without a
	// session, else 404.
	notFound http.Handler
	proofs   *proofCache
	backups  *backupLister
	// crossOrigin refuses a POST another site's page sends (by the
	// browser's Sec-Fetch-Site or Origin): the sign-in form carries no
	// CSRF token, and the signed-in forms get a second guard.
	crossOrigin *http.CrossOriginProtection
	mu          sync.Mutex // serialises link redemption
	seq         atomic.Uint64
}

// New builds the console.
func New(d Deps) *Console {
	c := &Console{
		d:   d,
		mux: http.NewServeMux(), proofs: newProofCache(), backups: &backupLister{wait: backupWait}, crossOrigin: http.NewCrossOriginProtection(),
	}
	c.seq.Store(uint64(d.Now().UnixNano()))
	c.routes()
	return c
}

// Close waits for a background proof computation to end; call it before
// closing the store.
func (c *Console) Close() { c.proofs.close() }

// MaxConns is the most connections the console's listener holds open at
// once (server.HTTPConfig.MaxConns): an operator's browser opens a
// handful, and the rest wait in the kernel's backlog.
const MaxConns = 64

// hsts tells a browser to reach the console over TLS only, for a year; it is
// sent only when the console is served over TLS (Deps.Secure or a TLS
// request), never over plain HTTP.
const hsts = "max-age=31536000"

// cookieName is the session cookie.
const cookieName = "coupond_console"

// routes lists every console route.
func (c *Console) routes() {
	c.mux.HandleFunc("GET /login", c.handleSignInPage)
	c.mux.HandleFunc("POST /login", c.handleSignIn)
	c.mux.Handle("POST /logout", c.authed(c.handleSignOut))
	c.mux.Handle("GET /{$}", c.authed(c.handleTenants))
	c.mux.Handle("GET /t/{tenant}", c.authed(c.handleTenant))
	c.mux.Handle("POST /t/{tenant}/action", c.authed(c.handleAction))
	c.mux.Handle("POST /t/{tenant}/proof", c.authed(c.handleRecompute))
	c.notFound = c.authed(func(w http.ResponseWriter, r *http.Request, _ *Session) {
		c.page(w, http.StatusNotFound, "message", msgPage{Title: "Not found", Text: "No such console page."})
	})
	c.mux.Handle("/", c.notFound)
}

// ServeHTTP implements http.Handler. It refuses (403) a POST sent from
// another site's page. A request for a path that is not one (CONNECT's
// host:port, OPTIONS *) is answered as any unknown page is, 401 or 404 as
// the API answers 404, rather than by http.ServeMux's plain 405 or 400.
// Every answer carries a trace id
// (X-Trace-Id, as the API's answers do); an error answer also shows it and
// is logged with it (trace_id), so the operator can find its log lines. A
// handler's panic answers the internal-error page, not a cut connection.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Trace-Id", server.NewTraceID())
	if c.d.Secure || r.TLS != nil {
		h.Set("Strict-Transport-Security", hsts)
	}
	sw := &server.StatusWriter{ResponseWriter: w}
	defer c.finish(sw, r)
	if c.crossOrigin.Check(r) != nil {
		// Its log line names the page the form was sent to, as the mux
		// names it for every other answer (it sets r.Pattern so too);
		// unset, a refused cross-site form read as not_found there.
		_, r.Pattern = c.mux.Handler(r)
		c.page(sw, http.StatusForbidden, "message", msgPage{Title: "Refused", Text: "This form was sent from another site; the console takes forms from its own pages only. Nothing was done."})
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/") {
		c.notFound.ServeHTTP(sw, r)
		return
	}
	c.mux.ServeHTTP(sw, r)
}

// finish answers a handler's panic with the internal-error page (when
// nothing of the answer has gone out) and logs every error answer with
// its trace id and the page's route (routeOf), not its path.
func (c *Console) finish(sw *server.StatusWriter, r *http.Request) {
	if p := recover(); p != nil {
		if p == http.ErrAbortHandler {
			panic(p)
		}
		if sw.Status() != 0 {
			c.d.Log.Error().Str("trace_id", traceOf(sw)).Str("panic", fmt.Sprint(p)).Msg("console: panic after the answer began")
			panic(http.ErrAbortHandler)
		}
		c.internal(sw, fmt.Errorf("panic: %v", p))
	}
	if sw.Status() < 400 {
		return
	}
	ev := c.d.Log.Info()
	if sw.Status() >= 500 {
		ev = c.d.Log.Warn()
	}
	ev.Str("method", r.Method).Str("route", routeOf(r)).Int("status", sw.Status()).Str("trace_id", traceOf(sw)).Msg("console answer")
}

// routeOf names the page r asked for by the mux pattern that matched it
// ("/t/{tenant}", "/" for the tenants page), or not_found, never by its path: a path is what the
// client typed and may carry a secret (a sign-in token) or anything else.
func routeOf(r *http.Request) string {
	_, route, _ := strings.Cut(r.Pattern, " ")
	switch route {
	case "", "/":
		return "not_found"
	case "/{$}":
		return "/"
	}
	return route
}

// traceOf is the trace id ServeHTTP gave the answer being written to w.
func traceOf(w http.ResponseWriter) string { return w.Header().Get("X-Trace-Id") }

type authedHandler func(w http.ResponseWriter, r *http.Request, s *Session)

// authed answers 401 with the sign-in instructions unless the request
// carries a live session (and deletes a cookie whose session is over);
// POSTs must also carry its CSRF token (403).
func (c *Console) authed(h authedHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tok string
		if ck, err := r.Cookie(cookieName); err == nil {
			tok = ck.Value
		}
		s, ok, err := lookupSession(c.d.DB, tok, c.d.Now())
		if err != nil {
			c.internal(w, err)
			return
		}
		if !ok {
			if tok != "" { // expired, revoked or unknown: the browser forgets it
				http.SetCookie(w, c.endedCookie(r))
			}
			c.page(w, http.StatusUnauthorized, "signin", signInPage{})
			return
		}
		if r.Method == http.MethodPost {
			if status, text := parseForm(w, r, 16<<10); status != 0 {
				c.page(w, status, "message", msgPage{Title: "Refused", Text: text, CSRF: s.csrfToken()})
				return
			}
			if !s.checkCSRF(r.PostForm.Get("csrf")) {
				c.page(w, http.StatusForbidden, "message", msgPage{Title: "Refused", Text: "The form's CSRF token is missing or wrong. Reload the page and try again.", CSRF: s.csrfToken()})
				return
			}
		}
		h(w, r, s)
	})
}

// parseForm parses r's form, reading at most limit bytes of its body. It
// returns status 0 when the form parsed, else the answer's status and the
// operator's text: 413 for a body over the limit (declared or read), 400
// for one that does not parse. A 413 closes the connection after the
// answer (Connection: close): the rest of the body may still be on its
// way, and net/http would otherwise read it all before answering.
func parseForm(w http.ResponseWriter, r *http.Request, limit int64) (status int, text string) {
	err := error(&http.MaxBytesError{Limit: limit})
	if r.ContentLength <= limit {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		err = r.ParseForm()
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &tooLarge):
		w.Header().Set("Connection", "close")
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than %d KiB, the most the console reads. Nothing was done.", limit>>10)
	}
	return http.StatusBadRequest, "The form could not be read (it is not a valid form encoding). Nothing was done."
}

// internal logs err with the answer's trace id and answers 500 with a
// page that names the trace id and nothing of err.
func (c *Console) internal(w http.ResponseWriter, err error) {
	c.d.Log.Error().Err(err).Str("trace_id", traceOf(w)).Msg("console")
	c.page(w, http.StatusInternalServerError, "message", msgPage{Title: "Internal error", Text: "The console could not do this; the server log says why (look for this trace id)."})
}

// traced is page data that can show the answer's trace id; page sets it on
// error answers.
type traced interface{ withTrace(id string) any }

type signInPage struct {
	Token string
	Error string
	Trace string
}

func (p signInPage) withTrace(id string) any { p.Trace = id; return p }

type msgPage struct {
	Title, Text string
	Output      string
	Back        string
	CSRF        string
	Trace       string
}

func (p msgPage) withTrace(id string) any { p.Trace = id; return p }

func (c *Console) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("t")
	if len(tok) > 128 {
		tok = ""
	}
	c.page(w, http.StatusOK, "signin", signInPage{Token: tok})
}

// handleSignIn trades a one-time link token for a session cookie.
func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if status, text := parseForm(w, r, 4<<10); status != 0 {
		c.page(w, status, "signin", signInPage{Error: text})
		return
	}
	c.mu.Lock()
	s, err := redeem(c.d.DB, r.PostForm.Get("t"), c.d.Now())
	c.mu.Unlock()
	if errors.Is(err, ErrBadLink) {
		c.page(w, http.StatusUnauthorized, "signin", signInPage{Error: "This sign-in link is unknown, already used or expired (links last 10 minutes and work once)."})
		return
	}
	if err != nil {
		c.internal(w, err)
		return
	}
	c.d.Log.Info().Str("session", s.ID).Msg("console sign-in")
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: s.token, Path: "/", MaxAge: int(SessionTTL.Seconds()),
		HttpOnly: true, Secure: c.d.Secure || r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request, s *Session) {
	if err := endSession(c.d.DB, s.token); err != nil {
		c.internal(w, err)
		return
	}
	http.SetCookie(w, c.endedCookie(r))
	c.page(w, http.StatusOK, "message", msgPage{Title: "Signed out", Text: "The session is closed."})
}

// endedCookie tells the browser to delete its session cookie.
func (c *Console) endedCookie(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.d.Secure || r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

type tenantsPage struct {
	CSRF   string
	Now    time.Time
	System []systemLine
	// Rows are the tenants that need the operator first (tenantRow.rank),
	// by ID within each rank; Attention counts those.
	Rows      []tenantRow
	Attention int
}

// handleTenants shows what concerns every tenant (systemView), then lists
// every tenant, those that need the operator first: among hundreds, a red
// row sorted by its ID could sit pages below the fold. A tenant whose state cannot be read is
// listed with a warning that names the answer's trace id (its log line
// has the cause), never the cause itself.
func (c *Console) handleTenants(w http.ResponseWriter, r *http.Request, s *Session) {
	p := tenantsPage{CSRF: s.csrfToken(), Now: c.d.Now().UTC(), System: c.systemView(r.Context(), traceOf(w)), Rows: []tenantRow{}}
	for _, t := range c.d.DB.Tenants() {
		h, err := c.loadHours(t)
		if err != nil {
			c.internal(w, err)
			return
		}
		row, err := c.tenantRow(t, h)
		if err != nil { // one tenant's unreadable state must not hide the others
			row = unreadableRow(t, c.unreadable(w, t.ID, "row", err))
		}
		p.Rows = append(p.Rows, row)
	}
	slices.SortStableFunc(p.Rows, func(a, b tenantRow) int { return cmp.Compare(a.rank(), b.rank()) })
	for _, row := range p.Rows {
		if row.rank() < 2 {
			p.Attention++
		}
	}
	c.page(w, http.StatusOK, "tenants", p)
}

type tenantPage struct {
	CSRF   string
	Tenant *store.Tenant
	Row    tenantRow
	Now    time.Time
	Loop   loopView
	Proof  proofView
	Health healthView
	Audit  []AuditEntry
	// LoopErr, HealthErr and AuditErr say that a section could not be read
	// (unreadable's note); the section shows the note instead.
	LoopErr, HealthErr, AuditErr string
}

// handleTenant shows one tenant. Each part of the page is read on its own:
// a part that cannot be read (a store read error) shows a note naming the
// answer's trace id in its place, and the rest, the actions among them,
// still shows, so an operator on a bad day can still pause the tenant here.
func (c *Console) handleTenant(w http.ResponseWriter, r *http.Request, s *Session) {
	t, ok := c.d.DB.Tenant(r.PathValue("tenant"))
	if !ok {
		c.page(w, http.StatusNotFound, "message", msgPage{Title: "Not found", Text: "No such tenant.", Back: "/"})
		return
	}
	p := tenantPage{CSRF: s.csrfToken(), Tenant: t, Now: t.Now(c.d.Now())}
	if h, err := c.loadHours(t); err != nil {
		note := c.unreadable(w, t.ID, "hours", err)
		p.Row, p.LoopErr, p.HealthErr = unreadableRow(t, note), note, note
	} else {
		if p.Row, err = c.tenantRow(t, h); err != nil {
			p.Row = unreadableRow(t, c.unreadable(w, t.ID, "row", err))
		}
		if p.Loop, err = c.loopView(t, h); err != nil {
			p.LoopErr = c.unreadable(w, t.ID, "loop", err)
		}
		if p.Health, err = c.healthView(t, h); err != nil {
			p.HealthErr = c.unreadable(w, t.ID, "health", err)
		}
	}
	var err error
	if p.Audit, err = Audit(c.d.DB, t.ID, 10); err != nil {
		p.AuditErr = c.unreadable(w, t.ID, "audit", err)
	}
	p.Proof = c.proofView(t)
	c.page(w, http.StatusOK, "tenant", p)
}

// unreadable logs err, a part of tenant's page (or its row) that could not
// be read, with the answer's trace id, and returns the note the page shows
// in its place: the trace id, never the error itself.
func (c *Console) unreadable(w http.ResponseWriter, tenant, part string, err error) string {
	c.d.Log.Error().Err(err).Str("tenant", tenant).Str("part", part).Str("trace_id", traceOf(w)).Msg("console")
	return "the console cannot read this tenant's state: the server log says why (trace_id " + traceOf(w) + "); see also 'coupond admin check'"
}

// unreadableRow is tenant t's row when its state cannot be read: its
// settings and the note as its one warning.
func unreadableRow(t *store.Tenant, note string) tenantRow {
	return tenantRow{ID: t.ID, Status: statusWords(t), Paused: t.Settings.Paused, Warnings: []string{note}}
}

func (c *Console) handleRecompute(w http.ResponseWriter, r *http.Request, _ *Session) {
	t, ok := c.d.DB.Tenant(r.PathValue("tenant"))
	if !ok {
		c.page(w, http.StatusNotFound, "message", msgPage{Title: "Not found", Text: "No such tenant.", Back: "/"})
		return
	}
	c.proof(t, true)
	http.Redirect(w, r, "/t/"+t.ID+"#proof", http.StatusSeeOther)
}

// action is one operator action of the tenant page and the admin command
// line that performs it.
type action struct {
	label string
	args  func(tenant, client string) []string
}

var actions = map[string]action{
	"pause":      {"Pause the tenant (every API call answers 503 inquilino_pausado)", func(t, _ string) []string { return []string{"admin", "tenant", "set", t, "--paused", "true"} }},
	"resume":     {"Resume the tenant", func(t, _ string) []string { return []string{"admin", "tenant", "set", t, "--paused", "false"} }},
	"shadow-on":  {"Switch shadow mode on", func(t, _ string) []string { return []string{"admin", "tenant", "set", t, "--shadow", "on"} }},
	"shadow-off": {"Switch shadow mode off (the caller must then execute the engine's decisions)", func(t, _ string) []string { return []string{"admin", "tenant", "set", t, "--shadow", "off"} }},
	"abuse-clear": {"Clear the credential's abuse steps (lifts brake, quarantine and suspension)", func(_, cl string) []string {
		return []string{"admin", "abuse", "clear", cl}
	}},
	"abuse-release": {"Apply the tenant's quarantined events", func(t, _ string) []string { return []string{"admin", "abuse", "release", "--tenant", t} }},
}

type confirmPage struct {
	CSRF, Tenant, Action, Client, Label string
	Command                             string
}

// handleAction asks for confirmation, then runs the action's admin command
// and records it in the audit log.
func (c *Console) handleAction(w http.ResponseWriter, r *http.Request, s *Session) {
	t, ok := c.d.DB.Tenant(r.PathValue("tenant"))
	if !ok {
		c.page(w, http.StatusNotFound, "message", msgPage{Title: "Not found", Text: "No such tenant.", Back: "/"})
		return
	}
	name, client := r.PostForm.Get("action"), r.PostForm.Get("client")
	a, ok := actions[name]
	if !ok || !store.ValidTenantID(t.ID) {
		c.page(w, http.StatusBadRequest, "message", msgPage{Title: "Refused", Text: "Unknown action.", Back: "/t/" + t.ID})
		return
	}
	if name == "abuse-clear" && !c.escalated(t.ID, client) {
		c.page(w, http.StatusBadRequest, "message", msgPage{Title: "Refused", Text: "That credential of this tenant has no abuse steps to clear.", Back: "/t/" + t.ID})
		return
	}
	args := a.args(t.ID, client)
	if r.PostForm.Get("confirm") != "yes" {
		c.page(w, http.StatusOK, "confirm", confirmPage{CSRF: s.csrfToken(), Tenant: t.ID, Action: name, Client: client, Label: a.label, Command: "coupond " + strings.Join(args, " ")})
		return
	}
	entry := AuditEntry{At: c.d.Now().UTC(), Session: s.ID, Tenant: t.ID, Action: name, Command: args, Outcome: "started"}
	seq := c.seq.Add(1)
	if err := appendAudit(c.d.DB, entry, seq); err != nil {
		c.internal(w, err)
		return
	}
	var out bytes.Buffer
	err := c.d.Admin(r.Context(), args, &out)
	entry.Outcome = "ok"
	if err != nil {
		entry.Outcome = "error: " + err.Error()
	}
	if aerr := appendAudit(c.d.DB, entry, seq); aerr != nil {
		c.d.Log.Error().Err(aerr).Msg("console audit")
	}
	c.d.Log.Info().Str("session", s.ID).Str("tenant", t.ID).Str("action", name).Str("outcome", entry.Outcome).Msg("console action")
	status, title := http.StatusOK, "Done"
	if err != nil {
		status, title = http.StatusConflict, "The command failed"
	}
	c.page(w, status, "message", msgPage{Title: title, Text: a.label + ": " + entry.Outcome, Output: out.String(), Back: "/t/" + t.ID, CSRF: s.csrfToken()})
}

// escalated reports whether client is a credential of tenant with recorded
// abuse steps.
func (c *Console) escalated(tenant, client string) bool {
	for _, st := range c.d.API.AbuseStates(tenant) {
		if st.ClientID == client && st.Level > 0 {
			return true
		}
	}
	return false
}

// actionButton is the data of an action's button.
type actionButton struct{ T, CSRF, Action, Label string }

//go:embed page.html
var pageHTML string

//go:embed console.css
var consoleCSS string

// csp allows nothing but the page's own embedded style sheet (by its hash)
// and forms posted to the console itself.
var csp = func() string {
	sum := sha256.Sum256([]byte(consoleCSS))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}()

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"css":  func() template.CSS { return template.CSS(consoleCSS) },
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"whenp": func(t *time.Time) string {
		if t == nil {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"mxn":  mxnText,
	"pct":  pctText,
	"args": func(t, csrf, action, label string) actionButton { return actionButton{t, csrf, action, label} },
	"join": strings.Join,
}).Parse(pageHTML))

// pctText prints a share as a percentage, or n/a when it has no
// denominator (defined false) or is not a number.
func pctText(v float64, defined bool) string {
	if !defined || math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f %%", 100*v)
}

// mxnText prints an amount in MXN with two decimals, or n/a when it is not
// a number (no estimate, no interval). An amount that rounds to zero cents
// prints as 0.00, never -0.00.
func mxnText(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	if v > -0.005 && v <= 0 { // %.2f would print a tiny negative, or −0, as -0.00
		v = 0
	}
	return fmt.Sprintf("%.2f", v)
}

// page renders a named template inside the layout; an error answer's page
// shows its trace id.
func (c *Console) page(w http.ResponseWriter, status int, name string, data any) {
	if t, ok := data.(traced); ok && status >= 400 {
		data = t.withTrace(traceOf(w))
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		c.d.Log.Error().Err(err).Str("page", name).Str("trace_id", traceOf(w)).Msg("console template")
		http.Error(w, "console template error; trace id "+traceOf(w), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
