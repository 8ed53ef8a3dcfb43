package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// CreateBatch starts a batch job (POST /v1/lotes-decision). The server runs
// one job per tenant at a time and at most one an hour: meanwhile the answer
// is 429 with Retry-After, its Detalle["job_id"] the job that holds the hour
// (the one an earlier call made, if its answer was lost). Every attempt of one call carries the same
// Idempotency-Key (coupond accepts it on this route beyond the API's
// spec), so it is retried as Decide is (429 that fits in ctx's deadline,
// 5xx, 409 idempotencia_conflicto, lost connections) and creates one job:
// a retry whose first attempt landed gets that job back, even past the
// hourly limit. A second call is a second job.
func (c *Client) CreateBatch(ctx context.Context, p PeticionLoteDecision) (*RespuestaLoteDecision, error) {
	var out RespuestaLoteDecision
	key := []string{newIdempotencyKey()}
	if err := c.callKeyed(ctx, http.MethodPost, "/v1/lotes-decision", &p, &out, retrySafe, key); err != nil {
		return nil, err
	}
	return &out, nil
}

// Batch returns the state of a batch job (GET /v1/lotes-decision/{job_id}).
func (c *Client) Batch(ctx context.Context, jobID string) (*EstadoLote, error) {
	id, err := pathSegment("job_id", jobID)
	if err != nil {
		return nil, err
	}
	return callFor[EstadoLote](ctx, c, http.MethodGet, "/v1/lotes-decision/"+id, nil, retrySafe)
}

// ErrBatchFailed: WaitBatch saw the job end in state fallido.
var ErrBatchFailed = errors.New("coupond: batch job failed")

// WaitBatch polls a batch job (WithPollInterval) until it is completado or
// fallido, calling progress (if not nil) with every state it reads. It
// returns the last state; a failed job also returns an error wrapping
// ErrBatchFailed with the job's error. ctx bounds the wait (the Client's
// default timeout does not apply to the whole wait, only to each poll).
// A poll that failed for a cause the server's return can end (a lost or
// refused connection, 429 or 5xx: a server restarting, a paused tenant)
// is made again after the interval, or its Retry-After if longer, until
// ctx ends; the error then wraps ctx's and the last poll's. Any other
// failed poll (404, an answer that is not the API's) is returned at once.
func (c *Client) WaitBatch(ctx context.Context, jobID string, progress func(EstadoLote)) (*EstadoLote, error) {
	for {
		st, err := c.Batch(ctx, jobID)
		if err != nil {
			wait, ok := pollAgain(ctx, err)
			if ctxErr := ctx.Err(); !ok && ctxErr != nil && !errors.Is(err, ctxErr) {
				// ctx ended while the poll failed for another cause.
				return nil, fmt.Errorf("%w; the last poll: %w", ctxErr, err)
			}
			if !ok {
				return nil, err
			}
			if !c.cfg.clock.wait(ctx, max(c.cfg.pollInterval, wait)) {
				return nil, fmt.Errorf("%w; the last poll: %w", ctx.Err(), err)
			}
			continue
		}
		if progress != nil {
			progress(*st)
		}
		switch st.Estado {
		case EstadoCompletado:
			return st, nil
		case EstadoFallido:
			return st, fmt.Errorf("%w: %s", ErrBatchFailed, st.Error)
		}
		if !c.cfg.clock.wait(ctx, c.cfg.pollInterval) {
			return st, ctx.Err()
		}
	}
}

// pollAgain tells WaitBatch whether to poll again after err, a failed
// poll (see WaitBatch), and the Retry-After to wait at least.
func pollAgain(ctx context.Context, err error) (wait time.Duration, ok bool) {
	var apiErr *Error
	switch {
	case ctx.Err() != nil, errors.Is(err, ErrClosed):
		return 0, false
	case errors.As(err, &apiErr):
		return apiErr.RetryAfter, apiErr.retryable()
	}
	return 0, connectionLost(err)
}

