package engine

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coupond/coupond/store"
)

// Confirmation errors, checked in this order after the id (contract 4).
var (
	ErrAlreadyConfirmed = errors.New("engine: execution already confirmed")
	ErrDecisionExpired  = errors.New("engine: confirmation deadline passed")
)

// Confirmation is the body of an execution confirmation.
type Confirmation struct {
	Ejecutada     bool
	AccionReal    *int
	MotivoRechazo string
	TsEjecucion   *time.Time
	// Idempotency, when keyed, makes a repeat within IdempotencyTTL of
	// the same decision and body (HashConfirmBody) answer the stored
	// estado and store nothing more, and another ErrIdempotencyConflict.
	Idempotency Idempotency
	// Check, when set, is the caller's validation of the body against the
	// tenant's state (catalog, clock): Confirm runs it after a keyed
	// replay's lookup and before any other check (404 included), and
	// returns its error as is.
	Check func() error
}

// HashConfirmBody is the identity of a confirmation of decision id with
// body b for idempotency. The id is part of it, since the body alone does
// not name the decision, and it differs from HashBody's and
// HashFallbackBody's for the same bytes, so a key never replays across
// routes.
func HashConfirmBody(id string, b []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("ejecucion\x00"))
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write(b)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// confirmAnswer is the answer a confirmation's idempotency record holds:
// the 200 body of POST /v1/decisiones/{decision_id}/ejecucion.
type confirmAnswer struct {
	DecisionID string `json:"decision_id"`
	Estado     string `json:"estado_ejecucion"`
}

// Confirm records the execution outcome of a decision and returns its
// estado_ejecucion. Errors: ErrNotFound (altered, invented, foreign or
// unknown id), ErrAlreadyConfirmed, ErrDecisionExpired. Its campaign's
// budget then counts what was sent (confirmedSends): a rejected send is
// given back, a modificada one counts accion_real's instead. With an Idempotency-Key the confirmation
// and the key's record are committed together, and a repeat of the same
// decision and body answers the stored estado (see Confirmation) whatever
// became of the decision since: the key is looked up right after the id,
// before c.Check and any other check.
func (e *Engine) Confirm(tenant, id string, c Confirmation) (string, error) {
	nonce, ok := e.ids.parse(tenant, id)
	if ok && c.Idempotency.Keyed() {
		// A stored answer needs no claim (see Decide).
		if estado, err := e.confirmedWith(tenant, c, false); estado != "" || err != nil {
			return estado, err
		}
		release, err := e.flights.claimKey(tenant, c.Idempotency.Key)
		if err != nil {
			return "", err
		}
		defer release()
		if estado, err := e.confirmedWith(tenant, c, true); estado != "" || err != nil {
			return estado, err
		}
	}
	if c.Check != nil {
		if err := c.Check(); err != nil {
			return "", err
		}
	}
	if !ok {
		return "", fmt.Errorf("decision: %w", ErrNotFound)
	}
	ts, err := e.state(tenant)
	if err != nil {
		return "", err
	}
	if err := c.checkTimes(); err != nil {
		return "", err
	}
	call := confirmCall{e: e, ts: ts, tenant: tenant, id: id, nonce: nonce, c: c}
	estado, err := call.once(false)
	if errors.Is(err, errRewardDue) {
		estado, err = call.once(true)
	}
	return estado, err
}

// errRewardDue is confirmCall.once's answer when the decision's reward fell due
// while it waited for the customer's lock, or a learner pass under way
// sees it due, without the learner lock held.
var errRewardDue = errors.New("engine: reward due during the confirmation")

// confirmCall is a Confirm call past its checks: decision nonce (id as
// given) of tenant, confirmed with c.
type confirmCall struct {
	e                 *Engine
	ts                *tenantState
	tenant, id, nonce string
	c                 Confirmation
}

