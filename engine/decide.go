package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// DecisionTTL is how long an execution confirmation is accepted.
const DecisionTTL = 7 * 24 * time.Hour

// DailyCap is the number of online decision requests (POST /v1/decisiones)
// per customer per UTC day; batch lines do not count toward it.
const DailyCap = 3

// IdempotencyTTL is how long a repeated Idempotency-Key returns the same
// decision.
const IdempotencyTTL = 24 * time.Hour

// Request is one decision request, online or from a batch job.
type Request struct {
	ClienteRef string
	Canal      string
	CampanaID  string
	// Allowed restricts the candidate actions (0 is always allowed); nil
	// means every action of the catalog.
	Allowed []int
	// Idempotency, when keyed, makes a repeat within IdempotencyTTL return
	// the same decision (body hashes: HashBody).
	Idempotency Idempotency
	// Explain adds μ per eligible action to the answer (scope explicar:leer).
	Explain bool
	// CapExempt skips the per-customer daily cap (sandbox tenants with rate
	// limits off, and batch jobs, which have their own hourly limit).
	CapExempt bool
	JobID     string
	// NoSend restricts the choice to 0: a batch's budget cut kept other
	// customers' sends.
	NoSend bool
}

// Decision is the answer to a decision request: api.Decision, the API's
// Decision body that the SDK reads as client.Decision, as a type of its own
// to carry the engine's encoder (AppendJSON, decisionjson.go). The engine
// never sets Causa, which is the SDK's.
type Decision api.Decision

// Detalle explains a decision: the expected value μ (MXN over the reward
// window) and its uncertainty for every eligible action, 0 included, and the
// probability with which each was drawn (api.Detalle).
type Detalle = api.Detalle

// DetalleAccion is one row of Detalle.
type DetalleAccion = api.DetalleAccion

// Decision errors.
var (
	// ErrDailyCap: the customer already had DailyCap decision requests today.
	ErrDailyCap = errors.New("engine: daily decisions per customer exceeded")
	// ErrIdempotencyConflict: same key with another body, still running, or
	// spent by a fallback record (ErrIdempotencySpent).
	ErrIdempotencyConflict = errors.New("engine: idempotency conflict")
	// ErrIdempotencyInFlight is the ErrIdempotencyConflict of a key whose
	// first request still runs: the request may be its replay, which a
	// retry once the first ends gets (errors.Is it ErrIdempotencyConflict).
	ErrIdempotencyInFlight = fmt.Errorf("%w: its first request still runs", ErrIdempotencyConflict)
	// ErrIdempotencySpent is the ErrIdempotencyConflict of a key a fallback
	// record's Replaces-Idempotency-Key spent (spentKeyRecord): the request
	// it named was replaced and decides nothing more, whatever its body.
	ErrIdempotencySpent = fmt.Errorf("%w: a fallback record replaced its request", ErrIdempotencyConflict)
)

// customerState is what the decision path keeps per customer: the decision
// whose reward window is open (its nonce, time and politica_version) and
// today's request count. OpenVersion is "" in a state of format 1 or one
// rebuilt from the decisions: the open window's answer then reads it from
// the decision record (Engine.openVersion).
type customerState struct {
	OpenNonce   string    `json:"open_nonce,omitempty"`
	OpenAt      time.Time `json:"open_at,omitempty"`
	Day         string    `json:"day,omitempty"`
	Count       int       `json:"count,omitempty"`
	OpenVersion string    `json:"open_version,omitempty"`
}

func customerStateKey(tenant, clienteRef string) []byte {
	return store.CustomerStateKey(tenant, clienteRef)
}

// Stored form of a customerState: every decision request reads and writes
// one, so it is binary (the format byte custStateFormat, then OpenNonce,
// OpenAt, Day, Count and OpenVersion with the primitives of the event
// encoding) rather than JSON. States of format 1 (custStateFormat1, no
// OpenVersion) and those written by earlier versions as JSON (first byte
// '{') are still read. Times are UTC, as the tenant clocks are.
const (
	custStateFormat  byte = 2
	custStateFormat1 byte = 1
)

