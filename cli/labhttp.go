package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/engine/lab"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// labPublishLead is how far ahead of the tenant clock the API accepts an
// event's ts (server's tsAhead): over HTTP a world's week of events is
// published with the clock that far before the window's end
// (httpTarget.CloseWindow).
const labPublishLead = 5 * time.Minute

// labScopes are the scopes of a world's credential: its catalog, events,
// decisions with their detalle, and confirmations.
var labScopes = []string{"catalogo:escribir", "eventos:publicar", "decisiones:pedir", "decisiones:confirmar", "explicar:leer"}

// httpOpener opens each world of coupond lab --over-http on a coupond
// server of its own in this process, wired as serve wires one (openEnv's
// services on a data dir in the system's temporary directory, the API on a
// loopback port, serve's background loops with the learner's 1-second loop
// on the real clock), driven through the client package. The server's
// errors go to errOut.
func httpOpener(errOut io.Writer) lab.Opener {
	return func(ctx context.Context, s lab.BenchSetup) (*lab.Bench, error) {
		dir, err := os.MkdirTemp("", "coupond-lab-http-")
		if err != nil {
			return nil, err
		}
		log := zerolog.New(errOut).Level(zerolog.ErrorLevel).With().Timestamp().Logger()
		e, err := openLabEnv(ctx, dir, log, s)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		t, err := startLabServer(ctx, e, s, log)
		if err != nil {
			e.close()
			os.RemoveAll(dir)
			return nil, err
		}
		return &lab.Bench{Target: t, DB: e.db, Engine: e.svc.engine, Close: func() error {
			err := t.stop()
			if cerr := e.close(); err == nil {
				err = cerr
			}
			os.RemoveAll(dir)
			return err
		}}, nil
	}
}

// openLabEnv opens the data dir dir of a world's server with the keys the
// lab's in-process engine has (store.TestSecrets): the control group is a
// keyed hash of cliente_ref, so with keys of its own a world over HTTP
// would put other customers in it than in process, and the two ways would
// differ by that draw as well as by the way. The data dir is the lab's
// own, removed after the world, and its server listens on loopback only.
func openLabEnv(ctx context.Context, dir string, log zerolog.Logger, s lab.BenchSetup) (*env, error) {
	keys, err := json.Marshal(store.TestSecrets())
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, store.SecretsFile), store.FileMode, keys); err != nil {
		return nil, err
	}
	return openEnv(ctx, dir, log, serviceOptions{seed: s.Seed, policy: s.Policy})
}

// startLabServer creates s's tenant and a credential (labScopes) in e,
// serves e's API on a loopback port with serve's background loops, and
// returns the target that drives it.
func startLabServer(ctx context.Context, e *env, s lab.BenchSetup, log zerolog.Logger) (*httpTarget, error) {
	if err := e.db.CreateTenant(s.Tenant); err != nil {
		return nil, err
	}
	cred, secret, err := e.createCredential(s.Tenant.ID, "coupond lab", labScopes)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	httpSrv, ln := e.svc.api.HTTPServer(ln, server.HTTPConfig{})
	go httpSrv.Serve(ln)
	t := &httpTarget{env: e, tenant: s.Tenant.ID, http: httpSrv, stopLoops: startServiceLoops(e.svc, false, log)}
	e.svc.ready.Store(true)
	// The budget is the lab's patience, not a retailer's: a decision the
	// server is slow to answer must not become a fallback the engine never
	// made.
	t.c, err = client.New("http://"+ln.Addr().String(), cred.ClientID, secret, client.WithBudget(time.Minute))
	if err != nil {
		t.stop()
		return nil, err
	}
	return t, nil
}

// httpTarget is a world's lab.Target over HTTP: the catalog, decisions,
// confirmations and events through the client package, and the clock moved
// as "coupond admin clock advance" moves a running server's (advanceClock,
// in the server's process).
type httpTarget struct {
	c         *client.Client
	env       *env
	tenant    string
	http      *http.Server
	stopLoops func()
}

// stop closes the client, the API and the background loops.
func (t *httpTarget) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	if t.c != nil {
		err = t.c.Close(ctx)
	}
	if serr := t.http.Shutdown(ctx); err == nil {
		err = serr
	}
	t.env.svc.ready.Store(false)
	t.stopLoops()
	return err
}

