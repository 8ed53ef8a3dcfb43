package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/store"
)

// IngestEvent is one event of a request that passed validation.
type IngestEvent struct {
	Index int   // position in the request
	Event Event // decoded
	// Canonical is the event's canonical JSON: two deliveries of one
	// event_id are "the same" when their canonical forms are equal.
	Canonical []byte
	// AsWritten, when not nil, is the event as written (Value.AppendJSON:
	// members sorted, numbers canonical, but nulls and timestamps as sent),
	// which differs from Canonical. Releases before Canonical existed
	// stored its hash: an event they stored with it is the same content
	// too. The abuse quarantine holds it, so nothing is lost while held.
	AsWritten []byte
	// Alike, when not nil, is Canonical with a valor of 0 left out, or
	// added where absent: the same event, for a tipo whose valor is
	// optional and stored as 0 when absent (CUPON_RECIBIDO, CUPON_CADUCADO,
	// BAJA, ALTA), which one delivery may send and another omit. A stored
	// event whose content is Alike's is the same content too.
	Alike []byte

	sum [32]byte // SHA-256 of Canonical, set by Ingest
}

// Rejection is one rejected event (an item of rechazados), the API's Rechazo.
type Rejection = api.Rechazo

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
	// The coupons received in shadow mode: CUPON_RECIBIDO events ingested
	// while the tenant is in shadow mode whose ts is from SombraDesde on,
	// the tenant's ShadowSince; they count from zero again when shadow mode
	// is switched on anew. A history of coupons sent before coupond (no
	// decision_id) is not among them: the shadow report's labelling share
	// reads these.
	CuponesSombra            int64     `json:"cupones_recibidos_en_sombra"`
	CuponesSombraSinDecision int64     `json:"cupones_en_sombra_sin_decision_id"`
	SombraDesde              time.Time `json:"sombra_desde,omitzero"`
	// The coupons received whose ts is from the tenant's creation on
	// (counted since this release): a history of coupons sent before the
	// tenant existed cannot carry a decision_id, so the labelling warning
	// of "admin tenant show" and the console's share read these.
	CuponesDesdeAlta            int64 `json:"cupones_recibidos_desde_alta"`
	CuponesDesdeAltaSinDecision int64 `json:"cupones_desde_alta_sin_decision_id"`
}

// Counts are q's counters under the names "admin tenant show" prints in its
// data quality section (--json: data_quality) and the console's tenant page
// shows: one list, so the two read alike. The coupons counted in shadow
// mode are the shadow report's, not among them.
func (q *Quality) Counts() map[string]int64 {
	return map[string]int64{
		"events_accepted": q.Eventos, "coupons_received": q.CuponesRecibidos,
		"coupons_received_without_decision_id": q.CuponesSinDecision, "coupons_since_creation": q.CuponesDesdeAlta,
		"coupons_since_creation_unlabelled": q.CuponesDesdeAltaSinDecision, "redemptions": q.Redenciones,
		"redemptions_of_unknown_coupons": q.RedencionesCuponDesconocido, "tickets_vat_suspect": q.TicketsIVASospechoso,
		"negative_margins": q.MargenesNegativos, "out_of_order_events": q.EventosFueraDeOrden,
		"events_after_account_closure": q.EventosTrasCierre,
	}
}

// Labelled returns the coupons received from the tenant's creation on
// that carry a decision_id, and all of them.
func (q *Quality) Labelled() (labelled, received int64) {
	return q.CuponesDesdeAlta - q.CuponesDesdeAltaSinDecision, q.CuponesDesdeAlta
}

// couponPeriods are the periods ingestion counts coupons in apart: the
// tenant's shadow mode, on and since when (store.Settings.ShadowSince), and
// the tenant's life, from its creation.
type couponPeriods struct {
	on             bool
	since, created time.Time
}

