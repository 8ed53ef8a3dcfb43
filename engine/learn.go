package engine

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

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
	return store.RewardQueueKey(tenant, due, kind, nonce)
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
	Replaced    int // replaced by a fallback record (its answer was lost): left out
	Voided      int // a batch decision of a job that failed (VoidJob), never delivered: left out
	Control     int // control group: reward recorded, not learned
	Released    int // expired unconfirmed sends whose budget went back
	Damaged     int // decision records that did not decode: quarantined, skipped
	// Requeued: reward entries come due before the window in force closed
	// (the operator widened the reward window or grace since the
	// decision), queued again at its close.
	Requeued int
}

// Worked reports whether the pass folded, left out, released or requeued
// anything (Damaged does not count): callers that run the learner until
// nothing is due stop at the first pass that did not work.
func (s LearnStats) Worked() bool {
	return s.Folded+s.Unconfirmed+s.Modified+s.Replaced+s.Voided+s.Control+s.Released+s.Requeued != 0
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
func (e *Learner) Learn(tenant string) (LearnStats, error) {
	var st LearnStats
	ts, t, now, err := e.stateNow(tenant)
	if err != nil {
		return st, err
	}
	ts.learnMu.Lock()
	defer ts.learnMu.Unlock()
	ts.learnView.Store(&learnView{now: now, span: t.Settings.RewardWindow + t.Settings.RewardGrace})
	defer ts.learnView.Store(nil)

	work, more, err := e.dueEntries(ts, tenant, now)
	if err != nil || len(work) == 0 {
		return st, err
	}
	q, err := e.loadQuality(tenant)
	if err != nil {
		return st, err
	}
	cat := ts.catalog.Load()
	p := &learnPass{e: e, ts: ts, t: t, now: now, tenant: tenant, st: &st, next: ts.model.Load().clone(), options: []int{0}, released: Releases{},
		discountsKnown: q.Redenciones > 0 || !cat.HasDiscounts(), more: more}
	p.next.m.Fade(now, t.Settings.RewardWindow)
	for i := range cat.Acciones {
		p.options = append(p.options, cat.Acciones[i].armKey())
	}
	b := e.db.NewBatch()
	defer b.Close()
	pace := e.NewBackgroundPacer(learnYieldEvery)
	if err := p.eachLoaded(work, func(i int, ld dueLoad) error {
		pace.Step()
		b.Delete(work[i].key)
		return p.apply(b, work[i], ld)
	}); err != nil {
		return st, err
	}
	var guard policy.GuardEvent
	if st.Folded > 0 {
		if guard, err = p.refit(b, now); err != nil {
			return st, err
		}
	}
	if e.beforeCommit != nil {
		e.beforeCommit()
	}
	if err := p.releaseExpired(); err != nil {
		return st, err
	}
	if err := p.settleUnconfirmed(b); err != nil {
		return st, err
	}
	if e.afterSettle != nil {
		e.afterSettle()
	}
	if err := e.campaigns.commitBudgets(ts, tenant, b, nil, p.released); err != nil {
		return st, err
	}
	ts.learnCursor = append(work[len(work)-1].key, 0) // the next key: all up to here are deleted
	if e.onLearn != nil {
		e.onLearn(tenant, st)
	}
	e.counters.learned(tenant, now, st.Folded)
	if st.Folded > 0 {
		ts.models.saved(p.gen)
		ts.model.Store(p.next)
		e.log.Info().Str("tenant", tenant).Int("folded", st.Folded).Str("politica_version", p.next.version).Msg("model updated")
		e.logGuard(tenant, guard, guardStatus(p.next.m, ts.catalog.Load()))
		e.logGate(tenant, p.gateWas, p.next.m.GateStatus())
	}
	return st, nil
}

// learnView is how a learner pass judges a reward due: by the tenant
// clock at its start and the reward window and grace it read then (apply).
// A confirmation reads its own clock and settings, which the operator may
// have changed since (a wider window, the sandbox clock set back): it
// waits for the pass when the pass sees the reward due (confirmCall.once), or
// the pass could write back, pending, a record it read again before the
// confirmation (settleUnconfirmed).
type learnView struct {
	now  time.Time
	span time.Duration // reward window + grace
}

// due reports whether the pass v (nil: none under way) makes final the
// reward of a decision made at at.
func (v *learnView) due(at time.Time) bool { return v != nil && !v.now.Before(at.Add(v.span)) }

// dueEntry is one learner queue entry come due.
type dueEntry struct {
	key         []byte
	kind, nonce string
}

// dueEntries reads the tenant's queue entries due at now: at most one
// pass's worth, fewer while online decisions are being answered; more
// reports that it left some due ahead of where it started (it reads one
// entry past the pass's worth to know). An
// expiry entry is due only once now is after its caduca_en: until then
// Confirm accepts the decision, and a release then would give back a send
// that is still confirmed (ejecutada) or released again (rechazada).
//
// Passes over a backlog delete the queue from its start: a scan from lo
// would step over every key deleted by the passes before (tombstones until
// a compaction), which made a backlog's passes quadratic. A pass starts
// where the last one stopped (ts.learnCursor, under learnMu); one that
// finds nothing there scans from lo, so a key written behind the cursor
// (the tenant clock set back, a restore) waits at most until the queue
// ahead is done.
func (e *Learner) dueEntries(ts *tenantState, tenant string, now time.Time) (work []dueEntry, more bool, err error) {
	lo, hi := store.RewardQueueDueSpan(tenant, now)
	limit := learnBatch
	if e.onlineSince(e.now()) < onlineWindow {
		limit = learnBatchOnline
	}
	scan := func(from []byte) error {
		return e.db.Scan(from, hi, func(k, _ []byte) error {
			due, kind, nonce, ok := store.ParseRewardQueueKey(tenant, k)
			if !ok || kind == queueExpiry && !now.After(due) {
				return nil // an expiry at now: the send can still be confirmed (Confirm)
			}
			if len(work) >= limit {
				more = true
				return store.ErrStop
			}
			work = append(work, dueEntry{key: append([]byte(nil), k...), kind: kind, nonce: nonce})
			return nil
		})
	}
	from := lo
	if c := ts.learnCursor; c != nil && bytes.Compare(c, lo) > 0 && bytes.Compare(c, hi) < 0 {
		from = c
	}
	if err := scan(from); err != nil {
		return nil, false, err
	}
	if len(work) == 0 && !bytes.Equal(from, lo) {
		ts.learnCursor = nil
		if err := scan(lo); err != nil {
			return nil, false, err
		}
	}
	return work, more, nil
}

// learnPass is one Learn over a tenant's due entries: the model being
// updated and what the pass did.
type learnPass struct {
	e        *Learner
	ts       *tenantState
	t        *store.Tenant
	now      time.Time // the tenant clock at the pass's start
	tenant   string
	st       *LearnStats
	next     *publishedModel   // the model being updated
	options  []int             // 0 (send nothing) and the catalog's actions' model keys
	gateWas  string            // the send gate's state before refit ("" without one)
	gen      uint64            // the generation refit stored the model as
	released Releases          // the sends the pass gave back
	expired  []*DecisionRecord // expiry entries' sends read as pending (releaseExpired)
	// unconfirmed: rewards of records read as pending (settleUnconfirmed).
	unconfirmed []unconfirmedReward
	// discountsKnown: the tenant has reported redemptions (CUPON_REDIMIDO)
	// or its catalog has no discount to redeem, so a window's discounts are
	// known; until then the model learns from the reward itself (its
	// margins are net of discounts it cannot see).
	discountsKnown bool
	// more: entries due now are left for the next pass (dueEntries): the
	// gate holds its look until the pass that folds the last of them
	// (policy.Model.UpdateGuard's backlog).
	more bool
}

// learnLoadChunk is the number of due entries a pass reads at a time
// when it reads ahead (eachLoaded).
const learnLoadChunk = 512

// eachLoaded reads work's entries (load) and calls fn with each entry's
// index and load, in order, stopping at the first error. A pass of more
// than one chunk (learnLoadChunk; an online pass, learnBatchOnline, is
// one) reads in a goroutine of its own, one chunk ahead of fn: on two
// cores the reads of the next chunk overlap the folding of this one, and
// a backlog folds in about the time of the larger of the two (POLICY.md
// §8). The reader paces itself as fn's caller does, and has stopped when
// eachLoaded returns.
func (p *learnPass) eachLoaded(work []dueEntry, fn func(i int, ld dueLoad) error) error {
	if len(work) <= learnLoadChunk {
		loads, err := p.load(work, p.e.NewBackgroundPacer(learnYieldEvery))
		if err != nil {
			return err
		}
		for i := range work {
			if err := fn(i, loads[i]); err != nil {
				return err
			}
		}
		return nil
	}
	type chunk struct {
		loads []dueLoad
		err   error
	}
	ch, done := make(chan chunk, 1), make(chan struct{})
	go func() {
		defer close(ch)
		pace := p.e.NewBackgroundPacer(learnYieldEvery)
		for lo := 0; lo < len(work); lo += learnLoadChunk {
			loads, err := p.load(work[lo:min(lo+learnLoadChunk, len(work))], pace)
			select {
			case ch <- chunk{loads, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { // stop the reader and wait for it: the store may close next
		close(done)
		for range ch {
		}
	}()
	i := 0
	for c := range ch {
		if c.err != nil {
			return c.err
		}
		for _, ld := range c.loads {
			if err := fn(i, ld); err != nil {
				return err
			}
			i++
		}
	}
	return nil
}

// dueLoad is what a pass read for one due entry (learnPass.load).
type dueLoad struct {
	rec     *DecisionRecord // nil: the decision is gone (an erased customer) or damaged
	damaged bool            // the record did not decode: quarantined
	win     windowSums      // a reward entry's window
}

// load reads every due entry's decision record and, for a reward entry,
// the customer's reward window as it stands now: the records with one
// sorted multi-get and the windows with one iterator (store.GetMany,
// ScanMany), which costs a fraction of a Get and a Scan each (a pass's
// nonces cluster). Each entry gets its own decoded record, so the reward
// and expiry entries of one decision do not share one. A record that does
// not decode is quarantined, as loadDecision does, by its first entry; its
// later entries find it gone. The reads step pace, record by record and
// event by event.
func (p *learnPass) load(work []dueEntry, pace *BackgroundPacer) ([]dueLoad, error) {
	e, tenant := p.e, p.tenant
	slot := make([]int, len(work)) // entry → index in keys
	seen := make(map[string]int, len(work))
	keys := make([][]byte, 0, len(work))
	for i, w := range work {
		j, ok := seen[w.nonce]
		if !ok {
			j = len(keys)
			seen[w.nonce] = j
			keys = append(keys, decisionKey(tenant, w.nonce))
		}
		slot[i] = j
	}
	raw := make([][]byte, len(keys))
	if err := e.db.GetMany(keys, func(j int, v []byte) error {
		pace.Step()
		raw[j] = append([]byte(nil), v...)
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]dueLoad, len(work))
	damaged := make([]bool, len(keys))
	var spans []store.Span
	var spanOf []int // span → entry
	for i, w := range work {
		j := slot[i]
		if raw[j] == nil || damaged[j] {
			continue // gone, or quarantined by an earlier entry: as if gone
		}
		r := new(DecisionRecord)
		if err := unmarshalRecord(raw[j], r); err != nil {
			e.quarantine(tenant, keys[j], raw[j], err)
			damaged[j], out[i].damaged = true, true
			continue
		}
		out[i].rec = r
		if w.kind == queueReward_ {
			spans = append(spans, windowSpan(tenant, r.ClienteRef, r.At, r.At.Add(p.t.Settings.RewardWindow)))
			spanOf = append(spanOf, i)
		}
	}
	accs := make([]windowAcc, len(spans))
	if err := e.db.ScanMany(spans, func(k int, _, v []byte) error {
		pace.Step()
		accs[k].add(v)
		return nil
	}); err != nil {
		return nil, err
	}
	for k, i := range spanOf {
		out[i].win = accs[k].sums()
	}
	return out, nil
}

// apply handles one due entry, read by load, into b: an expiry of an
// unconfirmed send has its budget released (releaseExpired); a closed
// reward window sets the reward and, for a confirmed decision outside the
// control group, folds it into the model. The window is the one in force (the tenant's reward
// window and grace now, as decisions and confirmations read them): an
// entry queued under a shorter one is queued again at its close.
func (p *learnPass) apply(b *store.Batch, w dueEntry, ld dueLoad) error {
	st := p.st
	r := ld.rec
	if ld.damaged {
		st.Damaged++ // quarantined by load
		return nil
	}
	if r == nil {
		return nil // deleted customer
	}
	if w.kind == queueExpiry {
		if pendingSend(r) {
			p.expired = append(p.expired, r) // given back by releaseExpired
		}
		return nil
	}
	s := p.t.Settings
	if due := r.At.Add(s.RewardWindow + s.RewardGrace); p.now.Before(due) {
		b.Set(queueKey(p.tenant, due, queueReward_, r.Nonce), nil)
		st.Requeued++
		return nil
	}
	reward, out := p.e.reward(p.t, r, ld.win)
	out.Full = out.Full && p.discountsKnown
	r.Recompensa = &reward
	if r.Estado == EstadoPendiente {
		st.Unconfirmed++
		p.unconfirmed = append(p.unconfirmed, unconfirmedReward{r, w.key}) // stored by settleUnconfirmed
		return nil
	}
	switch {
	case r.Estado == EstadoModificada:
		st.Modified++
	case replacedByFallback(r): // the fallback record says what was done
		st.Replaced++
	case r.Anulada:
		// A failed batch job's decision (VoidJob): its result never
		// reached the caller, so nothing was done on it, and its customer,
		// freed at once, is decided again (the job's rerun), whose coupon
		// falls in this window. As rechazada it taught "nothing sent"
		// with that coupon's purchases; the evaluation leaves it out too.
		st.Voided++
	case r.EnControl:
		st.Control++
	default:
		// ejecutada teaches the decided action; rechazada teaches what
		// happened: nothing was sent (action 0).
		action := r.Accion
		if r.Estado == EstadoRechazada {
			action = 0
		}
		target := p.next.m.Target(out)
		p.next.m.TallyTickets(out)
		p.next.m.TallyOptouts(out)
		if learnFrom(p.next.m, r, action, target, p.options) {
			r.Aprendida = true
			st.Folded++
		}
	}
	putRecord(b, p.tenant, r)
	return nil
}

// pendingSend reports whether r is a campaign send not yet confirmed, whose
// budget its expiry gives back.
func pendingSend(r *DecisionRecord) bool {
	return r.Estado == EstadoPendiente && r.Accion != 0 && r.CampanaID != ""
}

// releaseExpired gives back the sends of the expiry entries that apply
// read as pending, each read again under its customer's lock, just before
// the pass commits. A rejection whose clock reading (under that lock) was
// on or before caduca_en, before the pass started, may have committed
// since the pass read the record, and gave the send back itself. One that
// takes the lock after the read reads the clock after the pass did, past
// caduca_en, and is refused (ErrDecisionExpired): so Confirm and the
// expiry never both give a send back, as long as the tenant clock does not
// go back. A record gone meanwhile (quarantined) gives nothing back.
func (p *learnPass) releaseExpired() error {
	for _, r := range p.expired {
		lock := p.ts.custLock(p.e.seed, r.ClienteRef)
		lock.Lock()
		cur, err := p.e.loadDecision(p.tenant, r.Nonce)
		lock.Unlock()
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if pendingSend(cur) {
			p.released.add(cur)
			p.st.Released++
		}
	}
	return nil
}

// unconfirmedReward is the final reward of a record apply read as
// pending, in rec, and the queue entry it came from.
type unconfirmedReward struct {
	rec *DecisionRecord
	key []byte
}

// settleUnconfirmed stores, in b, the rewards of the records apply read as
// pending, each read again under its customer's lock just before the pass
// commits, as releaseExpired does. A confirmation may have committed since
// the pass read the record, which then no longer is pending: storing the
// record read would undo the confirmation (and count again the send a
// rejection gave back), so the record is left as it is and its queue entry
// written back, for a later pass to learn from its confirmation. One that
// takes the lock after the read sees the pass under way, which sees the
// reward due, and waits for it (Confirm, learnView). A record gone
// meanwhile (quarantined) is left out.
func (p *learnPass) settleUnconfirmed(b *store.Batch) error {
	for _, u := range p.unconfirmed {
		lock := p.ts.custLock(p.e.seed, u.rec.ClienteRef)
		lock.Lock()
		cur, err := p.e.loadDecision(p.tenant, u.rec.Nonce)
		lock.Unlock()
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		case cur.Estado != EstadoPendiente:
			b.Set(u.key, nil)
			p.st.Unconfirmed--
			p.st.Requeued++
		default:
			putRecord(b, p.tenant, u.rec)
		}
	}
	return nil
}

// refit refits the updated model, runs its guard and writes it to b with
// a new version, as the tenant's next stored model (saveModel).
func (p *learnPass) refit(b *store.Batch, now time.Time) (policy.GuardEvent, error) {
	next := p.next
	if len(next.m.Cats) < policy.NumCats {
		next.m.AddCats(p.ts.cats.top(next.m.Cats, policy.NumCats-len(next.m.Cats))...)
	}
	next.m.Refit()
	p.gateWas = next.m.GateState()
	guard := next.m.UpdateGuard(p.more)
	next.publishVersion(now)
	gen, err := saveModel(b, p.tenant, &p.ts.models, next)
	p.gen = gen
	return guard, err
}

// learnFrom folds one final reward (the model's target, Model.Target) of
// a logged decision that teaches action (what was done) into m, and adds
// the decision to the guard's evidence when it was executed as drawn (and
// not in shadow mode). It
// reports whether the reward was folded (false for records without policy
// inputs).
func learnFrom(m *policy.Model, r *DecisionRecord, action int, reward float64, options []int) bool {
	if len(r.X) == 0 || len(r.Priors) != len(r.Candidates) {
		return false
	}
	pc, cands := r.policyInputs()
	idx, choice := -1, -1 // the action taken and the logged choice, in cands
	for i, c := range cands {
		if c.id == action {
			idx = i
		}
		if r.Eleccion != nil && c.id == *r.Eleccion {
			choice = i
		}
	}
	if idx < 0 {
		return false
	}
	// A shadow decision was not applied as drawn (the caller followed its
	// own rule and confirmed ejecutada only where that rule agreed), so it
	// is no sample of the randomized test the guard and the gate run; its
	// reward still teaches the model what the action done brought.
	observe := !r.EnSombra && action == r.Accion && len(r.Probs) == len(cands) && len(r.Mu) == len(cands)
	if observe {
		arms := make([]policy.Arm, len(cands))
		for i := range cands {
			arms[i] = cands[i].arm
		}
		m.Observe(&policy.GuardSample{Customer: pc, Arms: arms, Probs: r.Probs, QHat: r.Mu, Logged: idx, Reward: reward, Options: options,
			Choice: choice, ChoiceKnown: r.Eleccion != nil})
	}
	m.Fold(&pc, &cands[idx].arm, reward, m.Weight(r.Propension, len(r.Candidates)))
	return true
}

// logGate logs a change of the send gate's state (policy.GateStatus) as
// an event: opened (for some frequency band the model's choices beat
// never-send with confidence; they are now sent there to all but the
// never-send share) or back to testing.
// Closing is the guard's switch (logGuard).
func (e *Learner) logGate(tenant, was string, g *policy.GateStatus) {
	if g == nil || was == "" || was == g.State || g.State == policy.GateClosedState || was == policy.GateClosedState {
		return
	}
	name, msg := "compuerta_abierta", "send gate open: for some frequency band the model's choices beat never-send with confidence; sending them there"
	if g.State == policy.GateTestingState {
		name, msg = "compuerta_en_prueba", "send gate back to testing: the model's choices no longer beat never-send with confidence"
	}
	l := e.log.Warn().Str("tenant", tenant).Str("evento", name).Float64("diferencia_mxn", g.Diff)
	seField(l, g.SE).Float64("decisiones_efectivas", g.N).Msg(msg)
}

// seField adds a policy standard error as error_estandar_mxn, or nothing
// while it cannot be estimated (nil).
func seField(l *zerolog.Event, se *float64) *zerolog.Event {
	if se == nil {
		return l
	}
	return l.Float64("error_estandar_mxn", *se)
}

// guardStatus is m's guard status (policy.Model.GuardStatus) with
// catalog ids for the model keys it names (Action.Arm), as cat has them:
// a baseline of a coupon that an id of cat named before (another
// tipo_cupon) is left out, one of an id cat no longer holds is shown
// under that id, as the baselines of actions gone from the catalog are.
func guardStatus(m *policy.Model, cat *Catalog) policy.GuardStatus {
	g := m.GuardStatus()
	g.Baseline = catalogID(g.Baseline)
	kept := g.Baselines[:0]
	for _, b := range g.Baselines {
		id := catalogID(b.Accion)
		if a := cat.Action(id); a != nil && a.armKey() != b.Accion {
			continue
		}
		b.Accion = id
		kept = append(kept, b)
	}
	g.Baselines = kept
	return g
}

// logGuard logs a switch of the policy guard (policy.Guard) as an event.
func (e *Learner) logGuard(tenant string, ev policy.GuardEvent, g policy.GuardStatus) {
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
			l = seField(l.Float64("valor_linea_base_mxn", b.Value).Float64("diferencia_mxn", b.Diff), b.SE)
		}
	}
	l.Msg(msg)
}

// reward is a decision's final reward in cents: the customer's purchase
// margin in the reward window w, minus the sending cost of the action if
// it was sent (the cost it had then, DecisionRecord.CostoEnvioCents), minus the opt-out penalty if a BAJA comunicaciones fell in
// it; and the window's outcome for the model's learning target
// (policy.Model.Target).
func (e *Learner) reward(t *store.Tenant, r *DecisionRecord, w windowSums) (int64, policy.Outcome) {
	reward := w.MarginCents
	sent := r.Accion
	if r.Estado == EstadoRechazada {
		sent = 0
	}
	if r.Estado == EstadoModificada && r.AccionReal != nil {
		sent = *r.AccionReal
	}
	switch {
	case sent == 0:
	case r.CostoEnvioCents != nil: // the cost when it was sent
		reward = featAdd(reward, -*r.CostoEnvioCents)
	default: // an older record: the catalog in force (a coupon retired since: its cost when it left)
		if cat := e.catalogOf(t.ID); cat != nil {
			if a := cat.Known(sent); a != nil {
				reward = featAdd(reward, -a.CostoEnvioCents)
			}
		}
	}
	if w.OptOut {
		reward = featAdd(reward, -t.Settings.OptoutPenaltyCents)
	}
	o := policy.Outcome{Reward: float64(reward), MarginCents: float64(w.MarginCents), DiscountCents: float64(w.DiscountCents),
		Tickets: w.Tickets, Full: w.Full, Sent: sent != 0, OptOut: w.OptOut}
	o.TicketMargin, o.HistTickets = ticketHistory(r.X)
	return reward, o
}

func (e *core) catalogOf(tenant string) *Catalog {
	ts, err := e.state(tenant)
	if err != nil {
		return nil
	}
	return ts.catalog.Load()
}

// RunLearner runs learner rounds (learnRound) every interval until ctx
// ends, and every idemPruneEvery deletes expired Idempotency-Key records
// (PruneIdempotency). Errors are retried on the next round; a tenant's
// failing learner pass is logged once until it works again (learnOnce).
func (e *Learner) RunLearner(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pruned time.Time
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(pruned) >= idemPruneEvery {
			pruned = time.Now()
			for _, t := range e.db.Tenants() {
				if n, err := e.pruneIdempotency(t.ID); err != nil {
					e.log.Error().Err(err).Str("tenant", t.ID).Msg("idempotency prune")
				} else if n > 0 {
					e.log.Info().Int("borradas", n).Str("tenant", t.ID).Msg("idempotency records past 24 h deleted")
				}
			}
		}
		e.learnRound(ctx, failing)
	}
}

// learnRound runs learner passes over every tenant until none has work
// left or ctx ends: one pass per tenant in turn, so a tenant with a backlog
// (after an outage or a restore) takes one pass's worth (learnBatch, or
// learnBatchOnline while decisions are being answered) between the other
// tenants' passes. It used to drain each tenant before the next, so the
// tenants after a busy one in the list waited for its whole backlog.
func (e *Learner) learnRound(ctx context.Context, failing map[string]bool) {
	var turn []string
	for _, t := range e.db.Tenants() {
		turn = append(turn, t.ID)
	}
	for len(turn) > 0 && ctx.Err() == nil {
		var again []string
		for _, tenant := range turn {
			if ctx.Err() != nil {
				return // serve stops: no more passes
			}
			if e.learnOnce(tenant, failing) {
				again = append(again, tenant)
			}
		}
		turn = again
	}
}

// learnOnce runs one learner pass for tenant and reports whether it did
// work (so another may). A failing pass is logged at error the first
// time, at debug while it keeps failing (a store that refuses writes would
// log every tenant every interval), and its end at info; failing holds the
// tenants whose last pass failed.
func (e *Learner) learnOnce(tenant string, failing map[string]bool) bool {
	st, err := e.Learn(tenant)
	if err != nil {
		ev := e.log.Error()
		if failing[tenant] {
			ev = e.log.Debug()
		}
		ev.Err(err).Str("tenant", tenant).Msg("learner pass")
		failing[tenant] = true
		return false
	}
	if failing[tenant] {
		delete(failing, tenant)
		e.log.Info().Str("tenant", tenant).Msg("learner passes work again")
	}
	return st.Worked()
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
	// ModelRestarted says why learning started again from the prior when
	// the tenant loaded (publishedModel.restarted), until the learner
	// publishes a model; "" otherwise.
	ModelRestarted string
	// ModelFallback says, likewise, that the tenant's newest stored model
	// did not decode and names the last good one loaded instead
	// (publishedModel.fallback); "" otherwise.
	ModelFallback string
}

// Guard returns the tenant's policy guard: its state and estimates (for
// /metrics; Status carries it too).
func (e *Learner) Guard(tenant string) (policy.GuardStatus, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return policy.GuardStatus{}, err
	}
	return guardStatus(ts.model.Load().m, ts.catalog.Load()), nil
}

// Status returns the tenant's engine state.
func (e *Learner) Status(tenant string) (Status, error) {
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
	return Status{PoliticaVersion: pm.version, RewardsLearned: pm.n(), CatalogVersion: cat.Version, CatalogActions: len(cat.Acciones), Quality: *q,
		Guard: guardStatus(pm.m, cat), ModelRestarted: pm.restarted, ModelFallback: pm.fallback}, nil
}

// Learner closes reward windows and updates each tenant's policy model
// (Learn, or RunLearner in the background), and reports on it (Status,
// Guard, Backlog).
type Learner struct {
	*core
	campaigns *Campaigns // budgets released when a window closes unconfirmed
	// pruneIdempotency is the decider's pruning of old idempotency
	// records, which the background loop runs too.
	pruneIdempotency func(tenant string) (int, error)
	onLearn          func(tenant string, st LearnStats) // see ObserveLearn
	// beforeCommit, when set (tests), runs after a pass has applied its
	// entries, before it commits them.
	beforeCommit func()
	// afterSettle, when set (tests), runs after a pass has read again the
	// records it writes back (settleUnconfirmed), before it commits.
	afterSettle func()
}
