package batch

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Webhook deliveries follow Standard Webhooks (https://www.standardwebhooks.com/):
// every POST carries
//
//	webhook-id:        the message id, the same on every retry of one event
//	webhook-timestamp: unix seconds of this attempt
//	webhook-signature: v1,<base64 (standard, padded) HMAC-SHA256 of "id.timestamp.body">
//
// keyed with the registration's secret, "whsec_" + base64 of 32 random
// bytes, whose decoded bytes are the HMAC key. Each attempt is signed afresh
// with its own timestamp, so receivers can refuse stale timestamps.

// Webhook errors.
var (
	// ErrWebhookURL: the URL is malformed, not http(s) or has no host
	// (registration: 422 url_parsing).
	ErrWebhookURL = errors.New("batch: webhook URL must be an absolute http or https URL")
	// ErrWebhookDestination: the host does not resolve, or resolves to an
	// address coupond does not send to (loopback, private, link-local,
	// metadata, ...) (registration: 422 url_parsing, but for
	// ErrWebhookUnresolved).
	ErrWebhookDestination = errors.New("batch: webhook destination not allowed")
	// ErrWebhookUnresolved: the host name does not resolve now, or resolves
	// to no address. It wraps ErrWebhookDestination (nothing is sent to
	// it), but registration accepts it: the name names no refused range,
	// and may resolve by the time a job completes (each attempt checks
	// again).
	ErrWebhookUnresolved = fmt.Errorf("batch: webhook host does not resolve: %w", ErrWebhookDestination)
	// ErrWebhookSecret: a secret not produced by NewWebhookSecret.
	ErrWebhookSecret = errors.New("batch: webhook secret malformed")
	// ErrWebhookRejected: the destination answered with a status other
	// than 2xx (redirects are not followed).
	ErrWebhookRejected = errors.New("batch: webhook delivery not accepted")
)

const (
	webhookSecretPrefix = "whsec_"
	webhookKeyBytes     = 32

	// DefaultWebhookTimeout bounds one delivery attempt: name resolution,
	// connection, request and response headers.
	DefaultWebhookTimeout = 10 * time.Second

	// WebhookAttempts is how many times one event is tried in all: the
	// first delivery plus the retries of RetrySchedule.
	WebhookAttempts = 12

	// maxWebhookResponse is how much of a response body is read (and
	// discarded) so the connection can be reused.
	maxWebhookResponse = 64 << 10
)

// NewWebhookSecret returns a new signing secret, "whsec_" followed by the
// standard base64 encoding of 32 random bytes. It is shown once to the
// integrator and stored to sign deliveries.
func NewWebhookSecret() string {
	key := make([]byte, webhookKeyBytes)
	rand.Read(key) // never fails (crypto/rand)
	return webhookSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// ParseWebhookSecret returns the HMAC key of a secret: the base64-decoded
// bytes after the optional "whsec_" prefix, which must be 24 to 64 bytes as
// Standard Webhooks requires. Other input is ErrWebhookSecret.
func ParseWebhookSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, webhookSecretPrefix))
	if err != nil || len(key) < 24 || len(key) > 64 {
		return nil, ErrWebhookSecret
	}
	return key, nil
}

// SignWebhook returns the webhook-signature header value for a message:
// "v1," + base64(HMAC-SHA256(key, id + "." + ts unix seconds + "." + body)).
func SignWebhook(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Resolver returns the IP addresses of a host name. (*net.Resolver).LookupNetIP
// with network "ip" is one; tests inject their own.
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// systemResolver resolves through the operating system's configuration.
func systemResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// CheckDestination reports whether coupond may deliver webhooks to rawURL:
// it must be an absolute http or https URL with a host (else ErrWebhookURL).
// Unless allowPrivate, the host (an IP literal, or every address resolve
// returns for a name; nil resolve uses the system resolver) must be a public
// unicast address, else ErrWebhookDestination: refused are unspecified,
// "this network" 0/8, loopback, private (10/8, 172.16/12, 192.168/16,
// fc00::/7), link-local (169.254/16, fe80::/10), cloud metadata
// (169.254.169.254, fd00:ec2::254), CGNAT 100.64/10, multicast, 192.0.0/24,
// 198.18/15, 240/4 and broadcast, site-local fec0::/10, and IPv6 forms that
// embed a refused IPv4 address (mapped, compatible, NAT64, 6to4), as well as
// "localhost" names; a name that does not resolve, or resolves to nothing,
// is ErrWebhookUnresolved (which wraps ErrWebhookDestination).
//
// A check at registration does not protect delivery by itself: a name can
// resolve differently later (DNS rebinding). Deliverer checks again before
// each attempt, and NewWebhookClient checks the address actually dialled.
func CheckDestination(ctx context.Context, rawURL string, allowPrivate bool, resolve Resolver) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("batch: webhook URL: %v: %w", withoutURL(err), ErrWebhookURL)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "" {
		return ErrWebhookURL
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("batch: webhook URL port %q: %w", p, ErrWebhookURL)
		}
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if why := refusedAddr(a); why != "" {
			return fmt.Errorf("batch: webhook host %s is %s: %w", host, why, ErrWebhookDestination)
		}
		return nil
	}
	if a, ok := shorthandIPv4(host); ok {
		if why := refusedAddr(a); why != "" {
			return fmt.Errorf("batch: webhook host %s is %s, a shorthand of %s: %w", host, why, a, ErrWebhookDestination)
		}
		return nil
	}
	lower := strings.ToLower(strings.TrimSuffix(host, "."))
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return fmt.Errorf("batch: webhook host %s is loopback: %w", host, ErrWebhookDestination)
	}
	if resolve == nil {
		resolve = systemResolver
	}
	addrs, err := resolve(ctx, host)
	if err != nil {
		return fmt.Errorf("batch: webhook host %s (%v): %w", host, err, ErrWebhookUnresolved)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("batch: webhook host %s has no address: %w", host, ErrWebhookUnresolved)
	}
	for _, a := range addrs {
		if why := refusedAddr(a); why != "" {
			return fmt.Errorf("batch: webhook host %s resolves to %s, which is %s: %w", host, a, why, ErrWebhookDestination)
		}
	}
	return nil
}

