package batch

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

func TestSignWebhookStandardVector(t *testing.T) {
	// The test vector published with the Standard Webhooks reference libraries.
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := ParseWebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	got := SignWebhook(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)
	if diff := cmp.Diff("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got); diff != "" {
		t.Errorf("SignWebhook (-want +got):\n%s", diff)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", got)
	if err := client.VerifyWebhookSignature(secret, h, body, time.Unix(1614265330, 0), client.WebhookTolerance); err != nil {
		t.Errorf("independent verifier: %v", err)
	}
}

func TestNewWebhookSecret(t *testing.T) {
	a, b := NewWebhookSecret(), NewWebhookSecret()
	if a == b {
		t.Fatalf("two secrets are equal: %s", a)
	}
	for _, s := range []string{a, b} {
		if !strings.HasPrefix(s, "whsec_") {
			t.Errorf("secret %q lacks the whsec_ prefix", s)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(raw) != 32 {
			t.Errorf("secret %q: %d bytes, err %v; want 32 bytes", s, len(raw), err)
		}
		key, err := ParseWebhookSecret(s)
		if err != nil {
			t.Fatalf("ParseWebhookSecret(%q): %v", s, err)
		}
		if diff := cmp.Diff(raw, key); diff != "" {
			t.Errorf("key (-want +got):\n%s", diff)
		}
	}
}

func TestParseWebhookSecretRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"whsec_",
		"whsec_not base64!",
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)),
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)),
		"whsec_" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)), // unpadded
	} {
		if _, err := ParseWebhookSecret(s); !errors.Is(err, ErrWebhookSecret) {
			t.Errorf("ParseWebhookSecret(%q) = %v, want ErrWebhookSecret", s, err)
		}
	}
	// Without the prefix, as the reference libraries accept.
	if _, err := ParseWebhookSecret(base64.StdEncoding.EncodeToString(make([]byte, 32))); err != nil {
		t.Errorf("unprefixed secret: %v", err)
	}
}

// fakeResolver answers from a table; unknown names fail as NXDOMAIN would.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	calls int
}

func (r *fakeResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[host] = addrs
}

