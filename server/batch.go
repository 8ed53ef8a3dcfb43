package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

var batchSchema = schema.Object(
	schema.Field("campana_id", schema.ID()).Required(),
	schema.Field("clientes", schema.Array(schema.ClienteRef()).Items(1, 500_000).Nullable()),
	schema.Field("segmento", schema.AnyObject().Nullable()),
)

// checkBatchSlot answers 429 before the body is read when the tenant has a
// job in progress or had one in the last hour.
func (s *Server) checkBatchSlot(c *call) error {
	if re := s.Batch.Busy(c.tenant.ID); re != nil {
		return batchBusy(re)
	}
	return nil
}

// batchBusy is the 429 of a batch creation the tenant's slot refuses: its
// detalle names the job that holds the slot (job_id), so that a caller
// whose 202 was lost, retrying without an Idempotency-Key, can follow the
// job it created rather than wait an hour without its id.
func batchBusy(re *batch.RetryError) error {
	ae := &apiError{kind: kindRateLimited, retryAfter: int(math.Ceil(re.After.Seconds())), msg: "hay un lote en curso o ya se creó uno en la última hora"}
	if re.JobID != "" {
		ae.detalle = map[string]any{"job_id": re.JobID}
	}
	return ae
}

// bodyReads lets each key (a tenant) read one request body at a time.
// The zero value is ready to use and safe for concurrent use.
type bodyReads struct {
	mu   sync.Mutex
	held map[string]bool
}

// acquire takes key's turn: ok is false while another request holds it,
// else release gives it back.
func (b *bodyReads) acquire(key string) (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[key] {
		return nil, false
	}
	if b.held == nil {
		b.held = map[string]bool{}
	}
	b.held[key] = true
	return func() {
		b.mu.Lock()
		delete(b.held, key)
		b.mu.Unlock()
	}, true
}

// errBatchReading is the 429 of a batch creation sent while another of the
// tenant's is being read and checked. Its body may hold 96 MB, so
// concurrent ones multiplied the memory: four 94 MB bodies at once took
// the process to 880 MB and another tenant's decisions to 1.4 s; one at a
// time, 250 MB and 75 ms. Replays with an Idempotency-Key, which pass the
// batch slot and were read however many came, are held too.
func errBatchReading() error {
	return &apiError{kind: kindRateLimited, retryAfter: 1, msg: "otra creación de lote del inquilino se está procesando; reintente tras Retry-After segundos"}
}

// viewJob is a job's status answer to call c. error is a failed job's
// reason only (contract §4): a completed job whose result was dropped
// (DropResult) keeps its reason in the record, for the operator, and
// answers as after retention. The resultado_url it gets is bound to the
// caller's credential and secret generation (it ends when that credential
// is revoked or suspended or that secret no longer accepted: grantHolds)
// and serves detalle only if the caller has explicar:leer, as /resultado
// does.
func (s *Server) viewJob(c *call, j *batch.Job) client.EstadoLote {
	v := client.EstadoLote{JobID: j.ID, Estado: j.Estado, CreadoEn: j.CreadoEn, CampanaID: j.CampanaID, Total: j.Total,
		Procesados: j.Procesados, IniciadoEn: j.IniciadoEn, CompletadoEn: j.CompletadoEn}
	if j.Estado == api.EstadoFallido {
		v.Error = j.Error
	}
	if _, ok := s.Batch.ResultFile(j); ok {
		exp := c.start.Add(batch.ResultURLTTL).Truncate(time.Second).UTC()
		g := batch.Grant{Tenant: j.Tenant, JobID: j.ID, ClientID: c.clientID, Gen: c.secretGen, Detalle: c.scopes&scopeExplicar != 0}
		v.ResultadoURL = s.Batch.Signer.Sign(g, exp)
		v.ResultadoExpiraEn = &exp
	}
	return v
}

