package engine

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// Reward queue entries (TableRewardQueue, key = due time, kind, nonce):
// kind "r" makes a decision's reward final at decision time + reward window
// + grace; kind "x" gives an unconfirmed send's campaign budget back at
// caduca_en.
const (
	queueReward_ = "r"
	queueExpiry  = "x"
)

func queueKey(tenant string, due time.Time, kind, nonce string) []byte {
	return store.Key(tenant, store.TableRewardQueue, due, kind, nonce)
}

// queueReward adds the learner's queue entries of a new decision to b.
func queueReward(b *store.Batch, tenant string, r *DecisionRecord, s store.Settings) {
	b.Set(queueKey(tenant, r.At.Add(s.RewardWindow+s.RewardGrace), queueReward_, r.Nonce), nil)
	if r.Accion != 0 && r.CampanaID != "" {
		b.Set(queueKey(tenant, r.CaducaEn, queueExpiry, r.Nonce), nil)
	}
}

// LearnStats counts what one learner pass did.
type LearnStats struct {
	Folded      int // rewards folded into the model
	Unconfirmed int // closed without confirmation: left out
	Modified    int // modificada: left out
	Control     int // control group: reward recorded, not learned
	Released    int // expired unconfirmed sends whose budget went back
	Damaged     int // decision records that did not decode: quarantined, skipped
}

// learnBatch bounds the work of one pass so a backlog does not hold the
// learner lock for long; the next pass continues.
const learnBatch = 5000

// learnBatchOnline bounds a pass while online decisions are being
// answered: a pass commits its rewards in one synced batch, and the online
// decisions committing meanwhile wait for that batch's WAL write and fsync
// (a 5,000-reward pass writes megabytes).
const learnBatchOnline = 500

// learnYieldEvery is a pass's slice of work, in rewards, between which it
// yields to online decisions (BackgroundPacer).
const learnYieldEvery = 64

// Learn makes final every reward whose window and grace have passed by the
// tenant clock, folds them into a copy of the tenant's model, stores the
// model and the rewards in one synced batch and publishes the new model
// with an atomic swap. Decisions keep reading the old model meanwhile.
func (e *Engine) Learn(tenant string) (LearnStats, error) {
	var st LearnStats
	ts, err := e.state(tenant)
	if err != nil {
		return st, err
	}
	t, now, err := e.tenantNow(tenant)
	if err != nil {
		return st, err
	}
	ts.learnMu.Lock()
	defer ts.learnMu.Unlock()

	lo, _ := store.TableSpan(tenant, store.TableRewardQueue)
	hi := store.Key(tenant, store.TableRewardQueue, now.Add(time.Nanosecond))
	limit := learnBatch
	if e.onlineSince(e.now()) < onlineWindow {
		limit = learnBatchOnline
	}
	type due struct {
		key         []byte
		kind, nonce string
	}
	var work []due
	scan := func(from []byte) error {
		return e.db.Scan(from, hi, func(k, _ []byte) error {
			parts, ok := store.SplitKey(tenant, k, "8ss")
			if !ok {
				return nil
			}
			work = append(work, due{key: append([]byte(nil), k...), kind: string(parts[1]), nonce: string(parts[2])})
			if len(work) >= limit {
				return store.ErrStop
			}
			return nil
		})
	}
	// Passes over a backlog delete the queue from its start: a scan from
	// lo would step over every key deleted by the passes before (tombstones
	// until a compaction), which made a backlog's passes quadratic. A pass
	// starts where the last one stopped; one that finds nothing there scans
	// from lo, so a key written behind the cursor (the tenant clock set
	// back, a restore) waits at most until the queue ahead is done.
	from := lo
	if c := ts.learnCursor; c != nil && bytes.Compare(c, lo) > 0 && bytes.Compare(c, hi) < 0 {
		from = c
	}
	if err := scan(from); err != nil {
		return st, err
	}
	if len(work) == 0 && !bytes.Equal(from, lo) {
		ts.learnCursor = nil
		if err := scan(lo); err != nil {
			return st, err
		}
	}
	if len(work) == 0 {
		return st, nil
	}

	pm := ts.model.Load()
	next := pm.clone()
	next.m.Fade(now, t.Settings.RewardWindow)
	options := []int{0}
	for _, a := range ts.catalog.Load().Acciones {
		options = append(options, a.ID)
	}
	b := e.db.NewBatch()
	defer b.Close()
	pace := e.NewBackgroundPacer(learnYieldEvery)
	for _, w := range work {
		pace.Step()
		b.Delete(w.key)
		r, err := e.loadDecision(tenant, w.nonce)
		if errors.Is(err, ErrDamaged) {
			st.Damaged++ // quarantined by loadDecision
			continue
		}
		if errors.Is(err, ErrNotFound) {
			continue // deleted customer
		}
		if err != nil {
			return st, err
		}
		if w.kind == queueExpiry {
			if r.Estado == EstadoPendiente && r.Accion != 0 && r.CampanaID != "" {
				if err := e.releaseBudget(ts, b, tenant, r); err != nil {
					return st, err
				}
				st.Released++
			}
			continue
		}
		reward, err := e.reward(t, r)
		if err != nil {
			return st, err
		}
		r.Recompensa = &reward
		switch {
		case r.Estado == EstadoPendiente:
			st.Unconfirmed++
		case r.Estado == EstadoModificada:
			st.Modified++
		case r.EnControl:
			st.Control++
		default:
			// ejecutada teaches the decided action; rechazada teaches what
			// happened: nothing was sent (action 0).
			action := r.Accion
			if r.Estado == EstadoRechazada {
				action = 0
			}
			if learnFrom(next.m, r, action, float64(reward), options) {
				r.Aprendida = true
				st.Folded++
			}
		}
		putDecision(b, tenant, r)
	}
	var guard policy.GuardEvent
	if st.Folded > 0 {
		if len(next.m.Cats) < policy.NumCats {
			next.m.AddCats(ts.cats.top(next.m.Cats, policy.NumCats-len(next.m.Cats))...)
		}
		next.m.Refit()
		guard = next.m.UpdateGuard()
		next.publishVersion(now)
		data, err := next.marshal()
		if err != nil {
			return st, err
		}
		b.Set(store.Key(tenant, store.TableModel), data)
	}
	if err := b.Commit(); err != nil {
		return st, err
	}
	ts.learnCursor = append(work[len(work)-1].key, 0) // the next key: all up to here are deleted
	if e.onLearn != nil {
		e.onLearn(tenant, st)
	}
	e.counters.learned(tenant, now, st.Folded)
	if st.Folded > 0 {
		ts.model.Store(next)
		e.log.Info().Str("tenant", tenant).Int("folded", st.Folded).Str("politica_version", next.version).Msg("model updated")
		e.logGuard(tenant, guard, next.m.GuardStatus())
	}
	return st, nil
}

