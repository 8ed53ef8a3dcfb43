package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/coupond/coupond/jsonappend"
)

// jsonType is the Content-Type of every JSON body. Header values shared by
// requests (this, the User-Agent, the token) are never modified: neither
// net/http nor a RoundTripper may change a request's headers.
var jsonType = []string{"application/json"}

// send makes one HTTP request with the bearer token, the User-Agent and,
// when set, the Idempotency-Key and extra headers. A 401 answer drops the
// token and the request is sent once more with a fresh one (the token may
// have been revoked or the server restarted with new keys). The caller
// closes the body of the answer.
func (c *Client) send(ctx context.Context, method, url string, body []byte, idemKey []string, hdr http.Header) (*http.Response, error) {
	for refreshed := false; ; refreshed = true {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			return nil, &notSentError{err}
		}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return nil, err
		}
		h := req.Header
		for k, v := range hdr {
			h[k] = v
		}
		h["Authorization"] = tok.value
		h["User-Agent"] = c.ua
		if body != nil {
			h["Content-Type"] = jsonType
		}
		if idemKey != nil {
			h["Idempotency-Key"] = idemKey
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if dialFailed(err) {
				return nil, &notSentError{err}
			}
			return nil, err
		}
		if resp.StatusCode != http.StatusUnauthorized || refreshed {
			return resp, nil
		}
		drain(resp)
		c.tokens.invalidate(tok)
	}
}

// notSentError is a failure before a request left: its token could not
// be fetched, or no connection to the server could be made. Nothing was
// sent, so a retry cannot act twice.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// dialFailed reports whether err is a failure to connect: a *net.OpError
// with Op "dial", possibly inside a proxy's "proxyconnect" one. A refused
// connection (ECONNREFUSED) is one, whatever the platform calls it, so
// syscall, which has no ECONNREFUSED on plan9, is not needed. No byte of
// the request was written then.
func dialFailed(err error) bool {
	for {
		var op *net.OpError
		if !errors.As(err, &op) {
			return false
		}
		if op.Op == "dial" {
			return true
		}
		err = op.Err
	}
}

// drain reads a little of an unwanted body and closes it so the connection
// can be reused.
func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
}

// maxAnswer bounds the 2xx answers read whole, but the customer export.
const maxAnswer = 64 << 20

// decodeAnswer reads a JSON answer into out (nil: discard), or the *Error
// of a non-2xx status, and closes the body.
func (c *Client) decodeAnswer(resp *http.Response, out any) error {
	buf, _ := c.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	defer c.bufs.Put(buf)
	return c.decodeWith(resp, out, buf, maxAnswer)
}

// decodeUnbounded is decodeAnswer for a 2xx answer of any length (the
// customer export, which the server streams whatever the customer's
// history), read into a buffer of its own: a pooled one would keep the
// largest export's memory alive.
func (c *Client) decodeUnbounded(resp *http.Response, out any) error {
	return c.decodeWith(resp, out, new(bytes.Buffer), math.MaxInt64)
}

// decodeWith is decodeAnswer reading into buf at most limit bytes of a
// 2xx answer (maxErrorBody of any other).
func (c *Client) decodeWith(resp *http.Response, out any, buf *bytes.Buffer, limit int64) error {
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		limit = maxErrorBody
	}
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit)); err != nil {
		return fmt.Errorf("coupond: reading answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return parseError(resp.StatusCode, resp.Header, buf.Bytes(), c.cfg.clock.now())
	}
	if out == nil {
		return nil
	}
	if err := unmarshalObject(buf.Bytes(), out); err != nil {
		return fmt.Errorf("coupond: %s is not the documented JSON: %w", answerOf(resp), err)
	}
	return nil
}

// unmarshalObject decodes data, which must be a JSON object, into out.
// Every answer of the API (and every line of a result file) is one; null,
// which encoding/json reads into the zero value without a word, is not.
func unmarshalObject(data []byte, out any) error {
	if b := bytes.TrimLeft(data, " \t\r\n"); len(b) > 0 && b[0] != '{' {
		return errors.New("want a JSON object")
	}
	return json.Unmarshal(data, out)
}

// answerOf names the request resp answers, for errors. A RoundTripper may
// return a response without its Request (httptest.ResponseRecorder's
// Result does), so it is not relied on.
func answerOf(resp *http.Response) string {
	if r := resp.Request; r != nil && r.URL != nil {
		return "answer of " + r.Method + " " + r.URL.Path
	}
	return "answer"
}

// retryMode says which failures a call may retry.
type retryMode int

const (
	// retrySafe: the request has no effect twice (GET, PUT, DELETE, events
	// by event_id): retry 429, 5xx and lost connections.
	retrySafe retryMode = iota
	// retryRefused: a second copy could act twice: retry only answers that
	// say the server did nothing (429, 503).
	retryRefused
)

