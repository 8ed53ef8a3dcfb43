package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// purchases returns n COMPRA_CAT events spread over customers, event ids
// prefixed by prefix; large ones carry about 1 KB of text.
func purchases(prefix string, n, customers int, large bool) []client.Evento {
	ts := time.Now().Add(-time.Hour).UTC()
	clave, text := "cat", (*string)(nil)
	if large {
		clave, text = strings.Repeat("c", 250), client.Ptr(strings.Repeat("t", 250))
	}
	out := make([]client.Evento, n)
	for i := range out {
		out[i] = client.Evento{EventID: fmt.Sprintf("%s-%05d", prefix, i), ClienteRef: fmt.Sprintf("%s-cust-%03d", prefix, i%customers),
			Ts: ts, Tipo: client.CompraCat, Clave: clave, Valor: client.Ptr(100.0),
			Extra: &client.ExtraCompraCat{TicketID: fmt.Sprintf("t%05d", i), Margen: 30, Tienda: text, Canal: text}}
	}
	return out
}

// bodySizes records the size and event count of each POST /v1/eventos.
type bodySizes struct {
	mu    sync.Mutex
	sizes []int64
}

func TestPublishEventsSplitsAndMapsIndices(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	var sizes bodySizes
	proxy.set(func(r *http.Request, n int) fault {
		if r.URL.Path == "/v1/eventos" {
			sizes.mu.Lock()
			sizes.sizes = append(sizes.sizes, r.ContentLength)
			sizes.mu.Unlock()
		}
		return fault{}
	})
	c := ts.newClient(t, proxy.http.URL)
	ctx := context.Background()

	evs := purchases("split", 2500, 25, false)
	bad := []int{5, 1500, 2499}
	for _, i := range bad {
		evs[i].Extra = &client.ExtraCompraCat{TicketID: "t", Margen: 0.001} // three decimals: rejected
	}
	got, err := c.PublishEvents(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, r := range got.Rechazados {
		idx = append(idx, r.Indice)
		if r.Codigo != "esquema_invalido" || r.Campo == nil || *r.Campo != "extra.margen" || *r.EventID != evs[r.Indice].EventID {
			t.Errorf("rejection %+v does not name event %d's extra.margen", r, r.Indice)
		}
	}
	if diff := cmp.Diff(bad, idx); diff != "" || got.Aceptados != 2497 || got.Duplicados != 0 {
		t.Fatalf("aceptados %d duplicados %d; rejected indices (-want +got):\n%s", got.Aceptados, got.Duplicados, diff)
	}
	if n := proxy.requests("/v1/eventos"); n != 3 {
		t.Errorf("%d requests for 2500 small events, want 3", n)
	}

	// Large events: the 1 MB limit splits before 1000 events.
	sizes.sizes = nil
	big := purchases("big", 1200, 10, true) // about 1 KB each
	got, err = c.PublishEvents(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if got.Aceptados != 1200 || len(got.Rechazados) != 0 {
		t.Fatalf("large events: %d aceptados, %d rechazados, want all 1200 accepted", got.Aceptados, len(got.Rechazados))
	}
	if len(sizes.sizes) != 2 {
		t.Errorf("%d requests (%v bytes) for 1200 events of 1 KB, want 2", len(sizes.sizes), sizes.sizes)
	}
	for _, s := range sizes.sizes {
		if s > client.MaxEventsBody {
			t.Errorf("request of %d bytes, over 1 MB", s)
		}
	}
}

// TestPublishEventsNeverDuplicates: a request whose answer is lost is
// resent, and a whole slice sent again, without any event stored twice.
func TestPublishEventsNeverDuplicates(t *testing.T) {
	ts := newTestServer(t)
	proxy := newFaultProxy(t, ts.api)
	c := ts.newClient(t, proxy.http.URL)
	ctx := context.Background()
	evs := purchases("dup", 2100, 3, false)
	// The second request reaches the server, its answer is lost.
	proxy.set(func(r *http.Request, n int) fault {
		if r.URL.Path == "/v1/eventos" && n == 2 {
			return fault{forward: true, reset: true}
		}
		return fault{}
	})
	got, err := c.PublishEvents(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Aceptados+got.Duplicados != 2100 || len(got.Rechazados) != 0 {
		t.Fatalf("first send: %+v, want 2100 stored", got)
	}
	if n := proxy.requests("/v1/eventos"); n < 4 {
		t.Errorf("%d requests, want 3 and the resent one", n)
	}
	proxy.set(nil)
	again, err := c.PublishEvents(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	if again.Aceptados != 0 || again.Duplicados != 2100 {
		t.Fatalf("resend: %+v, want all 2100 duplicados", again)
	}
	for cust := 0; cust < 3; cust++ {
		x, err := c.ExportCustomer(ctx, fmt.Sprintf("dup-cust-%03d", cust))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, e := range x.Eventos {
			seen[e.EventID]++
		}
		if len(x.Eventos) != 700 || len(seen) != 700 {
			t.Errorf("customer %d: %d events, %d distinct, want 700 once each", cust, len(x.Eventos), len(seen))
		}
	}
}

func TestPublishEventsTooBigAlone(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url)
	evs := purchases("alone", 3, 1, false)
	evs[1].Clave = strings.Repeat("y", client.MaxEventsBody)
	got, err := c.PublishEvents(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Aceptados != 2 || len(got.Rechazados) != 1 || got.Rechazados[0].Indice != 1 {
		t.Fatalf("got %+v, want events 0 and 2 accepted and 1 rejected", got)
	}
}

// TestPublishEventsTimeoutPerRequest: without a deadline on ctx, the
// Client's timeout bounds each request, not the whole slice: a nightly
// upload of many requests would otherwise fail at the same point however
// often it is sent again.
func TestPublishEventsTimeoutPerRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"eventos:publicar","token_type":"Bearer"}`)
			return
		}
		var body struct{ Eventos []json.RawMessage }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		time.Sleep(300 * time.Millisecond) // a server busy with its share of a large upload
		fmt.Fprintf(w, `{"aceptados":%d,"duplicados":0,"rechazados":[]}`, len(body.Eventos))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "ci_x", "sec", client.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	got, err := c.PublishEvents(context.Background(), purchases("slow", 5000, 50, false)) // 5 requests
	if err != nil {
		t.Fatal(err)
	}
	if got.Aceptados != 5000 {
		t.Errorf("%d aceptados, want 5000", got.Aceptados)
	}
}

// sum adds xs at run time, as a caller's code adds prices: 0.1+0.2 is
// 0.30000000000000004 in float64, more than the two decimals the API
// takes.
func sum(xs ...float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestPublishEventsMoneyInCents: an amount meant in cents but carrying
// float64 rounding noise (a sum of prices) is sent as those cents and
// stored, as the caller's own value unchanged; one with a real third
// decimal is sent as it is and refused. Without the rounding, a sum of
// two or more prices is refused about one time in four.
func TestPublishEventsMoneyInCents(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url)
	ctx := context.Background()
	tests := []struct {
		name                string
		valor, margen, tot  float64
		wantValor, wantMarg float64 // as stored; 0 when refused
		refused             string  // the campo refused, if any
	}{
		{name: "noise", valor: sum(0.1, 0.2), margen: sum(1.1, 2.2), tot: sum(412.5, 88.1, 0.2),
			wantValor: 0.3, wantMarg: 3.3},
		{name: "third decimal", valor: 0.305, margen: 1, tot: 1, refused: "valor"},
		{name: "exact", valor: 59.97, margen: 0.05, tot: 1e6, wantValor: 59.97, wantMarg: 0.05},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := fmt.Sprintf("money-%d-%s", i, newRef())
			valor, extra := tt.valor, &client.ExtraCompraCat{TicketID: "t1", Margen: tt.margen, TicketTotal: client.Ptr(tt.tot)}
			ev := client.Evento{EventID: ref + "-e", ClienteRef: ref, Ts: time.Now().Add(-time.Minute).UTC(), Tipo: client.CompraCat,
				Clave: "cat", Valor: &valor, Extra: extra}
			ans, err := c.PublishEvents(ctx, []client.Evento{ev})
			if err != nil {
				t.Fatal(err)
			}
			if valor != tt.valor || extra.Margen != tt.margen || *extra.TicketTotal != tt.tot {
				t.Errorf("the caller's event changed: %v %+v", valor, extra)
			}
			var refused string
			if len(ans.Rechazados) > 0 {
				refused = *ans.Rechazados[0].Campo
			}
			if diff := cmp.Diff(tt.refused, refused); diff != "" {
				t.Fatalf("refused campo (-want +got):\n%s\n%+v", diff, ans.Rechazados)
			}
			if tt.refused != "" {
				return
			}
			x, err := c.ExportCustomer(ctx, ref)
			if err != nil || len(x.Eventos) != 1 {
				t.Fatalf("export: %+v, %v", x, err)
			}
			got := []float64{x.Eventos[0].Valor, x.Eventos[0].Extra["margen"].(float64)}
			if diff := cmp.Diff([]float64{tt.wantValor, tt.wantMarg}, got); diff != "" {
				t.Errorf("stored valor and margen (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPublishEventsExtraOfAnotherTipo: an event whose Extra is another
// tipo's type is refused here, on extra, with a mensaje naming both; the
// server named only the first member that type lacks ("Field required" on
// extra.margen). An Extra that fits, a nil one, and an unknown tipo (the
// server names tipo) are sent.
func TestPublishEventsExtraOfAnotherTipo(t *testing.T) {
	ts := newTestServer(t)
	c := ts.newClient(t, ts.url)
	evs := purchases("extra", 4, 1, false)
	evs[1].Extra = &client.ExtraCuponRedimido{CuponEmitidoID: "cup-1", TicketID: "t1"}
	evs[2].Extra = nil
	evs[3].Tipo = "COMPRA"
	got, err := c.PublishEvents(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range got.Rechazados {
		lines = append(lines, r.String())
	}
	want := []string{
		`event 1 "extra-00001": esquema_invalido: extra es *client.ExtraCuponRedimido, el de CUPON_REDIMIDO; un COMPRA_CAT lleva el suyo: no se envió (campo extra)`,
		`event 2 "extra-00002": esquema_invalido: Field required (campo extra)`,
		`event 3 "extra-00003": esquema_invalido: Input should be 'COMPRA_CAT', 'CUPON_RECIBIDO', 'CUPON_REDIMIDO', 'CUPON_CADUCADO', 'BAJA' or 'ALTA' (campo tipo)`,
	}
	if diff := cmp.Diff(want, lines); diff != "" || got.Aceptados != 1 {
		t.Errorf("aceptados %d, want 1; rechazados (-want +got):\n%s", got.Aceptados, diff)
	}
}