// couponPeriodsOf reads tenant's periods; none for an unknown tenant.
func couponPeriodsOf(db *store.DB, tenant string) couponPeriods {
	t, ok := db.Tenant(tenant)
	if !ok {
		return couponPeriods{}
	}
	return couponPeriods{on: t.Settings.Shadow, since: t.Settings.ShadowSince, created: t.CreatedAt}
}

// enter starts q's shadow counts afresh when sh is a shadow period other
// than the one they count.
func (q *Quality) enter(sh couponPeriods) {
	if sh.on && !q.SombraDesde.Equal(sh.since) {
		q.CuponesSombra, q.CuponesSombraSinDecision, q.SombraDesde = 0, 0, sh.since
	}
}

// foldEvent adds one accepted event's customer index entry to index and
// applies the event to its customer's features, its coupon's attribution
// link and the quality counters.
func foldEvent(tenant string, it *IngestEvent, sh couponPeriods, feats map[string]*Features, attrs map[string]*attribution, q *Quality, index *[]keyedWrite) {
	ev := &it.Event
	flags := feats[ev.ClienteRef].Apply(ev)
	q.count(ev, flags, sh)
	if ev.CuponEmitidoID != "" {
		attrs[ev.CuponEmitidoID].apply(ev, q)
	}
	*index = append(*index, keyedWrite{store.CustomerEventKey(tenant, ev.ClienteRef, ev.TS, ev.ID), summaryOf(ev).encode()})
}

// keyedWrite is a write of a batch held back to be made in key order:
// Pebble inserts a batch's keys into the memtable in the batch's order, and
// a key next to the one before costs a few comparisons instead of a
// descent of the skiplist.
type keyedWrite struct{ key, val []byte }

// apply records a coupon event in the coupon's attribution link.
func (a *attribution) apply(ev *Event, q *Quality) {
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

// attribution links a coupon sent (cupon_emitido_id) to the decision that
// chose it, and records its fate, whatever order the events arrive in.
type attribution struct {
	DecisionID string `json:"decision_id,omitempty"`
	ClienteRef string `json:"cliente_ref"`
	Recibido   bool   `json:"recibido,omitempty"`
	Redimido   bool   `json:"redimido,omitempty"`
	Caducado   bool   `json:"caducado,omitempty"`
}

// Ingest applies validated events idempotently: an event_id already
// processed with the same content counts as a duplicate, with different
// content it is rejected with "duplicado" (the first stands), inside one
// request as across requests; an event whose decision_id is not signed
// for the tenant is rejected first (esquema_invalido, campo decision_id). The events, their idempotency records, the
// customers' feature updates, the attribution links and the data-quality
// counters are committed in one synced batch before Ingest returns.
//
// A tenant's requests fold one at a time, each on the writes of all
// before it, and commit their batches in that order (ingestTurn): one
// request folds while the one before is committed. Commits stay one at a
// time: a commit applied while an earlier one's WAL write fails would
// meet Pebble's broken WAL (a panic holding its commit lock), which the
// disk-full tests exercise.
//
// Ingest counts nothing against the tenant's daily quota of events:
// Receive, the events endpoint's call, does.
func (e *Ingester) Ingest(tenant string, events []IngestEvent) (IngestResult, error) {
	return e.ingest(tenant, events, nil)
}

// ingest is Ingest taking, when units is not nil, the quota for the events
// it accepts in the fold (see eventUnits): a request they do not fit
// applies nothing and fails with ErrQuota.
func (e *Ingester) ingest(tenant string, events []IngestEvent, units *eventUnits) (IngestResult, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return IngestResult{}, err
	}
	for i := range events {
		events[i].sum = sha256.Sum256(events[i].Canonical)
	}
	b := e.db.NewBatch()
	defer b.Close()
	t := &ts.ingestMu
	t.mu.Lock()
	if t.gone { // its tenant deleted since e.state: nothing may be kept of it again
		t.mu.Unlock()
		return IngestResult{}, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
	}
	dependent := t.beginFold()
	res, gen, err := e.foldIngest(b, tenant, events, t, dependent, units)
	if err != nil || gen == 0 {
		t.mu.Unlock()
		return res, err
	}
	t.applyMu.Lock()
	t.mu.Unlock()
	if t.beforeApply != nil {
		t.beforeApply()
	}
	if dependent && t.broken.Load() {
		err = fmt.Errorf("%w: %w", errIngestAborted, t.failure) // a disk full stays a disk full (503)
	} else {
		err = b.Commit()
	}
	if err != nil {
		t.broken.Store(true)
		t.failure = err
		units.giveBack(res.Aceptados)
	} else if t.afterCommit != nil {
		t.afterCommit()
	}
	t.doneGen.Store(gen)
	t.applyMu.Unlock()
	return res, err
}

