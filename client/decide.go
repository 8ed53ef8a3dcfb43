package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// DecideOption changes one Decide call.
type DecideOption func(*decideOptions)

type decideOptions struct {
	budget      time.Duration
	fallback    int
	hasFallback bool
}

// with returns o changed by opts; a copy, so that o itself stays off the
// heap when a call passes no options.
func (o decideOptions) with(opts []DecideOption) decideOptions {
	p := o
	for _, f := range opts {
		f(&p)
	}
	return p
}

// check names the first per-call option out of range, as config.check
// does for the Client's.
func (o *decideOptions) check() error {
	switch {
	case o.budget <= 0:
		return errors.New("coupond: option out of range: Budget: the budget must be positive")
	case o.hasFallback && o.fallback < 0:
		return errors.New("coupond: option out of range: FallbackAction: the action must be 0 (nothing) or a catalog id")
	}
	return nil
}

// FallbackAction sets the action this call returns when the engine does not
// answer, overriding WithFallback; it must be 0 or a catalog id.
func FallbackAction(accion int) DecideOption {
	return func(o *decideOptions) { o.fallback, o.hasFallback = accion, true }
}

// Budget sets this call's time budget, overriding WithBudget; it must be
// positive.
func Budget(d time.Duration) DecideOption { return func(o *decideOptions) { o.budget = d } }

// Decide asks the engine which action to take for one customer.
//
// It answers within the budget (WithBudget, Budget; default 100 ms) plus a
// few milliseconds at most. All attempts of one call carry the same
// Idempotency-Key, so the engine holds at most one decision per call however
// many attempts reach it. Decide retries, with exponential backoff and full
// jitter inside the budget: 5xx, 409 idempotencia_conflicto (an earlier
// attempt is still running), lost connections and timeouts of one attempt;
// and 429 when its Retry-After fits in what is left of the budget (else it
// stops at once instead of sleeping past the budget). The 429 of one
// customer's daily cap (3 decision requests per cliente_ref a day, Campo
// "cliente_ref") is neither retried nor a fallback: it returns the *Error,
// since the engine has decided for that customer today (send nothing).
//
// When the attempts or the budget run out, the tenant is paused (503
// inquilino_pausado) or the breaker is open (WithBreaker), Decide returns a
// Decision for the fallback action (FallbackAction, WithFallback) with
// EnRespaldo true, Propension 1, no DecisionID and the cause in Causa, and a
// nil error; the record of it (POST /v1/decisiones/respaldo) is queued and
// sent in the background until the server accepts it. Such a decision needs
// no confirmation, and its CUPON_RECIBIDO event carries no decision_id.
// Without a fallback action, these cases return an error wrapping
// ErrNoFallback and the cause; record what the caller did instead with
// RecordFallback and Replacing(err), so that a decision coupond made whose
// answer never arrived is voided, as the queued record does.
//
// A 2xx answer that is not JSON or has no decision_id counts as a failed
// attempt (retried, then the fallback or an error saying so), never as a
// decision.
//
// Answers a retry cannot fix (401, 403, 404, 409, 422, …) return an *Error
// and no Decision. After Close, a call that needs a new token returns an
// error wrapping ErrClosed and no fallback. If ctx is canceled Decide
// returns an error wrapping ctx's (errors.Is(err, context.Canceled)), no
// fallback and no record: an attempt may have reached coupond, whose
// decision, its answer lost, would hold the customer's reward window, so
// record what the caller did instead (accion 0 if nothing) with
// RecordFallback and Replacing(err), which voids it. A deadline of ctx
// sooner than the budget is the budget (one already passed gives the
// fallback at once, and counts as no failure of the engine for the
// breaker). A per-call option out of range
// (Budget not positive, FallbackAction negative) is an error naming it,
// with no attempt and no fallback.
func (c *Client) Decide(ctx context.Context, req PeticionDecision, opts ...DecideOption) (*Decision, error) {
	o := decideOptions{budget: c.cfg.budget, fallback: c.cfg.fallback, hasFallback: c.cfg.hasFallback}
	if len(opts) > 0 {
		o = o.with(opts)
		if err := o.check(); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		// The caller's deadline passed before the call: the engine was not
		// asked, so the breaker hears nothing of it.
		return c.fallback(&req, &o, "", whyLate, fmt.Errorf("%w before the first attempt: %w", ErrBudgetExhausted, err))
	}
	clk := c.cfg.clock
	start := clk.now()
	// Attempts stop a little before the budget ends, so that the fallback
	// is in the caller's hands within it.
	deadline := start.Add(o.budget - min(2*time.Millisecond, o.budget/50))
	if d, ok := clk.deadline(ctx); ok && d.Before(deadline) {
		deadline = d
	}
	allowed, probe := c.breaker.allow(start)
	if !allowed {
		return c.fallback(&req, &o, "", whyBreaker, ErrBreakerOpen)
	}
	body := appendDecisionRequest(make([]byte, 0, 128), &req)
	// One allocation holds the answer and the Idempotency-Key header value.
	s := new(decideScratch)
	s.key[0] = newIdempotencyKey()
	d, n, out, err := c.attempts(ctx, body, s, deadline)
	switch out {
	case decided:
		c.breaker.success(probe)
		c.decisions.Add(1)
		return d, nil
	case refused:
		c.breaker.success(probe) // the engine answered
		return nil, err
	case canceled:
		c.breaker.release(probe)
		// An attempt may have reached coupond, whose decision then holds
		// the customer's reward window: Replacing(err) can void it.
		return nil, &canceledError{cause: err, attempts: n, replaces: s.key[0]}
	case closed:
		c.breaker.release(probe)
		return nil, err
	case paused:
		c.breaker.failure(probe, clk.now())
		return c.fallback(&req, &o, s.key[0], whyPaused, err)
	}
	why := whyLate
	if out == limited {
		c.breaker.release(probe) // limits are no sign of a sick engine
		why = whyLimited
	} else {
		c.breaker.failure(probe, clk.now())
	}
	return c.fallback(&req, &o, s.key[0], why, fmt.Errorf("%w after %d attempts in %v: %w", ErrBudgetExhausted, n,
		clk.now().Sub(start).Round(time.Millisecond), err))
}