// marshalCustomerState returns the stored form of cs.
func marshalCustomerState(cs *customerState) []byte {
	b := make([]byte, 0, 8+len(cs.OpenNonce)+12+len(cs.Day)+4+len(cs.OpenVersion))
	b = append(b, custStateFormat)
	b = binAppendString(b, cs.OpenNonce)
	b = binAppendTime(b, cs.OpenAt)
	b = binAppendString(b, cs.Day)
	b = binary.AppendUvarint(b, uint64(cs.Count))
	return binAppendString(b, cs.OpenVersion)
}

// unmarshalCustomerState decodes a stored state (binary or the older JSON)
// into cs. Damaged input gives an error, never a panic.
func unmarshalCustomerState(b []byte, cs *customerState) error {
	*cs = customerState{}
	format := custStateFormat
	if len(b) > 0 && b[0] == custStateFormat1 {
		format = custStateFormat1
	}
	d, ok, err := openStored(b, format, cs, errCustomerState)
	if !ok {
		return err
	}
	cs.OpenNonce = d.str()
	cs.OpenAt = d.time()
	cs.Day = d.str()
	n := d.uvarint()
	if format == custStateFormat {
		cs.OpenVersion = d.str()
	}
	if n > math.MaxInt32 || !d.done() {
		*cs = customerState{}
		return errCustomerState
	}
	cs.Count = int(n)
	return nil
}

// errCustomerState reports a damaged stored customer state.
var errCustomerState = errors.New("customer state: damaged")

// loadCustomerState reads a customer's decision state; a customer without
// one gets the zero state. A damaged state is read as rebuilt from the
// customer's decisions; locked says the caller holds the customer's lock
// (tenantState.custLock), and only then is the damaged record replaced
// (rebuildCustomerState). Without the lock (SendGain) it is left for the
// customer's next decision: replacing it could put back a state older than
// a concurrent decision's, or a quarantine copy after her erasure.
func (e *Engine) loadCustomerState(tenant, clienteRef string, locked bool) (customerState, error) {
	var cs customerState
	b, err := e.db.Get(customerStateKey(tenant, clienteRef))
	if errors.Is(err, store.ErrNotFound) {
		return cs, nil
	}
	if err != nil {
		return cs, err
	}
	switch err := unmarshalCustomerState(b, &cs); {
	case err == nil:
		return cs, nil
	case locked:
		return e.rebuildCustomerState(tenant, clienteRef, b, err)
	default:
		return e.customerStateFromDecisions(tenant, clienteRef)
	}
}

// HashBody is the identity of a request body for idempotency.
func HashBody(b []byte) [32]byte { return sha256.Sum256(b) }

// Decide answers one decision request for tenant: the idempotency record,
// the tenant's daily quota, the per-customer daily cap and reward window,
// the control group, then the policy with exploration and the campaign
// budget. A keyed replay (same Idempotency-Key and body within
// IdempotencyTTL) is looked up first and answered with the stored decision
// whatever the day's quota and cap: replays do not count. Every other
// answer takes one unit of the quota before it is made (a DayLimitError
// with ErrQuota when none is left), and a request that then fails gives it
// back, so concurrent requests never answer more than the quota. The
// decision is durable (committed with Sync) before Decide returns. An
// error means no decision was committed; a failure left after the commit
// is logged, never answered.
func (e *Engine) Decide(tenant string, req Request) (*Decision, error) {
	e.markOnline()
	ts, t, now, err := e.stateNow(tenant)
	if err != nil {
		return nil, err
	}
	if req.Idempotency.Keyed() {
		// A stored answer is sent again without claiming the key, so a
		// retry beside another retry is a replay, not a 409 (contract §2:
		// that is for another body or a first request still running). A
		// key without one is claimed, then looked up again: its first
		// request may have ended in between.
		if d, err := e.replay(t.ID, now, req, false); d != nil || err != nil {
			return d, err
		}
		release, err := e.flights.claimKey(t.ID, req.Idempotency.Key)
		if err != nil {
			return nil, err
		}
		defer release()
		d, err := e.replay(t.ID, now, req, true)
		if d != nil || err != nil {
			return d, err
		}
	}
	return e.decideCounted(ts, t, now, req)
}