// shorthandIPv4 reads host as the C library's inet_aton does: one to four
// parts separated by dots, each decimal, octal (a leading 0) or hex (0x),
// the last part filling the bytes the others leave ("127.1" is 127.0.0.1,
// "0x7f000001" and "2130706433" are too). netip.ParseAddr takes only the
// dotted quad, but a resolver built on getaddrinfo connects to these forms,
// so registration judges the address they stand for. ok is false when host
// is not such a form (a name, or a number out of range).
func shorthandIPv4(host string) (a netip.Addr, ok bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil || digits == "" || digits[0] == '+' {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	last := len(vals) - 1
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	n := vals[last]
	for i, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// refusedAddr says why a webhook may not go to a, or "" if it may.
func refusedAddr(a netip.Addr) string {
	if !a.IsValid() {
		return "not an address"
	}
	if a.Zone() != "" {
		return "scoped to an interface"
	}
	a = a.Unmap()
	switch {
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}),
		a == netip.MustParseAddr("fd00:ec2::254"):
		return "cloud metadata"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	if a.Is4() {
		for _, r := range []struct {
			p   string
			why string
		}{
			{"0.0.0.0/8", "this network"},
			{"100.64.0.0/10", "carrier-grade NAT"},
			{"192.0.0.0/24", "IETF protocol assignment"},
			{"198.18.0.0/15", "benchmarking"},
			{"240.0.0.0/4", "reserved or broadcast"},
		} {
			if netip.MustParsePrefix(r.p).Contains(a) {
				return r.why
			}
		}
		return ""
	}
	b := a.As16()
	switch {
	case netip.MustParsePrefix("fec0::/10").Contains(a):
		return "site-local"
	case netip.MustParsePrefix("::/96").Contains(a): // IPv4-compatible (deprecated)
		return embedded(netip.AddrFrom4([4]byte(b[12:16])))
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a): // NAT64 well-known prefix
		return embedded(netip.AddrFrom4([4]byte(b[12:16])))
	case netip.MustParsePrefix("64:ff9b:1::/48").Contains(a):
		return "local NAT64"
	case netip.MustParsePrefix("2002::/16").Contains(a): // 6to4
		return embedded(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return ""
}

func embedded(v4 netip.Addr) string {
	if why := refusedAddr(v4); why != "" {
		return "an IPv6 form of a " + why + " address"
	}
	return ""
}

// NewWebhookClient returns an HTTP client for webhook deliveries: no proxy,
// no redirects (a 3xx is the answer), timeout per request, and unless
// allowPrivate a dialer that refuses to connect to any address
// CheckDestination refuses, so a name that resolves to a public address when
// checked and to an internal one when dialled (DNS rebinding) still cannot
// reach the inside.
func NewWebhookClient(timeout time.Duration, allowPrivate bool) *http.Client {
	if timeout <= 0 {
		timeout = DefaultWebhookTimeout
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("batch: webhook dial %q: %w", address, ErrWebhookDestination)
			}
			if why := refusedAddr(ap.Addr()); why != "" {
				return fmt.Errorf("batch: webhook dial %s, which is %s: %w", ap.Addr(), why, ErrWebhookDestination)
			}
			return nil
		}
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		},
		Timeout:       timeout,
		CheckRedirect: noRedirect,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// DelivererConfig is what a Deliverer needs; zero fields take the defaults.
type DelivererConfig struct {
	// Client sends the requests; nil: NewWebhookClient(Timeout, AllowPrivate).
	// The Deliverer uses a copy that does not follow redirects. A client not
	// built by NewWebhookClient lacks its dial-time address check, leaving
	// only the check before each attempt (a rebinding window remains).
	Client *http.Client
	// Resolve resolves destination hosts for the check before each attempt;
	// nil: the system resolver.
	Resolve Resolver
	// Now gives the webhook-timestamp; nil: time.Now.
	Now func() time.Time
	// Timeout bounds one attempt, resolution included; 0: DefaultWebhookTimeout.
	Timeout time.Duration
	// AllowPrivate skips the destination address checks (coupond serve
	// --webhook-allow-private), for tests and single-network installs.
	AllowPrivate bool
}

// Deliverer makes single webhook delivery attempts; retries are the
// caller's, paced by RetrySchedule. It is safe for concurrent use.
type Deliverer struct {
	client       *http.Client
	resolve      Resolver
	now          func() time.Time
	timeout      time.Duration
	allowPrivate bool
}

// NewDeliverer returns a Deliverer configured by c.
func NewDeliverer(c DelivererConfig) *Deliverer {
	d := &Deliverer{resolve: c.Resolve, now: c.Now, timeout: c.Timeout, allowPrivate: c.AllowPrivate}
	if d.timeout <= 0 {
		d.timeout = DefaultWebhookTimeout
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.resolve == nil {
		d.resolve = systemResolver
	}
	if c.Client == nil {
		d.client = NewWebhookClient(d.timeout, d.allowPrivate)
	} else {
		cl := *c.Client
		cl.CheckRedirect = noRedirect
		d.client = &cl
	}
	return d
}

// Delivery is one webhook message to one destination.
type Delivery struct {
	// ID is the webhook-id: unique per event and the same on every retry,
	// so receivers can drop duplicates.
	ID string
	// URL is the registered destination.
	URL string
	// Secret is the registration's secret as NewWebhookSecret returned it.
	Secret string
	// Body is the JSON payload, sent as is.
	Body []byte
}

// Deliver makes one attempt to POST m: it checks the destination again
// (unless AllowPrivate), signs the body with the current time and sends it
// with Content-Type application/json and the Standard Webhooks headers. It
// returns the response status (0 when none came) and nil for a 2xx answer.
// Errors: ErrWebhookSecret or ErrWebhookURL (the registration is unusable),
// ErrWebhookDestination (the destination is refused now), ErrWebhookRejected
// (another status), or the transport's error (timeout, connection refused,
// ctx done). All but the first two are worth retrying.
func (d *Deliverer) Deliver(ctx context.Context, m Delivery) (status int, err error) {
	if m.ID == "" {
		return 0, errors.New("batch: webhook delivery without id")
	}
	key, err := ParseWebhookSecret(m.Secret)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if err := CheckDestination(ctx, m.URL, d.allowPrivate, d.resolve); err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return 0, fmt.Errorf("batch: webhook request: %v: %w", withoutURL(err), ErrWebhookURL)
	}
	ts := d.now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "coupond-webhooks")
	req.Header.Set("webhook-id", m.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", SignWebhook(key, m.ID, ts, m.Body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("batch: webhook %s: %w", m.ID, withoutURL(err))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookResponse))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("batch: webhook %s: status %d: %w", m.ID, resp.StatusCode, ErrWebhookRejected)
	}
	return resp.StatusCode, nil
}