// callFor is call for a request whose answer is a T.
func callFor[T any](ctx context.Context, c *Client, method, path string, in any, mode retryMode) (*T, error) {
	var out T
	if err := c.call(ctx, method, path, in, &out, mode); err != nil {
		return nil, err
	}
	return &out, nil
}

// call sends a JSON request (in nil: no body) and decodes the answer into
// out, retrying per mode with backoff (20 times Decide's) and Retry-After
// within ctx's deadline, or the Client's timeout if ctx has none.
func (c *Client) call(ctx context.Context, method, path string, in, out any, mode retryMode) error {
	return c.callKeyed(ctx, method, path, in, out, mode, nil)
}

// callKeyed is call with an Idempotency-Key header (idemKey: its one
// value; nil: none), the same on every attempt.
func (c *Client) callKeyed(ctx context.Context, method, path string, in, out any, mode retryMode, idemKey []string) error {
	return c.callWith(ctx, method, path, in, out, mode, idemKey, nil)
}

// callWith is callKeyed with more headers, hdr, on every attempt.
func (c *Client) callWith(ctx context.Context, method, path string, in, out any, mode retryMode, idemKey []string, hdr http.Header) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var body []byte
	if in != nil {
		var err error
		if body, err = jsonappend.Marshal(in); err != nil {
			return fmt.Errorf("coupond: encoding %s %s: %w", method, path, err)
		}
	}
	return c.retry(ctx, 20, mode, func() error {
		resp, err := c.send(ctx, method, c.base+path, body, idemKey, hdr)
		if err != nil {
			return err
		}
		return c.decodeAnswer(resp, out)
	})
}

// retry runs attempt until it succeeds, fails for good, or the attempts or
// ctx's deadline run out; it returns the last error. scale multiplies the
// backoff. A wait that would pass the deadline ends the call at once; the
// deadline is read once, on the Client's clock, so that the waits count
// against it. A wait cut short by ctx returns ctx's error wrapped with the
// last one, so that errors.Is(err, context.Canceled) holds for a call
// canceled between attempts as during one.
func (c *Client) retry(ctx context.Context, scale time.Duration, mode retryMode, attempt func() error) error {
	end, _ := c.cfg.clock.deadline(ctx)
	var err error
	for n := 0; n < c.cfg.attempts; n++ {
		if err = attempt(); err == nil {
			return nil
		}
		wait, ok := c.retryWait(ctx, err, n, scale, mode)
		if !ok || n+1 == c.cfg.attempts {
			return err
		}
		if !c.cfg.clock.waitBefore(ctx, wait, end) {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return fmt.Errorf("%w while waiting to retry after: %w", ctxErr, err)
			}
			return err
		}
	}
	return err
}

// retryWait reports whether err after attempt n may be retried and after
// how long: the jittered backoff, or Retry-After if longer. A failed
// token fetch (lost connection, 429 or 5xx of the token endpoint) and a
// connection that could not be made are retried in every mode, since the
// request itself was not sent.
func (c *Client) retryWait(ctx context.Context, err error, n int, scale time.Duration, mode retryMode) (time.Duration, bool) {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return 0, false
	}
	var notSent *notSentError
	if errors.As(err, &notSent) {
		mode = retrySafe // a failed token fetch or dial: the request was not sent
	}
	wait := c.backoff(n, scale)
	var apiErr *Error
	switch {
	case errors.As(err, &apiErr):
		if !apiErr.retryable() || mode == retryRefused && apiErr.Status != 429 && apiErr.Status != 503 {
			return 0, false
		}
		wait = max(wait, apiErr.RetryAfter)
	case mode == retryRefused:
		return 0, false
	}
	return wait, true
}

// backoffCeil bounds the backoff between the attempts of one call,
// whatever WithRetries sets (a longer Retry-After is still honoured, up to
// MaxRetryAfter).
const backoffCeil = 5 * time.Second

// backoff is the wait before retry n+1: full jitter over
// min(cap, base·2ⁿ), both multiplied by scale, and below backoffCeil.
func (c *Client) backoff(n int, scale time.Duration) time.Duration {
	limit := scaled(c.cfg.backoffCap, scale, backoffCeil)
	ceil := doubled(scaled(c.cfg.backoffBase, scale, limit), limit, n)
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil)
}

// scaled is d·scale (scale >= 1), or limit if that is less, without
// overflow.
func scaled(d, scale, limit time.Duration) time.Duration {
	if d >= limit/scale {
		return limit
	}
	return d * scale
}

// doubled is min(limit, base·2ⁿ) for base and limit >= 0, without
// overflow however large n is.
func doubled(base time.Duration, limit time.Duration, n int) time.Duration {
	d := min(base, limit)
	for ; n > 0 && d > 0 && d < limit; n-- {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return d
}
