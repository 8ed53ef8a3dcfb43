package server

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

// decisionSchema is the online decision request (contract §4). The optional
// members of contexto may also be null, read as absent.
var decisionSchema = schema.Object(
	schema.Field("cliente_ref", schema.ClienteRef()).Required(),
	schema.Field("contexto", schema.Object(
		schema.Field("canal", schema.String().Len(1, 256)).Required(),
		schema.Field("campana_id", schema.ID().Len(1, 128).Nullable()),
		schema.Field("acciones_permitidas", schema.Array(schema.Int().Min(0)).Items(0, 1000).Nullable()),
	)).Required(),
)

// idemKeySchema is the Idempotency-Key header: 1 to 255 printable ASCII
// characters (the OpenAPI document gives the header this schema).
var idemKeySchema = schema.String().Len(1, 255).Pattern(`^[\x20-\x7E]+$`, func(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] >= 0x7f {
			return false
		}
	}
	return true
})

// idempotencyKey validates the Idempotency-Key header with idemKeySchema;
// a repeated header is a value_error.
func idempotencyKey(c *call) (string, error) { return keyHeader(c, "Idempotency-Key") }

// replacesHeader names, on a fallback record, the Idempotency-Key of the
// decision request whose answer never arrived and whose place the record
// takes (engine.FallbackInput.Replaces); beyond the spec.
const replacesHeader = "Replaces-Idempotency-Key"

// keyHeader validates header name, a key, with idemKeySchema: "" when it
// is absent; a repeated header is a value_error.
func keyHeader(c *call, name string) (string, error) {
	vals := c.r.Header.Values(name)
	if len(vals) == 0 {
		return "", nil
	}
	k := vals[0]
	if len(vals) > 1 {
		return "", &validationError{detail: []schema.Violation{
			schema.ValueError([]any{"header", name}, name+" debe enviarse una sola vez", k),
		}}
	}
	if bad := idemKeySchema.ValidateText(k, "header", name); len(bad) > 0 {
		return "", &validationError{detail: bad}
	}
	return k, nil
}

func (s *Server) handleDecide(c *call) error {
	key, v, err := decodeWith(c, idempotencyKey, decisionSchema)
	if err != nil {
		return err
	}
	ctx := v.Field("contexto")
	req := engine.Request{
		ClienteRef: v.Field("cliente_ref").String(),
		Canal:      ctx.Field("canal").String(),
		CampanaID:  ctx.Field("campana_id").String(),
		Explain:    c.scopes&scopeExplicar != 0,
		CapExempt:  c.tenant.Sandbox && !c.tenant.Settings.RateLimits,
	}
	if f := ctx.Field("acciones_permitidas"); f.Present() && !f.IsNull() {
		req.Allowed = []int{}
		for _, it := range f.Items() {
			req.Allowed = append(req.Allowed, int(it.Int()))
		}
	}
	if key != "" {
		// The body's identity is its canonical JSON (as an event's): a
		// retry that respaces, reorders keys or respells numbers is the
		// same request, not a conflict.
		req.Idempotency = engine.Idempotency{Key: key, BodyHash: engine.HashBody(v.JSON()), RawBodyHash: engine.HashBody(c.body)}
	}
	d, err := s.Engine.Decide(c.tenant.ID, req)
	if err != nil {
		return decideError(err)
	}
	c.answer = answer{http.StatusOK, d}
	if d.Accion != 0 && !d.EnRespaldo {
		c.sent = d.DecisionID
	}
	return nil
}

// decideError maps Decide's errors to the API's.
func decideError(err error) error {
	var capped *engine.DayLimitError
	switch {
	case errors.Is(err, engine.ErrQuota): // taken by a concurrent request since checkQuota
		return quotaError(err)
	case errors.As(err, &capped):
		// campo names cliente_ref: this customer's cap, not the
		// credential's rate, so a client knows waiting or its own rule
		// would only send to a customer the engine already decided for.
		return &apiError{kind: kindRateLimited, retryAfter: capped.RetryAfter, campo: "cliente_ref",
			msg: "límite de 3 decisiones por cliente_ref por día alcanzado"}
	case errors.Is(err, engine.ErrIdempotencyConflict):
		return idemConflict(err)
	}
	return err
}