// decideCounted is decideAndCommit taking one unit of the tenant's daily
// quota of decisions first, given back when no decision is committed.
func (e *Engine) decideCounted(ts *tenantState, t *store.Tenant, now time.Time, req Request) (*Decision, error) {
	if err := e.quotas.reserve(t, QuotaDecisions, now, 1); err != nil {
		return nil, err
	}
	d, err := e.decideAndCommit(ts, t, now, req)
	if err != nil {
		if rerr := e.quotas.release(t.ID, QuotaDecisions, now, 1); rerr != nil {
			e.log.Error().Err(rerr).Str("tenant", t.ID).Msg("decision refused but its unit of the daily quota not given back")
		}
		return nil, err
	}
	return d, nil
}

// keyFlights are the Idempotency-Keys (tenant NUL key) whose first
// request, or whose pruning, is running.
type keyFlights struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// claimKey marks tenant's Idempotency-Key key as in flight until release
// is called, or returns ErrIdempotencyInFlight while another request with
// it runs.
func (f *keyFlights) claimKey(tenant, key string) (release func(), err error) {
	flight := tenant + "\x00" + key
	if !f.tryMark(flight) {
		return nil, ErrIdempotencyInFlight
	}
	return func() { f.unmark(flight) }, nil
}

// tryMark marks flight as in flight; false when it already was.
func (f *keyFlights) tryMark(flight string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.m[flight]; busy {
		return false
	}
	f.m[flight] = struct{}{}
	return true
}

// unmark ends the given flights.
func (f *keyFlights) unmark(flights ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fl := range flights {
		delete(f.m, fl)
	}
}

// decideAndCommit makes the decision of req under its customer's lock and
// commits it with Sync: the record, its reward-queue entries and the
// customer state (decideInto) and, for an Idempotency-Key, the answer;
// then counts the new record for the console.
func (e *Engine) decideAndCommit(ts *tenantState, t *store.Tenant, now time.Time, req Request) (*Decision, error) {
	if req.CampanaID != "" { // may write the campaign's budget: after a batch chunk's commit
		ts.budgetGate.RLock()
		defer ts.budgetGate.RUnlock()
	}
	lock := ts.custLock(e.seed, req.ClienteRef)
	lock.Lock()
	defer lock.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	d, rec, err := e.decideInto(ts, t, now, req, b)
	if err != nil {
		return nil, err
	}
	if req.Idempotency.Keyed() {
		answer, ok := d.AppendJSON(nil)
		if !ok {
			var err error
			if answer, err = json.Marshal(d); err != nil {
				return nil, err
			}
		}
		stored, err := req.Idempotency.record(now, answer, req.ClienteRef)
		if err != nil {
			return nil, err
		}
		b.SetIdempotency(t.ID, req.Idempotency.Key, stored)
	}
	var spent []string
	if rec != nil && rec.Accion != 0 && rec.CampanaID != "" {
		spent = append(spent, rec.CampanaID)
	}
	if err := e.Campaigns.commitBudgets(ts, t.ID, b, spent, nil); err != nil {
		return nil, err
	}
	e.counters.decided(t.ID, rec)
	return d, nil
}

// replay answers a request whose Idempotency-Key was answered within
// IdempotencyTTL: the same decision for the same body, ErrIdempotencyConflict
// for another; nil, nil when the key is new (or expired). A record that does
// not decode, or whose answer does not, is moved to quarantine and read as
// absent, as after its expiry: the request is answered afresh. That sends
// nothing twice: the first answer opened its customer's reward window, so
// the same body is answered with that window's decision (counted toward the
// customer's daily cap, as any answer that is not a replay). A conflict
// cannot be told from a damaged record, and refusing the key would not
// last: once quarantined, the key is new. The stored answer's detalle is
// left out for a request without req.Explain. claimed says whether the
// request holds its key (see idemLookup).
func (e *Engine) replay(tenant string, now time.Time, req Request, claimed bool) (*Decision, error) {
	rec, d, err := e.idemLookup(tenant, now, req.Idempotency, claimed)
	if rec == nil || err != nil {
		return nil, err
	}
	if !req.Explain {
		// The key is the tenant's, not the credential's: a credential
		// without explicar:leer gets no detalle, whoever asked first.
		d.Detalle = nil
	}
	return d, nil
}