// handleBatchCreate queues a batch job. Beyond the spec it accepts an
// Idempotency-Key, as POST /v1/decisiones does: a repeat of the same body
// (canonical JSON, or the bytes as sent) within 24 h is answered with the
// first job and creates nothing, past the hourly limit too (mayReplay), so
// the client library retries a creation whose answer was lost.
func (s *Server) handleBatchCreate(c *call) error {
	key, v, err := decodeWith(c, idempotencyKey, batchSchema)
	if err != nil {
		return err
	}
	cl, seg := v.Field("clientes"), v.Field("segmento")
	hasCl, hasSeg := cl.Present() && !cl.IsNull(), seg.Present() && !seg.IsNull()
	if hasCl == hasSeg {
		return &validationError{detail: []schema.Violation{schema.ValueError([]any{"body"}, "envíe exactamente uno de clientes o segmento", nil)}}
	}
	sub := batch.Submission{CampanaID: v.Field("campana_id").String(), Explain: c.scopes&scopeExplicar != 0}
	if hasCl {
		sub.Clientes = make([]string, 0, cl.Len())
		for _, it := range cl.Items() {
			sub.Clientes = append(sub.Clientes, it.String())
		}
	} else {
		raw := seg.JSON()
		parsed, err := engine.ParseSegmentJSON(raw)
		if err != nil {
			var se *engine.SegmentError
			if errors.As(err, &se) {
				var bad []schema.Violation
				for _, sv := range se.Violations {
					loc := append([]any{"body"}, sv.Loc...)
					if sv.Type == "value_error" { // worded as every other value_error (pydantic v2)
						bad = append(bad, schema.ValueError(loc, sv.Msg, sv.Input))
						continue
					}
					bad = append(bad, schema.Violation{Loc: loc, Msg: sv.Msg, Type: sv.Type, Input: sv.Input, Ctx: sv.Ctx})
				}
				return &validationError{detail: bad}
			}
			return err
		}
		sub.Segmento, sub.SegmentoRaw = parsed, raw
	}
	if key != "" {
		// Streamed into the hash: a body of up to 96 MB is not copied.
		sub.Idempotency = engine.Idempotency{Key: key, BodyHash: engine.HashBatchBody(v), RawBodyHash: engine.HashBatchBody(bytes.NewReader(c.body))}
	}
	j, err := s.Batch.Submit(c.tenant.ID, sub)
	var re *batch.RetryError
	switch {
	case errors.Is(err, engine.ErrIdempotencyConflict):
		return idemConflict(err)
	case errors.As(err, &re):
		return batchBusy(re)
	case errors.Is(err, engine.ErrNoCampaign):
		return &validationError{detail: []schema.Violation{schema.ValueError([]any{"body", "campana_id"}, "la campaña no está definida; defínala con PUT /v1/campanas/{campana_id}", sub.CampanaID)}}
	case err != nil:
		return err
	}
	c.w.Header().Set("Location", "/v1/lotes-decision/"+url.PathEscape(j.ID))
	c.answer = answer{http.StatusAccepted, map[string]any{"job_id": j.ID, "estado": j.Estado, "creado_en": j.CreadoEn}}
	return nil
}

func (s *Server) job(c *call) (*batch.Job, error) {
	j, err := s.Batch.Job(c.tenant.ID, c.params.ByName("job_id"))
	if errors.Is(err, batch.ErrNotFound) {
		return nil, errKind(kindNotFound)
	}
	return j, err
}

func (s *Server) handleBatchStatus(c *call) error {
	j, err := s.job(c)
	if err != nil {
		return err
	}
	// A completed job's resultado_url downloads the result without a
	// token until it expires: no cache keeps it.
	c.w.Header().Set("Cache-Control", "no-store")
	c.answer = answer{http.StatusOK, s.viewJob(c, j)}
	return nil
}

func (s *Server) handleBatchResult(c *call) error {
	j, err := s.job(c)
	if err != nil {
		return err
	}
	return s.sendResult(c, j, c.scopes&scopeExplicar != 0)
}