var confirmSchema = schema.Object(
	schema.Field("ejecutada", schema.Bool()).Required(),
	schema.Field("accion_real", schema.Int().Min(0).Nullable()),
	schema.Field("motivo_rechazo", schema.String().Len(0, 512).Nullable()),
	schema.Field("ts_ejecucion", schema.Timestamp().Nullable()),
)

// handleConfirm confirms the execution of a decision. Beyond the spec it
// accepts an Idempotency-Key, as POST /v1/decisiones does: the client
// library retries a confirmation whose answer was lost, and a repeat with
// the key gets the stored answer instead of 409 ejecucion_ya_confirmada.
func (s *Server) handleConfirm(c *call) error {
	key, v, err := decodeWith(c, idempotencyKey, confirmSchema)
	if err != nil {
		return err
	}
	id := c.params.ByName("decision_id")
	conf := engine.Confirmation{Ejecutada: v.Field("ejecutada").Bool()}
	if f := v.Field("accion_real"); f.Present() && !f.IsNull() {
		n := int(f.Int())
		conf.AccionReal = &n
	}
	if f := v.Field("motivo_rechazo"); f.Present() && !f.IsNull() {
		conf.MotivoRechazo = f.String()
	}
	if f := v.Field("ts_ejecucion"); f.Present() && !f.IsNull() {
		ts := f.Time()
		conf.TsEjecucion = &ts
	}
	conf.Check = func() error { return s.checkConfirmation(c, v, conf) }
	if key != "" {
		conf.Idempotency = engine.Idempotency{Key: key, BodyHash: engine.HashConfirmBody(id, v.JSON()), RawBodyHash: engine.HashConfirmBody(id, c.body)}
	}
	estado, err := s.Engine.Confirm(c.tenant.ID, id, conf)
	switch {
	case errors.Is(err, engine.ErrIdempotencyConflict):
		return &apiError{kind: kindIdempotencyConflict, msg: idemConflictMsg(err)}
	case errors.Is(err, engine.ErrNotFound):
		return errKind(kindNotFound)
	case errors.Is(err, engine.ErrAlreadyConfirmed):
		return errKind(kindAlreadyConfirmed)
	case errors.Is(err, engine.ErrDecisionExpired):
		return errKind(kindExpired)
	case errors.Is(err, engine.ErrUnstorableTime): // the schema's range refuses these first
		return &validationError{detail: []schema.Violation{schema.ValueError([]any{"body", "ts_ejecucion"}, "ts_ejecucion fuera del intervalo admitido", nil)}}
	case err != nil:
		return err
	}
	c.answer = answer{http.StatusOK, map[string]string{"decision_id": id, "estado_ejecucion": estado}}
	c.confirmed = id
	return nil
}

// checkConfirmation is the 422 of confirmation conf, body v, that the
// schema cannot tell: accion_real only with ejecutada true and known to the
// tenant, motivo_rechazo only with ejecutada false, ts_ejecucion not after
// the tenant's clock plus tsAhead. Confirm runs it after a keyed replay's
// lookup, so a repeat whose accion_real left the catalog since still gets
// its stored answer.
func (s *Server) checkConfirmation(c *call, v schema.Value, conf engine.Confirmation) error {
	var bad []schema.Violation
	if n := conf.AccionReal; n != nil {
		if !conf.Ejecutada {
			bad = append(bad, schema.ValueError([]any{"body", "accion_real"}, "accion_real solo se admite con ejecutada true", *n))
		}
		known, err := s.knownAccionReal(c, *n)
		if err != nil {
			return err
		}
		if !known {
			bad = append(bad, schema.ValueError([]any{"body", "accion_real"}, "la acción no existe en el catálogo del inquilino", *n))
		}
	}
	if f := v.Field("motivo_rechazo"); f.Present() && !f.IsNull() && conf.Ejecutada {
		bad = append(bad, schema.ValueError([]any{"body", "motivo_rechazo"}, "motivo_rechazo solo se admite con ejecutada false", f.String()))
	}
	if ts := conf.TsEjecucion; ts != nil {
		if limit := c.now().Add(tsAhead); ts.After(limit) {
			bad = append(bad, schema.ValueError([]any{"body", "ts_ejecucion"},
				"ts_ejecucion no puede ser posterior a "+limit.UTC().Format(time.RFC3339)+" (reloj del inquilino más 5 minutos)", v.Field("ts_ejecucion").String()))
		}
	}
	if len(bad) > 0 {
		return &validationError{detail: bad}
	}
	return nil
}

