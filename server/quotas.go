package server

import (
	"errors"

	"github.com/coupond/coupond/engine"
)

// Quota names (route.quota): the tenant's daily quotas, which the engine
// counts, and the batch slot.
const (
	quotaDecisions = engine.QuotaDecisions
	quotaEvents    = engine.QuotaEvents
	quotaBatch     = "lotes" // one job in progress and one per hour
)

// checkQuota answers 429 when the tenant's daily quota of kind is used up,
// with Retry-After up to the next UTC midnight of the tenant clock.
func (s *Server) checkQuota(c *call, kind string) error {
	if kind == quotaBatch {
		return s.checkBatchSlot(c)
	}
	if err := s.Engine.Quotas.CheckQuota(c.tenant, kind, c.now()); err != nil {
		return quotaError(err)
	}
	return nil
}

// quotaError maps a refusal of the tenant's daily quota (CheckQuota's, or
// the engine's when it takes the units) to 429 with its Retry-After; other
// errors go through.
func quotaError(err error) error {
	var lim *engine.DayLimitError
	if errors.As(err, &lim) {
		return &apiError{kind: kindRateLimited, retryAfter: lim.RetryAfter, msg: "cuota diaria del inquilino agotada"}
	}
	return err
}

// mayReplay reports whether a request refused by checkQuota with err, the
// 429 of the tenant's daily quota of kind, may be a replay, which the quota
// does not count (contract §5), so that its 429 waits for the answer: a
// decision request with an Idempotency-Key (the engine looks its record up
// before the quota), a request of events (a resend of events accepted
// before takes nothing), a batch creation with an Idempotency-Key past the
// batch slot (batch.Runner.Submit looks its record up before the slot).
// Any other error of checkQuota is answered as is.
func mayReplay(c *call, kind string, err error) bool {
	var ae *apiError
	if !errors.As(err, &ae) || ae.kind != kindRateLimited {
		return false
	}
	switch kind {
	case quotaEvents:
		return true
	case quotaDecisions, quotaBatch:
		return len(c.r.Header.Values("Idempotency-Key")) > 0
	}
	return false
}

// idemConflict is the 409 idempotencia_conflicto of err, an
// engine.ErrIdempotencyConflict. One of a key whose first request still
// runs (engine.ErrIdempotencyInFlight) is marked inFlight: the request may
// be that request's replay, so past the quota or the batch slot (which
// the first request may have just taken) it stays a 409, which clients
// retry soon and then get the first answer, rather than a 429 whose
// Retry-After (up to an hour, or to midnight) would lose that answer.
func idemConflict(err error) *apiError {
	return &apiError{kind: kindIdempotencyConflict, inFlight: errors.Is(err, engine.ErrIdempotencyInFlight), msg: idemConflictMsg(err)}
}

// idemConflictMsg is the mensaje of the 409 idempotencia_conflicto of err:
// for a key a fallback record's Replaces-Idempotency-Key spent
// (engine.ErrIdempotencySpent) it says so, since the body was not changed
// and nothing still runs; "" (the error table's) otherwise.
func idemConflictMsg(err error) string {
	if errors.Is(err, engine.ErrIdempotencySpent) {
		return "Idempotency-Key sustituida por un registro de respaldo (Replaces-Idempotency-Key): " +
			"la petición que nombra ya no decide nada; use una clave nueva"
	}
	return ""
}

// pastQuota is the answer to a request past the daily quota held back for
// a possible replay (call.overQuota): a refusal of the request (4xx) is the
// quota's 429, which comes first in contract section 7 (413/415, 422, 409
// come after it); a replay's answer, a server fault and the 409 of a key
// whose first request still runs (idemConflict) stay as they are.
func (c *call) pastQuota(err error) error {
	var ae *apiError
	if c.overQuota == nil || err == nil || errors.As(err, &ae) && ae.inFlight {
		return err
	}
	var ve *validationError
	if errors.As(err, &ve) || errors.As(err, &ae) && errorTable[ae.kind].status < 500 {
		return c.overQuota
	}
	return err
}