// learnFrom folds one final reward of a logged decision that teaches
// action (what was done) into m, and adds the decision to the guard's
// evidence when it was executed as drawn. It reports whether the reward
// was folded (false for records without policy inputs).
func learnFrom(m *policy.Model, r *DecisionRecord, action int, reward float64, options []int) bool {
	if len(r.X) == 0 || len(r.Priors) != len(r.Candidates) {
		return false
	}
	pc, cands := r.policyInputs()
	idx := -1
	for i, c := range cands {
		if c.id == action {
			idx = i
		}
	}
	if idx < 0 {
		return false
	}
	if action == r.Accion && len(r.Probs) == len(cands) && len(r.Mu) == len(cands) {
		arms := make([]policy.Arm, len(cands))
		for i := range cands {
			arms[i] = cands[i].arm
		}
		m.Observe(&policy.GuardSample{Customer: pc, Arms: arms, Probs: r.Probs, QHat: r.Mu, Logged: idx, Reward: reward, Options: options})
	}
	m.Fold(&pc, &cands[idx].arm, reward, m.Weight(r.Propension, len(r.Candidates)))
	return true
}

// logGuard logs a switch of the policy guard (policy.Guard) as an event.
func (e *Engine) logGuard(tenant string, ev policy.GuardEvent, g policy.GuardStatus) {
	if ev == policy.GuardUnchanged {
		return
	}
	name, msg := "guardia_activada", "policy guard active: the learned policy is below a baseline with confidence; exploiting the baseline"
	if ev == policy.GuardReleased {
		name, msg = "guardia_liberada", "policy guard released: the learned policy is no longer below its baseline"
	}
	l := e.log.Warn().Str("tenant", tenant).Str("evento", name).Int("linea_base", g.Baseline).Float64("valor_politica_mxn", g.Policy)
	for _, b := range g.Baselines {
		if b.Accion == g.Baseline {
			l = l.Float64("valor_linea_base_mxn", b.Value).Float64("diferencia_mxn", b.Diff).Float64("error_estandar_mxn", b.SE)
		}
	}
	l.Msg(msg)
}