// idemRecord reads tenant's record of id's Idempotency-Key: nil when the
// key is new, expired (IdempotencyTTL by now) or its record damaged (moved
// to quarantine, see replay); ErrIdempotencyConflict when it answered
// another body (Idempotency.sameBody). The caller holds the key's claim.
func (e *core) idemRecord(tenant string, now time.Time, id Idempotency) (*idemRecord, *Decision, error) {
	return e.idemLookup(tenant, now, id, true)
}

// idemLookup is idemRecord for a caller that holds the key's claim
// (claimed) or not: a lookup without the claim finds replays and
// conflicts only, and leaves a damaged record as it is (nil, nil), for the
// claimed lookup that follows to move to quarantine, once.
func (e *core) idemLookup(tenant string, now time.Time, id Idempotency, claimed bool) (*idemRecord, *Decision, error) {
	raw, err := e.db.Idempotency(tenant, id.Key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	rec, d, err := decodeIdem(raw)
	if err != nil {
		if claimed {
			e.quarantine(tenant, store.IdempotencyKey(tenant, id.Key), raw, err)
		}
		return nil, nil, nil
	}
	if now.Sub(rec.At) >= IdempotencyTTL {
		return nil, nil, nil
	}
	if rec.BodyHash == spentKeyHash(id.Key) {
		return nil, nil, ErrIdempotencySpent
	}
	if !id.sameBody(rec.BodyHash) {
		return nil, nil, ErrIdempotencyConflict
	}
	return &rec, d, nil
}

// replayed reports whether a fallback request of identity id was stored
// within IdempotencyTTL (ErrIdempotencyConflict for another body); claimed
// as for idemLookup.
func (e *core) replayed(tenant string, now time.Time, id Idempotency, claimed bool) (bool, error) {
	rec, _, err := e.idemLookup(tenant, now, id, claimed)
	return rec != nil, err
}

// decodeIdem decodes a stored idempotency record and the answer it holds.
func decodeIdem(raw []byte) (idemRecord, *Decision, error) {
	var rec idemRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return rec, nil, fmt.Errorf("idempotency record: %w", err)
	}
	var d Decision
	if err := json.Unmarshal(rec.Answer, &d); err != nil {
		return rec, nil, fmt.Errorf("idempotency record: answer: %w", err)
	}
	return rec, &d, nil
}

// decideInto applies the per-customer rules (daily cap, open reward window) and, when no window is open, makes a new
// decision. Its writes go to b; the caller holds the customer's lock
// (tenantState.custLock) until b is committed. rec is nil when the answer is
// the open window's decision.
func (e *Engine) decideInto(ts *tenantState, t *store.Tenant, now time.Time, req Request, b *store.Batch) (*Decision, *DecisionRecord, error) {
	tenant := t.ID
	cs, err := e.loadCustomerState(tenant, req.ClienteRef, true)
	if err != nil {
		return nil, nil, err
	}
	// A day before cs.Day (the clock set back) keeps the later day's
	// count: starting from 0 there would let both days past the cap, the
	// later one once the clock is back on it. Days in DateOnly order as
	// strings.
	day := now.UTC().Format(time.DateOnly)
	if day > cs.Day {
		cs.Day, cs.Count = day, 0
	}
	if !req.CapExempt && cs.Count >= DailyCap {
		return nil, nil, dayLimit(ErrDailyCap, now)
	}
	if req.JobID == "" { // the cap counts online requests; a batch line takes none of them
		cs.Count++
	}

	var d *Decision
	var rec *DecisionRecord
	if cs.OpenNonce != "" && now.Before(cs.OpenAt.Add(t.Settings.RewardWindow)) {
		// Reward window open: answer with the open decision, create nothing.
		version := cs.OpenVersion
		if version == "" { // a state of format 1, or rebuilt
			version, err = e.openVersion(tenant, cs.OpenNonce, ts.model.Load().version)
			if err != nil {
				return nil, nil, err
			}
		}
		d = &Decision{
			DecisionID: e.ids.issue(tenant, cs.OpenNonce), Accion: 0, AccionNombre: "nada", Propension: 1,
			PoliticaVersion: version, CaducaEn: cs.OpenAt.Add(DecisionTTL),
			Motivo: api.MotivoVentanaAbierta + cs.OpenAt.Add(t.Settings.RewardWindow).Format(time.RFC3339) + ": no se crea una nueva decisión",
		}
		if req.Explain { // 0 is the only action an open window allows (contract: 0 always listed)
			d.Detalle = &Detalle{Acciones: []DetalleAccion{{Accion: 0, Probabilidad: 1}}}
		}
	} else {
		s := e.scratch.get()
		defer e.scratch.put(s) // once the record is encoded
		rec, d, err = e.decideNew(ts, t, now, req, b, s)
		if err != nil {
			return nil, nil, err
		}
		s.enc = putDecision(b, tenant, rec, s.enc)
		queueReward(b, tenant, rec, t.Settings)
		cs.OpenNonce, cs.OpenAt, cs.OpenVersion = rec.Nonce, rec.At, rec.Version
	}
	d.EnSombra = t.Settings.Shadow
	b.Set(customerStateKey(tenant, req.ClienteRef), marshalCustomerState(&cs))
	return d, rec, nil
}

