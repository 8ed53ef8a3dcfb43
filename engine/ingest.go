package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coupond/coupond/store"
)

// IngestEvent is one event of a request that passed validation.
type IngestEvent struct {
	Index int   // position in the request
	Event Event // decoded
	// Canonical is the event's canonical JSON: two deliveries of one
	// event_id are "the same" when their canonical forms are equal.
	Canonical []byte

	sum [32]byte // SHA-256 of Canonical, set by Ingest
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
// The store is read in three sorted multi-gets (event ids, then the
// features and attribution links of the accepted events), not a Get each.
func (e *Engine) applyIngest(b *store.Batch, tenant string, events []IngestEvent) (IngestResult, error) {
	var res IngestResult
	q, err := e.loadQuality(tenant)
	if err != nil {
		return res, err
	}
	accepted, err := e.admitEvents(tenant, events, &res)
	if err != nil || len(accepted) == 0 {
		return res, err
	}
	feats, attrs, err := e.loadIngestState(tenant, events, accepted)
	if err != nil {
		return res, err
	}
	var buf []byte
	for _, k := range accepted {
		it := &events[k]
		ev := &it.Event
		buf = ev.AppendEncode(append(buf[:0], it.sum[:]...))
		b.Set(eventKey(tenant, ev.ID), buf)
		summary := eventSummary{Tipo: ev.Tipo}
		if ev.Tipo == CompraCat {
			summary.MarginCents = ev.MargenCents
		}
		summary.OptOut = ev.Tipo == Baja && ev.Clave == BajaComunicaciones
		b.Set(customerEventKey(tenant, ev.ClienteRef, ev.TS, ev.ID), summary.encode())

		flags := feats[ev.ClienteRef].Apply(ev)
		q.count(ev, flags)

		if ev.CuponEmitidoID != "" {
			a := attrs[ev.CuponEmitidoID]
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
		b.Set(featuresKey(tenant, ref), f.AppendEncode(buf[:0]))
	}
	for cupon, a := range attrs {
		if err := b.SetJSON(attributionKey(tenant, cupon), a); err != nil {
			return res, err
		}
	}
	if err := b.SetJSON(store.Key(tenant, store.TableQuality), q); err != nil {
		return res, err
	}
	return res, b.Apply()
}

// admitEvents decides which events are new: an event_id seen earlier in
// the request or already stored is counted in res as a duplicate (same
// canonical content) or rejected as "duplicado" (other content), and an
// event with a time the store cannot hold is rejected. It returns the
// indexes in events of the accepted ones, in order, and leaves each
// event's content hash in its sum.
func (e *Engine) admitEvents(tenant string, events []IngestEvent, res *IngestResult) ([]int, error) {
	keys := make([][]byte, len(events))
	for i := range events {
		events[i].sum = sha256.Sum256(events[i].Canonical)
		keys[i] = eventKey(tenant, events[i].Event.ID)
	}
	stored := map[string][32]byte{}
	err := e.db.GetMany(keys, func(i int, v []byte) error {
		if len(v) >= 32 {
			stored[events[i].Event.ID] = [32]byte(v[:32])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	accepted := make([]int, 0, len(events))
	seen := make(map[string][32]byte, len(events))
	for i := range events {
		it := &events[i]
		ev := &it.Event
		prev, dup := seen[ev.ID]
		if !dup {
			prev, dup = stored[ev.ID]
		}
		if dup {
			if prev == it.sum {
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
		seen[ev.ID] = it.sum
		accepted = append(accepted, i)
	}
	return accepted, nil
}

// loadIngestState reads the features of the customers and the attribution
// links of the coupons of the accepted events (zero values for those not
// stored; damaged features are quarantined as loadFeatures does).
func (e *Engine) loadIngestState(tenant string, events []IngestEvent, accepted []int) (map[string]*Features, map[string]*attribution, error) {
	feats := map[string]*Features{}
	attrs := map[string]*attribution{}
	var refs, cupons []string
	var fkeys, akeys [][]byte
	for _, k := range accepted {
		ev := &events[k].Event
		if _, ok := feats[ev.ClienteRef]; !ok {
			feats[ev.ClienteRef] = &Features{}
			refs = append(refs, ev.ClienteRef)
			fkeys = append(fkeys, featuresKey(tenant, ev.ClienteRef))
		}
		if _, ok := attrs[ev.CuponEmitidoID]; ev.CuponEmitidoID != "" && !ok {
			attrs[ev.CuponEmitidoID] = &attribution{}
			cupons = append(cupons, ev.CuponEmitidoID)
			akeys = append(akeys, attributionKey(tenant, ev.CuponEmitidoID))
		}
	}
	var damaged []int
	var damagedVals [][]byte
	err := e.db.GetMany(fkeys, func(i int, v []byte) error {
		f, ok := DecodeFeatures(v)
		if !ok {
			damaged, damagedVals = append(damaged, i), append(damagedVals, bytes.Clone(v))
			return nil
		}
		*feats[refs[i]] = f
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for n, i := range damaged {
		// Derived data: the customer goes on as one without history.
		e.quarantine(tenant, fkeys[i], damagedVals[n], errors.New("features: do not decode"))
	}
	err = e.db.GetMany(akeys, func(i int, v []byte) error {
		if err := json.Unmarshal(v, attrs[cupons[i]]); err != nil {
			return fmt.Errorf("store: decode %q: %w", akeys[i][:min(len(akeys[i]), 16)], err)
		}
		return nil
	})
	return feats, attrs, err
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
