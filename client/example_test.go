package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/coupond/coupond/client"
)

// The examples run against a coupond server started in process
// (exampleServer); in production the base URL, client_id and client_secret
// come from your configuration.

// A complete online flow: decide, send the coupon or not, publish the
// CUPON_RECIBIDO event with the decision_id, confirm the execution. The
// customer's second visit, while the first decision's reward window is
// open, gets that decision back (accion 0, VentanaAbierta): nothing to
// confirm.
func Example() {
	srv, stop := exampleServer()
	defer stop()

	c, err := client.New(srv.url, srv.clientID, srv.secret,
		client.WithFallback(0),           // if the engine does not answer in time: send nothing
		client.WithBudget(2*time.Second), // for this example on a busy test machine; the default is 100 ms
		client.WithUserAgent("crm-example/1.0"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // sends queued fallback records, for up to 30 s
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.Close(ctx)
	}()
	ctx := context.Background()

	for visit := 1; visit <= 2; visit++ {
		d, err := c.Decide(ctx, client.PeticionDecision{
			ClienteRef: "c9f1a2b3d4e5",
			Contexto:   client.Contexto{Canal: "push", AccionesPermitidas: []int{1, 2, 3}},
		})
		if err != nil {
			log.Fatal(err) // a request the API refuses (422, 401, 403, …)
		}
		if d.VentanaAbierta() {
			// The customer's reward window is open: d is that decision
			// again (same DecisionID, accion 0), confirmed by its own
			// answer's confirmation. Confirming d would confirm that
			// decision's coupon.
			fmt.Printf("visit %d: window open, nothing new (accion %d)\n", visit, d.Accion)
			continue
		}
		if d.EnRespaldo {
			// The engine did not answer: apply d.Accion (the fallback); the
			// library records it. Nothing to confirm.
			fmt.Println("fallback:", d.Accion, d.Causa)
			return
		}
		if d.Accion != 0 {
			// Send the coupon d.Accion through your channel, then tell coupond.
			now := time.Now().UTC()
			r, err := c.PublishEvents(ctx, []client.Evento{{
				EventID: "recibido-" + d.DecisionID, ClienteRef: "c9f1a2b3d4e5", Ts: now,
				DecisionID: &d.DecisionID, Tipo: client.CuponRecibido, Clave: fmt.Sprintf("T%d", d.Accion),
				Extra: &client.ExtraCuponRecibido{CuponEmitidoID: "cupon-" + d.DecisionID, Caducidad: now.Add(30 * 24 * time.Hour)},
			}})
			if err != nil {
				log.Fatal(err)
			}
			if len(r.Rechazados) > 0 { // refused events come in the answer, not as an error
				log.Fatalf("event refused: %+v", r.Rechazados[0])
			}
		}
		// Confirm every new engine decision, accion 0 included. A repeat
		// of a confirmation whose answer was lost answers 409
		// ejecucion_ya_confirmada: there is nothing more to do.
		conf, err := c.Confirm(ctx, d.DecisionID, client.PeticionEjecucion{Ejecutada: true})
		var apiErr *client.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Codigo == "ejecucion_ya_confirmada":
			fmt.Printf("visit %d: confirmed before (accion %d)\n", visit, d.Accion)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("visit %d: %s\n", visit, conf.EstadoEjecucion)
		}
	}
	// Output:
	// visit 1: ejecutada
	// visit 2: window open, nothing new (accion 0)
}

// When the engine cannot answer within the budget, Decide returns the
// fallback action marked EnRespaldo and records it in the background.
func ExampleClient_Decide_fallback() {
	srv, stop := exampleServer()
	defer stop()
	down := "http://127.0.0.1:0" // port 0: nothing can listen there, a dial is refused

	c, err := client.New(down, srv.clientID, srv.secret, client.WithFallback(2), client.WithBudget(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "c9f1a2b3d4e5", Contexto: client.Contexto{Canal: "sms"}},
		client.FallbackAction(1)) // this call's fallback
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accion:", d.Accion, "en_respaldo:", d.EnRespaldo)
	fmt.Println("budget exhausted:", errors.Is(d.Causa, client.ErrBudgetExhausted))
	fmt.Println("records waiting:", c.Stats().FallbackPending)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c.Close(ctx) // the server stays down: the record is given up
	fmt.Println("records dropped:", c.Stats().FallbackDropped)
	// Output:
	// accion: 1 en_respaldo: true
	// budget exhausted: true
	// records waiting: 1
	// records dropped: 1
}