// openVersion is the politica_version of the open decision (nonce) that an
// open window's answer names, so that one decision_id never reads two
// versions, for a customer state that does not keep it (OpenVersion "");
// current (the model's now) when its record is gone (deleted, or damaged
// and quarantined by loadDecision).
func (e *core) openVersion(tenant, nonce, current string) (string, error) {
	open, err := e.loadDecision(tenant, nonce)
	if errors.Is(err, ErrNotFound) {
		return current, nil
	}
	if err != nil {
		return "", err
	}
	return open.Version, nil
}

// decideNew makes a new decision: control group, eligibility, policy,
// budget cut, exploration, in the scratch memory s. It reserves campaign
// budget for a send.
func (e *Engine) decideNew(ts *tenantState, t *store.Tenant, now time.Time, req Request, b *store.Batch, s *decideScratch) (*DecisionRecord, *Decision, error) {
	tenant := t.ID
	cat := ts.catalog.Load()
	pm := ts.model.Load()
	nonce, err := e.freshNonce(ts, t, now)
	if err != nil {
		return nil, nil, err
	}
	rec := &DecisionRecord{
		Nonce: nonce, ClienteRef: req.ClienteRef, At: now, Canal: req.Canal,
		CampanaID: req.CampanaID, JobID: req.JobID, Version: pm.version, CaducaEn: now.Add(DecisionTTL),
		EnSombra: t.Settings.Shadow,
	}
	if inControl(e.secrets, tenant, req.ClienteRef, t.Settings.ControlShare) {
		rec.Accion, rec.Propension, rec.EnControl = 0, 1, true
		rec.Motivo = "grupo de control: no enviar nada"
		if t.Settings.ControlKind == "regla_actual" {
			rec.Motivo = "grupo de control: aplique su regla actual y confirme lo enviado con accion_real"
		}
		return rec, e.answer(tenant, cat, rec, nil, req.Explain), nil
	}

	cust, err := e.customer(&s.cust, tenant, req.ClienteRef, now, t.Settings.RewardWindow)
	if err != nil {
		return nil, nil, err
	}
	cands, reason := eligible(cat, req, cust, s.cands)
	s.cands = cands
	if req.NoSend && len(cands) > 1 {
		cands, reason = cands[:1], "presupuesto de la campaña: su cupo de envíos se reservó a los clientes de mayor margen esperado"
	}
	sc := pm.score(cust, cands, t.Settings.OptoutPenaltyCents, &s.scores)
	if len(pm.m.Cats) < policy.NumCats {
		var names [featMaxCats + 1]string
		ts.cats.add(cust.sum.catNames(names[:0]))
	}

	// Campaign budget before any randomisation: drop sends the budget cannot
	// afford; where it binds, keep the highest expected margins. The budget
	// lock is held until the send is counted.
	var camp *Campaign
	if req.CampanaID != "" {
		ts.budgetMu.Lock()
		defer ts.budgetMu.Unlock()
		if camp, reason, err = e.fitBudget(ts, tenant, req.CampanaID, sc, reason); err != nil {
			return nil, nil, err
		}
	}

	probs, top := pm.distribution(sc)
	idx := drawIndex(probs, e.uniform())
	chosen := sc.cands[idx]
	recordChoice(rec, cust, sc, probs, idx, top)
	rec.Motivo = choiceMotive(cat, rec, reason, chosen.id)
	if camp != nil && chosen.id != 0 {
		if err := e.spendBudget(ts, b, tenant, camp, chosen.action, rec); err != nil {
			return nil, nil, err
		}
	}
	return rec, e.answer(tenant, cat, rec, sc, req.Explain), nil
}

