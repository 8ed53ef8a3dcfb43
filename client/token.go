package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tokenCache holds the current bearer token. A token is renewed in the
// background once it is past its refresh point (a quarter of its life, at
// most 2 minutes, before it expires), so calls do not wait for renewals; a
// failed renewal is tried again after a second (or the Retry-After);
// only the first call, or one after the token expired or was refused, waits
// for a fetch. Every fetch runs in the background, one at a time, bounded
// by tokenFetchTimeout, not by the context of the call that started it: a
// call waits for it no longer than its own context allows, and a fetch
// longer than a Decide attempt still ends with a token for the calls
// after it. Fetches go through golang.org/x/oauth2/clientcredentials with
// the client in HTTP Basic, the standard OAuth form POST /v1/token accepts.
type tokenCache struct {
	conf       clientcredentials.Config
	hc         *http.Client // the Client's, with the User-Agent added
	cur        atomic.Pointer[bearer]
	renewAfter atomic.Int64 // unix nanoseconds before which no renewal starts, after one failed
	bg         *sync.WaitGroup
	now        func() time.Time // the Client's clock

	mu      sync.Mutex  // guards conf's secret (setSecret), pending and closed
	pending *tokenFetch // the fetch under way, if any
	closed  bool        // set by close: no fetch starts after it
}

// tokenFetchTimeout bounds one token fetch.
const tokenFetchTimeout = 10 * time.Second

// tokenFetch is one fetch: done is closed once b or err is set.
type tokenFetch struct {
	done chan struct{}
	b    *bearer
	err  error
}

// bearer is one token as the Authorization header value.
type bearer struct {
	header    string
	value     []string // {header}, shared by every request; never modified
	refreshAt time.Time
	expiry    time.Time
}

func newTokenCache(tokenURL, id, secret string, scopes []string, hc *http.Client, ua string, bg *sync.WaitGroup,
	now func() time.Time) *tokenCache {
	inner := hc.Transport
	if inner == nil {
		inner = http.DefaultTransport
	}
	tokenHC := *hc
	tokenHC.Transport = uaTransport{inner: inner, ua: ua}
	return &tokenCache{
		conf: clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: tokenURL, Scopes: scopes,
			AuthStyle: oauth2.AuthStyleInHeader},
		hc: &tokenHC, bg: bg, now: now,
	}
}

// get returns a valid token. A call that must wait for a fetch waits no
// longer than ctx allows; the fetch goes on for the calls after it.
func (t *tokenCache) get(ctx context.Context) (*bearer, error) {
	now := t.now()
	if b := t.cur.Load(); b != nil && now.Before(b.expiry) {
		if !now.Before(b.refreshAt) && now.UnixNano() >= t.renewAfter.Load() {
			t.start() // a renewal; this call goes on with b
		}
		return b, nil
	}
	f := t.start()
	select {
	case <-f.done:
		return f.b, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("coupond: waiting for a token: %w", ctx.Err())
	}
}

// start returns the fetch under way, starting one if there is none and
// the current token (which a fetch may have stored since the caller looked)
// is not valid and short of its refresh point. After close it starts none:
// the fetch it returns has failed with ErrClosed.
func (t *tokenCache) start() *tokenFetch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending != nil {
		return t.pending
	}
	f := &tokenFetch{done: make(chan struct{})}
	if b := t.cur.Load(); b != nil && t.now().Before(b.refreshAt) {
		f.b = b
		close(f.done)
		return f
	}
	if t.closed {
		f.err = ErrClosed
		close(f.done)
		return f
	}
	t.pending = f
	t.bg.Add(1)
	go t.run(f)
	return f
}

// run makes fetch f. After a failure, renewals of a token still valid
// pause (renewalPause), so a failing token endpoint is not asked on every
// call; a call without a valid token starts a new fetch.
func (t *tokenCache) run(f *tokenFetch) {
	defer t.bg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), tokenFetchTimeout)
	defer cancel()
	f.b, f.err = t.fetch(ctx)
	if f.err != nil {
		t.renewAfter.Store(t.now().Add(renewalPause(f.err)).UnixNano())
	}
	t.mu.Lock()
	t.pending = nil
	t.mu.Unlock()
	close(f.done)
}

// close stops new fetches, so that once it has returned no bg.Add races
// with the Client's bg.Wait; a fetch under way goes on.
func (t *tokenCache) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// renewalPause is how long after a failed renewal the next one may start:
// a second, or the token endpoint's Retry-After if longer.
func renewalPause(err error) time.Duration {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return max(time.Second, apiErr.RetryAfter)
	}
	return time.Second
}

// fetch gets a new token and makes it current; run calls it, one at a
// time. The token's life counts from before the request, on the Client's
// clock.
func (t *tokenCache) fetch(ctx context.Context) (*bearer, error) {
	start := t.now()
	t.mu.Lock()
	conf := t.conf // setSecret may change it meanwhile
	t.mu.Unlock()
	tok, err := conf.Token(context.WithValue(ctx, oauth2.HTTPClient, t.hc))
	if err != nil {
		return nil, tokenError(err, t.now())
	}
	life := tokenLife(tok)
	expiry := start.Add(life - min(5*time.Second, life/10)) // margin for the request in flight
	life = expiry.Sub(start)
	h := "Bearer " + tok.AccessToken
	b := &bearer{header: h, value: []string{h}, expiry: expiry, refreshAt: expiry.Add(-min(2*time.Minute, life/4))}
	t.cur.Store(b)
	return b, nil
}

// setSecret makes the fetches that start from now on ask with secret, at
// once: a pause after a failed renewal (renewAfter) ends.
func (t *tokenCache) setSecret(secret string) {
	t.mu.Lock()
	t.conf.ClientSecret = secret
	t.mu.Unlock()
	t.renewAfter.Store(0)
}

// tokenLife is how long tok is valid from its request: its expires_in, or
// 5 minutes if it has none. oauth2 sets Expiry from expires_in on the real
// clock, so it is read only for an answer that carries no ExpiresIn (a
// form-encoded one).
func tokenLife(tok *oauth2.Token) time.Duration {
	const maxSeconds = int64(math.MaxInt64 / time.Second)
	switch {
	case tok.ExpiresIn > 0:
		return time.Duration(min(tok.ExpiresIn, maxSeconds)) * time.Second
	case !tok.Expiry.IsZero():
		return time.Until(tok.Expiry)
	}
	return 5 * time.Minute
}

// invalidate drops the token the server refused, unless it was replaced
// already.
func (t *tokenCache) invalidate(b *bearer) { t.cur.CompareAndSwap(b, nil) }

// tokenError turns oauth2's error into an *Error: the stock parser keeps
// only RFC 6749's "error" and "error_description"; coupond's codigo,
// mensaje, campo and trace_id (and a 422's detail) are parsed here, and a
// Retry-After as of now.
func tokenError(err error, now time.Time) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		return parseError(re.Response.StatusCode, re.Response.Header, re.Body, now)
	}
	return err
}

// uaTransport sets the User-Agent of token requests, which oauth2 builds.
type uaTransport struct {
	inner http.RoundTripper
	ua    string
}

func (u uaTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", u.ua)
	return u.inner.RoundTrip(r)
}
