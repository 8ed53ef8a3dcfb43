package engine

import (
	"crypto/sha256"
	"errors"

	"github.com/coupond/coupond/store"
)

// IngestEvent is one event of a request that passed validation.
type IngestEvent struct {
	Index int   // position in the request
	Event Event // decoded
	// Canonical is the event's canonical JSON: two deliveries of one
	// event_id are "the same" when their canonical forms are equal.
	Canonical []byte
}

// Rejection is one rejected event (an item of rechazados).
type Rejection struct {
	Indice  int     `json:"indice"`
	EventID *string `json:"event_id"`
	Codigo  string  `json:"codigo"`
	Campo   *string `json:"campo"`
	Mensaje string  `json:"mensaje"`
}

// IngestResult counts what Ingest did.
type IngestResult struct {
	Aceptados  int
	Duplicados int
	Rechazados []Rejection
}

// Quality are a tenant's data-quality counters (TableQuality), shown by
// "admin tenant show".
type Quality struct {
	Eventos                     int64 `json:"eventos_aceptados"`
	CuponesRecibidos            int64 `json:"cupones_recibidos"`
	CuponesSinDecision          int64 `json:"cupones_recibidos_sin_decision_id"`
	Redenciones                 int64 `json:"redenciones"`
	RedencionesCuponDesconocido int64 `json:"redenciones_de_cupon_desconocido"`
	TicketsIVASospechoso        int64 `json:"tickets_con_iva_sospechoso"`
	MargenesNegativos           int64 `json:"margenes_negativos"`
	EventosFueraDeOrden         int64 `json:"eventos_fuera_de_orden"`
	EventosTrasCierre           int64 `json:"eventos_tras_cierre_de_cuenta"`
}

// attribution links a coupon sent (cupon_emitido_id) to the decision that
// chose it, and records its fate, whatever order the events arrive in.
type attribution struct {
	DecisionID string `json:"decision_id,omitempty"`
	ClienteRef string `json:"cliente_ref"`
	Recibido   bool   `json:"recibido,omitempty"`
	Redimido   bool   `json:"redimido,omitempty"`
	Caducado   bool   `json:"caducado,omitempty"`
}

func attributionKey(tenant, cupon string) []byte {
	return store.Key(tenant, store.TableAttribution, cupon)
}

func eventKey(tenant, id string) []byte { return store.Key(tenant, store.TableEvent, id) }

// Ingest applies validated events idempotently: an event_id already
// processed with the same content counts as a duplicate, with different
// content it is rejected with "duplicado" (the first stands), inside one
// request as across requests. The events, their idempotency records, the
// customers' feature updates, the attribution links and the data-quality
// counters are committed in one synced batch before Ingest returns.
//
// Requests of a tenant apply one at a time (reads, then the batch applied
// to the memtable, where the next request reads it), but the WAL fsync is
// waited for outside that turn: requests share fsyncs instead of queueing
// for one each, and since the WAL syncs in order a request is never
// durable before one it read.
func (e *Engine) Ingest(tenant string, events []IngestEvent) (IngestResult, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return IngestResult{}, err
	}
	b := e.db.NewBatch()
	defer b.Close()
	ts.ingestMu.Lock()
	res, err := e.applyIngest(b, tenant, events)
	ts.ingestMu.Unlock()
	if err != nil {
		return res, err
	}
	if err := b.SyncWait(); err != nil {
		return res, err
	}
	e.counters.ingested(e, tenant, res.Aceptados)
	return res, nil
}