// fitBudget drops from sc the sends campaign campana's budget cannot
// afford, with the reason when that changed the choice; camp is nil for a
// campaign that does not exist. A campaign whose record is damaged
// (loadCampaign) affords no send: its caps are unknown. The caller holds
// ts.budgetMu.
func (e *Engine) fitBudget(ts *tenantState, tenant, campana string, sc *scored, reason string) (camp *Campaign, why string, err error) {
	camp, err = e.Campaigns.campaignLocked(ts, tenant, campana)
	if errors.Is(err, ErrDamaged) {
		sc.keep(func(c *candidate) bool { return c.action == nil })
		if reason == "" {
			reason = "la campaña " + campana + " no se puede leer (registro dañado): no se envían cupones hasta que se defina de nuevo con PUT /v1/campanas/" + campana
		}
		return nil, reason, nil
	}
	if errors.Is(err, ErrNotFound) || (err == nil && camp == nil) {
		return nil, reason, nil
	}
	if err != nil {
		return nil, reason, err
	}
	bu, err := e.Campaigns.budgetLocked(ts, tenant, camp.ID)
	if err != nil {
		return nil, reason, err
	}
	before, uncapped := len(sc.cands), false
	sc.keep(func(c *candidate) bool {
		ok := c.action == nil || camp.affordable(bu, c.action)
		uncapped = uncapped || !ok && camp.MaxDescuentoCents != nil && unbounded(c.action)
		return ok
	})
	switch {
	case len(sc.cands) == before || reason != "":
	case uncapped:
		reason = "presupuesto de la campaña agotado para un cupón porcentual sin descuento_max_mxn: no cabe en max_descuento_mxn"
	case len(sc.cands) == 1:
		reason = "presupuesto de la campaña agotado"
	default:
		reason = "presupuesto de la campaña agotado para algunas acciones"
	}
	return camp, reason, nil
}

// recordChoice writes the draw (candidate idx of sc, top the policy's
// favourite) and the policy inputs the learner and the evaluation replay
// into rec.
func recordChoice(rec *DecisionRecord, cust *customer, sc *scored, probs []float64, idx, top int) {
	rec.Accion = sc.cands[idx].id
	rec.CostoEnvioCents = new(int64)
	if a := sc.cands[idx].action; a != nil {
		*rec.CostoEnvioCents = a.CostoEnvioCents
	}
	rec.Propension = probs[idx]
	rec.Explorado = idx != top
	if top >= 0 {
		choice := sc.cands[top].id
		rec.Eleccion = &choice
	}
	rec.X = cust.x
	rec.Shares = sc.cust.Shares
	n := len(sc.cands)
	aff := affPerAction * n
	lists := make([]float64, aff+3*n) // one allocation for Aff, Mu, Priors and Downs
	rec.Aff = lists[:0:aff]
	rec.Mu, rec.Priors, rec.Downs = lists[aff:aff+n:aff+n], lists[aff+n:aff+2*n:aff+2*n], lists[aff+2*n:]
	rec.Candidates = make([]int, n)
	for i := range sc.cands {
		c := &sc.cands[i]
		rec.Aff = append(rec.Aff, c.arm.AffShare, c.arm.AffFreq, c.arm.AffRec)
		rec.Candidates[i] = c.id
		rec.Mu[i] = math.Round(c.mu)
		rec.Priors[i] = math.Round(c.prior)
		rec.Downs[i] = c.arm.Downside
		if c.arm.ID != c.id && rec.Arms == nil {
			rec.Arms = make([]int, n)
		}
	}
	if rec.Arms != nil {
		for i := range sc.cands {
			rec.Arms[i] = sc.cands[i].arm.ID
		}
	}
	if allZero(rec.Aff) {
		rec.Aff = nil // read back as zeros (policyInputs)
	}
	rec.Probs = probs
}