// knownAccionReal reports whether accion_real n of a confirmation of the
// decision in the path names an action the caller may have applied: 0, an
// action of the tenant's catalog, active or not, a coupon an earlier
// catalog held (engine.Catalog.Known), or one of the decision's own
// candidates, its decided action included, which a catalog replaced since
// may no longer list: the caller sent it before the catalog changed. An id
// that names no decision of the tenant gives false for the last, as before
// any lookup: the 422 comes before the 404 (contract §7).
func (s *Server) knownAccionReal(c *call, n int) (bool, error) {
	if n == 0 {
		return true, nil
	}
	cat, err := s.Engine.Campaigns.Catalog(c.tenant.ID)
	if err != nil {
		return false, err
	}
	if cat.Known(n) != nil {
		return true, nil
	}
	r, err := s.Engine.DecisionByID(c.tenant.ID, c.params.ByName("decision_id"))
	if errors.Is(err, engine.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return r.Accion == n || slices.Contains(r.Candidates, n), nil
}

var fallbackSchema = schema.Object(
	schema.Field("accion", schema.Int().Min(0)).Required(),
	schema.Field("canal", schema.String().Len(1, 256)).Required(),
	schema.Field("cliente_ref", schema.ClienteRef()).Required(),
	schema.Field("campana_id", schema.ID().Len(1, 128)),
)

// handleFallback records a fallback decision. Beyond the spec it accepts
// an Idempotency-Key, as POST /v1/decisiones does: the client library
// retries a record whose answer was lost, and a repeat with the key stores
// nothing more. Also beyond the spec, Replaces-Idempotency-Key names the
// decision request whose answer never arrived: its decision, still
// unconfirmed, is voided (engine.FallbackInput.Replaces).
func (s *Server) handleFallback(c *call) error {
	var replaces string
	key, v, err := decodeWith(c, func(c *call) (string, error) {
		k, kerr := idempotencyKey(c)
		r, rerr := keyHeader(c, replacesHeader)
		replaces = r
		return k, joinValidation(kerr, rerr)
	}, fallbackSchema)
	if err != nil {
		return err
	}
	in := engine.FallbackInput{
		Accion: int(v.Field("accion").Int()), Canal: v.Field("canal").String(),
		ClienteRef: v.Field("cliente_ref").String(), CampanaID: v.Field("campana_id").String(),
		Replaces: replaces,
	}
	if key != "" {
		in.Idempotency = engine.Idempotency{Key: key, BodyHash: engine.HashFallbackBody(v.JSON()), RawBodyHash: engine.HashFallbackBody(c.body)}
	}
	err = s.Engine.Fallback(c.tenant.ID, in)
	if errors.Is(err, engine.ErrIdempotencyConflict) {
		return &apiError{kind: kindIdempotencyConflict, msg: idemConflictMsg(err)}
	}
	if errors.Is(err, engine.ErrUnknownAction) {
		return &validationError{detail: []schema.Violation{
			schema.ValueError([]any{"body", "accion"}, "la acción no existe en el catálogo del inquilino", in.Accion),
		}}
	}
	if err != nil {
		return err
	}
	s.metrics.decision(c.tenant.ID, "respaldo", &engine.Decision{Accion: in.Accion, EnRespaldo: true})
	c.answer = answer{http.StatusOK, struct{}{}}
	return nil
}