// once confirms the decision. When the decision's reward is
// due (its window and grace passed by the tenant clock), a learner pass may
// write back the record it read, so the confirmation waits for the pass
// (ts.learnMu), or it would be lost, and its budget given back for a
// record the pass stored pending again. Due is judged by the clock read
// before the locks and again under the customer's lock: the clock moves on
// meanwhile, and a pass that started since reads past the reward's due
// time; then errRewardDue, and Confirm tries again with waitLearner. So
// it is when the pass under way sees the reward due by its own clock and
// settings (tenantState.learnView): the operator may have widened the
// reward window since the pass read it, or set the sandbox clock back.
func (k confirmCall) once(waitLearner bool) (string, error) {
	e, ts, tenant, id, nonce, c := k.e, k.ts, k.tenant, k.id, k.nonce, k.c
	r, err := e.loadDecision(tenant, nonce)
	if err != nil {
		return "", err
	}
	t, now, err := e.tenantNow(tenant)
	if err != nil {
		return "", err
	}
	due := func(t *store.Tenant, now time.Time) bool {
		return !now.Before(r.At.Add(t.Settings.RewardWindow + t.Settings.RewardGrace))
	}
	if waitLearner = waitLearner || due(t, now); waitLearner {
		ts.learnMu.Lock()
		defer ts.learnMu.Unlock()
	}
	if r.CampanaID != "" { // a rejection gives budget back: after a batch chunk's commit
		ts.budgetGate.RLock()
		defer ts.budgetGate.RUnlock()
	}
	lock := ts.custLock(e.seed, r.ClienteRef)
	lock.Lock()
	defer lock.Unlock()
	if r, err = e.loadDecision(tenant, nonce); err != nil { // re-read under the lock
		return "", err
	}
	if r.Estado != EstadoPendiente || r.EnRespaldo {
		return "", ErrAlreadyConfirmed
	}
	if t, now, err = e.tenantNow(tenant); err != nil {
		return "", err
	}
	if now.After(r.CaducaEn) {
		return "", ErrDecisionExpired
	}
	if !waitLearner && (due(t, now) || ts.learnView.Load().due(r.At)) {
		return "", errRewardDue
	}
	c.applyTo(r, now)
	if r.Estado == EstadoModificada {
		r.CostoEnvioCents = sendCost(ts.catalog.Load(), *r.AccionReal)
	}
	released, sent, err := e.Campaigns.confirmedSends(ts, tenant, r)
	if err != nil {
		return "", err
	}
	b := e.db.NewBatch()
	defer b.Close()
	putRecord(b, tenant, r)
	if r.Recompensa != nil {
		// A learner pass closed the reward unconfirmed (a reward window
		// and grace shorter than DecisionTTL) and deleted its entry: queued
		// again, the next pass learns it with this confirmation.
		b.Set(queueKey(tenant, r.At.Add(t.Settings.RewardWindow+t.Settings.RewardGrace), queueReward_, nonce), nil)
	}
	if c.Idempotency.Keyed() {
		if err := putConfirmIdem(b, tenant, id, now, r, c); err != nil {
			return "", err
		}
	}
	if err := e.Campaigns.commitCounts(ts, tenant, b, nil, released, sent); err != nil {
		return "", err
	}
	e.counters.confirmed(tenant, r)
	return r.Estado, nil
}

// sendCost is the sending cost in cents of action id of cat, as a
// DecisionRecord keeps it: 0 for action 0, the cost it had when it left
// for a retired coupon (Catalog.Known), nil for an id cat does not know.
func sendCost(cat *Catalog, id int) *int64 {
	if id == 0 {
		return new(int64)
	}
	if a := cat.Known(id); a != nil {
		c := a.CostoEnvioCents // a copy: the catalog is shared
		return &c
	}
	return nil
}

// applyTo records c in r, the pending decision it confirms, at now.
func (c Confirmation) applyTo(r *DecisionRecord, now time.Time) {
	switch {
	case !c.Ejecutada:
		r.Estado = EstadoRechazada
		r.MotivoRechazo = c.MotivoRechazo
	case c.AccionReal != nil && *c.AccionReal != r.Accion:
		r.Estado = EstadoModificada
	default:
		r.Estado = EstadoEjecutada
	}
	r.AccionReal = c.AccionReal
	r.TsEjecucion = c.TsEjecucion
	r.ConfirmadaEn = &now
}