// connectionLost reports whether err is a failure of the network a
// server's return can end: a refused, reset or closed connection, a
// timeout, a name not resolved. net/http wraps every failure of a request
// in a *url.Error, itself a net.Error, so the cause inside it is what
// counts: a certificate the Client does not trust, a plain HTTP answer to
// HTTPS or a redirect refused is no outage and would fail every poll.
func connectionLost(err error) bool {
	var netErr net.Error
	if !errors.As(err, &netErr) {
		return false
	}
	var urlErr *url.Error
	if !errors.As(err, &urlErr) {
		return true
	}
	return errors.As(urlErr.Err, &netErr) || errors.Is(urlErr.Err, io.EOF) || errors.Is(urlErr.Err, io.ErrUnexpectedEOF)
}

// BatchResults streams the decisions of a completed job
// (GET /v1/lotes-decision/{job_id}/resultado), one LineaResultado per
// iteration. It asks for the file as stored (Accept-Encoding: zstd) and
// decompresses it here, so fewer bytes cross the network. Iteration stops
// at the first error, which is yielded; breaking out of the loop closes the
// download. A download that breaks off yields its read error (such as
// context.Canceled, for errors.Is) after the whole lines before it.
//
//	for line, err := range c.BatchResults(ctx, jobID) {
//		if err != nil { … }
//		use(line.ClienteRef, line.Accion)
//	}
//
// ctx bounds the whole download (the Client's default timeout does not
// apply).
func (c *Client) BatchResults(ctx context.Context, jobID string) iter.Seq2[*LineaResultado, error] {
	return func(yield func(*LineaResultado, error) bool) {
		id, err := pathSegment("job_id", jobID)
		if err != nil {
			yield(nil, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var resp *http.Response
		err = c.retry(ctx, 20, retrySafe, func() error {
			r, err := c.send(ctx, http.MethodGet, c.base+"/v1/lotes-decision/"+id+"/resultado", nil, nil,
				http.Header{"Accept-Encoding": {"zstd"}, "Accept": {"application/x-ndjson"}})
			if err != nil {
				return err
			}
			if r.StatusCode != http.StatusOK {
				if err := c.decodeAnswer(r, nil); err != nil {
					return err
				}
				return fmt.Errorf("coupond: result download answered %d without the file", r.StatusCode)
			}
			resp = r
			return nil
		})
		if err != nil {
			yield(nil, err)
			return
		}
		defer resp.Body.Close()
		for line, err := range decodeResultLines(resp.Body, resp.Header.Get("Content-Encoding")) {
			if !yield(line, err) || err != nil {
				return
			}
		}
	}
}

// decodeResultLines decodes a result file, zstd-compressed when encoding
// says so, into its lines.
func decodeResultLines(body io.Reader, encoding string) iter.Seq2[*LineaResultado, error] {
	return func(yield func(*LineaResultado, error) bool) {
		r := body
		switch strings.ToLower(strings.TrimSpace(encoding)) {
		case "", "identity":
		case "zstd":
			dec, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1))
			if err != nil {
				yield(nil, fmt.Errorf("coupond: result file: %w", err))
				return
			}
			defer dec.Close()
			r = dec
		default:
			yield(nil, fmt.Errorf("coupond: result file sent with unknown Content-Encoding %q", encoding))
			return
		}
		br := bufio.NewReaderSize(r, 64<<10)
		for n := 1; ; n++ {
			data, err := br.ReadBytes('\n')
			if err != nil && err != io.EOF {
				// The download broke off (ctx canceled, connection lost):
				// what came before the error is a piece of a line, and
				// the error, not that piece, is why the loop ends.
				yield(nil, fmt.Errorf("coupond: result file after line %d: %w", n-1, err))
				return
			}
			if len(data) > 0 {
				line := new(LineaResultado)
				if jerr := unmarshalObject(data, line); jerr != nil {
					yield(nil, fmt.Errorf("coupond: result file line %d is not the documented JSON: %w", n, jerr))
					return
				}
				if !yield(line, nil) {
					return
				}
			}
			if err == io.EOF {
				return
			}
		}
	}
}