// reward is a decision's final reward in cents: the customer's purchase
// margin in the reward window, minus the sending cost of the action if it
// was sent, minus the opt-out penalty if a BAJA comunicaciones fell in it.
func (e *Engine) reward(t *store.Tenant, r *DecisionRecord) (int64, error) {
	margin, optOut, err := e.windowOutcome(t.ID, r.ClienteRef, r.At, r.At.Add(t.Settings.RewardWindow))
	if err != nil {
		return 0, err
	}
	reward := margin
	sent := r.Accion
	if r.Estado == EstadoRechazada {
		sent = 0
	}
	if r.Estado == EstadoModificada && r.AccionReal != nil {
		sent = *r.AccionReal
	}
	if sent != 0 {
		if cat := e.catalogOf(t.ID); cat != nil {
			if a := cat.Action(sent); a != nil {
				reward -= a.CostoEnvioCents
			}
		}
	}
	if optOut {
		reward -= t.Settings.OptoutPenaltyCents
	}
	return reward, nil
}

func (e *Engine) catalogOf(tenant string) *Catalog {
	ts, err := e.state(tenant)
	if err != nil {
		return nil
	}
	return ts.catalog.Load()
}

// RunLearner runs learner passes for every tenant every interval until ctx
// ends, and every idemPruneEvery deletes expired Idempotency-Key records
// (PruneIdempotency). Errors are logged and retried on the next pass.
func (e *Engine) RunLearner(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pruned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(pruned) >= idemPruneEvery {
			pruned = time.Now()
			for _, t := range e.db.Tenants() {
				if n, err := e.PruneIdempotency(t.ID); err != nil {
					e.log.Error().Err(err).Str("tenant", t.ID).Msg("idempotency prune")
				} else if n > 0 {
					e.log.Info().Int("borradas", n).Str("tenant", t.ID).Msg("idempotency records past 24 h deleted")
				}
			}
		}
		for _, t := range e.db.Tenants() {
			for {
				st, err := e.Learn(t.ID)
				if err != nil {
					e.log.Error().Err(err).Str("tenant", t.ID).Msg("learner pass")
					break
				}
				// A pass may be cut short (learnBatchOnline): go on while one does work.
				if st.Folded+st.Unconfirmed+st.Modified+st.Control+st.Released == 0 || ctx.Err() != nil {
					break
				}
			}
		}
	}
}

func (e *Engine) loadModel(tenant string) (*publishedModel, error) {
	data, err := e.db.Get(store.Key(tenant, store.TableModel))
	if errors.Is(err, store.ErrNotFound) {
		return newPublishedModel(e.policy), nil
	}
	if err != nil {
		return nil, err
	}
	pm, old, err := unmarshalModel(data, e.policy)
	if err != nil {
		// Quarantined: the tenant learns again from the prior rather than
		// stopping every decision.
		e.quarantine(tenant, store.Key(tenant, store.TableModel), data, err)
		return newPublishedModel(e.policy), nil
	}
	if old {
		e.log.Warn().Str("tenant", tenant).Msg("stored model of an earlier format: the policy starts afresh from the economic prior")
	}
	return pm, nil
}

// Status is a summary of a tenant's engine state for the operator.
type Status struct {
	PoliticaVersion string
	RewardsLearned  int64
	CatalogVersion  int64
	CatalogActions  int
	Quality         Quality
	// Guard is the policy guard's state and estimates.
	Guard policy.GuardStatus
}

// Guard returns the tenant's policy guard: its state and estimates (for
// /metrics; Status carries it too).
func (e *Engine) Guard(tenant string) (policy.GuardStatus, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return policy.GuardStatus{}, err
	}
	return ts.model.Load().m.GuardStatus(), nil
}

// Status returns the tenant's engine state.
func (e *Engine) Status(tenant string) (Status, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return Status{}, err
	}
	q, err := e.loadQuality(tenant)
	if err != nil {
		return Status{}, err
	}
	pm := ts.model.Load()
	cat := ts.catalog.Load()
	return Status{PoliticaVersion: pm.version, RewardsLearned: pm.n(), CatalogVersion: cat.Version, CatalogActions: len(cat.Acciones), Quality: *q, Guard: pm.m.GuardStatus()}, nil
}