func (r *fakeResolver) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	addrs, ok := r.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestCheckDestination(t *testing.T) {
	res := &fakeResolver{hosts: map[string][]string{
		"hooks.example.com":    {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"internal.example.com": {"10.1.2.3"},
		"mixed.example.com":    {"93.184.215.14", "127.0.0.1"},
		"meta.example.com":     {"169.254.169.254"},
		"empty.example.com":    {},
	}}
	tests := []struct {
		url          string
		allowPrivate bool
		want         string // "ok", "url", "destination" or "unresolved"
	}{
		{"https://hooks.example.com/coupond", false, "ok"},
		{"http://hooks.example.com:8080/x?y=1", false, "ok"},
		{"https://93.184.215.14/", false, "ok"},
		{"https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", false, "ok"},
		{"https://[64:ff9b::5db8:d70e]/", false, "ok"}, // NAT64 of a public address
		{"https://user:pw@hooks.example.com/", false, "ok"},

		{"ftp://hooks.example.com/", false, "url"},
		{"file:///etc/passwd", false, "url"},
		{"hooks.example.com/x", false, "url"},
		{"https:///nohost", false, "url"},
		{"http:opaque", false, "url"},
		{"https://hooks.example.com:0/", false, "url"},
		{"https://hooks.example.com:99999/", false, "url"},
		{"://bad", false, "url"},
		{"ftp://10.0.0.1/", true, "url"},

		{"http://127.0.0.1/", false, "destination"},
		{"http://127.9.9.9/", false, "destination"},
		{"http://[::1]/", false, "destination"},
		{"http://localhost/", false, "destination"},
		{"http://api.localhost./", false, "destination"},
		{"http://0.0.0.0/", false, "destination"},
		{"http://0.1.2.3/", false, "destination"},
		{"http://[::]/", false, "destination"},
		{"http://10.0.0.1/", false, "destination"},
		{"http://172.16.0.1/", false, "destination"},
		{"http://172.31.255.255/", false, "destination"},
		{"http://192.168.1.1/", false, "destination"},
		{"http://[fc00::1]/", false, "destination"},
		{"http://[fd12:3456::1]/", false, "destination"},
		{"http://169.254.0.1/", false, "destination"},
		{"http://169.254.169.254/latest/meta-data/", false, "destination"},
		{"http://[fd00:ec2::254]/", false, "destination"},
		{"http://[fe80::1]/", false, "destination"},
		{"http://[fe80::1%25eth0]/", false, "destination"},
		{"http://100.64.0.1/", false, "destination"},
		{"http://100.127.255.255/", false, "destination"},
		{"http://224.0.0.1/", false, "destination"},
		{"http://[ff02::1]/", false, "destination"},
		{"http://255.255.255.255/", false, "destination"},
		{"http://240.0.0.1/", false, "destination"},
		{"http://[::ffff:127.0.0.1]/", false, "destination"},
		{"http://[::ffff:10.0.0.1]/", false, "destination"},
		{"http://[64:ff9b::a00:1]/", false, "destination"},    // NAT64 of 10.0.0.1
		{"http://[2002:a9fe:a9fe::1]/", false, "destination"}, // 6to4 of 169.254.169.254
		{"http://[fec0::1]/", false, "destination"},
		{"http://127.1/", false, "destination"},         // inet_aton shorthands
		{"http://0x7f000001/", false, "destination"},    // of 127.0.0.1
		{"http://2130706433/", false, "destination"},    // a getaddrinfo resolver
		{"http://0177.0.0.1/", false, "destination"},    // connects to
		{"http://10.1/", false, "destination"},          // 10.0.0.1
		{"http://169.254.43518/", false, "destination"}, // 169.254.169.254
		{"http://0xA9FEA9FE/", false, "destination"},    // 169.254.169.254
		{"http://0/", false, "destination"},             // 0.0.0.0
		{"http://1572395042/", false, "ok"},             // 93.184.215.34
		{"http://4294967296/", false, "unresolved"},     // past 32 bits: a name
		{"http://1.2.3.4.5/", false, "unresolved"},      // five parts: a name
		{"http://08.0.0.1/", false, "unresolved"},       // not octal: a name
		{"http://internal.example.com/", false, "destination"},
		{"http://mixed.example.com/", false, "destination"},
		{"http://meta.example.com/", false, "destination"},
		{"http://empty.example.com/", false, "unresolved"},
		{"http://nxdomain.example.com/", false, "unresolved"},

		{"http://127.0.0.1:8080/hook", true, "ok"},
		{"http://internal.example.com/", true, "ok"},
		{"http://nxdomain.example.com/", true, "ok"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s private=%v", tt.url, tt.allowPrivate), func(t *testing.T) {
			err := CheckDestination(context.Background(), tt.url, tt.allowPrivate, res.resolve)
			got := "other: " + fmt.Sprint(err)
			switch {
			case err == nil:
				got = "ok"
			case errors.Is(err, ErrWebhookURL):
				got = "url"
			case errors.Is(err, ErrWebhookUnresolved) && errors.Is(err, ErrWebhookDestination):
				got = "unresolved"
			case errors.Is(err, ErrWebhookDestination):
				got = "destination"
			}
			if got != tt.want {
				t.Errorf("CheckDestination(%q, %v) = %v (%s), want %s", tt.url, tt.allowPrivate, err, got, tt.want)
			}
		})
	}
}

// hookServer is a webhook receiver that answers the statuses in order (then
// 200) and records what it received.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []received
}

type received struct {
	ID, Timestamp, ContentType string
	Body                       string
	VerifyErr                  string
}

func newHookServer(t *testing.T, secret string, now func() time.Time, statuses ...int) *hookServer {
	hs := &hookServer{statuses: statuses}
	hs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verr := ""
		if err := client.VerifyWebhookSignature(secret, r.Header, body, now(), client.WebhookTolerance); err != nil {
			verr = err.Error()
		}
		hs.mu.Lock()
		hs.got = append(hs.got, received{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("Content-Type"), string(body), verr})
		status := http.StatusOK
		if len(hs.statuses) > 0 {
			status, hs.statuses = hs.statuses[0], hs.statuses[1:]
		}
		hs.mu.Unlock()
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(hs.Close)
	return hs
}

