package client

import (
	"context"
	"errors"
	"fmt"
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
// for a fetch. Fetches go through golang.org/x/oauth2/clientcredentials with
// the client in HTTP Basic, the standard OAuth form POST /v1/token accepts.
type tokenCache struct {
	conf       clientcredentials.Config
	hc         *http.Client // the Client's, with the User-Agent added
	cur        atomic.Pointer[bearer]
	sem        chan struct{} // held by the one fetch under way; waiting for it honours the caller's context
	refreshing atomic.Bool
	renewAfter atomic.Int64 // unix nanoseconds before which no renewal starts, after one failed
	bg         *sync.WaitGroup
}

// bearer is one token as the Authorization header value.
type bearer struct {
	header    string
	value     []string // {header}, shared by every request; never modified
	refreshAt time.Time
	expiry    time.Time
}

func newTokenCache(tokenURL, id, secret string, scopes []string, hc *http.Client, ua string, bg *sync.WaitGroup) *tokenCache {
	inner := hc.Transport
	if inner == nil {
		inner = http.DefaultTransport
	}
	tokenHC := *hc
	tokenHC.Transport = uaTransport{inner: inner, ua: ua}
	return &tokenCache{
		conf: clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: tokenURL, Scopes: scopes,
			AuthStyle: oauth2.AuthStyleInHeader},
		hc: &tokenHC, bg: bg, sem: make(chan struct{}, 1),
	}
}

// get returns a valid token. A call that must wait for a fetch under way
// (another call's, or a renewal's) waits no longer than ctx allows.
func (t *tokenCache) get(ctx context.Context) (*bearer, error) {
	now := time.Now()
	if b := t.cur.Load(); b != nil && now.Before(b.expiry) {
		if !now.Before(b.refreshAt) && now.UnixNano() >= t.renewAfter.Load() && t.refreshing.CompareAndSwap(false, true) {
			t.bg.Add(1)
			go t.refreshInBackground()
		}
		return b, nil
	}
	if err := t.lock(ctx); err != nil {
		return nil, err
	}
	defer t.unlock()
	if b := t.cur.Load(); b != nil && time.Now().Before(b.expiry) {
		return b, nil // fetched by another caller meanwhile
	}
	return t.fetch(ctx)
}

func (t *tokenCache) refreshInBackground() {
	defer t.bg.Done()
	defer t.refreshing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if t.lock(ctx) != nil {
		return
	}
	defer t.unlock()
	if _, err := t.fetch(ctx); err != nil {
		// The current token stays until it expires; the next renewal waits
		// a while, so a failing token endpoint is not asked on every call.
		t.renewAfter.Store(time.Now().Add(renewalPause(err)).UnixNano())
	}
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

// lock takes the right to fetch, or returns ctx's error if ctx ends first.
func (t *tokenCache) lock(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("coupond: waiting for a token: %w", ctx.Err())
	}
}

func (t *tokenCache) unlock() { <-t.sem }

// fetch gets a new token and makes it current; the lock is held.
func (t *tokenCache) fetch(ctx context.Context) (*bearer, error) {
	start := time.Now()
	tok, err := t.conf.Token(context.WithValue(ctx, oauth2.HTTPClient, t.hc))
	if err != nil {
		return nil, tokenError(err)
	}
	expiry := tok.Expiry
	if expiry.IsZero() {
		expiry = start.Add(5 * time.Minute)
	}
	life := expiry.Sub(start)
	expiry = expiry.Add(-min(5*time.Second, life/10)) // margin for the request in flight
	life = expiry.Sub(start)
	h := "Bearer " + tok.AccessToken
	b := &bearer{header: h, value: []string{h}, expiry: expiry, refreshAt: expiry.Add(-min(2*time.Minute, life/4))}
	t.cur.Store(b)
	return b, nil
}

// invalidate drops the token the server refused, unless it was replaced
// already.
func (t *tokenCache) invalidate(b *bearer) { t.cur.CompareAndSwap(b, nil) }

// tokenError turns oauth2's error into an *Error: the stock parser keeps
// only RFC 6749's "error" and "error_description"; coupond's codigo,
// mensaje, campo and trace_id (and a 422's detail) are parsed here.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		return parseError(re.Response.StatusCode, re.Response.Header, re.Body)
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