// allZero reports whether every value of v is +0: a record need not keep
// such affinities (no candidate has categorias the customer bought in, as
// in a catalog without categorias), whose bytes were a fifth of a
// 1,000-action record.
func allZero(v []float64) bool {
	for _, x := range v {
		if math.Float64bits(x) != 0 {
			return false
		}
	}
	return true
}

// choiceMotive is the decision's motivo: why action chosen was drawn.
func choiceMotive(cat *Catalog, rec *DecisionRecord, reason string, chosen int) string {
	switch {
	case reason != "" && chosen == 0:
		return reason
	case rec.Explorado:
		return "exploración: " + cat.ActionName(chosen) + " elegida con probabilidad " + motiveProb(rec.Propension)
	case chosen == 0:
		return "la política espera más margen sin enviar cupón"
	default:
		return "mayor margen esperado: " + cat.ActionName(chosen)
	}
}

// motiveProb writes a propensity for a motivo: three decimals, or three
// significant digits below 0.001, so that a drawn action never reads as
// drawn with probability 0.000.
func motiveProb(p float64) string {
	prec := 3
	if p > 0 && p < 0.001 {
		prec = 2 - int(math.Floor(math.Log10(p)))
	}
	return strconv.FormatFloat(p, 'f', prec, 64)
}

// spendBudget counts a send of action against camp's budget, in b. The
// caller holds ts.budgetMu.
func (e *Engine) spendBudget(ts *tenantState, b *store.Batch, tenant string, camp *Campaign, action *Action, rec *DecisionRecord) error {
	bu, _ := e.Campaigns.budgetLocked(ts, tenant, camp.ID)
	bu.Envios = featAdd(bu.Envios, 1)
	bu.DescuentoCents = featAdd(bu.DescuentoCents, action.DescuentoMaxCents)
	rec.BudgetCents = action.DescuentoMaxCents
	return b.SetJSON(store.BudgetKey(tenant, camp.ID), bu)
}

// answer builds the API answer of a new decision record.
func (e *Engine) answer(tenant string, cat *Catalog, rec *DecisionRecord, sc *scored, explain bool) *Decision {
	d := &Decision{
		DecisionID: e.ids.issue(tenant, rec.Nonce), Accion: rec.Accion, AccionNombre: cat.ActionName(rec.Accion),
		Propension: rec.Propension, PoliticaVersion: rec.Version, Explorado: rec.Explorado, EnControl: rec.EnControl,
		EnRespaldo: rec.EnRespaldo, CaducaEn: rec.CaducaEn, Motivo: rec.Motivo,
	}
	if explain {
		d.Detalle = &Detalle{Acciones: []DetalleAccion{}}
		if sc != nil {
			for i, c := range sc.cands {
				d.Detalle.Acciones = append(d.Detalle.Acciones, DetalleAccion{
					Accion: c.id, MuMXN: math.Round(c.mu) / 100, SigmaMXN: math.Round(sc.sigma(i)) / 100, Probabilidad: rec.Probs[i],
				})
			}
		} else {
			d.Detalle.Acciones = append(d.Detalle.Acciones, DetalleAccion{Accion: 0, Probabilidad: 1})
		}
	}
	return d
}