// confirmedSends are the budget changes of r's confirmation, which applyTo
// has just recorded in r, so that its campaign counts what was sent: a
// rechazada or modificada confirmation gives back (rel) the send its
// decision counted, the decided action's; a modificada one with an
// accion_real other than 0 counts (sent) that action's send, one send and
// its descuento_max (a retired coupon's as it had it when it left, see
// Catalog.Known; 0 for an id the catalog no longer knows), when the
// campaign is defined (or its record damaged), past the caps too: it went
// out. r.BudgetCents of a modificada decision
// becomes what it counts. The caller holds the customer lock of r.
func (c *Campaigns) confirmedSends(ts *tenantState, tenant string, r *DecisionRecord) (rel, sent Releases, err error) {
	rel, sent = Releases{}, Releases{}
	if r.CampanaID == "" || r.Estado == EstadoEjecutada {
		return rel, sent, nil
	}
	if r.Accion != 0 {
		rel.add(r)
	}
	if r.Estado != EstadoModificada {
		return rel, sent, nil
	}
	r.BudgetCents = 0
	if r.AccionReal == nil || *r.AccionReal == 0 {
		return rel, sent, nil
	}
	if counted, err := c.countsSends(tenant, r.CampanaID); err != nil || !counted {
		return rel, sent, err
	}
	if a := ts.catalog.Load().Known(*r.AccionReal); a != nil {
		r.BudgetCents = a.DescuentoMaxCents
	}
	sent.addSend(r.CampanaID, r.BudgetCents)
	return rel, sent, nil
}

// confirmedWith returns the estado stored for c's Idempotency-Key within
// IdempotencyTTL: "" when the key is new, expired or its record damaged
// (moved to quarantine, see idemRecord), ErrIdempotencyConflict when it
// answered another request. claimed says whether the caller holds the
// key (see idemLookup: without it a damaged record is left as it is).
func (e *core) confirmedWith(tenant string, c Confirmation, claimed bool) (string, error) {
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return "", err
	}
	rec, _, err := e.idemLookup(tenant, now, c.Idempotency, claimed)
	if rec == nil || err != nil {
		return "", err
	}
	var a confirmAnswer
	if err := json.Unmarshal(rec.Answer, &a); err != nil || !confirmedEstado(a.Estado) {
		key := store.IdempotencyKey(tenant, c.Idempotency.Key)
		if raw, err := e.db.Get(key); err == nil && claimed {
			e.quarantine(tenant, key, raw, fmt.Errorf("idempotency record: answer: estado_ejecucion %q", a.Estado))
		}
		return "", nil
	}
	return a.Estado, nil
}

// confirmedEstado reports whether estado is one a confirmation stores.
func confirmedEstado(estado string) bool {
	return estado == EstadoEjecutada || estado == EstadoModificada || estado == EstadoRechazada
}

// putConfirmIdem writes in b the idempotency record of c's key for the
// confirmation r of decision id at now: its answer and, so a deletion of
// the customer finds it, the cliente_ref.
func putConfirmIdem(b *store.Batch, tenant, id string, now time.Time, r *DecisionRecord, c Confirmation) error {
	answer, err := json.Marshal(confirmAnswer{DecisionID: id, Estado: r.Estado})
	if err != nil {
		return err
	}
	rec, err := c.Idempotency.record(now, answer, r.ClienteRef)
	if err != nil {
		return err
	}
	b.SetIdempotency(tenant, c.Idempotency.Key, rec)
	return nil
}

// Releases are sends by campaign: those a writer gives back, until its
// commit (or, passed as sent to commitCounts, counts): commitBudgets takes them off the counters as it commits, so no
// decision spends them, and no other writer stores counters without them,
// before the writer's records say they were given back.
type Releases map[string]budget

// add gives the send of r, a campaign decision, back (call under the
// customer lock of r).
func (rel Releases) add(r *DecisionRecord) { rel.addSend(r.CampanaID, r.BudgetCents) }

// addSend adds one send of campaign with expected discount cents.
func (rel Releases) addSend(campaign string, cents int64) {
	x := rel[campaign]
	x.Envios = featAdd(x.Envios, 1)
	x.DescuentoCents = featAdd(x.DescuentoCents, cents)
	rel[campaign] = x
}

