package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// Execution states of a decision (spec: Execution of a decision).
const (
	EstadoPendiente  = ""
	EstadoEjecutada  = "ejecutada"
	EstadoModificada = "modificada"
	EstadoRechazada  = "rechazada"
)

// DecisionRecord is the durable record of a decision, a fallback record or
// a batch line: everything learning, evaluation, export and deletion need.
// It is found by decision id (TableDecision, key = nonce) and by customer
// (TableCustomerDecide, key = cliente_ref, time, nonce).
type DecisionRecord struct {
	Nonce      string    `json:"nonce"`
	ClienteRef string    `json:"cliente_ref"`
	At         time.Time `json:"at"`
	Canal      string    `json:"canal,omitempty"`
	CampanaID  string    `json:"campana_id,omitempty"`
	JobID      string    `json:"job_id,omitempty"`

	Accion     int       `json:"accion"`
	Propension float64   `json:"propension"`
	Version    string    `json:"politica_version"`
	Explorado  bool      `json:"explorado"`
	EnControl  bool      `json:"en_control"`
	EnRespaldo bool      `json:"en_respaldo"`
	EnSombra   bool      `json:"en_sombra,omitempty"`
	CaducaEn   time.Time `json:"caduca_en"`
	Motivo     string    `json:"motivo"`

	// Policy inputs and outputs, kept for learning and off-policy evaluation:
	// the feature vector, the eligible actions, their probabilities and the
	// model's expected rewards (cents) at decision time.
	X          []float64 `json:"x,omitempty"`
	Candidates []int     `json:"candidatos,omitempty"`
	Probs      []float64 `json:"probs,omitempty"`
	Mu         []float64 `json:"mu,omitempty"`
	Priors     []float64 `json:"priors,omitempty"`
	// Downs are the candidates' downsides (policy.Arm.Downside, cents;
	// never-send's 0). Absent in older records.
	Downs []float64 `json:"downs,omitempty"`
	// Arms are the candidates' model keys (Action.Arm), aligned with
	// Candidates; nil when every key is its candidate's id (no candidate
	// is of an id the catalog gave another coupon before; older records).
	Arms []int `json:"arms,omitempty"`
	// Shares are the customer's spend shares in the model's main
	// categories at decision time; Aff holds, per candidate, the
	// customer's affinity to the action's categorias (share, frequency,
	// recency: affPerAction values each). Absent in older records, and
	// when every affinity is 0, as policyInputs reads them then.
	Shares []float64 `json:"shares,omitempty"`
	Aff    []float64 `json:"afinidad,omitempty"`
	// Eleccion is the policy's choice, the action it favoured before the
	// draw (0: never-send; the send gate tests it, policy.GuardSample).
	// Nil in older records and in records without policy inputs.
	Eleccion *int `json:"eleccion,omitempty"`
	// Budget reserved by this decision (sends are given back on rejection or
	// expiry); for a modificada one, accion_real's, which it counts instead
	// (0 when accion_real is 0 or its campaign undefined).
	BudgetCents int64 `json:"budget_cents,omitempty"`
	// CostoEnvioCents is the sending cost of the coupon sent as the catalog
	// had it when it was sent: the decided action's at decision time (0 for
	// action 0), accion_real's at a modificada confirmation. The reward
	// subtracts it, whatever the catalog says by then (a coupon left out or
	// repriced since). Nil in older records: the reward reads the catalog.
	CostoEnvioCents *int64 `json:"costo_envio_cents,omitempty"`

	// Execution confirmation.
	Estado        string     `json:"estado_ejecucion,omitempty"`
	AccionReal    *int       `json:"accion_real,omitempty"`
	MotivoRechazo string     `json:"motivo_rechazo,omitempty"`
	TsEjecucion   *time.Time `json:"ts_ejecucion,omitempty"`
	ConfirmadaEn  *time.Time `json:"confirmada_en,omitempty"`
	// Anulada marks a decision of a failed batch job that VoidJob made
	// rechazada, or one a fallback record replaced (replacedByFallback):
	// it never reached the caller, and its customer's reward window was
	// released, so a later decision's window overlaps its own. The reports
	// leave it out (Evaluate, Shadow). A caller's rejection,
	// whatever its motivo_rechazo, is never one. Records written before
	// the field are read with it from VoidJob's motivo_rechazo
	// (legacyVoided).
	Anulada bool `json:"anulada,omitempty"`

	// Reward, once final.
	Recompensa *int64 `json:"recompensa_cents,omitempty"`
	Aprendida  bool   `json:"aprendida,omitempty"`
}

func decisionKey(tenant, nonce string) []byte { return store.DecisionKey(tenant, nonce) }

func customerDecisionKey(tenant, clienteRef string, at time.Time, nonce string) []byte {
	return store.CustomerDecisionKey(tenant, clienteRef, at, nonce)
}

// putDecision adds the record and its customer index entry to b. The
// record is encoded in enc's memory, which it returns for the next one
// (nil: new memory).
func putDecision(b *store.Batch, tenant string, r *DecisionRecord, enc []byte) []byte {
	enc = encodeRecord(enc, r)
	b.Set(decisionKey(tenant, r.Nonce), enc)
	b.Set(customerDecisionKey(tenant, r.ClienteRef, r.At, r.Nonce), nil)
	return enc
}

