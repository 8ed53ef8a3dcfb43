package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
)

// encodingRecorder records the Content-Encoding of result downloads.
type encodingRecorder struct {
	inner http.RoundTripper
	mu    sync.Mutex
	seen  []string
}

func (e *encodingRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.inner.RoundTrip(r)
	if err == nil && bytes.HasSuffix([]byte(r.URL.Path), []byte("/resultado")) {
		e.mu.Lock()
		e.seen = append(e.seen, resp.Header.Get("Content-Encoding"))
		e.mu.Unlock()
	}
	return resp, err
}

// TestBatchWebhookAndResults: register a webhook, run a batch job, wait for
// it with progress, stream its zstd result, and verify the signed
// notification.
func TestBatchWebhookAndResults(t *testing.T) {
	ts := newTestServer(t)
	rec := &encodingRecorder{inner: http.DefaultTransport}
	c := ts.newClient(t, ts.url, client.WithHTTPClient(&http.Client{Transport: rec}), client.WithPollInterval(20*time.Millisecond))
	ctx := context.Background()
	installCatalog(t, c, 3)

	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
	}))
	defer receiver.Close()
	reg, err := c.RegisterWebhook(ctx, client.PeticionWebhook{URL: receiver.URL, Eventos: []string{"lote.completado"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutCampaign(ctx, "verano", client.Campana{Canal: "email", Descripcion: "verano", MaxEnvios: client.Ptr[int64](10)}); err != nil {
		t.Fatal(err)
	}
	refs := make([]string, 40)
	for i := range refs {
		refs[i] = fmt.Sprintf("lote-cliente-%03d", i)
	}
	job, err := c.CreateBatch(ctx, client.PeticionLoteDecision{CampanaID: "verano", Clientes: refs})
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := c.WaitBatch(wctx, job.JobID, func(s client.EstadoLote) { states = append(states, s.Estado) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Estado != client.EstadoCompletado || st.Total != 40 || st.Procesados != 40 || st.ResultadoURL == "" || len(states) == 0 {
		t.Fatalf("final state %+v after %v", st, states)
	}
	seen := map[string]bool{}
	sends := 0
	for line, err := range c.BatchResults(ctx, job.JobID) {
		if err != nil {
			t.Fatal(err)
		}
		if line.DecisionID == "" || seen[line.ClienteRef] {
			t.Fatalf("bad or repeated line %+v", line)
		}
		seen[line.ClienteRef] = true
		if line.Accion != 0 {
			sends++
		}
	}
	if len(seen) != 40 || sends > 10 {
		t.Errorf("%d lines with %d sends, want 40 lines and at most max_envios 10 sends", len(seen), sends)
	}
	if len(rec.seen) != 1 || rec.seen[0] != "zstd" {
		t.Errorf("result downloads with Content-Encoding %q, want one zstd", rec.seen)
	}

	// The notification.
	var d delivery
	select {
	case d = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook delivery")
	}
	p, err := client.VerifyWebhook(reg.Secreto, d.header, d.body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if p.Tipo != "lote.completado" || p.JobID != job.JobID || p.Lineas != 40 || p.CampanaID != "verano" {
		t.Errorf("payload %+v", p)
	}
	if err := c.DeleteWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	// A second job within the hour: 429 with Retry-After, not retried past ctx.
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	_, err = c.CreateBatch(short, client.PeticionLoteDecision{CampanaID: "verano", Clientes: refs[:1]})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || apiErr.RetryAfter < time.Minute {
		t.Errorf("second job: %v, want 429 with a long Retry-After", err)
	}
}

func TestVerifyWebhook(t *testing.T) {
	secret := batch.NewWebhookSecret()
	key, err := batch.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"tipo":"lote.completado","job_id":"j1","campana_id":"c","estado":"completado","lineas":3,"completado_en":"2026-11-02T12:00:00Z"}`)
	headers := func(id string, ts time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		h.Set("webhook-signature", sig)
		return h
	}
	good := batch.SignWebhook(key, "msg_1", now, body)
	other := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))
	// twin spells good's signature with other padding bits in its last
	// character before "=": the same bytes to a lenient decoder.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	last := len(good) - 2
	twin := good[:last] + string(alphabet[strings.IndexByte(alphabet, good[last])^1]) + good[last+1:]
	tests := []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		want   error
	}{
		{"valid", secret, headers("msg_1", now, good), body, nil},
		{"valid without the whsec_ prefix", secret[len("whsec_"):], headers("msg_1", now, good), body, nil},
		{"valid among several signatures", secret, headers("msg_1", now, other+" "+good), body, nil},
		{"timestamp 4 minutes old", secret, headers("msg_1", now.Add(-4*time.Minute), batch.SignWebhook(key, "msg_1", now.Add(-4*time.Minute), body)), body, nil},
		{"body changed", secret, headers("msg_1", now, good), append(bytes.Clone(body[:len(body)-1]), ' ', '}'), client.ErrWebhookSignature},
		{"id changed", secret, headers("msg_2", now, good), body, client.ErrWebhookSignature},
		{"other secret", batch.NewWebhookSecret(), headers("msg_1", now, good), body, client.ErrWebhookSignature},
		{"timestamp 6 minutes old", secret, headers("msg_1", now.Add(-6*time.Minute), batch.SignWebhook(key, "msg_1", now.Add(-6*time.Minute), body)), body, client.ErrWebhookTimestamp},
		{"timestamp 6 minutes ahead", secret, headers("msg_1", now.Add(6*time.Minute), batch.SignWebhook(key, "msg_1", now.Add(6*time.Minute), body)), body, client.ErrWebhookTimestamp},
		{"signature altered in its padding bits", secret, headers("msg_1", now, twin), body, client.ErrWebhookSignature},
		{"v2 signature only", secret, headers("msg_1", now, "v2,"+good[3:]), body, client.ErrWebhookSignature},
		{"no signature", secret, headers("msg_1", now, ""), body, client.ErrWebhookHeaders},
		{"secret not base64", "whsec_***", headers("msg_1", now, good), body, client.ErrWebhookSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := client.VerifyWebhook(tt.secret, tt.h, tt.body, now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err == nil && (p.JobID != "j1" || p.Lineas != 3) {
				t.Errorf("payload %+v", p)
			}
		})
	}
}

// TestBatchResultsUnexpectedStatus: a download answered with a 2xx other
// than 200 (such as a proxy's 204) is an error for the loop, not a panic
// in the caller's process.
func TestBatchResultsUnexpectedStatus(t *testing.T) {
	for _, status := range []int{http.StatusAccepted, http.StatusNoContent} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/token" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"decisiones:pedir","token_type":"Bearer"}`)
					return
				}
				w.WriteHeader(status)
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "ci_x", "sec", client.WithTimeout(5*time.Second), newFakeTime().option())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			var errs []error
			for line, err := range c.BatchResults(context.Background(), "job-1") {
				if line != nil {
					t.Errorf("line %+v from a %d answer", line, status)
				}
				errs = append(errs, err)
			}
			if len(errs) != 1 || errs[0] == nil {
				t.Fatalf("got errors %v, want one", errs)
			}
		})
	}
}

