package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// TestAnswerNotJSONThroughInMemoryTransport: a 200 whose body is not JSON
// (a proxy's page, a stub in an integrator's test) is an error, or
// Decide's fallback, also through a RoundTripper whose responses carry no
// Request, as httptest.ResponseRecorder's do: never a panic in the
// caller's process.
func TestAnswerNotJSONThroughInMemoryTransport(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"x","token_type":"Bearer"}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>portal</html>")
	})
	c, err := client.New("http://coupond.invalid", "ci_x", "sec", client.WithFallback(0), client.WithBreaker(0, time.Second),
		client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c.Close(ctx) // the fallback record is never accepted here
	}()
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"Catalog", func() error { _, err := c.Catalog(ctx); return err }},
		{"Confirm", func() error {
			_, err := c.Confirm(ctx, "d-1", client.PeticionEjecucion{Ejecutada: true})
			return err
		}},
		{"Decide", func() error {
			d, err := c.Decide(ctx, decisionRequest("cli-00000001"))
			if err != nil {
				return err
			}
			if !d.EnRespaldo {
				return nil
			}
			return d.Causa
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = tt.call()
			}()
			var apiErr *client.Error
			if err == nil || errors.As(err, &apiErr) {
				t.Fatalf("got %v, want an error saying the answer is not JSON", err)
			}
			t.Log(err)
		})
	}
}

// TestEmptyPathIDRefused: a call whose path id is empty, such as Confirm
// of a fallback decision (EnRespaldo, no DecisionID), is an error naming
// the parameter, sent nowhere; the server would answer a bare 404
// no_encontrado that reads as a lost decision, job or campaign.
func TestEmptyPathIDRefused(t *testing.T) {
	var requests atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"x","token_type":"Bearer"}`)
			return
		}
		requests.Add(1)
		w.WriteHeader(404)
		fmt.Fprint(w, `{"codigo":"no_encontrado","mensaje":"recurso no encontrado","campo":null,"detalle":null,"trace_id":"t1"}`)
	})
	c, err := client.New("http://coupond.invalid", "ci_x", "sec",
		client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	for _, tt := range []struct {
		name, param string
		call        func() error
	}{
		{"Confirm", "decision_id", func() error {
			_, err := c.Confirm(ctx, "", client.PeticionEjecucion{Ejecutada: true})
			return err
		}},
		{"PutCampaign", "campana_id", func() error {
			_, err := c.PutCampaign(ctx, "", client.Campana{Canal: "push", Descripcion: "x"})
			return err
		}},
		{"Campaign", "campana_id", func() error { _, err := c.Campaign(ctx, ""); return err }},
		{"ExportCustomer", "cliente_ref", func() error { _, err := c.ExportCustomer(ctx, ""); return err }},
		{"DeleteCustomer", "cliente_ref", func() error { _, err := c.DeleteCustomer(ctx, ""); return err }},
		{"Batch", "job_id", func() error { _, err := c.Batch(ctx, ""); return err }},
		{"WaitBatch", "job_id", func() error { _, err := c.WaitBatch(ctx, "", nil); return err }},
		{"BatchResults", "job_id", func() error {
			for _, err := range c.BatchResults(ctx, "") {
				return err
			}
			return nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := requests.Load()
			err := tt.call()
			var apiErr *client.Error
			if err == nil || errors.As(err, &apiErr) || !strings.Contains(err.Error(), tt.param) {
				t.Errorf("got %v, want an error naming %s", err, tt.param)
			}
			if n := requests.Load() - before; n != 0 {
				t.Errorf("%d requests sent for an empty %s", n, tt.param)
			}
		})
	}
}

// TestAnswerNullIsNotAnAnswer: a 2xx whose body is JSON but not an object
// (null from a stub or a gateway, a list) is an error saying the answer is
// not the documented JSON, as any other such answer is. null decoded into
// the zero value with no error: Confirm answered an empty
// estado_ejecucion, PublishEvents counted nothing accepted and nothing
// rejected, WaitBatch polled a job with no state until its deadline, and
// BatchResults yielded an empty line.
func TestAnswerNullIsNotAnAnswer(t *testing.T) {
	for _, body := range []string{"null", " null\n", "[]", `"x"`, "7"} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/token" {
				fmt.Fprint(w, tokenJSON)
				return
			}
			fmt.Fprint(w, body+"\n")
		})
		c := inMemoryClient(t, h, client.WithTimeout(2*time.Second), client.WithPollInterval(time.Millisecond),
			client.WithRetries(1, 0, 0))
		ctx := context.Background()
		tests := []struct {
			name string
			call func() error
		}{
			{"Catalog", func() error { _, err := c.Catalog(ctx); return err }},
			{"Campaign", func() error { _, err := c.Campaign(ctx, "c1"); return err }},
			{"Confirm", func() error {
				_, err := c.Confirm(ctx, "d-1", client.PeticionEjecucion{Ejecutada: true})
				return err
			}},
			{"RecordFallback", func() error {
				return c.RecordFallback(ctx, client.PeticionRespaldo{Canal: "push", ClienteRef: "cli-00000001"})
			}},
			{"DeleteWebhook", func() error { return c.DeleteWebhook(ctx) }},
			{"ExportCustomer", func() error { _, err := c.ExportCustomer(ctx, "cli-00000001"); return err }},
			{"PublishEvents", func() error {
				_, err := c.PublishEvents(ctx, []client.Evento{{EventID: "e1", ClienteRef: "cli-00000001",
					Ts: time.Now(), Tipo: client.Baja, Clave: "cuenta"}})
				return err
			}},
			{"WaitBatch", func() error {
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := c.WaitBatch(wctx, "lote_x", nil)
				return err
			}},
			{"BatchResults", func() error {
				for _, err := range c.BatchResults(ctx, "lote_x") {
					return err
				}
				return nil
			}},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%q", tt.name, body), func(t *testing.T) {
				err := tt.call()
				var apiErr *client.Error
				if err == nil || errors.As(err, &apiErr) || errors.Is(err, context.DeadlineExceeded) ||
					!strings.Contains(err.Error(), "not the documented JSON") {
					t.Fatalf("got %v, want an error saying the answer is not the documented JSON", err)
				}
			})
		}
	}
}

// TestExportCustomerOfAnySize: the server streams a customer's export
// whatever its length (a walk-in sales account holds millions of events),
// and ExportCustomer reads it whole: past 64 MB too, where it failed with
// "unexpected end of JSON input", the answer cut at the bound every other
// answer has. A document cut short is still an error.
func TestExportCustomerOfAnySize(t *testing.T) {
	if raceEnabled && testing.Short() {
		t.Skip("decoding 70 MB takes 25 s under the race detector, with one goroutine to watch")
	}
	const events, extra = 70, 1 << 20 // 70 MB of events
	nota := strings.Repeat("x", extra)
	event := `","cliente_ref":"cli-00000001","ts":"2026-11-30T00:00:00Z","tipo":"ALTA","clave":"tienda","valor":0,` +
		`"decision_id":null,"extra":{"nota":"` + nota + `"}}`
	var cut atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, tokenJSON)
			return
		}
		fmt.Fprint(w, `{"cliente_ref":"cli-00000001","generado_en":"2026-12-01T00:00:00Z","eventos":[`)
		for i := range events {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"event_id":"e%d`, i)
			io.WriteString(w, event)
		}
		if cut.Load() {
			return // the server's storage failed after the status line
		}
		fmt.Fprint(w, `],"caracteristicas":{},"decisiones":[],"confirmaciones":[],"vinculos_cupon":[],"borrado":null,"en_cuarentena":0}`)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithRetries(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })

	x, err := c.ExportCustomer(context.Background(), "cli-00000001")
	if err != nil {
		t.Fatalf("export of %d MB: %v", events*extra>>20, err)
	}
	if len(x.Eventos) != events || x.Eventos[events-1].Extra["nota"] != nota {
		t.Fatalf("export has %d events, want %d whole", len(x.Eventos), events)
	}
	cut.Store(true)
	if _, err := c.ExportCustomer(context.Background(), "cli-00000001"); err == nil ||
		!strings.Contains(err.Error(), "not the documented JSON") {
		t.Fatalf("export cut short: got %v, want an error saying so", err)
	}
}

