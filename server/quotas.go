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