// cutBody yields data, then err where the stream would end.
type cutBody struct {
	r   io.Reader
	err error
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}

// resultTransport answers tokens, and every other request with a 200
// result file of body() sent with Content-Encoding encoding.
type resultTransport struct {
	encoding string
	body     func() io.Reader
}

func (t resultTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/token" {
		return handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, tokenJSON)
		})}.RoundTrip(r)
	}
	h := http.Header{"Content-Type": {"application/x-ndjson"}}
	if t.encoding != "" {
		h.Set("Content-Encoding", t.encoding)
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(t.body()), Request: r}, nil
}

// TestBatchResultsDownloadCutShort: a download that ends in a read error
// (the caller's context canceled, the connection lost) yields that error,
// for errors.Is, after the whole lines read before it, whatever the
// encoding. Before, the piece of line read before the error was parsed
// first and the loop got "line n is not the documented JSON", which reads
// as a damaged file: a caller that canceled could not tell. A last line
// without its newline, followed by the file's end, is still a line.
func TestBatchResultsDownloadCutShort(t *testing.T) {
	const lines = `{"cliente_ref":"c1","decision_id":"d1"}` + "\n" + `{"cliente_ref":"c2","decision_id":"d2"}` + "\n"
	const partial = `{"cliente_ref":"c3","deci`
	zstdOf := func(s string) []byte {
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		return enc.EncodeAll([]byte(s), nil)
	}
	tests := []struct {
		name     string
		encoding string
		body     []byte
		err      error // ending the body; io.EOF: a whole file
		want     []string
		wantErr  error // nil: no error
	}{
		{"identity canceled", "", []byte(lines + partial), context.Canceled, []string{"c1", "c2"}, context.Canceled},
		{"identity connection lost", "", []byte(lines + partial), io.ErrUnexpectedEOF, []string{"c1", "c2"}, io.ErrUnexpectedEOF},
		{"identity cut at a newline", "", []byte(lines), context.Canceled, []string{"c1", "c2"}, context.Canceled},
		{"identity last line without newline", "", []byte(lines + `{"cliente_ref":"c3","decision_id":"d3"}`), io.EOF, []string{"c1", "c2", "c3"}, nil},
		{"zstd canceled", "zstd", zstdOf(lines + partial + `sion_id":"d3"}` + "\n"), context.Canceled, nil, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if tt.encoding == "zstd" {
				body = body[:len(body)-8] // the frame cut short
			}
			rt := resultTransport{encoding: tt.encoding, body: func() io.Reader { return &cutBody{bytes.NewReader(body), tt.err} }}
			c, err := client.New("http://coupond.invalid", "ci_x", "sec", client.WithHTTPClient(&http.Client{Transport: rt}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			var got []string
			var gotErr error
			for line, err := range c.BatchResults(context.Background(), "job-1") {
				if err != nil {
					gotErr = err
					break
				}
				got = append(got, line.ClienteRef)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if tt.wantErr == nil && gotErr != nil || tt.wantErr != nil && !errors.Is(gotErr, tt.wantErr) {
				t.Errorf("error %v, want %v", gotErr, tt.wantErr)
			}
		})
	}
}

// TestCreateBatchFieldAtFault: a batch request the API refuses names the
// field at fault in Campo. An empty, non-nil Clientes (an audience that
// came out empty) is sent as [], refused on clientes; before, it was left
// out like nil and the 422 read "send exactly one of clientes or segmento"
// on body.
func TestCreateBatchFieldAtFault(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url)
	ctx := context.Background()
	if _, err := c.PutCampaign(ctx, "vacia", client.Campana{Canal: "email", Descripcion: "vacía"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    client.PeticionLoteDecision
		want string
	}{
		{"empty list", client.PeticionLoteDecision{CampanaID: "vacia", Clientes: []string{}}, "clientes"},
		{"neither list nor segment", client.PeticionLoteDecision{CampanaID: "vacia"}, "body"},
		{"bad cliente_ref", client.PeticionLoteDecision{CampanaID: "vacia", Clientes: []string{"x"}}, "clientes.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.CreateBatch(ctx, tt.p)
			var apiErr *client.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("CreateBatch: %v, want a *client.Error", err)
			}
			if diff := cmp.Diff([]any{422, tt.want}, []any{apiErr.Status, apiErr.Campo}); diff != "" {
				t.Errorf("status, campo (-want +got):\n%s\n%v", diff, err)
			}
		})
	}
}