// applyIngest is Ingest's turn under the tenant's ingestMu: it checks and
// folds events into b and applies b (Batch.Apply) when any was accepted.
func (e *Engine) applyIngest(b *store.Batch, tenant string, events []IngestEvent) (IngestResult, error) {
	var res IngestResult
	q, err := e.loadQuality(tenant)
	if err != nil {
		return res, err
	}
	seen := map[string][32]byte{}
	feats := map[string]*Features{}
	attrs := map[string]*attribution{}
	for i := range events {
		it := &events[i]
		ev := &it.Event
		sum := sha256.Sum256(it.Canonical)
		prev, dupInRequest := seen[ev.ID]
		if !dupInRequest {
			stored, err := e.db.Get(eventKey(tenant, ev.ID))
			switch {
			case err == nil && len(stored) >= 32:
				copy(prev[:], stored[:32])
				dupInRequest = true
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return res, err
			}
		}
		if dupInRequest {
			if prev == sum {
				res.Duplicados++
			} else {
				id := ev.ID
				campo := "event_id"
				res.Rechazados = append(res.Rechazados, Rejection{Indice: it.Index, EventID: &id, Codigo: "duplicado", Campo: &campo,
					Mensaje: "event_id ya procesado con otro contenido; se conserva el primero"})
			}
			continue
		}
		if campo := unstorableField(ev); campo != "" {
			id := ev.ID
			res.Rechazados = append(res.Rechazados, Rejection{Indice: it.Index, EventID: &id, Codigo: "esquema_invalido", Campo: &campo,
				Mensaje: "fecha fuera del intervalo admitido"})
			continue
		}
		seen[ev.ID] = sum

		val := append(sum[:], ev.AppendEncode(nil)...)
		b.Set(eventKey(tenant, ev.ID), val)
		summary := eventSummary{Tipo: ev.Tipo}
		if ev.Tipo == CompraCat {
			summary.MarginCents = ev.MargenCents
		}
		summary.OptOut = ev.Tipo == Baja && ev.Clave == BajaComunicaciones
		b.Set(customerEventKey(tenant, ev.ClienteRef, ev.TS, ev.ID), summary.encode())

		f, ok := feats[ev.ClienteRef]
		if !ok {
			loaded, err := e.loadFeatures(tenant, ev.ClienteRef)
			if err != nil {
				return res, err
			}
			f = &loaded
			feats[ev.ClienteRef] = f
		}
		flags := f.Apply(ev)
		q.count(ev, flags)

		if ev.CuponEmitidoID != "" {
			a, ok := attrs[ev.CuponEmitidoID]
			if !ok {
				a = &attribution{}
				if err := e.db.GetJSON(attributionKey(tenant, ev.CuponEmitidoID), a); err != nil && !errors.Is(err, store.ErrNotFound) {
					return res, err
				}
				attrs[ev.CuponEmitidoID] = a
			}
			a.ClienteRef = ev.ClienteRef
			switch ev.Tipo {
			case CuponRecibido:
				a.Recibido = true
				if ev.DecisionID != "" {
					a.DecisionID = ev.DecisionID
				}
			case CuponRedimido:
				if !a.Recibido {
					q.RedencionesCuponDesconocido++
				}
				a.Redimido = true
			case CuponCaducado:
				a.Caducado = true
			}
		}
		res.Aceptados++
	}
	for ref, f := range feats {
		b.Set(featuresKey(tenant, ref), f.AppendEncode(nil))
	}
	for cupon, a := range attrs {
		if err := b.SetJSON(attributionKey(tenant, cupon), a); err != nil {
			return res, err
		}
	}
	if res.Aceptados > 0 {
		if err := b.SetJSON(store.Key(tenant, store.TableQuality), q); err != nil {
			return res, err
		}
		if err := b.Apply(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (q *Quality) count(ev *Event, flags DataFlags) {
	q.Eventos++
	switch ev.Tipo {
	case CuponRecibido:
		q.CuponesRecibidos++
		if ev.DecisionID == "" {
			q.CuponesSinDecision++
		}
	case CuponRedimido:
		q.Redenciones++
	}
	if flags&FlagVATSuspect != 0 {
		q.TicketsIVASospechoso++
	}
	if flags&FlagNegativeMargin != 0 {
		q.MargenesNegativos++
	}
	if flags&FlagOutOfOrder != 0 {
		q.EventosFueraDeOrden++
	}
	if flags&FlagAfterClosure != 0 {
		q.EventosTrasCierre++
	}
}

func (e *Engine) loadQuality(tenant string) (*Quality, error) {
	var q Quality
	if err := e.db.GetJSON(store.Key(tenant, store.TableQuality), &q); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return &q, nil
}

// Quality returns the tenant's data-quality counters.
func (e *Engine) Quality(tenant string) (*Quality, error) { return e.loadQuality(tenant) }

// Attribution returns the decision id a coupon was sent for, "" if the
// coupon is unknown or was not labelled.
func (e *Engine) Attribution(tenant, cupon string) (string, error) {
	var a attribution
	err := e.db.GetJSON(attributionKey(tenant, cupon), &a)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	return a.DecisionID, err
}

// unstorableField names the first time field of ev that the event encoding
// cannot read back ("" when every one can; see storableTime).
func unstorableField(ev *Event) string {
	switch {
	case !storableTime(ev.TS):
		return "ts"
	case !ev.Caducidad.IsZero() && !storableTime(ev.Caducidad):
		return "extra.caducidad"
	}
	return ""
}