// TestFallbackQueueRetriesAnswerNotJSON: a 2xx to a queued fallback
// record whose body is not the API's answer (a proxy's or captive
// portal's page) is a failed delivery, retried with the same
// Idempotency-Key until the API accepts it, as RecordFallback treats it.
// Before, the queue discarded the body and counted the record in
// FallbackSent though the server never stored it.
func TestFallbackQueueRetriesAnswerNotJSON(t *testing.T) {
	tests := []struct {
		name      string
		portal    int64 // fallback deliveries answered 200 with an HTML page first
		wantSends int64 // fallback deliveries in all
	}{
		{"accepted at once", 0, 1},
		{"portal page once", 1, 2},
		{"portal page three times", 3, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sends atomic.Int64
			var keys keySet
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/v1/token":
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, tokenJSON)
				case "/v1/decisiones/respaldo":
					keys.add(r.Header.Values("Idempotency-Key"))
					if sends.Add(1) <= tt.portal {
						w.Header().Set("Content-Type", "text/html")
						fmt.Fprint(w, "<html>portal</html>")
						return
					}
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{}`)
				default:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprint(w, `{"codigo":"no_disponible","mensaje":"m","campo":null,"detalle":null,"trace_id":"t"}`)
				}
			})
			c := inMemoryClient(t, h, client.WithFallback(0), client.WithBreaker(0, time.Second),
				client.WithRetries(1, 0, 0), client.WithFallbackRetry(time.Millisecond, time.Millisecond))
			d, err := c.Decide(context.Background(), decisionRequest(newRef()))
			if err != nil || !d.EnRespaldo {
				t.Fatalf("Decide: %+v, %v; want the fallback", d, err)
			}
			waitFor(t, 5*time.Second, func() bool { return c.Stats().FallbackPending == 0 })
			st := c.Stats()
			got := []int64{sends.Load(), st.FallbackSent, st.FallbackRejected, int64(keys.count())}
			if diff := cmp.Diff([]int64{tt.wantSends, 1, 0, 1}, got); diff != "" {
				t.Errorf("[deliveries, sent, rejected, keys] (-want +got):\n%s", diff)
			}
		})
	}
}