// outcome is how the attempts of one Decide ended.
type outcome int

const (
	decided  outcome = iota // the engine answered a decision
	refused                 // the API answered an error a retry cannot fix
	canceled                // the caller's context was canceled
	closed                  // the Client was closed and has no valid token
	paused                  // the tenant is paused
	limited                 // out of time or attempts, the last one a 429
	failed                  // out of time or attempts: timeouts, lost connections, 5xx
)

// attempts makes the attempts of one decision, all with one
// Idempotency-Key, until one succeeds, fails for good, or the attempts or
// the time up to deadline run out, with s's key. It returns the decision or
// the last error, and how many attempts it made.
func (c *Client) attempts(ctx context.Context, body []byte, s *decideScratch, deadline time.Time) (*Decision, int, outcome, error) {
	for n := 0; ; n++ {
		if n > 0 {
			c.retries.Add(1)
		}
		d, err := c.decideOnce(ctx, body, s, deadline)
		if err == nil {
			return d, n + 1, decided, nil
		}
		if ctx.Err() == context.Canceled {
			return nil, n + 1, canceled, ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return nil, n + 1, closed, err
		}
		var apiErr *Error
		wait := c.backoff(n, 1)
		if errors.As(err, &apiErr) {
			switch {
			case apiErr.paused():
				return nil, n + 1, paused, err
			case !apiErr.retryable() || apiErr.customerCapped():
				return nil, n + 1, refused, err
			}
			wait = max(wait, apiErr.RetryAfter)
		}
		if n+1 == c.cfg.attempts || !c.cfg.clock.waitBefore(ctx, wait, deadline) {
			if ctx.Err() == context.Canceled { // during the wait
				return nil, n + 1, canceled, ctx.Err()
			}
			if apiErr != nil && apiErr.Status == http.StatusTooManyRequests {
				return nil, n + 1, limited, err
			}
			return nil, n + 1, failed, err
		}
	}
}

// decideScratch is what one Decide call allocates once for all attempts.
type decideScratch struct {
	d   Decision
	key [1]string // the Idempotency-Key header value
}

// decideOnce is one attempt, bounded by the budget's deadline and the
// attempt timeout (both on the Client's clock).
func (c *Client) decideOnce(ctx context.Context, body []byte, s *decideScratch, deadline time.Time) (*Decision, error) {
	if t := c.cfg.attemptTimeout; t > 0 {
		if at := c.cfg.clock.now().Add(t); at.Before(deadline) {
			deadline = at
		}
	}
	actx, cancel := c.cfg.clock.timeout(ctx, deadline)
	defer cancel()
	resp, err := c.send(actx, http.MethodPost, c.decideURL, body, s.key[:], nil)
	if err != nil {
		return nil, err
	}
	s.d = Decision{}
	if err := c.decodeAnswer(resp, &s.d); err != nil {
		return nil, err
	}
	if s.d.DecisionID == "" {
		// Not the engine's answer (a stub, a proxy's 200): a failed
		// attempt, never a decision nobody can confirm.
		return nil, fmt.Errorf("coupond: %s (%d) has no decision_id", answerOf(resp), resp.StatusCode)
	}
	return &s.d, nil
}