// handleSignedDownload serves a signed result URL: no token; an altered,
// expired or foreign URL answers 404 and leaks nothing, and so does one
// whose credential can no longer use the tokens it was minted with
// (revoked, suspended, its secret rotated past the grace: grantHolds). It
// serves what that credential may see: the lines as stored, without
// detalle when it lacks explicar:leer (the signature says which). A
// link that passes those checks for a paused tenant answers 503
// inquilino_pausado with Retry-After, as the tenant's every route does
// (its /resultado twin included), so that nothing of a tenant paused for
// an incident leaves; it downloads again once the tenant is resumed.
func (s *Server) handleSignedDownload(c *call) error {
	g, err := s.Batch.Signer.Verify(c.r.Method, c.r.URL.Path, c.r.URL.RawQuery, c.start)
	if err != nil || !s.grantHolds(g, c.start) {
		return errKind(kindNotFound)
	}
	if t, ok := s.DB.Tenant(g.Tenant); ok && t.Settings.Paused {
		return errPaused()
	}
	j, err := s.Batch.Job(g.Tenant, g.JobID)
	if err != nil {
		return errKind(kindNotFound)
	}
	return s.sendResult(c, j, g.Detalle)
}

// grantHolds reports whether the credential a signed URL was minted for
// would still be let in with the token it was minted with (authenticate's
// checks but the token's own expiry: the URL lives ResultURLTTL, longer
// than the token): it exists, belongs to the URL's tenant, is active, is
// not held at the abuse guard's suspension, and still accepts that secret
// generation.
// A URL of the earlier form names no credential and holds until its exp.
func (s *Server) grantHolds(g batch.Grant, now time.Time) bool {
	if g.ClientID == "" {
		return true
	}
	cred, ok := s.DB.Credential(g.ClientID)
	return ok && cred.Tenant == g.Tenant && cred.Active() && cred.AcceptsGeneration(g.Gen, now) &&
		s.abuse.level(cred.ClientID) < levelSuspension
}