// dropBudgetCache forgets campaigns' cached counters after a failed
// commit, so they are read again from the store.
func (e *Campaigns) dropBudgetCache(ts *tenantState, campaigns ...string) {
	ts.budgetMu.Lock()
	for _, c := range campaigns {
		delete(ts.budgets, c)
	}
	ts.budgetMu.Unlock()
}

// commitBudgets commits b, whose writes count sends of the campaigns in
// spent against their budgets and give back the sends in rel, with each
// campaign's counters as they stand in memory at the commit (rel taken
// off them there, under ts.budgetMu), applied in
// the order of ts.budgetMu (store.Batch.CommitOrdered: the lock is not
// held through the WAL sync, so concurrent sends still share syncs).
// Budget records are counters written whole: a writer that stored the
// counters it saw when it counted, and committed after a writer that
// counted later, put the older value back (a learner pass commits long
// after its releases), and an engine started again over the store read a
// budget with sends missing. On failure the campaigns' counters are read
// again from the store. A release's counters were stored with another
// writer's commit before its own, and a stop in between had the release
// given again at the next start (its records still pending).
func (e *Campaigns) commitBudgets(ts *tenantState, tenant string, b *store.Batch, spent []string, rel Releases) error {
	return e.commitCounts(ts, tenant, b, spent, rel, nil)
}

// commitCounts is commitBudgets that also counts the sends in sent, sends
// that went out whatever the budget (a confirmation's accion_real, a
// fallback record's accion), on the counters at the commit, after rel is
// taken off them, caps or not.
func (e *Campaigns) commitCounts(ts *tenantState, tenant string, b *store.Batch, spent []string, rel, sent Releases) error {
	campaigns := spent // a decision's: no copy on the decision path
	if len(rel) > 0 || len(sent) > 0 {
		campaigns = slices.Clone(spent)
	}
	for _, m := range []Releases{rel, sent} {
		for c := range m {
			if !slices.Contains(campaigns, c) {
				campaigns = append(campaigns, c)
			}
		}
	}
	if len(campaigns) == 0 {
		return b.Commit()
	}
	ts.budgetMu.Lock()
	err := e.applyCounts(ts, tenant, rel, takeOff)
	if err == nil {
		err = e.applyCounts(ts, tenant, sent, featAdd)
	}
	if err == nil {
		err = e.setBudgets(ts, tenant, b, campaigns)
	}
	if err != nil {
		ts.budgetMu.Unlock()
	} else {
		err = b.CommitOrdered(ts.budgetMu.Unlock)
	}
	if err != nil {
		e.dropBudgetCache(ts, campaigns...)
	}
	return err
}

// applyCounts changes the cached counters of each campaign of m by its
// counts, op(counter, count) for Envios and for DescuentoCents: takeOff
// for releases, featAdd for sends. The caller holds ts.budgetMu.
func (e *Campaigns) applyCounts(ts *tenantState, tenant string, m Releases, op func(counter, n int64) int64) error {
	for c, x := range m {
		bu, err := e.budgetLocked(ts, tenant, c)
		if err != nil {
			return err
		}
		bu.Envios = op(bu.Envios, x.Envios)
		bu.DescuentoCents = op(bu.DescuentoCents, x.DescuentoCents)
	}
	return nil
}

// takeOff is counter less a released count n, never below 0.
func takeOff(counter, n int64) int64 { return max(0, counter-n) }

// setBudgets writes the cached counters of campaigns to b; a campaign
// without cached counters keeps what b holds. The caller holds ts.budgetMu.
func (e *Campaigns) setBudgets(ts *tenantState, tenant string, b *store.Batch, campaigns []string) error {
	for _, c := range campaigns {
		if bu, ok := ts.budgets[c]; ok {
			if err := b.SetJSON(store.BudgetKey(tenant, c), bu); err != nil {
				return err
			}
		}
	}
	return nil
}