// foldIngest is a request's fold (t.mu held): it checks the events, folds
// the accepted ones into b and, when there are any, publishes the writes
// in t's overlay and returns their generation (0: nothing to apply). It
// reads t's overlay before the store; the request's event ids are read in
// one sorted multi-get (GetMany). A dependent request (folded while others
// were pending) that accepts nothing still commits a batch (the unchanged
// quality counters), so that its answer, which may count duplicates of
// pending events, waits until they are durable. With units, the accepted
// events take their quota first (ErrQuota: nothing folded).
func (e *Ingester) foldIngest(b *store.Batch, tenant string, events []IngestEvent, t *ingestTurn, dependent bool, units *eventUnits) (IngestResult, uint64, error) {
	var res IngestResult
	var q Quality
	if t.quality != nil {
		q = *t.quality
	} else {
		loaded, err := e.loadQuality(tenant)
		if err != nil {
			return res, 0, err
		}
		q = *loaded
	}
	accepted, keys, err := e.admitEvents(tenant, events, t, &res)
	if err != nil || len(accepted) == 0 && !dependent {
		return res, 0, err
	}
	var feats map[string]*Features
	var encs map[string][]byte
	var attrs map[string]*attribution
	if len(accepted) > 0 {
		if err := units.take(len(accepted)); err != nil {
			return res, 0, err
		}
		if feats, encs, attrs, err = e.foldAccepted(b, tenant, events, accepted, keys, t, &q); err != nil {
			units.giveBack(len(accepted))
			return res, 0, err
		}
		res.Aceptados = len(accepted)
	}
	if err := b.SetJSON(store.QualityKey(tenant), &q); err != nil {
		units.giveBack(res.Aceptados)
		return res, 0, err
	}
	for _, f := range feats {
		t.recycleFeatures(f)
	}
	return res, t.publish(events, accepted, encs, attrs, &q), nil
}

