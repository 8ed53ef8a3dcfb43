package engine

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"time"

	"github.com/coupond/coupond/store"
)

// A decision whose answer never reached its caller (the caller's budget
// ran out while coupond was deciding, the connection broke after the
// commit) is stored like any other: it holds its customer's reward window
// for weeks and waits for a confirmation nobody can send, while the
// caller applies its own rule and records it with a fallback record. A
// fallback record that names the Idempotency-Key of that decision request
// (FallbackInput.Replaces) voids it in the record's own commit, as VoidJob
// voids a failed job's decisions: rechazada with motivoRespaldo and
// Anulada, its send given back to the campaign budget, its reward window
// closed, left out of learning and evaluation (the fallback record says
// what was done). The key is then spent (spentKeyRecord), also when it
// answered nothing yet: an attempt of the lost request still on its way
// (its body not yet read when the record came) would otherwise decide
// afterwards, and its decision hold the window the record freed.

// motivoRespaldo is the motivo_rechazo of a decision a fallback record
// replaced (DecisionRecord.Anulada marks it too).
const motivoRespaldo = "sustituida por un registro de respaldo: la respuesta no llegó al cliente"

// replacedByFallback reports whether r is a decision a fallback record
// replaced: never delivered, and not what was done, so not learned from.
func replacedByFallback(r *DecisionRecord) bool {
	return r.Anulada && r.MotivoRechazo == motivoRespaldo
}

// replacedWait bounds how long a fallback record waits for the decision
// request it replaces while that request is still being answered.
const replacedWait = 2 * time.Second

// fallbackCall stores one fallback record, in, for tenant t at now (the
// tenant clock), once Engine.Fallback has made its checks.
type fallbackCall struct {
	e   *Engine
	ts  *tenantState
	t   *store.Tenant
	now time.Time
	in  FallbackInput
}

// store builds the record (action act, nil for 0) and commits it with
// idem (its Idempotency-Key's record, nil without one), its send (see
// fallbackSend) and, with in.Replaces, the void of the decision it
// replaces and the spent key (replace).
func (f fallbackCall) store(act *Action, idem []byte) error {
	e, ts, tenant, in := f.e, f.ts, f.t.ID, f.in
	nonce, err := e.freshNonce(ts, f.t, f.now)
	if err != nil {
		return err
	}
	r := &DecisionRecord{
		Nonce: nonce, ClienteRef: in.ClienteRef, At: f.now, Canal: in.Canal, CampanaID: in.CampanaID,
		Accion: in.Accion, Propension: 1, Version: "respaldo", EnRespaldo: true, CaducaEn: f.now,
		Motivo: "registro de respaldo: regla del cliente aplicada", Estado: EstadoEjecutada,
	}
	replacing := false
	if in.Replaces != "" {
		var release func()
		if release, replacing = f.claim(); replacing {
			defer release()
		}
	}
	if (act != nil || replacing) && in.CampanaID != "" { // counts or gives back a send: after a batch chunk's commit
		ts.budgetGate.RLock()
		defer ts.budgetGate.RUnlock()
	}
	sent, err := e.Campaigns.fallbackSend(tenant, r, act)
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	putDecision(b, tenant, r, nil)
	if idem != nil {
		b.SetIdempotency(tenant, in.Idempotency.Key, idem)
	}
	var voided *DecisionRecord
	released := Releases{}
	if replacing {
		lock := ts.custLock(e.seed, in.ClienteRef)
		lock.Lock()
		defer lock.Unlock()
		if voided, released, err = f.replace(b); err != nil {
			return err
		}
	}
	if err := e.Campaigns.commitCounts(ts, tenant, b, nil, released, sent); err != nil {
		return err
	}
	e.counters.Add(tenant, f.now, CountFallbacks, 1)
	if voided != nil {
		e.counters.confirmed(tenant, voided)
	}
	return nil
}

