package privacy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/jsonappend"
	"github.com/coupond/coupond/store"
)

// The export document is the API's ExportacionCliente (spec: GET
// /v1/clientes/{cliente_ref}/exportacion); its types are the Go SDK's
// (client), so the document the server writes and the one the SDK reads
// are one definition.

// Export gathers everything held about a customer and writes the access to
// the access log (synced) before returning. An unknown customer gets empty
// collections. It holds the whole document: ExportStream writes the same
// one without holding the events.
func (s *Service) Export(tenant, clienteRef, clientID, trace string) (*client.ExportacionCliente, error) {
	x, now, err := s.exportStart(tenant, clienteRef, clientID, trace)
	if err != nil {
		return nil, err
	}
	walk, err := s.exportEvents(tenant, clienteRef, func(ev *client.EventoExportado) error {
		x.Eventos = append(x.Eventos, *ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.exportRest(tenant, clienteRef, now, walk, x); err != nil {
		return nil, err
	}
	return x, nil
}

// ExportStream is Export for a document of any size: it makes every check
// and writes the access-log entry (synced) before returning, and its error
// is Export's; write then writes the document Export returns, as JSON
// (the API's form, member for member and byte for byte what encoding
// Export's answer gives, without a trailing newline), reading the
// customer's events a chunk at a time: its memory does not grow with
// them. An error from write comes after bytes were written: the output is
// then incomplete and must be discarded (cut short, for an HTTP answer).
func (s *Service) ExportStream(tenant, clienteRef, clientID, trace string) (write func(w io.Writer) error, err error) {
	x, now, err := s.exportStart(tenant, clienteRef, clientID, trace)
	if err != nil {
		return nil, err
	}
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 32<<10)
		head, _, err := splitAtEvents(x)
		if err != nil {
			return err
		}
		if _, err := bw.Write(head); err != nil {
			return err
		}
		first := true
		walk, err := s.exportEvents(tenant, clienteRef, func(ev *client.EventoExportado) error {
			b, err := jsonappend.Marshal(ev)
			if err != nil {
				return err
			}
			if !first {
				bw.WriteByte(',')
			}
			first = false
			_, err = bw.Write(b)
			return err
		})
		if err != nil {
			return err
		}
		if err := s.exportRest(tenant, clienteRef, now, walk, x); err != nil {
			return err
		}
		_, tail, err := splitAtEvents(x)
		if err != nil {
			return err
		}
		if _, err := bw.Write(tail); err != nil {
			return err
		}
		return bw.Flush()
	}, nil
}

// eventsMember is how the document's "eventos" member opens; nothing
// before it can hold these bytes (a string's quotes are escaped).
const eventsMember = `"eventos":[`

// splitAtEvents encodes x, whose Eventos must be empty, and returns what
// comes up to the events ("eventos":[ included) and what comes after them
// ("]" included): the document with the events written between the two.
func splitAtEvents(x *client.ExportacionCliente) (head, tail []byte, err error) {
	if len(x.Eventos) != 0 {
		return nil, nil, errors.New("export: events held in the document to split")
	}
	b, err := jsonappend.Marshal(x)
	if err != nil {
		return nil, nil, err
	}
	i := bytes.Index(b, []byte(eventsMember))
	if i < 0 {
		return nil, nil, errors.New("export: the document has no events member")
	}
	i += len(eventsMember)
	return b[:i], b[i:], nil
}

// exportStart reads the tenant's clock, writes the export's access-log
// entry and returns the document with its members but the records (empty
// collections, and the deletion if there is one) and the tenant's now.
func (s *Service) exportStart(tenant, clienteRef, clientID, trace string) (*client.ExportacionCliente, time.Time, error) {
	now, err := s.rec.TenantNow(tenant)
	if err != nil {
		return nil, time.Time{}, err
	}
	del, err := s.logExport(tenant, clienteRef, clientID, trace)
	if err != nil {
		return nil, time.Time{}, err
	}
	x := &client.ExportacionCliente{
		ClienteRef: clienteRef, GeneradoEn: now.UTC(), Eventos: []client.EventoExportado{}, Caracteristicas: map[string]any{},
		Decisiones: []client.DecisionExportada{}, Confirmaciones: []client.ConfirmacionExportada{}, VinculosCupon: []client.VinculoCupon{},
	}
	if del != nil {
		x.Borrado = &client.BorradoExportado{Estado: del.Estado, SolicitadoEn: del.SolicitadoEn.UTC(), CompletadoEn: utcPtr(del.CompletadoEn)}
	}
	return x, now, nil
}

// exportRest adds to x everything but the events (walk is what the events'
// walk found): the features, decisions and confirmations, the coupons'
// links and the count of the customer's damaged records.
func (s *Service) exportRest(tenant, clienteRef string, now time.Time, walk *eventsWalk, x *client.ExportacionCliente) error {
	if err := s.exportFeatures(tenant, clienteRef, now, x); err != nil {
		return err
	}
	dkeys, err := s.exportDecisions(tenant, clienteRef, x)
	if err != nil {
		return err
	}
	if err := s.exportLinks(tenant, clienteRef, walk.cupons, x); err != nil {
		return err
	}
	// After every record was read (and a damaged one moved to quarantine).
	if err := walk.addDamaged(s, tenant, clienteRef, dkeys); err != nil {
		return err
	}
	x.EnCuarentena = len(walk.damaged)
	return nil
}

// logExport writes the export's access-log entry and returns the
// customer's deletion record (nil when there is none). It holds requestMu,
// as a deletion request does, from the read of the record to the entry's
// commit: an entry with the raw cliente_ref is committed before the
// deletion is requested, so the erasure rewrites it; any later one is
// written by keyed hash.
func (s *Service) logExport(tenant, clienteRef, clientID, trace string) (*DeletionRecord, error) {
	s.requestMu.Lock()
	defer s.requestMu.Unlock()
	del, err := s.Deletion(tenant, clienteRef)
	if err != nil {
		return nil, err
	}
	if s.beforeAccessLog != nil {
		s.beforeAccessLog()
	}
	return del, s.logAccess(tenant, clienteRef, clientID, trace, "exportacion", del != nil)
}

// indexedIDs returns the ids a customer index (events or decisions) names
// for ref.
func (s *Service) indexedIDs(tenant string, idx customerIndex, ref string) ([]string, error) {
	var ids []string
	lo, hi := idx.span(tenant, ref)
	err := s.db.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, id, ok := idx.parse(tenant, k); ok {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// exportFeatures adds the customer's features to x (damaged ones go to
// quarantine).
func (s *Service) exportFeatures(tenant, clienteRef string, now time.Time, x *client.ExportacionCliente) error {
	b, err := s.db.Get(s.rec.FeaturesKey(tenant, clienteRef))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if f, ok := engine.DecodeFeatures(b); ok {
		x.Caracteristicas = f.Export(now)
	} else {
		s.rec.Quarantine(tenant, s.rec.FeaturesKey(tenant, clienteRef), b, errors.New("features: do not decode"))
	}
	return nil
}

// exportDecisions adds the customer's decisions and confirmations to x and
// returns the decision keys its index names.
func (s *Service) exportDecisions(tenant, clienteRef string, x *client.ExportacionCliente) ([][]byte, error) {
	nonces, err := s.indexedIDs(tenant, decisionIndex, clienteRef)
	if err != nil {
		return nil, err
	}
	var known [][]byte
	for _, nonce := range nonces {
		known = append(known, s.rec.DecisionKey(tenant, nonce))
		r, err := s.rec.LoadDecision(tenant, nonce)
		if errors.Is(err, engine.ErrNotFound) {
			continue // deleted, or damaged: quarantined, counted by Export
		}
		if err != nil {
			return nil, err
		}
		if r.ClienteRef != clienteRef {
			continue
		}
		id := s.rec.DecisionID(tenant, nonce)
		x.Decisiones = append(x.Decisiones, exportDecision(id, r))
		if r.ConfirmadaEn != nil {
			c := client.ConfirmacionExportada{DecisionID: id, EstadoEjecucion: r.Estado, AccionReal: r.AccionReal,
				TsEjecucion: utcPtr(r.TsEjecucion), ConfirmadaEn: r.ConfirmadaEn.UTC()}
			if r.MotivoRechazo != "" {
				m := r.MotivoRechazo
				c.MotivoRechazo = &m
			}
			x.Confirmaciones = append(x.Confirmaciones, c)
		}
	}
	return known, nil
}

// exportDecision renders a decision record.
func exportDecision(id string, r *engine.DecisionRecord) client.DecisionExportada {
	d := client.DecisionExportada{
		DecisionID: id, CreadaEn: r.At.UTC(), Canal: r.Canal, CampanaID: r.CampanaID, JobID: r.JobID,
		Accion: r.Accion, Propension: r.Propension, PoliticaVersion: r.Version, Explorado: r.Explorado,
		EnControl: r.EnControl, EnRespaldo: r.EnRespaldo, CaducaEn: r.CaducaEn.UTC(), Motivo: r.Motivo,
		EstadoEjecucion: r.Estado,
	}
	if d.EstadoEjecucion == engine.EstadoPendiente {
		d.EstadoEjecucion = "pendiente"
	}
	if r.Recompensa != nil {
		m := float64(*r.Recompensa) / 100
		d.RecompensaMXN = &m
	}
	if names := engine.VectorNames(); len(r.X) == len(names) {
		d.CaracteristicasUsadas = make(map[string]float64, len(names))
		for i, n := range names {
			d.CaracteristicasUsadas[n] = r.X[i]
		}
	}
	return d
}

// exportLinks adds the attribution links of the customer's coupons to x,
// in coupon order; a link that does not decode is moved to quarantine and
// left out.
func (s *Service) exportLinks(tenant, clienteRef string, cupons map[string]bool, x *client.ExportacionCliente) error {
	ordered := make([]string, 0, len(cupons))
	for c := range cupons {
		ordered = append(ordered, c)
	}
	sort.Strings(ordered)
	for _, cupon := range ordered {
		key := s.rec.AttributionKey(tenant, cupon)
		v, err := s.db.Get(key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var a engine.Attribution
		if err := json.Unmarshal(v, &a); err != nil {
			s.rec.Quarantine(tenant, key, v, fmt.Errorf("attribution record: %w", err)) // contract §8: skipped
			continue
		}
		if a.ClienteRef != clienteRef {
			continue
		}
		l := client.VinculoCupon{CuponEmitidoID: cupon, Recibido: a.Recibido, Redimido: a.Redimido, Caducado: a.Caducado}
		if a.DecisionID != "" {
			id := a.DecisionID
			l.DecisionID = &id
		}
		x.VinculosCupon = append(x.VinculosCupon, l)
	}
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// exportEvent renders a stored event as the event contract's JSON.
func exportEvent(ev *engine.Event) client.EventoExportado {
	out := client.EventoExportado{EventID: ev.ID, ClienteRef: ev.ClienteRef, Ts: ev.TS.UTC(), Tipo: string(ev.Tipo), Clave: ev.Clave,
		Valor: float64(ev.ValorCents) / 100, Extra: map[string]any{}}
	if ev.DecisionID != "" {
		id := ev.DecisionID
		out.DecisionID = &id
	}
	str := func(name, v string) {
		if v != "" {
			out.Extra[name] = v
		}
	}
	str("ticket_id", ev.TicketID)
	str("tienda", ev.Tienda)
	str("canal", ev.Canal)
	str("cupon_emitido_id", ev.CuponEmitidoID)
	str("campana_id", ev.CampanaID)
	str("segmento", ev.Segmento)
	str("perfil", ev.Perfil)
	if ev.Tipo == engine.CompraCat {
		out.Extra["margen"] = float64(ev.MargenCents) / 100
	}
	if ev.HasCantidad {
		out.Extra["cantidad"] = ev.Cantidad
	}
	if ev.HasTicketTotal {
		out.Extra["ticket_total"] = float64(ev.TicketTotalCents) / 100
	}
	if !ev.Caducidad.IsZero() {
		out.Extra["caducidad"] = ev.Caducidad.UTC()
	}
	if ev.HasDescuentoPct {
		out.Extra["descuento_pct"] = ev.DescuentoPct
	}
	return out
}