// Without a fallback action, a Decide the engine does not answer in time
// returns an error wrapping ErrNoFallback and the cause; the caller
// applies its own rule and records what it did with RecordFallback.
func ExampleClient_RecordFallback() {
	srv, stop := exampleServer()
	defer stop()
	c, err := client.New(srv.url, srv.clientID, srv.secret) // no WithFallback
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()

	req := client.PeticionDecision{ClienteRef: "c9f1a2b3d4e5", Contexto: client.Contexto{Canal: "push"}}
	// A budget no answer fits in stands for an engine that does not answer.
	d, err := c.Decide(ctx, req, client.Budget(time.Nanosecond))
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrNoFallback):
		fmt.Println("no answer in time:", errors.Is(err, client.ErrBudgetExhausted))
		accion := 1 // what your own rule decided, and applied
		// Replacing(err): a decision coupond made whose answer was lost
		// is voided, instead of holding the customer's reward window.
		if err := c.RecordFallback(ctx, client.PeticionRespaldo{Accion: accion, Canal: req.Contexto.Canal,
			ClienteRef: req.ClienteRef}, client.Replacing(err)); err != nil {
			log.Fatal(err)
		}
		fmt.Println("recorded accion", accion)
	case errors.As(err, &apiErr):
		log.Fatal(apiErr) // the API refused the request: fix the call
	case err != nil:
		log.Fatal(err) // ctx canceled (record what you did, with Replacing(err)), or the Client closed
	default:
		fmt.Println("the engine decided", d.Accion)
	}
	// Output:
	// no answer in time: true
	// recorded accion 1
}

// Errors from the API are *client.Error values.
func ExampleError() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.url, srv.clientID, srv.secret)
	defer c.Close(context.Background())

	_, err := c.Confirm(context.Background(), "decision-inventada", client.PeticionEjecucion{Ejecutada: true})
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Codigo, apiErr.TraceID != "")
	}
	_, err = c.Decide(context.Background(), client.PeticionDecision{ClienteRef: "corto", Contexto: client.Contexto{Canal: "push"}})
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Campo, apiErr.Detail[0].Type)
	}
	// Output:
	// 404 no_encontrado true
	// 422 cliente_ref string_too_short
}

// PublishEvents splits any number of events into requests the API accepts
// and maps rejections back to the caller's indices.
func ExampleClient_PublishEvents() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.url, srv.clientID, srv.secret)
	defer c.Close(context.Background())

	ts := time.Now().Add(-time.Hour).UTC()
	var evs []client.Evento
	for i := 0; i < 2500; i++ {
		evs = append(evs, client.Evento{
			EventID: fmt.Sprintf("ticket-%d-abarrotes", i), ClienteRef: fmt.Sprintf("cliente-%04d", i%100), Ts: ts,
			Tipo: client.CompraCat, Clave: "abarrotes", Valor: client.Ptr(250.0),
			Extra: &client.ExtraCompraCat{TicketID: fmt.Sprintf("ticket-%d", i), Margen: 60},
		})
	}
	evs[1234].Valor = client.Ptr(-1.0) // refused: negative amount
	res, err := c.PublishEvents(context.Background(), evs)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("aceptados:", res.Aceptados, "rechazado:", res.Rechazados[0].Indice, *res.Rechazados[0].Campo)
	res, _ = c.PublishEvents(context.Background(), evs) // resending duplicates nothing
	fmt.Println("aceptados:", res.Aceptados, "duplicados:", res.Duplicados)
	// Output:
	// aceptados: 2499 rechazado: 1234 valor
	// aceptados: 0 duplicados: 2499
}

// A batch job: create, wait with progress, stream the result.
func ExampleClient_BatchResults() {
	srv, stop := exampleServer()
	defer stop()
	c, _ := client.New(srv.url, srv.clientID, srv.secret, client.WithPollInterval(20*time.Millisecond))
	defer c.Close(context.Background())
	ctx := context.Background()

	if _, err := c.PutCampaign(ctx, "buen-fin", client.Campana{Canal: "email", Descripcion: "Buen Fin", MaxEnvios: client.Ptr[int64](100)}); err != nil {
		log.Fatal(err)
	}
	// Retried with one Idempotency-Key: a lost answer does not make a second job.
	job, err := c.CreateBatch(ctx, client.PeticionLoteDecision{CampanaID: "buen-fin",
		Clientes: []string{"cliente-0001", "cliente-0002", "cliente-0003"}})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.WaitBatch(ctx, job.JobID, func(s client.EstadoLote) { /* show s.Procesados of s.Total */ })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Estado, st.Total)
	n := 0
	for line, err := range c.BatchResults(ctx, job.JobID) {
		if err != nil {
			log.Fatal(err)
		}
		// Send line.Accion to line.ClienteRef, then Confirm line.DecisionID
		// (a customer's open decision, repeated, is confirmed once).
		_ = line.Accion
		n++
	}
	fmt.Println("lineas:", n)
	// Output:
	// completado 3
	// lineas: 3
}

// A receiver of lote.completado notifications.
func ExampleVerifyWebhook() {
	secreto := "whsec_…" // RegistroWebhook.Secreto, kept when registering
	http.HandleFunc("/coupond/webhook", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		p, err := client.VerifyWebhook(secreto, r.Header, body, time.Now())
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get("webhook-id"), then fetch p.JobID's results.
		log.Printf("job %s done: %d lines", p.JobID, p.Lineas)
	})
}
