package privacy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
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
// one without holding the events, decisions or confirmations.
func (s *Service) Export(tenant, clienteRef, clientID, trace string) (*client.ExportacionCliente, error) {
	x, now, err := s.exportStart(tenant, clienteRef, clientID, trace)
	if err != nil {
		return nil, err
	}
	err = s.exportWalk(tenant, clienteRef, now, x, exportSink{
		event: appendTo(&x.Eventos), decision: appendTo(&x.Decisiones), confirmation: appendTo(&x.Confirmaciones),
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// ExportStream is Export for a document of any size: it makes every check
// and writes the access-log entry (synced) before returning, and its error
// is Export's; write then writes the document Export returns, as JSON
// (the API's form, member for member and byte for byte what encoding
// Export's answer gives, without a trailing newline), reading the
// customer's events and decisions a chunk of index entries at a time and
// writing each as it is read: its memory does not grow with them. The
// confirmations come from a second walk of the decision index (every
// decision is read twice; nothing is held between the walks) in the same
// snapshot of the store (exportWalk). An error
// from write comes after bytes were written: the output is then
// incomplete and must be discarded (cut short, for an HTTP answer).
func (s *Service) ExportStream(tenant, clienteRef, clientID, trace string) (write func(w io.Writer) error, err error) {
	x, now, err := s.exportStart(tenant, clienteRef, clientID, trace)
	if err != nil {
		return nil, err
	}
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 32<<10)
		err := s.exportWalk(tenant, clienteRef, now, x, exportSink{
			event:        elements[client.EventoExportado](bw),
			decision:     elements[client.DecisionExportada](bw),
			confirmation: elements[client.ConfirmacionExportada](bw),
			part: func(i int) error {
				parts, err := splitAt(x, eventsMember, decisionsMember, confirmationsMember)
				if err != nil {
					return err
				}
				_, err = bw.Write(parts[i])
				return err
			},
		})
		if err != nil {
			return err
		}
		return bw.Flush()
	}, nil
}

// appendTo returns an emit that appends each value it is given to *list.
func appendTo[T any](list *[]T) func(*T) error {
	return func(v *T) error {
		*list = append(*list, *v)
		return nil
	}
}

// elements returns an emit that writes each value it is given to bw as
// JSON, after a comma but for the first: the elements of one array.
func elements[T any](bw *bufio.Writer) func(*T) error {
	first := true
	return func(v *T) error {
		b, err := jsonappend.Marshal(v)
		if err != nil {
			return err
		}
		if !first {
			bw.WriteByte(',')
		}
		first = false
		_, err = bw.Write(b)
		return err
	}
}

// The openings of the members ExportStream writes as it reads them, in
// document order. Nothing before one can hold its bytes: a string's quotes
// are escaped, and the only member between two of them, caracteristicas,
// holds no array under these names (its free keys, the categories' names,
// hold numbers).
const (
	eventsMember        = `"eventos":[`
	decisionsMember     = `"decisiones":[`
	confirmationsMember = `"confirmaciones":[`
)

// splitAt encodes x, whose streamed members (events, decisions,
// confirmations) must be empty, and cuts it after the opening of each of
// members (in document order; each is searched for after the previous):
// len(members)+1 parts, the document being each part followed by the
// elements of the member it opens ("]" starts the next part).
func splitAt(x *client.ExportacionCliente, members ...string) ([][]byte, error) {
	if len(x.Eventos)+len(x.Decisiones)+len(x.Confirmaciones) != 0 {
		return nil, errors.New("export: records held in the document to split")
	}
	b, err := jsonappend.Marshal(x)
	if err != nil {
		return nil, err
	}
	parts := make([][]byte, 0, len(members)+1)
	for _, m := range members {
		i := bytes.Index(b, []byte(m))
		if i < 0 {
			return nil, fmt.Errorf("export: the document has no %s member", m)
		}
		i += len(m)
		parts, b = append(parts, b[:i]), b[i:]
	}
	return append(parts, b), nil
}

// exportSink receives the records the walk of a customer (exportWalk)
// reads, each as it is read, in document order.
type exportSink struct {
	event        func(*client.EventoExportado) error
	decision     func(*client.DecisionExportada) error
	confirmation func(*client.ConfirmacionExportada) error
	// part, when set, is called with i from 0 to 3 where the document's
	// part i (splitAt's, at the three streamed members) is complete in x:
	// before the events; between the events and the decisions (the
	// features read); between the decisions and the confirmations; and at
	// the end (the links and en_cuarentena set).
	part func(i int) error
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

// exportWalk reads everything held about the customer in document order,
// handing the events, decisions and confirmations to k and adding the
// rest to x (the features, the coupons' links, and the count of the
// customer's damaged records, moved to quarantine on the way). It reads
// one snapshot of the store, so the document is the customer's data as of
// one moment, however long the walk (a streamed export to a slow client)
// and whatever is written meanwhile: no confirmation of a decision the
// document does not list, no decision whose state the confirmations
// contradict.
func (s *Service) exportWalk(tenant, clienteRef string, now time.Time, x *client.ExportacionCliente, k exportSink) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	part := k.part
	if part == nil {
		part = func(int) error { return nil }
	}
	if err := part(0); err != nil {
		return err
	}
	walk, err := s.exportEvents(snap, tenant, clienteRef, k.event)
	if err != nil {
		return err
	}
	if err := s.exportHeldEvents(snap, tenant, clienteRef, k.event); err != nil {
		return err
	}
	if err := s.exportFeatures(snap, tenant, clienteRef, now, x); err != nil {
		return err
	}
	if err := part(1); err != nil {
		return err
	}
	if err := s.exportDecisions(snap, tenant, clienteRef, walk, k.decision); err != nil {
		return err
	}
	if err := part(2); err != nil {
		return err
	}
	if err := s.exportConfirmations(snap, tenant, clienteRef, walk, k.confirmation); err != nil {
		return err
	}
	if err := s.exportLinks(snap, tenant, clienteRef, walk.cupons, x); err != nil {
		return err
	}
	// After every record was read (and a damaged one moved to
	// quarantine): those that name the customer.
	if err := walk.addDamaged(s, tenant, clienteRef, nil); err != nil {
		return err
	}
	x.EnCuarentena = len(walk.damaged)
	return part(3)
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

// exportFeatures adds the customer's features to x (damaged ones go to
// quarantine).
func (s *Service) exportFeatures(r store.Reader, tenant, clienteRef string, now time.Time, x *client.ExportacionCliente) error {
	b, err := r.Get(s.rec.FeaturesKey(tenant, clienteRef))
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

// exportDecision renders a decision record.
func exportDecision(id string, r *engine.DecisionRecord) client.DecisionExportada {
	d := client.DecisionExportada{
		DecisionID: id, CreadaEn: r.At.UTC(), Canal: r.Canal, CampanaID: r.CampanaID, JobID: r.JobID,
		Accion: r.Accion, Propension: r.Propension, PoliticaVersion: r.Version, Explorado: r.Explorado,
		EnControl: r.EnControl, EnRespaldo: r.EnRespaldo, EnSombra: r.EnSombra, CaducaEn: r.CaducaEn.UTC(), Motivo: r.Motivo,
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
func (s *Service) exportLinks(r store.Reader, tenant, clienteRef string, cupons map[string]bool, x *client.ExportacionCliente) error {
	for _, cupon := range slices.Sorted(maps.Keys(cupons)) {
		key := s.rec.AttributionKey(tenant, cupon)
		v, err := r.Get(key)
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