func (hs *hookServer) received() []received {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return append([]received(nil), hs.got...)
}

// dialTo returns a client that sends every connection to addr, whatever the
// URL's host: the destination check sees a public name, the test server
// answers.
func dialTo(addr string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
}

func TestDeliverRetriesUntilAccepted(t *testing.T) {
	secret := NewWebhookSecret()
	clk := clock.NewFake(time.Unix(1_772_000_000, 0))
	hs := newHookServer(t, secret, clk.Now, http.StatusInternalServerError, http.StatusServiceUnavailable)
	res := &fakeResolver{hosts: map[string][]string{"hooks.example.com": {"93.184.215.14"}}}
	d := NewDeliverer(DelivererConfig{
		Client:  dialTo(hs.Listener.Addr().String()),
		Resolve: res.resolve,
		Now:     clk.Now,
		Timeout: 5 * time.Second,
	})
	sched := NewRetrySchedule(constSource(0))
	m := Delivery{
		ID:     "msg_lote_abc",
		URL:    "http://hooks.example.com/coupond?src=1",
		Secret: secret,
		Body:   []byte(`{"tipo":"lote.completado","job_id":"lote_abc","lineas":3}`),
	}

	var statuses []int
	var errs []string
	for attempt := 1; ; attempt++ {
		status, err := d.Deliver(context.Background(), m)
		statuses = append(statuses, status)
		if err == nil {
			break
		}
		errs = append(errs, fmt.Sprint(errors.Is(err, ErrWebhookRejected)))
		wait, ok := sched.NextAttempt(attempt)
		if !ok {
			t.Fatalf("gave up after %d attempts", attempt)
		}
		clk.Advance(wait) // the runner would sleep; the clock moves instead
	}
	if diff := cmp.Diff([]int{500, 503, 200}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"true", "true"}, errs); diff != "" {
		t.Errorf("errors wrap ErrWebhookRejected (-want +got):\n%s", diff)
	}
	t0 := clk.Now().Add(-4*time.Second - 24*time.Second).Unix() // waits 0.8×5s and 0.8×30s
	want := []received{
		{m.ID, strconv.FormatInt(t0, 10), "application/json", string(m.Body), ""},
		{m.ID, strconv.FormatInt(t0+4, 10), "application/json", string(m.Body), ""},
		{m.ID, strconv.FormatInt(t0+28, 10), "application/json", string(m.Body), ""},
	}
	if diff := cmp.Diff(want, hs.received()); diff != "" {
		t.Errorf("received by the webhook server (-want +got):\n%s", diff)
	}
	if res.calls != 3 {
		t.Errorf("destination resolved %d times, want once per attempt (3)", res.calls)
	}
}

func TestDeliverRechecksDestination(t *testing.T) {
	secret := NewWebhookSecret()
	hs := newHookServer(t, secret, time.Now)
	res := &fakeResolver{hosts: map[string][]string{"hooks.example.com": {"93.184.215.14"}}}
	url := "http://hooks.example.com/h"
	if err := CheckDestination(context.Background(), url, false, res.resolve); err != nil {
		t.Fatalf("at registration: %v", err)
	}
	// The name now points inside (DNS rebinding): nothing is sent.
	res.set("hooks.example.com", "127.0.0.1")
	d := NewDeliverer(DelivererConfig{Client: dialTo(hs.Listener.Addr().String()), Resolve: res.resolve})
	status, err := d.Deliver(context.Background(), Delivery{ID: "msg_1", URL: url, Secret: secret, Body: []byte(`{}`)})
	if status != 0 || !errors.Is(err, ErrWebhookDestination) {
		t.Errorf("Deliver = %d, %v; want 0, ErrWebhookDestination", status, err)
	}
	if n := len(hs.received()); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}

	// With AllowPrivate the same delivery goes through.
	d = NewDeliverer(DelivererConfig{Client: dialTo(hs.Listener.Addr().String()), Resolve: res.resolve, AllowPrivate: true})
	if status, err := d.Deliver(context.Background(), Delivery{ID: "msg_1", URL: url, Secret: secret, Body: []byte(`{}`)}); status != 200 || err != nil {
		t.Errorf("Deliver with AllowPrivate = %d, %v; want 200, nil", status, err)
	}
}