// claim holds in.Replaces, the Idempotency-Key of the decision request the
// record replaces, so that no attempt of that request commits between the
// read of its answer and the record's commit. A request still running is
// waited for up to replacedWait; past that (or for the record's own key)
// nothing is held and ok is false: the record is stored and replaces
// nothing.
func (f fallbackCall) claim() (release func(), ok bool) {
	if f.in.Idempotency.Keyed() && f.in.Idempotency.Key == f.in.Replaces {
		return nil, false
	}
	deadline := time.Now().Add(replacedWait)
	for {
		release, err := f.e.flights.claimKey(f.t.ID, f.in.Replaces)
		if err == nil {
			return release, true
		}
		if !time.Now().Before(deadline) {
			return nil, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replace writes to b the void of the decision the record replaces, if
// any (replaced, void), and, when it voided one or the key answered
// nothing yet, spends the key (spentKeyRecord): an attempt of the lost
// request that reaches coupond after the record, its body still on the
// way when the record came, then decides nothing. It returns the decision
// voided (nil: none) and the send it gives back. The caller holds the key
// (claim), the customer's lock until b is committed and, for a campaign,
// the budget gate.
func (f fallbackCall) replace(b *store.Batch) (*DecisionRecord, Releases, error) {
	// The tenant clock and settings read again under the lock, as Confirm
	// does: f's were read before the claim's wait, and a learner pass that
	// started and ended since may have made the reward final.
	t, now, err := f.e.tenantNow(f.t.ID)
	if err != nil {
		return nil, nil, err
	}
	r, unanswered, err := f.replaced(t, now)
	if err != nil {
		return nil, nil, err
	}
	released := Releases{}
	if r != nil {
		if released, err = f.void(r, b, now); err != nil {
			return nil, nil, err
		}
	}
	if r != nil || unanswered {
		spent, err := spentKeyRecord(f.in.Replaces, now, f.in.ClienteRef)
		if err != nil {
			return nil, nil, err
		}
		b.SetIdempotency(f.t.ID, f.in.Replaces, spent)
	}
	return r, released, nil
}

// spentKeyRecord is the idempotency record a fallback record leaves under
// key, the key of the decision request it replaces, at now for customer
// clienteRef: its body hash (spentKeyHash) is no route's (Idempotency), so
// every request with the key within IdempotencyTTL is ErrIdempotencySpent
// (409 idempotencia_conflicto) and decides nothing, and a repeat of the
// lost request no longer replays the decision voided.
func spentKeyRecord(key string, now time.Time, clienteRef string) ([]byte, error) {
	id := Idempotency{Key: key, BodyHash: spentKeyHash(key)}
	return id.record(now, json.RawMessage("{}"), clienteRef)
}

// spentKeyHash is the body hash of key's spentKeyRecord: no route hashes a
// body to it, so a lookup that finds it knows the key was spent.
func spentKeyHash(key string) [32]byte {
	h := sha256.New()
	h.Write([]byte("sustituida\x00"))
	h.Write([]byte(key))
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// replaced returns the decision the record replaces: the new decision the
// request of Idempotency-Key in.Replaces was answered with within
// IdempotencyTTL (not an open window's earlier decision given back),
// online, for in's customer and campaign, still pendiente and whose
// reward is not yet due (by the tenant's settings and by the learner's
// view). nil when there is none: the key is unknown, expired, damaged or
// another route's, or the decision was confirmed, voided or is another's.
// unanswered reports that the key holds no answer within IdempotencyTTL
// (unknown or expired). The caller holds the key (claim) and the
// customer's lock, under which it read t, the tenant, and now, its clock.
func (f fallbackCall) replaced(t *store.Tenant, now time.Time) (r *DecisionRecord, unanswered bool, err error) {
	e, tenant, in := f.e, f.t.ID, f.in
	raw, err := e.db.Idempotency(tenant, in.Replaces)
	if errors.Is(err, store.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	rec, d, err := decodeIdem(raw)
	if err != nil {
		return nil, false, nil // a damaged record is its own key's to quarantine
	}
	if now.Sub(rec.At) >= IdempotencyTTL {
		return nil, true, nil
	}
	if rec.ClienteRef != in.ClienteRef {
		return nil, false, nil
	}
	nonce, ok := e.ids.parse(tenant, d.DecisionID)
	if !ok {
		return nil, false, nil // another route's answer
	}
	if r, err = e.loadDecision(tenant, nonce); errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s := t.Settings
	switch {
	case r.ClienteRef != in.ClienteRef, r.CampanaID != in.CampanaID, r.JobID != "", r.EnRespaldo,
		r.Estado != EstadoPendiente:
		return nil, false, nil
	case !r.At.Equal(rec.At) || d.Accion != r.Accion || d.Motivo != r.Motivo:
		return nil, false, nil // the answer gave back an open window's decision
	case !now.Before(r.At.Add(s.RewardWindow + s.RewardGrace)), f.ts.learnView.Load().due(r.At):
		return nil, false, nil // a learner pass may hold it; its window no longer holds anyone
	}
	return r, false, nil
}

// void writes to b the void of r, the decision the record replaces, at
// now, and returns the send it gives back. The caller holds r's customer
// lock and, for a campaign, the budget gate.
func (f fallbackCall) void(r *DecisionRecord, b *store.Batch, now time.Time) (Releases, error) {
	e, tenant := f.e, f.t.ID
	r.Estado, r.MotivoRechazo, r.Anulada = EstadoRechazada, motivoRespaldo, true
	at := now
	r.ConfirmadaEn = &at
	released, _, err := e.Campaigns.confirmedSends(f.ts, tenant, r)
	if err != nil {
		return nil, err
	}
	putRecord(b, tenant, r)
	cs, err := e.loadCustomerState(tenant, r.ClienteRef, true)
	if err != nil {
		return nil, err
	}
	if cs.OpenNonce == r.Nonce {
		cs.OpenNonce, cs.OpenAt, cs.OpenVersion = "", time.Time{}, ""
		b.Set(customerStateKey(tenant, r.ClienteRef), marshalCustomerState(&cs))
	}
	return released, nil
}