func (t *httpTarget) ReplaceCatalog(ctx context.Context, acts []engine.Action) error {
	cat := client.Catalogo{Acciones: make([]client.AccionCatalogo, len(acts))}
	for i, a := range acts {
		activa := a.Activa
		ca := client.AccionCatalogo{ID: a.ID, Nombre: a.Nombre, TipoCupon: a.TipoCupon, CostoEnvioMXN: mxnOf(a.CostoEnvioCents),
			Canales: a.Canales, Activa: &activa, Categorias: a.Categorias}
		if a.DescuentoMaxCents > 0 {
			m := mxnOf(a.DescuentoMaxCents)
			ca.DescuentoMaxMXN = &m
		}
		if a.DescuentoPct > 0 {
			p := a.DescuentoPct
			ca.DescuentoPct = &p
		}
		cat.Acciones[i] = ca
	}
	_, err := t.c.PutCatalog(ctx, cat)
	return err
}

// Decide asks the decision; one the client made up from a fallback
// (EnRespaldo) is an error: the engine did not decide it.
func (t *httpTarget) Decide(ctx context.Context, clienteRef string) (*api.Decision, error) {
	d, err := t.c.Decide(ctx, client.PeticionDecision{ClienteRef: clienteRef, Contexto: client.Contexto{Canal: "push"}})
	if err != nil {
		return nil, err
	}
	if d.EnRespaldo {
		return nil, fmt.Errorf("lab over HTTP: decision for %s is the client's fallback: %w", clienteRef, d.Causa)
	}
	return d, nil
}

func (t *httpTarget) Confirm(ctx context.Context, id string, c engine.Confirmation) error {
	p := client.PeticionEjecucion{Ejecutada: c.Ejecutada, AccionReal: c.AccionReal}
	if c.MotivoRechazo != "" {
		m := c.MotivoRechazo
		p.MotivoRechazo = &m
	}
	_, err := t.c.Confirm(ctx, id, p)
	return err
}

// Publish sends evs with POST /v1/eventos (the client splits them into
// requests); a rejected event is an error naming the first.
func (t *httpTarget) Publish(ctx context.Context, evs []engine.IngestEvent) error {
	if len(evs) == 0 {
		return nil
	}
	out := make([]client.Evento, len(evs))
	for i := range evs {
		out[i] = eventoOf(&evs[i].Event)
	}
	res, err := t.c.PublishEvents(ctx, out)
	if err != nil {
		return err
	}
	if len(res.Rechazados) > 0 {
		r := res.Rechazados[0]
		return fmt.Errorf("lab over HTTP: %d events refused, the first (%s) %s: %s", len(res.Rechazados), out[r.Indice].EventID, r.Codigo, r.Mensaje)
	}
	return nil
}

// CloseWindow moves the clock to labPublishLead before d from now, when
// the API accepts every event of the window, publishes evs, and moves it
// the rest of the way: the last move closes the window, and returns when
// the learner has folded what it closed, as "admin clock advance" does.
func (t *httpTarget) CloseWindow(ctx context.Context, evs []engine.IngestEvent, d time.Duration) error {
	if d <= labPublishLead {
		return errors.New("lab over HTTP: the reward window must be longer than the events' lead")
	}
	if _, err := t.env.advanceClock(t.tenant, d-labPublishLead); err != nil {
		return err
	}
	if err := t.Publish(ctx, evs); err != nil {
		return err
	}
	_, err := t.env.advanceClock(t.tenant, labPublishLead)
	return err
}

func mxnOf(cents int64) float64 { return float64(cents) / 100 }

// eventoOf is the API's form of the lab's event e (the types the lab
// writes: purchases, coupons received, redeemed and expired, opt-outs).
func eventoOf(e *engine.Event) client.Evento {
	ev := client.Evento{EventID: e.ID, ClienteRef: e.ClienteRef, Ts: e.TS, Tipo: string(e.Tipo), Clave: e.Clave}
	if e.DecisionID != "" {
		id := e.DecisionID
		ev.DecisionID = &id
	}
	valor := func() { v := mxnOf(e.ValorCents); ev.Valor = &v }
	switch e.Tipo {
	case engine.CompraCat:
		valor()
		ev.Extra = &client.ExtraCompraCat{TicketID: e.TicketID, Margen: mxnOf(e.MargenCents)}
	case engine.CuponRecibido:
		ev.Extra = &client.ExtraCuponRecibido{CuponEmitidoID: e.CuponEmitidoID, Caducidad: e.Caducidad}
	case engine.CuponRedimido:
		valor()
		ev.Extra = &client.ExtraCuponRedimido{CuponEmitidoID: e.CuponEmitidoID, TicketID: e.TicketID}
	case engine.CuponCaducado:
		ev.Extra = &client.ExtraCuponCaducado{CuponEmitidoID: e.CuponEmitidoID}
	case engine.Baja:
		ev.Extra = &client.ExtraBaja{}
	}
	return ev
}