// sendResult streams a result file: the stored zstd bytes as they are to a
// client that accepts zstd, decompressed on the fly otherwise. explain says
// whether the caller may see detalle (scope explicar:leer): the lines of a
// job made with that scope go to a caller without it decompressed and
// without detalle, whatever Accept-Encoding asks (detalle is only for
// credentials with the scope, as for an Idempotency-Key replay), one line
// at a time. A file gone (retention) is 404. The file is opened once, and
// what was opened is read whole before the status line (once for the file
// as it is: batch.Runner.VerifyResult) and then sent, so that a damaged
// one is a 500 rather than a 200 cut short.
func (s *Server) sendResult(c *call, j *batch.Job, explain bool) error {
	path, ok := s.Batch.ResultFile(j)
	if !ok {
		return errKind(kindNotFound)
	}
	res, err := batch.OpenResult(path)
	if errors.Is(err, fs.ErrNotExist) {
		return errKind(kindNotFound)
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	defer res.Close()
	if err := s.Batch.VerifyResult(res); err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	// The result's headers go on the result only, not on an error answer.
	h := c.w.Header()
	setResultHeaders := func() {
		h.Set("Content-Type", batch.ResultContentType)
		h.Set("Cache-Control", "no-store")
		h.Set("Vary", "Accept-Encoding")
	}
	strip := j.Explain && !explain
	if !strip && batch.AcceptsZstd(c.r.Header.Get("Accept-Encoding")) {
		setResultHeaders()
		h.Set("Content-Encoding", "zstd")
		h.Set("Content-Length", strconv.FormatInt(res.Size(), 10))
		c.w.WriteHeader(http.StatusOK)
		_, err := io.Copy(c.w, res.Compressed())
		return ignoreClientGone(err)
	}
	rd, err := res.Decompressed()
	if err != nil {
		return err
	}
	if strip {
		rd = batch.StripDetalleReader(rd)
	}
	setResultHeaders()
	c.w.WriteHeader(http.StatusOK)
	src := &readErr{r: rd}
	if _, err := io.Copy(c.w, src); err != nil && src.err != nil {
		// Damaged since it was verified: the status line went out, so
		// the only way to tell the client is to cut the response short
		// instead of ending it as if it were complete.
		s.log.Error().Err(src.err).Str("job_id", j.ID).Str("trace_id", c.trace).Msg("result file unreadable")
		s.Batch.ForgetVerified(res)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// readErr remembers the error of its reader, to tell a damaged source from
// a client that went away.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// ignoreClientGone drops errors after the status line went out: nothing can
// be told to the client any more.
func ignoreClientGone(error) error { return nil }

var webhookSchema = schema.Object(
	schema.Field("url", schema.URL("http", "https")).Required(),
	schema.Field("eventos", schema.Array(schema.String().Enum(batch.EventLoteCompletado)).Items(1, 10)).Required(),
)

// webhookResolveTimeout bounds the name resolution of a registration: a
// name not resolved by then is registered as one that does not resolve.
const webhookResolveTimeout = 5 * time.Second

// webhookURLRefused is the 422 on body.url of a webhook destination the
// schema lets through but registration refuses: url_parsing with its
// reason in ctx.error, as pydantic gives every url_parsing.
func webhookURLRefused(reason string, input any) error {
	return &validationError{detail: []schema.Violation{{Loc: []any{"body", "url"}, Type: "url_parsing",
		Msg: "URL no admitida: " + reason, Input: input, Ctx: map[string]any{"error": reason}}}}
}

// handlePutWebhook registers the tenant's webhook. Unless the server
// allows private destinations, a URL whose host is, or resolves to, an
// address of the loopback, private, link-local or metadata ranges (and the
// like: batch.CheckDestination) is 422 on body.url (contract §7). A name
// that does not resolve now is registered: it names none of those, and
// every delivery attempt checks the destination again. A URL with user
// information (https://user:pass@host) is 422 too, its password masked in
// the error's input.
func (s *Server) handlePutWebhook(c *call) error {
	v, err := decode(c.body, webhookSchema)
	if err != nil {
		return err
	}
	u := v.Field("url").String()
	if pu, err := url.Parse(u); err == nil && pu.User != nil {
		// The registration is stored, answered and shown in the console;
		// a password in it would be a secret kept and echoed in clear.
		// The deliveries are signed (webhook-signature) instead.
		return webhookURLRefused("no debe llevar usuario ni contraseña; cada entrega va firmada con el secreto", pu.Redacted())
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), webhookResolveTimeout)
	err = batch.CheckDestination(ctx, u, s.WebhookAllowPrivate, s.WebhookResolve)
	cancel()
	if err != nil && !errors.Is(err, batch.ErrWebhookUnresolved) {
		if errors.Is(err, batch.ErrWebhookURL) { // what the schema lets through: a port out of range
			const reason = "invalid port number"
			return &validationError{detail: []schema.Violation{{Loc: []any{"body", "url"}, Type: "url_parsing",
				Msg: "Input should be a valid URL, " + reason, Input: u, Ctx: map[string]any{"error": reason}}}}
		}
		return webhookURLRefused("destino privado, de loopback, link-local o de metadatos", u)
	}
	var eventos []string
	for _, it := range v.Field("eventos").Items() {
		eventos = append(eventos, it.String())
	}
	reg, err := s.Webhooks.Register(c.tenant.ID, u, eventos, c.now())
	if err != nil {
		return err
	}
	c.w.Header().Set("Cache-Control", "no-store") // the signing secret, shown once: no cache keeps it
	c.answer = answer{http.StatusOK, map[string]any{"url": reg.URL, "eventos": reg.Eventos, "secreto": reg.Secreto, "creado_en": reg.CreadoEn}}
	return nil
}

func (s *Server) handleDeleteWebhook(c *call) error {
	if err := s.Webhooks.Delete(c.tenant.ID); err != nil {
		return err
	}
	c.answer = answer{http.StatusOK, struct{}{}}
	return nil
}