// withoutURL is err without the URL a *url.Error quotes: a webhook URL may
// carry the integrator's token in its query string, and delivery errors
// are logged. What the error wraps (a timeout, ctx done) stays.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// RetrySchedule paces webhook retries. The wait after the n-th failed
// attempt is a base delay times a jitter factor drawn uniformly from
// [0.8, 1.2):
//
//	n     1   2    3   4    5    6   7   8   9   10  11
//	base  5s  30s  2m  10m  30m  1h  2h  4h  8h  8h  8h
//
// so the first retry comes within 6 s, and the 11 retries (WebhookAttempts
// attempts in all) span 31h42m35s of base delay: at least 25h22m with the
// smallest jitter, at most 38h03m with the largest. After the 12th failed
// attempt NextAttempt reports false: give up.
// It is safe for concurrent use.
type RetrySchedule struct {
	mu  sync.Mutex
	rnd *mathrand.Rand
}

// NewRetrySchedule returns a schedule whose jitter comes from src; tests pass
// a seeded source, production e.g. mathrand.NewChaCha8 with a random seed.
func NewRetrySchedule(src mathrand.Source) *RetrySchedule {
	return &RetrySchedule{rnd: mathrand.New(src)}
}

// NextAttempt returns how long to wait, after attempt (1 = the first
// delivery) failed, before the next attempt, and false when attempt was the
// last (attempt >= WebhookAttempts). attempt < 1 counts as 1.
func (s *RetrySchedule) NextAttempt(attempt int) (time.Duration, bool) {
	base := retryBase(max(attempt, 1))
	if base == 0 {
		return 0, false
	}
	s.mu.Lock()
	f := s.rnd.Float64()
	s.mu.Unlock()
	return time.Duration(float64(base) * (0.8 + 0.4*f)), true
}

// retryBase is the base delay after the n-th failed attempt, 0 after the last.
func retryBase(n int) time.Duration {
	switch {
	case n == 1:
		return 5 * time.Second
	case n == 2:
		return 30 * time.Second
	case n == 3:
		return 2 * time.Minute
	case n == 4:
		return 10 * time.Minute
	case n == 5:
		return 30 * time.Minute
	case n == 6:
		return time.Hour
	case n == 7:
		return 2 * time.Hour
	case n == 8:
		return 4 * time.Hour
	case n < WebhookAttempts:
		return 8 * time.Hour
	default:
		return 0
	}
}
