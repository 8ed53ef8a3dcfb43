package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coupond/coupond/client"
)

// The benchmarks measure what the library adds to a decision over a plain
// HTTP call: both run against the same stub server, which answers a fixed
// decision at once, so the difference of the two is the client's overhead
// (budget, idempotency key, token cache, breaker, retry bookkeeping).
//
//	go test -run '^$' -bench 'Decide$' -benchmem ./client/

const stubDecision = `{"decision_id":"d1.acme.0123456789abcdef","accion":2,"accion_nombre":"cupon2","propension":0.8,` +
	`"politica_version":"v7","explorado":false,"en_control":false,"en_respaldo":false,"caduca_en":"2026-11-09T12:00:00Z","motivo":"política"}` + "\n"

// stubServer answers tokens and decisions.
func stubServer(tb testing.TB) *httptest.Server {
	srv := httptest.NewServer(stubHandler())
	tb.Cleanup(srv.Close)
	return srv
}

func stubHandler() http.Handler {
	tok := []byte(`{"access_token":"tok","expires_in":900,"scope":"decisiones:pedir","token_type":"Bearer"}`)
	dec := []byte(stubDecision)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		if r.URL.Path == "/v1/token" {
			w.Write(tok)
			return
		}
		w.Write(dec)
	})
}

// handlerTransport serves requests with a handler in memory: without the
// loopback network, what remains of the difference between the two
// benchmarks is the client's own work.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

var benchRequest = client.PeticionDecision{ClienteRef: "c9f1a2b3d4e5", Contexto: client.Contexto{Canal: "push", CampanaID: "verano"}}

// rawDecide is the plain HTTP call: encode, POST with a bearer token,
// decode.
func rawDecide(ctx context.Context, hc *http.Client, url string) (*client.Decision, error) {
	body, err := json.Marshal(&benchRequest)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	d := new(client.Decision)
	if err := json.NewDecoder(resp.Body).Decode(d); err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	return d, nil
}

func rawHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
}

func benchClient(tb testing.TB, url string, opts ...client.Option) *client.Client {
	// A long budget: on a loaded machine a slow round trip must not turn
	// into a fallback, which would measure something else.
	opts = append([]client.Option{client.WithFallback(0), client.WithBudget(10 * time.Second)}, opts...)
	c, err := client.New(url, "ci_bench", "secret", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	if err := c.Warm(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return c
}

func BenchmarkRawHTTPDecide(b *testing.B) {
	srv := stubServer(b)
	benchRawDecide(b, rawHTTPClient(), srv.URL+"/v1/decisiones")
}

func BenchmarkDecide(b *testing.B) {
	srv := stubServer(b)
	benchDecide(b, benchClient(b, srv.URL))
}

func BenchmarkRawHTTPDecideInMemory(b *testing.B) {
	benchRawDecide(b, &http.Client{Transport: handlerTransport{stubHandler()}}, "http://stub/v1/decisiones")
}

func BenchmarkDecideInMemory(b *testing.B) {
	benchDecide(b, benchClient(b, "http://stub", client.WithHTTPClient(&http.Client{Transport: handlerTransport{stubHandler()}})))
}

// benchRawDecide times plain HTTP decisions through hc to url, with their
// allocations and the process's CPU.
func benchRawDecide(b *testing.B, hc *http.Client, url string) {
	ctx := context.Background()
	b.ReportAllocs()
	cpu := processCPU()
	defer reportCPU(b, cpu)
	for b.Loop() {
		if _, err := rawDecide(ctx, hc, url); err != nil {
			b.Fatal(err)
		}
	}
}

// benchDecide times c's decisions, which must not fall back, with their
// allocations and the process's CPU.
func benchDecide(b *testing.B, c *client.Client) {
	ctx := context.Background()
	b.ReportAllocs()
	cpu := processCPU()
	defer reportCPU(b, cpu)
	for b.Loop() {
		d, err := c.Decide(ctx, benchRequest)
		if err != nil || d.EnRespaldo {
			b.Fatal(err, d.Causa)
		}
	}
}

// TestDecideAllocationOverhead holds the client to at most 10 allocations
// per decision over the plain HTTP call.
func TestDecideAllocationOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts of HTTP round trips need a quiet run")
	}
	srv := stubServer(t)
	c := benchClient(t, srv.URL)
	hc := rawHTTPClient()
	ctx := context.Background()
	url := srv.URL + "/v1/decisiones"
	raw := testing.AllocsPerRun(200, func() { rawDecide(ctx, hc, url) })
	lib := testing.AllocsPerRun(200, func() { c.Decide(ctx, benchRequest) })
	t.Logf("allocations per decision: raw %.1f, client %.1f", raw, lib)
	if lib-raw > 10 {
		t.Errorf("client adds %.1f allocations per decision, want at most 10", lib-raw)
	}
}