func TestDeliverRefusals(t *testing.T) {
	secret := NewWebhookSecret()
	hs := newHookServer(t, secret, time.Now, http.StatusFound)
	d := NewDeliverer(DelivererConfig{Client: hs.Client(), AllowPrivate: true, Timeout: 2 * time.Second})
	ctx := context.Background()

	// A redirect is not followed: it is the answer, and not a success.
	status, err := d.Deliver(ctx, Delivery{ID: "msg_1", URL: hs.URL, Secret: secret, Body: []byte(`{}`)})
	if status != http.StatusFound || !errors.Is(err, ErrWebhookRejected) {
		t.Errorf("redirect: Deliver = %d, %v; want 302, ErrWebhookRejected", status, err)
	}
	for _, tt := range []struct {
		name string
		m    Delivery
		want error
	}{
		{"bad secret", Delivery{ID: "m", URL: hs.URL, Secret: "whsec_short", Body: []byte(`{}`)}, ErrWebhookSecret},
		{"bad url", Delivery{ID: "m", URL: "gopher://x", Secret: secret, Body: []byte(`{}`)}, ErrWebhookURL},
	} {
		if _, err := d.Deliver(ctx, tt.m); !errors.Is(err, tt.want) {
			t.Errorf("%s: Deliver = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := d.Deliver(ctx, Delivery{URL: hs.URL, Secret: secret}); err == nil {
		t.Error("Deliver without ID = nil error")
	}
	if n := len(hs.received()); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}

func TestDeliverTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	d := NewDeliverer(DelivererConfig{Client: srv.Client(), AllowPrivate: true, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := d.Deliver(context.Background(), Delivery{ID: "m", URL: srv.URL, Secret: NewWebhookSecret(), Body: []byte(`{}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Deliver to a stalled server = %v, want a deadline error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Deliver took %v", took)
	}
}

// TestDeliverErrorsOmitTheURL: a delivery error (logged by the queue) does
// not quote the webhook URL, whose query may hold the integrator's token;
// what it wraps still answers errors.Is.
func TestDeliverErrorsOmitTheURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL + "/hook?token=s3cr3t-t0ken"
	srv.Close() // connection refused from now on
	d := NewDeliverer(DelivererConfig{AllowPrivate: true, Timeout: time.Second})
	_, err := d.Deliver(context.Background(), Delivery{ID: "m", URL: url, Secret: NewWebhookSecret(), Body: []byte(`{}`)})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "/hook") {
		t.Errorf("Deliver to a closed server = %v; want an error without the URL", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("Deliver error %v does not wrap the transport's *net.OpError", err)
	}
}

func TestWebhookClientRefusesPrivateDial(t *testing.T) {
	hits := 0
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer srv.Close()

	resp, err := NewWebhookClient(time.Second, false).Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, ErrWebhookDestination) {
		t.Errorf("dial to %s = %v, want ErrWebhookDestination", srv.URL, err)
	}
	resp, err = NewWebhookClient(time.Second, true).Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("allowPrivate client: %v", err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if hits != 1 {
		t.Errorf("server hits = %d, want 1 (from the allowPrivate client only)", hits)
	}
}

// constSource is a rand source that always returns the same value: 0 gives
// the smallest jitter factor, MaxUint64 the largest.
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) }

func TestRetrySchedule(t *testing.T) {
	bases := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 8 * time.Hour, 8 * time.Hour}
	if len(bases) != WebhookAttempts-1 {
		t.Fatalf("%d base delays for %d attempts", len(bases), WebhookAttempts)
	}
	tests := []struct {
		name    string
		src     constSource
		factor  float64
		minSpan time.Duration
	}{
		{"smallest jitter", 0, 0.8, 24 * time.Hour},
		{"largest jitter", math.MaxUint64, 1.2, 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewRetrySchedule(tt.src)
			var got, want []time.Duration
			var span time.Duration
			for attempt := 1; ; attempt++ {
				d, ok := s.NextAttempt(attempt)
				if !ok {
					if attempt != WebhookAttempts {
						t.Errorf("gave up after attempt %d, want %d", attempt, WebhookAttempts)
					}
					break
				}
				if attempt >= WebhookAttempts {
					t.Fatalf("attempt %d still retried", attempt)
				}
				got = append(got, d.Round(time.Second))
				want = append(want, time.Duration(float64(bases[attempt-1])*tt.factor).Round(time.Second))
				span += d
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			if got[0] > 10*time.Second {
				t.Errorf("first retry after %v, want within 10s", got[0])
			}
			if span < tt.minSpan {
				t.Errorf("retries span %v, want at least %v", span, tt.minSpan)
			}
		})
	}
	s := NewRetrySchedule(constSource(0))
	if d0, _ := s.NextAttempt(0); d0 != 4*time.Second {
		t.Errorf("NextAttempt(0) = %v, want the first retry's 4s", d0)
	}
	if _, ok := s.NextAttempt(WebhookAttempts + 5); ok {
		t.Error("NextAttempt past the last attempt = true")
	}
}

// TestSlowReceiverDelaysOnlyItsTenant: a receiver that does not answer
// holds up its own tenant's deliveries, not another tenant's, and its
// message is not attempted again while its attempt is in flight. One
// delivery pass for every tenant in turn made a slow receiver (up to the
// attempt timeout per message) delay every other tenant's webhooks.
func TestSlowReceiverDelaysOnlyItsTenant(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	if err := e.db.CreateTenant(&store.Tenant{ID: "zeta", CreatedAt: jobsStart, Sandbox: true, ClockNow: jobsStart, Settings: store.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var slowHits atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowHits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // runs before slow.Close
	fastGot := make(chan string, 4)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fastGot <- r.Header.Get("webhook-id")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(fast.Close)

	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true, Timeout: time.Minute}), zerolog.Nop(), e.clock.Now, 1)
	done := jobsStart
	for _, hook := range []struct{ tenant, url string }{{"acme", slow.URL}, {"zeta", fast.URL}} {
		if _, err := w.Register(hook.tenant, hook.url, []string{EventLoteCompletado}, jobsStart); err != nil {
			t.Fatal(err)
		}
		if err := w.Enqueue(&Job{ID: "lote_" + hook.tenant, Tenant: hook.tenant, CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); w.Run(ctx) }()
	defer func() { cancel(); <-stopped }()

	select {
	case id := <-fastGot:
		if id != "msg_lote_zeta" {
			t.Errorf("fast receiver got %q, want msg_lote_zeta", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("tenant zeta's webhook not delivered while tenant acme's receiver hangs (slow receiver hit %d times)", slowHits.Load())
	}
	// acme's retry falls due while its first attempt still hangs: it must
	// wait for that attempt to end, not be sent alongside it.
	e.clock.Advance(time.Minute)
	time.Sleep(2500 * time.Millisecond)
	if n := slowHits.Load(); n != 1 {
		t.Errorf("slow receiver hit %d times while its first attempt was in flight, want 1", n)
	}
}

// TestWebhookPostponementLoggedOnce: while the store refuses writes (a
// full disk, until a restart) a due message cannot have its attempt
// recorded and waits; that is logged once, not on every delivery pass
// (every second, for every tenant with messages due).
func TestWebhookPostponementLoggedOnce(t *testing.T) {
	fs, full := storefs.WithWriteFaults(storefs.Mem(), func(path string) error { return fmt.Errorf("%s: %w", path, syscall.ENOSPC) })
	e := newJobEnv(t, fs, "db", 2, -1)
	lines := &lineCounter{msg: "postponed", at: func() {}}
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.New(lines).Level(zerolog.InfoLevel), e.clock.Now, 1)
	if _, err := w.Register("acme", "http://127.0.0.1:9/hook", []string{EventLoteCompletado}, jobsStart); err != nil {
		t.Fatal(err)
	}
	if err := w.Enqueue(&Job{Tenant: "acme", ID: "lote_lleno", CampanaID: "camp", Estado: api.EstadoCompletado}); err != nil {
		t.Fatal(err)
	}
	full.On()
	b := e.db.NewBatch()
	b.Set([]byte("otro"), []byte("x"))
	if err := b.Commit(); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("commit on a full disk: %v, want store.ErrFailed", err)
	}
	b.Close()
	for range 5 {
		if n := w.DeliverDue(t.Context()); n != 0 {
			t.Errorf("DeliverDue made %d attempts it could not record", n)
		}
	}
	if diff := cmp.Diff(1, lines.n); diff != "" {
		t.Errorf("postponement log lines over 5 passes (-want +got):\n%s", diff)
	}
}

// TestDeleteDropsPendingDeliveries: DELETE /v1/webhooks drops the
// deliveries still pending (the OpenAPI document says so). They used to
// stay queued and go, when due, to whatever webhook was registered then:
// a tenant that deleted its webhook and registered another got the old
// jobs' notifications at the new destination. The case where the delete
// falls inside a delivery pass (the pass listed the message before the
// delete) is covered too: no attempt is made, none is queued again.
func TestDeleteDropsPendingDeliveries(t *testing.T) {
	for _, tt := range []struct {
		name string
		// deleteDuring: the webhook is deleted, and another registered,
		// while the pass's first attempt is in flight, the second
		// message listed by that pass.
		deleteDuring bool
	}{
		{name: "between passes"},
		{name: "during a pass", deleteDuring: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
			w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.Nop(), e.clock.Now, 1)
			var newGot []string
			var mu sync.Mutex
			replacement := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				mu.Lock()
				newGot = append(newGot, r.Header.Get("webhook-id"))
				mu.Unlock()
				rw.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(replacement.Close)
			var oldHits atomic.Int32
			old := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				if oldHits.Add(1) == 1 && tt.deleteDuring {
					if err := w.Delete("acme"); err != nil {
						t.Error(err)
					}
					if _, err := w.Register("acme", replacement.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
						t.Error(err)
					}
				}
				rw.WriteHeader(http.StatusInternalServerError)
			}))
			t.Cleanup(old.Close)

			if _, err := w.Register("acme", old.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
				t.Fatal(err)
			}
			done := jobsStart
			for _, id := range []string{"lote_a", "lote_b"} {
				if err := w.Enqueue(&Job{ID: id, Tenant: "acme", CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
					t.Fatal(err)
				}
			}
			w.DeliverDue(t.Context()) // deleteDuring: deletes and registers after the first attempt
			if !tt.deleteDuring {     // both failed: retries queued
				if err := w.Delete("acme"); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Register("acme", replacement.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
					t.Fatal(err)
				}
			}
			attempts := 0
			for range 12 {
				e.clock.Advance(9 * time.Hour)
				attempts += w.DeliverDue(t.Context())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(newGot) != 0 || attempts != 0 {
				t.Errorf("after DELETE: %d attempts, the new registration got %q; want none", attempts, newGot)
			}
			wantOld := int32(2)
			if tt.deleteDuring {
				wantOld = 1
			}
			if got := oldHits.Load(); got != wantOld {
				t.Errorf("old destination hit %d times, want %d", got, wantOld)
			}
			lo, hi := store.WebhookQueueSpan("acme")
			left := 0
			if err := e.db.Scan(lo, hi, func(_, _ []byte) error { left++; return nil }); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d messages left in the queue after DELETE, want 0", left)
			}
		})
	}
}

// TestDamagedWebhookRecordsQuarantined: a queued message or a registration
// that does not decode is moved to quarantine (contract §8), the message
// counted dropped and the registration read as none, and the rest go on:
// the damaged message was skipped at every pass, never reported, and a
// damaged registration stopped every pass with an error.
func TestDamagedWebhookRecordsQuarantined(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	var got []string
	rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("webhook-id"))
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.Nop(), e.clock.Now, 1)
	w.QuarantineInto(e.eng.Records().Quarantine)
	if _, err := w.Register("acme", rc.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
		t.Fatal(err)
	}
	done := jobsStart
	if err := w.Enqueue(&Job{ID: "lote_bueno", Tenant: "acme", CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
		t.Fatal(err)
	}
	put := func(key []byte, v string) {
		b := e.db.NewBatch()
		defer b.Close()
		b.Set(key, []byte(v))
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put(store.WebhookDeliveryKey("acme", jobsStart.Add(-time.Second), "msg_roto"), `{"id": "msg_roto", "bo`)
	if n := w.DeliverDue(t.Context()); n != 1 || len(got) != 1 {
		t.Fatalf("first pass: %d attempts, delivered %q; want the sound message alone", n, got)
	}
	put(store.WebhookKey("acme"), `{"url": 7}`)
	if reg, err := w.Registration("acme"); reg != nil || err != nil {
		t.Errorf("damaged registration: %+v, %v; want none, no error", reg, err)
	}
	q, err := e.eng.Quarantine.Quarantined("acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 2 {
		t.Errorf("quarantined %d records, want 2 (the message and the registration): %+v", len(q), q)
	}
}

// TestWebhookGivenUpAfterLastAttempt: a receiver that always fails gets
// WebhookAttempts attempts of one message through the durable queue, the
// first retry within 10 s (contract §7) and the last more than 24 hours
// after the first (contract §4); the last is counted given up and the
// message leaves the queue, so later passes attempt nothing.
func TestWebhookGivenUpAfterLastAttempt(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.Nop(), e.clock.Now, 7)
	var mu sync.Mutex
	var at []time.Time // the fake clock at each attempt
	var outcomes []string
	w.Observe(Observer{WebhookAttempt: func(_, outcome string) {
		mu.Lock()
		outcomes = append(outcomes, outcome)
		mu.Unlock()
	}})
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		at = append(at, e.clock.Now())
		mu.Unlock()
		rw.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(hs.Close)
	if _, err := w.Register("acme", hs.URL, []string{EventLoteCompletado}, jobsStart); err != nil {
		t.Fatal(err)
	}
	done := jobsStart
	if err := w.Enqueue(&Job{ID: "lote_a", Tenant: "acme", CampanaID: "camp", Estado: api.EstadoCompletado, CompletadoEn: &done}); err != nil {
		t.Fatal(err)
	}
	for step := range 60 * 45 { // 45 hours: past the longest schedule (38h03m)
		w.DeliverDue(t.Context())
		if step < 60 {
			e.clock.Advance(time.Second)
		} else {
			e.clock.Advance(time.Minute)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := slices.Repeat([]string{WebhookRetry}, WebhookAttempts-1)
	want = append(want, WebhookGivenUp)
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Fatalf("outcomes (-want +got):\n%s", diff)
	}
	if first := at[1].Sub(at[0]); first > 10*time.Second {
		t.Errorf("first retry %s after the first attempt, want within 10s", first)
	}
	if span := at[len(at)-1].Sub(at[0]); span < 24*time.Hour {
		t.Errorf("attempts span %s, want more than 24h", span)
	}
	lo, hi := store.WebhookQueueSpan("acme")
	left := 0
	if err := e.db.Scan(lo, hi, func(_, _ []byte) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d messages left in the queue after giving up, want 0", left)
	}
}

// TestRegisterDeletedTenant: a webhook of a tenant no longer in the store
// (deleted after its request was authenticated) is not registered: the
// call is engine.ErrNoTenant (the API's 401) and no record is written for
// the tenant's sweep to miss.
func TestRegisterDeletedTenant(t *testing.T) {
	e := newJobEnv(t, storefs.Mem(), "db", 2, -1)
	w := NewWebhooks(e.db, NewDeliverer(DelivererConfig{AllowPrivate: true}), zerolog.Nop(), e.clock.Now, 1)
	if _, err := w.Register("gone", "http://127.0.0.1:9/hook", []string{EventLoteCompletado}, jobsStart); !errors.Is(err, engine.ErrNoTenant) {
		t.Errorf("Register for a tenant not in the store: %v, want engine.ErrNoTenant", err)
	}
	if _, err := e.db.Get(webhookKey("gone")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the gone tenant's webhook record: %v, want none", err)
	}
}