// foldAccepted folds the accepted events (indexes in events, keys[k] event
// k's key) into b: the event records, the customers' index entries and
// features, and the coupons' links, counting them in q. It returns the
// customers' features (t's spares, for the caller to recycle once written),
// their encodings and the links, for t's overlay.
func (e *Ingester) foldAccepted(b *store.Batch, tenant string, events []IngestEvent, accepted []int, keys [][]byte, t *ingestTurn, q *Quality) (map[string]*Features, map[string][]byte, map[string]*attribution, error) {
	feats, attrs, err := e.loadIngestState(tenant, events, accepted, t)
	if err != nil {
		return nil, nil, nil, err
	}
	index := make([]keyedWrite, 0, len(accepted))
	sh := couponPeriodsOf(e.db, tenant)
	q.enter(sh)
	for _, k := range accepted {
		foldEvent(tenant, &events[k], sh, feats, attrs, q, &index)
	}
	buf := writeEvents(b, events, accepted, keys, nil)
	slices.SortFunc(index, func(x, y keyedWrite) int { return bytes.Compare(x.key, y.key) })
	for _, w := range index {
		b.Set(w.key, w.val)
	}
	refs := make([]string, 0, len(feats))
	for ref := range feats {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	encs := make(map[string][]byte, len(feats))
	for _, ref := range refs {
		f := feats[ref]
		buf = f.AppendEncode(buf[:0])
		enc := bytes.Clone(buf) // its own allocation, of its size: it may be kept (ingestTurn)
		encs[ref] = enc
		b.Set(store.FeaturesKey(tenant, ref), enc)
	}
	for cupon, a := range attrs {
		if err := b.SetJSON(store.AttributionKey(tenant, cupon), a); err != nil {
			return nil, nil, nil, err
		}
	}
	return feats, encs, attrs, nil
}

// admitEvents decides which events are new: an event_id seen earlier in
// the request, pending in t or stored is counted in res as a duplicate
// (same canonical content) or rejected as "duplicado" (other content), and
// an event with a time the store cannot hold is rejected. It returns the
// indexes in events of the accepted ones, in order, and the events' keys.
func (e *Ingester) admitEvents(tenant string, events []IngestEvent, t *ingestTurn, res *IngestResult) (accepted []int, keys [][]byte, err error) {
	keys = make([][]byte, len(events))
	for i := range events {
		keys[i] = store.EventKey(tenant, events[i].Event.ID)
	}
	stored := map[string][32]byte{}
	err = e.db.GetMany(keys, func(i int, v []byte) error {
		if len(v) >= 32 {
			stored[events[i].Event.ID] = [32]byte(v[:32])
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	accepted = make([]int, 0, len(events))
	seen := make(map[string][32]byte, len(events))
	for i := range events {
		it := &events[i]
		ev := &it.Event
		if rej := e.unsignedDecisionID(tenant, it); rej != nil {
			res.Rechazados = append(res.Rechazados, *rej)
			continue
		}
		prev, dup := seen[ev.ID]
		if !dup {
			var p pendingEvent
			if p, dup = t.events[ev.ID]; dup {
				prev = p.sum
			} else {
				prev, dup = stored[ev.ID]
			}
		}
		if dup {
			if it.sameContent(prev) {
				res.Duplicados++
			} else {
				res.Rechazados = append(res.Rechazados, rejectDuplicado(it))
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
	return accepted, keys, nil
}

// rejectDuplicado is the rejection of it, whose event_id was processed
// (or held) with other content.
func rejectDuplicado(it *IngestEvent) Rejection {
	id := it.Event.ID
	campo := "event_id"
	return Rejection{Indice: it.Index, EventID: &id, Codigo: "duplicado", Campo: &campo,
		Mensaje: "event_id ya procesado con otro contenido; se conserva el primero"}
}

// sameContent reports whether prev, the content hash of an event stored or
// pending with it's event_id, is it's content: its Canonical's, its
// Alike's, or its AsWritten's (stored by an earlier release).
func (it *IngestEvent) sameContent(prev [32]byte) bool {
	return prev == it.sum || it.Alike != nil && prev == sha256.Sum256(it.Alike) ||
		it.AsWritten != nil && prev == sha256.Sum256(it.AsWritten)
}

// unsignedDecisionID rejects an event whose decision_id is not a decision
// id signed for tenant (unknown, altered or another tenant's); nil when it
// has none or a good one. No store read.
func (e *core) unsignedDecisionID(tenant string, it *IngestEvent) *Rejection {
	if it.Event.DecisionID == "" {
		return nil
	}
	if _, ok := e.ids.parse(tenant, it.Event.DecisionID); ok {
		return nil
	}
	id, campo := it.Event.ID, "decision_id"
	return &Rejection{Indice: it.Index, EventID: &id, Codigo: "esquema_invalido", Campo: &campo,
		Mensaje: "decision_id desconocido, alterado o de otro inquilino"}
}

// loadIngestState reads the features of the customers and the attribution
// links of the coupons of the accepted events, from t's overlay (for
// features, also the records it keeps after their commit) or else the
// store (zero values for those in neither; damaged features and links are
// quarantined, see readFeatures and loadAttribution). The features are decoded into t's
// spare Features. The store reads are point Gets: the
// keys are spread over the table and mostly stored, so Pebble's Get, which
// stops at the first level holding the key, beats seeking one iterator
// through every level (GetMany).
func (e *Ingester) loadIngestState(tenant string, events []IngestEvent, accepted []int, t *ingestTurn) (map[string]*Features, map[string]*attribution, error) {
	feats := make(map[string]*Features, len(accepted))
	attrs := map[string]*attribution{}
	for _, k := range accepted {
		ev := &events[k].Event
		if _, ok := feats[ev.ClienteRef]; !ok {
			f := t.spareFeatures()
			if p, ok := t.feats[ev.ClienteRef]; ok {
				f.Decode(p.enc) // encoded by foldIngest: decodes
			} else {
				loaded, err := e.readFeatures(tenant, ev.ClienteRef, true)
				if err != nil {
					return nil, nil, err
				}
				*f = loaded
			}
			feats[ev.ClienteRef] = f
		}
		if _, ok := attrs[ev.CuponEmitidoID]; ev.CuponEmitidoID != "" && !ok {
			a := &attribution{}
			if p, ok := t.attrs[ev.CuponEmitidoID]; ok {
				*a = p.a
			} else {
				loaded, err := e.loadAttribution(tenant, ev.CuponEmitidoID)
				if err != nil {
					return nil, nil, err
				}
				*a = loaded
			}
			attrs[ev.CuponEmitidoID] = a
		}
	}
	return feats, attrs, nil
}

func (q *Quality) count(ev *Event, flags DataFlags, sh couponPeriods) {
	q.Eventos++
	switch ev.Tipo {
	case CuponRecibido:
		q.CuponesRecibidos++
		if ev.DecisionID == "" {
			q.CuponesSinDecision++
		}
		if sh.on && !ev.TS.Before(sh.since) {
			q.CuponesSombra++
			if ev.DecisionID == "" {
				q.CuponesSombraSinDecision++
			}
		}
		if !sh.created.IsZero() && !ev.TS.Before(sh.created) {
			q.CuponesDesdeAlta++
			if ev.DecisionID == "" {
				q.CuponesDesdeAltaSinDecision++
			}
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

// loadQuality reads the tenant's data-quality counters: zero when there
// are none yet or their record does not decode (moved to quarantine: they
// count afresh rather than failing every ingestion and learner pass).
func (e *core) loadQuality(tenant string) (*Quality, error) {
	q, err := loadDerived[Quality](e, tenant, store.QualityKey(tenant), "quality record")
	return &q, err
}

// loadAttribution reads coupon cupon's attribution link: zero when there
// is none or its record does not decode (moved to quarantine: the coupon's
// events link it afresh).
func (e *core) loadAttribution(tenant, cupon string) (attribution, error) {
	return loadDerived[attribution](e, tenant, store.AttributionKey(tenant, cupon), "attribution record")
}

// loadDerived decodes the JSON record at key, for records readers can do
// without: the zero T when it is absent or does not decode (then moved to
// quarantine, with what in the cause).
func loadDerived[T any](e *core, tenant string, key []byte, what string) (T, error) {
	var v T
	raw, err := e.db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil
	}
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		e.quarantine(tenant, key, raw, fmt.Errorf("%s: %w", what, err))
		var zero T
		return zero, nil
	}
	return v, nil
}

// Quality returns the tenant's data-quality counters.
func (e *Ingester) Quality(tenant string) (*Quality, error) { return e.loadQuality(tenant) }

// Attribution returns the decision id a coupon was sent for, "" if the
// coupon is unknown or was not labelled.
func (e *Ingester) Attribution(tenant, cupon string) (string, error) {
	a, err := e.loadAttribution(tenant, cupon)
	return a.DecisionID, err
}

// Ingester applies event batches: idempotent per event_id, each batch one
// synced write of events, customer index, features, attribution links and
// data-quality counters.
type Ingester struct{ *core }