// eligible lists the candidate actions, in dst's memory: active catalog
// actions on the channel, within acciones_permitidas, not opted out; 0
// always. reason is set when something other than the policy restricted
// the choice to 0.
func eligible(cat *Catalog, req Request, cust *customer, dst []candidate) (cands []candidate, reason string) {
	cands = append(slices.Grow(dst[:0], 1+len(cat.Acciones)), candidate{})
	if cust.closed {
		return cands, "cuenta cerrada: no se envían cupones"
	}
	if cust.optedOut(req.Canal) {
		return cands, "el cliente se dio de baja de comunicaciones en este canal"
	}
	var allowed map[int]bool
	if req.Allowed != nil {
		allowed = make(map[int]bool, len(req.Allowed))
		for _, id := range req.Allowed {
			allowed[id] = true
		}
	}
	for i := range cat.Acciones {
		a := &cat.Acciones[i]
		if !a.Activa || !a.AllowsChannel(req.Canal) || (allowed != nil && !allowed[a.ID]) {
			continue
		}
		cands = append(cands, candidate{id: a.ID, action: a})
	}
	if len(cands) == 1 && len(cat.Acciones) > 0 {
		reason = "ninguna acción del catálogo es elegible en este canal y contexto"
	} else if len(cat.Acciones) == 0 {
		reason = "el catálogo de acciones está vacío"
	}
	return cands, reason
}

// drawIndex draws an index from probs with the uniform u in [0, 1).
func drawIndex(probs []float64, u float64) int {
	acc := 0.0
	for i, p := range probs {
		acc += p
		if u < acc {
			return i
		}
	}
	for i := len(probs) - 1; i >= 0; i-- { // rounding: last non-zero
		if probs[i] > 0 {
			return i
		}
	}
	return 0
}

// inControl draws the stable control group: a keyed hash of cliente_ref
// below share.
func inControl(s *store.Secrets, tenant, clienteRef string, share float64) bool {
	if share <= 0 {
		return false
	}
	h := s.CustomerHash(tenant, "control:"+clienteRef)
	var v uint64
	for i := 0; i < 13; i++ { // 52 bits of the hex digest
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		default:
			v = v<<4 | uint64(c-'a'+10)
		}
	}
	return float64(v)/float64(uint64(1)<<52) < share
}

// idemPruneBatch bounds the deletions of one commit of PruneIdempotency;
// the learner loop prunes every idemPruneEvery.
const (
	idemPruneBatch = 1000
	idemPruneEvery = time.Hour
)

// PruneIdempotency deletes the tenant's Idempotency-Key records older than
// IdempotencyTTL by its clock, which no request can replay any more, so the
// table holds about one day of keys, and moves the records that do not
// decode (decodeIdem), whose age is unknown, to quarantine. A key whose request is running is
// left for the next pass; while a key is being deleted, a request with it
// gets idempotencia_conflicto, as for any request in flight. It returns
// the number of records deleted.
func (e *Engine) PruneIdempotency(tenant string) (int, error) {
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return 0, err
	}
	var keys []string // Idempotency-Keys
	lo, hi := store.IdempotencySpan(tenant)
	err = e.db.Scan(lo, hi, func(k, v []byte) error {
		idem, ok := store.ParseIdempotencyKey(tenant, k)
		if rec, _, err := decodeIdem(v); ok && (err != nil || now.Sub(rec.At) >= IdempotencyTTL) {
			keys = append(keys, idem)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for i := 0; i < len(keys); i += idemPruneBatch {
		d, err := e.pruneIdem(tenant, keys[i:min(i+idemPruneBatch, len(keys))], now)
		deleted += d
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// pruneIdem deletes the records of the given Idempotency-Keys that are
// still expired, and quarantines those that do not decode, holding each
// key's in-flight mark until the commit.
func (e *Engine) pruneIdem(tenant string, keys []string, now time.Time) (int, error) {
	var marks []string
	defer func() { e.flights.unmark(marks...) }()
	b := e.db.NewBatch()
	defer b.Close()
	n := 0
	for _, k := range keys {
		flight := tenant + "\x00" + k
		if !e.flights.tryMark(flight) {
			continue
		}
		marks = append(marks, flight)
		raw, err := e.db.Idempotency(tenant, k) // read again: a request may have renewed it
		if err != nil {
			continue
		}
		rec, _, err := decodeIdem(raw)
		if err != nil {
			e.quarantine(tenant, store.IdempotencyKey(tenant, k), raw, err)
			continue
		}
		if now.Sub(rec.At) < IdempotencyTTL {
			continue
		}
		b.DeleteIdempotency(tenant, k)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if err := b.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}