// The reasons a fallback decision gives in its Motivo, after "respaldo: ".
const (
	whyLate    = "el motor no respondió a tiempo"
	whyLimited = "el motor limitó las peticiones (429)"
	whyPaused  = "el inquilino está pausado"
	whyBreaker = "el motor falló varias veces seguidas (cortocircuito abierto)"
)

// fallback answers the fallback action, if any, and queues its record;
// why (whyLate, ...) is the reason its Motivo gives, replaces the
// Idempotency-Key of the attempts made ("" when none was sent): a
// decision they made whose answer was lost is voided by the record.
func (c *Client) fallback(req *PeticionDecision, o *decideOptions, replaces, why string, cause error) (*Decision, error) {
	if !o.hasFallback {
		return nil, &noFallbackError{cause: cause, replaces: replaces}
	}
	c.respaldos.Add(1)
	c.fallbacks.enqueue(queuedFallback{replaces: replaces, body: PeticionRespaldo{Accion: o.fallback,
		Canal: req.Contexto.Canal, ClienteRef: req.ClienteRef, CampanaID: req.Contexto.CampanaID}})
	return &Decision{Accion: o.fallback, Propension: 1, EnRespaldo: true,
		Motivo: "respaldo: " + why + "; se aplicó la acción de respaldo del cliente", Causa: cause}, nil
}

// noFallbackError is Decide's error without a fallback action: it wraps
// ErrNoFallback and the cause, and carries the Idempotency-Key of the
// attempts made ("" when none was sent) for Replacing.
type noFallbackError struct {
	cause    error
	replaces string
}

func (e *noFallbackError) Error() string       { return ErrNoFallback.Error() + ": " + e.cause.Error() }
func (e *noFallbackError) Unwrap() []error     { return []error{ErrNoFallback, e.cause} }
func (e *noFallbackError) replacedKey() string { return e.replaces }

// canceledError is Decide's error when the caller canceled ctx after the
// attempts began: it wraps ctx's error (errors.Is(err, context.Canceled))
// and carries their Idempotency-Key for Replacing, since an attempt that
// reached coupond may have made a decision whose answer never arrived.
type canceledError struct {
	cause    error
	attempts int
	replaces string
}

func (e *canceledError) Error() string {
	return fmt.Sprintf("coupond: decision canceled after %d attempts (pass this error to RecordFallback with Replacing): %v",
		e.attempts, e.cause)
}
func (e *canceledError) Unwrap() error       { return e.cause }
func (e *canceledError) replacedKey() string { return e.replaces }

// RecordOption changes one RecordFallback call.
type RecordOption func(*recordOptions)

type recordOptions struct{ replaces string }

// Replacing makes the record take the place of the decision request whose
// Decide returned err (an error wrapping ErrNoFallback, or one wrapping
// context.Canceled after its attempts began): the record names that
// request's Idempotency-Key (Replaces-Idempotency-Key), so a decision
// coupond made whose answer never arrived is voided (rechazada, its send
// given back, its reward window closed) instead of holding the customer
// for weeks. Any other err, or one of a Decide whose attempts never left
// (breaker open, deadline passed, ctx canceled before the call), changes
// nothing.
func Replacing(err error) RecordOption {
	var r interface{ replacedKey() string }
	key := ""
	if errors.As(err, &r) {
		key = r.replacedKey()
	}
	return func(o *recordOptions) { o.replaces = key }
}

// newIdempotencyKey returns a fresh key for one logical decision: 128
// random bits (the runtime's per-thread ChaCha8 generator, seeded from the
// OS), unique enough that no two decisions of a credential share one.
func newIdempotencyKey() string {
	var b [36]byte
	copy(b[:4], "cpd-")
	x := strconv.AppendUint(b[4:4], rand.Uint64()|1<<63, 16)
	x = strconv.AppendUint(x, rand.Uint64()|1<<63, 16)
	return string(b[:4+len(x)])
}