// FallbackInput is a fallback record: the caller applied its own rule
// because the engine did not answer or was paused.
type FallbackInput struct {
	Accion     int
	Canal      string
	ClienteRef string
	CampanaID  string
	// Idempotency, when keyed, makes a repeat within IdempotencyTTL of
	// the same body (HashFallbackBody) store nothing more, and one with
	// another body ErrIdempotencyConflict.
	Idempotency Idempotency
	// Replaces, when set, is the Idempotency-Key of the decision request
	// whose answer never reached the caller and whose place this record
	// takes: that request's decision, if it is still pendiente, is voided
	// in the record's commit (fallbackCall), and the key spent when it
	// voided one or answered nothing yet (a later request with it is
	// ErrIdempotencyConflict). A key that answered nothing this record
	// can replace is no error.
	Replaces string
}

// HashFallbackBody is the identity of a fallback request's body for
// idempotency. It differs from HashBody's for the same bytes, so a key
// used for a fallback record never replays as a decision.
func HashFallbackBody(b []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("respaldo\x00"))
	h.Write(b)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// ErrUnknownAction is returned when an action id is not in the catalog.
var ErrUnknownAction = errors.New("engine: action not in the catalog")

// Fallback stores a fallback record with propensity 1 and en_respaldo true.
// It is kept for evaluation and does not open a reward window; with
// in.Replaces it voids the decision whose answer it replaces (see
// fallbackCall.replaced), in the same commit. A send
// (accion ≠ 0) for a defined campaign is counted against its budget in the
// same commit (fallbackSend), past the caps too. With an Idempotency-Key
// the record and the key's record are committed together, and a repeat of
// the same body stores and counts nothing (see FallbackInput), even
// when its action has left the catalog since. ErrUnknownAction: an action
// other than 0 that neither the catalog nor its retired coupons hold
// (Catalog.Known; checked after the replay).
func (e *Engine) Fallback(tenant string, in FallbackInput) error {
	ts, err := e.state(tenant)
	if err != nil {
		return err
	}
	t, now, err := e.tenantNow(tenant)
	if err != nil {
		return err
	}
	var idem []byte
	if in.Idempotency.Keyed() {
		// A stored record needs no claim (see Decide).
		if stored, err := e.replayed(tenant, now, in.Idempotency, false); stored || err != nil {
			return err
		}
		release, err := e.flights.claimKey(tenant, in.Idempotency.Key)
		if err != nil {
			return err
		}
		defer release()
		stored, err := e.replayed(tenant, now, in.Idempotency, true)
		if stored || err != nil {
			return err
		}
		if idem, err = in.Idempotency.record(now, json.RawMessage("{}"), in.ClienteRef); err != nil {
			return err
		}
	}
	// After the replay's lookup, as a confirmation's accion_real: a retry
	// of a stored record whose action left the catalog since is answered
	// as the first call was, not refused. A coupon an earlier catalog held
	// (Catalog.Known) is one the caller's rule may have sent before the
	// catalog changed, its record queued until the engine answered again.
	var act *Action
	if in.Accion != 0 {
		if act = ts.catalog.Load().Known(in.Accion); act == nil {
			return ErrUnknownAction
		}
	}
	return fallbackCall{e: e, ts: ts, t: t, now: now, in: in}.store(act, idem)
}

// fallbackSend is the send r, a fallback record of action act (nil: 0; a
// retired coupon: as it left the catalog), counts against its campaign's
// budget: one send and act's descuento_max
// (also set as r.BudgetCents) when the campaign is defined (or its record
// damaged), past the caps too, since it went out; none otherwise.
func (c *Campaigns) fallbackSend(tenant string, r *DecisionRecord, act *Action) (Releases, error) {
	if act == nil || r.CampanaID == "" {
		return nil, nil
	}
	if counted, err := c.countsSends(tenant, r.CampanaID); err != nil || !counted {
		return nil, err
	}
	r.BudgetCents = act.DescuentoMaxCents
	sent := Releases{}
	sent.addSend(r.CampanaID, r.BudgetCents)
	return sent, nil
}

// checkTimes refuses a confirmation whose times a record cannot hold (see
// storableTime).
func (c Confirmation) checkTimes() error {
	if c.TsEjecucion != nil && !storableTime(*c.TsEjecucion) {
		return fmt.Errorf("ts_ejecucion: %w", ErrUnstorableTime)
	}
	return nil
}
