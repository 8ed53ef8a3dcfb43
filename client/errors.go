package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors of the library; check them with errors.Is.
var (
	// ErrBreakerOpen: recent decisions failed, so Decide answered the
	// fallback without calling the engine (Decision.Causa; without a
	// fallback, wrapped with ErrNoFallback).
	ErrBreakerOpen = errors.New("coupond: circuit breaker open")
	// ErrBudgetExhausted: the time budget or the attempts of one Decide ran
	// out; the error wraps the last failure too, such as an *Error or
	// context.DeadlineExceeded (Decision.Causa; without a fallback, wrapped
	// with ErrNoFallback).
	ErrBudgetExhausted = errors.New("coupond: decision budget exhausted")
	// ErrNoFallback: the engine did not answer and neither the call nor the
	// client named a fallback action. It wraps the failure. Record what
	// your own rule did instead with RecordFallback.
	ErrNoFallback = errors.New("coupond: no fallback action configured")
	// ErrClosed: a call after Close needed a new token, and a closed Client
	// starts no more background work to fetch one.
	ErrClosed = errors.New("coupond: client closed")
)

// Error is an answer of the API with a status other than 2xx. Check it with
// errors.As:
//
//	var apiErr *client.Error
//	if errors.As(err, &apiErr) && apiErr.Codigo == "decision_caducada" { … }
//
// A 422 has Codigo "validacion" (the API sends no codigo with it: the items
// are in Detail) and Campo set to the dotted path of the first item. An
// answer whose body is not the API's error (a proxy's page, a 3xx) has
// Codigo "http_" and the status, such as "http_502", and the status text
// as Mensaje. A token request the server refuses is an *Error too (a wrong
// secret: 401 no_autenticado).
type Error struct {
	Status  int            // HTTP status
	Codigo  string         // error code: no_autenticado, limite_excedido, …
	Mensaje string         // human message, at most 512 characters
	Campo   string         // failing field, if any
	Detalle map[string]any // codigo-specific details, if any
	TraceID string         // quote to support; also the X-Trace-Id header
	// Detail holds the items of a 422 (HTTPValidationError).
	Detail []ValidationItem
	// RetryAfter is the Retry-After header of a 429 or 503, in seconds or
	// as an HTTP date: 0 if absent, unreadable, negative or past, and at
	// most MaxRetryAfter.
	RetryAfter time.Duration
}

// MaxRetryAfter caps Error.RetryAfter: a larger Retry-After (which would
// overflow a time.Duration, or have a call sleep for days) counts as this.
// A call never waits past its context's deadline for a Retry-After: it
// returns the 429 or 503 at once instead.
const MaxRetryAfter = 24 * time.Hour

// CodigoValidacion is Error.Codigo for a 422 answer.
const CodigoValidacion = "validacion"

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coupond: %d %s", e.Status, e.Codigo)
	if e.Mensaje != "" {
		b.WriteString(": " + e.Mensaje)
	}
	if e.Campo != "" {
		b.WriteString(" (campo " + e.Campo + ")")
	}
	for i, d := range e.Detail {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Detail)-i)
			break
		}
		fmt.Fprintf(&b, "; %s: %s", locString(d.Loc), d.Msg)
	}
	if e.TraceID != "" {
		b.WriteString(" [trace_id " + e.TraceID + "]")
	}
	return b.String()
}

// locString joins a 422 loc without its first element ("body", "path", …):
// ["body","contexto","canal"] is "contexto.canal".
func locString(loc []any) string {
	var parts []string
	for i, p := range loc {
		if i == 0 && len(loc) > 1 {
			continue
		}
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, ".")
}

// Retryable reports whether sending the same request again later can
// succeed (after RetryAfter, when the answer set it): a 429 other than one
// customer's daily cap (3 decision requests a day, Campo "cliente_ref":
// send that customer nothing more today), a 5xx (a paused tenant, a full
// disk, a fault), and a 409 idempotencia_conflicto, which is also what a
// key reused with another body gets: retry with the same key only a
// request you know you sent once. The library's calls already retry these
// within their budget; Retryable is for work a caller queues for later.
// Everything else (a 4xx, a 422) needs the request or the credential
// changed first.
func (e *Error) Retryable() bool { return e.retryable() && !e.customerCapped() }

// retryable reports whether a new attempt of the same request can succeed:
// 429, 5xx and 409 idempotencia_conflicto (the first attempt with the same
// Idempotency-Key is still running).
func (e *Error) retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 ||
		e.Status == http.StatusConflict && e.Codigo == "idempotencia_conflicto"
}

// customerCapped reports whether e is the 429 of one customer's daily cap
// (3 decision requests per cliente_ref per day; the server names the
// field): neither waiting nor the caller's own rule is what that customer
// needs, since the engine has already decided for them today.
func (e *Error) customerCapped() bool {
	return e.Status == http.StatusTooManyRequests && e.Campo == "cliente_ref"
}

// paused reports whether the operator paused the tenant.
func (e *Error) paused() bool { return e.Codigo == "inquilino_pausado" }

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date
// (RFC 9110 10.2.3), as of now: 0 if it is unreadable, negative or past,
// MaxRetryAfter if it is longer, with no overflow.
func parseRetryAfter(s string, now time.Time) time.Duration {
	s = strings.TrimSpace(s)
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// ParseInt saturates out-of-range values, keeping their sign.
		switch {
		case secs <= 0:
			return 0
		case secs >= int64(MaxRetryAfter/time.Second):
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter)
	}
	return 0
}

// parseError builds the *Error of a non-2xx answer from its status, headers
// and body (ErrorV1 or HTTPValidationError; anything else, such as a proxy's
// HTML page, keeps only the status); an HTTP-date Retry-After is read as of
// now.
func parseError(status int, h http.Header, body []byte, now time.Time) *Error {
	e := &Error{Status: status, TraceID: h.Get("X-Trace-Id")}
	if s := h.Get("Retry-After"); s != "" {
		e.RetryAfter = parseRetryAfter(s, now)
	}
	if status == http.StatusUnprocessableEntity {
		var v HTTPValidationError
		if json.Unmarshal(body, &v) == nil && v.Detail != nil {
			e.Codigo, e.Detail = CodigoValidacion, v.Detail
			e.Mensaje = "la petición no pasó la validación"
			if len(v.Detail) > 0 {
				e.Campo = locString(v.Detail[0].Loc)
			}
			return e
		}
	}
	var v ErrorV1
	if json.Unmarshal(body, &v) == nil && v.Codigo != "" {
		e.Codigo, e.Mensaje, e.Detalle = v.Codigo, v.Mensaje, v.Detalle
		if v.Campo != nil {
			e.Campo = *v.Campo
		}
		if v.TraceID != "" {
			e.TraceID = v.TraceID
		}
		return e
	}
	e.Codigo = "http_" + strconv.Itoa(status)
	e.Mensaje = http.StatusText(status)
	if status/100 == 3 {
		e.Mensaje += " (redirects are not followed: check the base URL)"
	}
	return e
}