// putRecord writes an update of a stored decision record r to b: its
// customer index entry, written with the decision and never changed, stays.
// Callers hold what keeps erasure out (the customer lock, or learnMu), so
// the record they read is still there.
func putRecord(b *store.Batch, tenant string, r *DecisionRecord) {
	b.Set(decisionKey(tenant, r.Nonce), marshalRecord(r))
}

// loadDecision reads a decision record by nonce. A record that does not
// decode is moved to quarantine and reported as an error wrapping both
// ErrDamaged and ErrNotFound.
func (e *core) loadDecision(tenant, nonce string) (*DecisionRecord, error) {
	v, err := e.db.Get(decisionKey(tenant, nonce))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("decision: %w", ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var r DecisionRecord
	if err := unmarshalRecord(v, &r); err != nil {
		e.quarantine(tenant, decisionKey(tenant, nonce), v, err)
		return nil, damagedErr("decision record", err)
	}
	return &r, nil
}

// DecisionByID verifies a decision id of tenant and returns its record.
// Altered, invented, foreign and unknown ids all give ErrNotFound.
func (e *Engine) DecisionByID(tenant, id string) (*DecisionRecord, error) {
	nonce, ok := e.ids.parse(tenant, id)
	if !ok {
		return nil, fmt.Errorf("decision: %w", ErrNotFound)
	}
	return e.loadDecision(tenant, nonce)
}

// DecisionID returns the public id of a record.
func (e *Engine) DecisionID(tenant string, r *DecisionRecord) string {
	return e.ids.issue(tenant, r.Nonce)
}

// freshNonce draws a nonce for a decision of t made at at (see
// decisionIDs). The random part comes from a source seeded by Config.Seed,
// so a run with a fixed seed is reproducible; serve draws a new seed at
// every start. Only a sandbox clock can stand still, and only there can a
// restarted engine with a fixed seed meet its predecessor's draws at the
// same microsecond: for sandbox tenants a draw that a stored decision has
// is drawn again (one point read per draw), unless the store held no
// decision at that microsecond when this engine first drew there
// (Engine.nonceFreeAt). The draws of one engine do not repeat (72
// random bits), so then no predecessor's nonce can be met; other tenants
// need no read at all.
// nonceBlockSpan is the microseconds whose nonces share their first
// nonceTimeLen-1 characters: the last character of the time holds its low
// 6 bits.
const nonceBlockSpan = 64

func (e *Engine) freshNonce(ts *tenantState, t *store.Tenant, at time.Time) (string, error) {
	free := !t.Sandbox
	if !free {
		var err error
		if free, err = e.nonceFreeAt(ts, at); err != nil {
			return "", err
		}
	}
	for {
		var rnd [9]byte
		e.nonceMu.Lock()
		e.nonceRand.Read(rnd[:])
		e.nonceMu.Unlock()
		n := newNonce(at, rnd)
		if free {
			return n, nil
		}
		taken, err := e.db.Has(decisionKey(t.ID, n))
		if err != nil || !taken {
			return n, err
		}
	}
}

// nonceFreeAt reports whether the tenant's store held no decision made at
// the microsecond of at before this engine drew its first nonce there: one
// bounded scan (nonces start with their microsecond, nonceTimeLen
// characters) the first time at is seen, then none while the clock stays
// on it. Decisions this engine stored at that microsecond earlier (the
// clock went back to it) make the answer false, which only costs reads.
//
// The scan first looks at the block of nonceBlockSpan microseconds around
// at (nonces of one block share their first nonceTimeLen-1 characters);
// when the block holds no decision, every microsecond of it from at on is
// free while the clock moves forward (batch jobs once decided each line at
// its own microsecond, one scan per line). A job's lines now share the
// job's microsecond: one scan, and when that microsecond already held a
// decision (online ones at a sandbox clock standing still), one point read
// per line (freshNonce): a 50,000-line job took about 15 % longer.
func (e *Engine) nonceFreeAt(ts *tenantState, at time.Time) (bool, error) {
	us := at.UnixMicro()
	ts.nonceMu.Lock()
	defer ts.nonceMu.Unlock()
	if ts.nonceSeen && ts.nonceMicro == us {
		return ts.nonceFree, nil
	}
	block := us / nonceBlockSpan
	if ts.nonceBlockSeen && ts.nonceBlock == block && us >= ts.nonceBlockFrom {
		ts.nonceBlockFrom = us
		ts.nonceSeen, ts.nonceMicro, ts.nonceFree = true, us, true
		return true, nil
	}
	if us >= 0 {
		blockPrefix := newNonce(at, [9]byte{})[:nonceTimeLen-1]
		empty, err := e.db.Empty(store.DecisionNonceSpan(ts.id, blockPrefix))
		if err != nil {
			return false, err
		}
		if empty {
			ts.nonceBlockSeen, ts.nonceBlock, ts.nonceBlockFrom = true, block, us
			ts.nonceSeen, ts.nonceMicro, ts.nonceFree = true, us, true
			return true, nil
		}
	}
	prefix := newNonce(at, [9]byte{})[:nonceTimeLen]
	free, err := e.db.Empty(store.DecisionNonceSpan(ts.id, prefix))
	if err != nil {
		return false, err
	}
	ts.nonceSeen, ts.nonceMicro, ts.nonceFree = true, us, free
	return free, nil
}
