package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coupond/coupond/store"
)

// BatchDecider decides a batch job's customers with the same code as online
// decisions, writing records in synced chunks instead of one commit each.
// It is used by one goroutine.
//
// Decision times: the tenant clock is read once, at T, and every line of
// the job is decided at T: its creada_en, caduca_en and reward window are
// the job's. Nonces stay distinct at one instant (72 random bits,
// decisionIDs). Lines used to be decided at T + i µs, so on a sandbox clock,
// which stands still, a purchase stamped with the clock's time fell before
// the decision time of every line but the first, and no line's reward but
// the first counted it.
//
// Locking: decideInto expects the customer's lock to be held until its
// writes are committed. A chunk's writes are committed together, so the
// decider holds the lock of each customer of a chunk from that customer's
// decision until the chunk is flushed (at most batchChunk decisions, or
// batchChunkOnline while online decisions are being answered), and the
// tenant's budget gate for the whole chunk: campaign budgets are counters
// written whole, so every other writer of them (online decisions with a
// campana_id, confirmations of campaign decisions, VoidJob) waits for the
// chunk's commit, as before. Online decisions without a campaign wait only
// when they share a lock stripe with a customer of the chunk (32 of 4,096
// stripes). The decider never waits for a lock while it holds others: when
// a customer's lock is taken, it commits the chunk first (no lock-order
// cycle with online decisions, privacy's LockCustomer, VoidJob or another
// decider). Between chunks, with the locks released, the decider yields to
// online decisions (BackgroundPacer).
type BatchDecider struct {
	e        *Engine
	ts       *tenantState
	t        *store.Tenant
	now      time.Time
	campaign *Campaign
	// start is the campaign's budget when the job began (a copy): gain
	// counts the coupons it affords, as fitBudget does at decision time.
	start    budget
	jobID    string
	b        *store.Batch
	pending  int
	spent    bool
	locked   bool     // the budget gate is held for the chunk
	held     []uint32 // customer lock stripes the chunk holds
	heldBits [custLockCount / 64]uint64
	scratch  gainScratch // scratch of gain
	tally    decisionTally

	// Explain adds detalle to every decision, as online for a credential
	// with explicar:leer: set it before the first Decide.
	Explain bool
	pace    *BackgroundPacer
}

// batchChunk is how many decisions one synced commit carries.
const batchChunk = 1000

// batchChunkOnline is the chunk while online decisions are being answered:
// a chunk holds every customer lock of the tenant until its commit, so
// 1,000 decisions (tens of milliseconds) sat whole in the tail of every
// online decision that arrived meanwhile; 32 hold them about a millisecond.
const batchChunkOnline = 32

// ErrNoCampaign is returned when a batch names a campaign that is not defined.
var ErrNoCampaign = errors.New("engine: campaign not defined")

// NewBatchDecider prepares a batch job's decisions for campaign campana.
func (e *Engine) NewBatchDecider(tenant, jobID, campana string) (*BatchDecider, error) {
	ts, t, now, err := e.stateNow(tenant)
	if err != nil {
		return nil, err
	}
	camp, err := e.Campaigns.Campaign(tenant, campana)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNoCampaign, campana)
	}
	if err != nil {
		return nil, err
	}
	bd := &BatchDecider{e: e, ts: ts, t: t, now: now, campaign: camp, jobID: jobID, b: e.db.NewBatch(), pace: e.NewBackgroundPacer(1)}
	bd.start, _ = bd.budgetNow() // unread: none spent here, and SendBudget reads no budget left
	return bd, nil
}

// Now is the decision time of every line of the job.
func (bd *BatchDecider) Now() time.Time { return bd.now }

// SendBudget is how many sends the campaign can still afford; limited is
// false when the campaign has no cap on sends or discount.
func (bd *BatchDecider) SendBudget() (remaining int64, limited bool) {
	c := bd.campaign
	if c.MaxEnvios == nil && c.MaxDescuentoCents == nil {
		return 0, false
	}
	bu, ok := bd.budgetNow()
	if !ok {
		return 0, true
	}
	remaining = 1 << 62
	if c.MaxEnvios != nil {
		remaining = max(0, *c.MaxEnvios-bu.Envios)
	}
	if c.MaxDescuentoCents != nil {
		// Upper bound by the cheapest coupon; the exact discount cap is
		// still enforced per send when deciding.
		cheapest := int64(-1)
		for _, a := range bd.ts.catalog.Load().Acciones {
			if a.Activa && a.AllowsChannel(c.Canal) && !unbounded(&a) && (cheapest < 0 || a.DescuentoMaxCents < cheapest) {
				cheapest = a.DescuentoMaxCents
			}
		}
		if cheapest > 0 {
			remaining = min(remaining, max(0, (*c.MaxDescuentoCents-bu.DescuentoCents)/cheapest))
		}
	}
	return remaining, true
}

// DiscountBudget is how much discount (cents of descuento_max_mxn) the
// campaign can still reserve; capped is false without max_descuento_mxn.
func (bd *BatchDecider) DiscountBudget() (cents int64, capped bool) {
	c := bd.campaign
	if c.MaxDescuentoCents == nil {
		return 0, false
	}
	bu, ok := bd.budgetNow()
	if !ok {
		return 0, true
	}
	return max(0, *c.MaxDescuentoCents-bu.DescuentoCents), true
}

// budgetNow is a copy of the campaign's budget as it stands; ok is false
// when it cannot be read (a damaged record counts as spent).
func (bd *BatchDecider) budgetNow() (budget, bool) {
	bd.ts.budgetMu.Lock()
	defer bd.ts.budgetMu.Unlock()
	bu, err := bd.e.Campaigns.budgetLocked(bd.ts, bd.t.ID, bd.campaign.ID)
	if err != nil {
		return budget{}, false
	}
	return *bu, true
}

// Gain is what a send would bring one customer of a job, as the decision
// would compute it (SendGain).
type Gain struct {
	// Cents is the expected margin a send adds: the best eligible action's
	// μ minus μ of sending nothing (cents over the reward window).
	Cents float64
	// PSend is the probability that the customer's decision sends
	// something: 1 − the policy's probability of never-send over the same
	// candidates (exploration included).
	PSend float64
	// CostCents is the discount the decision is expected to reserve: the
	// sum over coupons of their probability times their descuento_max_mxn
	// (cents), what a send counts against max_descuento_mxn.
	CostCents float64
	// OK is false when the customer cannot receive a send in this job
	// whatever the budget: in the control group, with a reward window
	// open, or with no eligible action (account closed, opted out of the
	// channel, empty catalog, none the budget affords); Cents, PSend and
	// CostCents are 0 then.
	OK bool
}

// SendGain is what a send would bring the customer, among the coupons the
// campaign's budget affords at the job's start (fitBudget: under
// max_descuento_mxn never a percentage coupon without descuento_max_mxn).
// The budget cut of a batch keeps the customers with the highest gains, as
// many as their expected sends (PSend) or discounts (CostCents) fill the
// budget (batch.KeepTop).
func (bd *BatchDecider) SendGain(clienteRef string) (Gain, error) {
	t := bd.t
	cs, err := bd.e.loadCustomerState(t.ID, clienteRef, false)
	if err != nil {
		return Gain{}, err
	}
	f, err := bd.e.loadFeatures(t.ID, clienteRef)
	if err != nil {
		return Gain{}, err
	}
	return bd.gain(clienteRef, &f, &cs, &bd.scratch), nil
}

// gainScratch is gain's scratch memory: the candidates, their scores and
// the policy's distribution over them.
type gainScratch struct {
	cands  []candidate
	scores scoreBuf
	probs  []float64
}

// gain is SendGain for a customer whose features and state are read. It is
// safe for concurrent use with distinct scratch.
func (bd *BatchDecider) gain(clienteRef string, f *Features, cs *customerState, scratch *gainScratch) Gain {
	t := bd.t
	if cs.OpenNonce != "" && bd.now.Before(cs.OpenAt.Add(t.Settings.RewardWindow)) {
		return Gain{}
	}
	if inControl(bd.e.secrets, t.ID, clienteRef, t.Settings.ControlShare) {
		return Gain{}
	}
	cust := newCustomer(*f, bd.now, t.Settings.RewardWindow)
	cs2, _ := eligibleInto(scratch.cands[:0], bd.ts.catalog.Load(), bd.campaign, &bd.start, cust)
	scratch.cands = cs2
	if len(cs2) < 2 {
		return Gain{}
	}
	pm := bd.ts.model.Load()
	sc := pm.score(cust, cs2, t.Settings.OptoutPenaltyCents, &scratch.scores)
	best, zero := math.Inf(-1), 0.0
	for _, c := range sc.cands {
		if c.id == 0 {
			zero = c.mu
		} else if c.mu > best {
			best = c.mu
		}
	}
	scratch.probs = slices.Grow(scratch.probs[:0], len(sc.cands))[:len(sc.cands)]
	pm.m.Distribution(sc.scores, scratch.probs)
	never, cost := 0.0, 0.0
	for i, c := range sc.cands {
		if c.id == 0 {
			never = scratch.probs[i]
		} else {
			cost += scratch.probs[i] * float64(c.action.DescuentoMaxCents)
		}
	}
	return Gain{Cents: best - zero, PSend: min(1, max(0, 1-never)), CostCents: cost, OK: true}
}

// eligibleInto is eligible for a batch of campaign camp (every action of
// the catalog on its channel) with fitBudget's cut at budget bu, appending
// to cands.
func eligibleInto(cands []candidate, cat *Catalog, camp *Campaign, bu *budget, cust *customer) ([]candidate, bool) {
	cands = append(cands, candidate{id: 0})
	if cust.closed || cust.optedOut(camp.Canal) {
		return cands, false
	}
	for i := range cat.Acciones {
		a := &cat.Acciones[i]
		if a.Activa && a.AllowsChannel(camp.Canal) && camp.affordable(bu, a) {
			cands = append(cands, candidate{id: a.ID, action: a})
		}
	}
	return cands, true
}

// ScanSegment calls fn, in cliente_ref order, for every customer with
// history who matches seg at the job's decision time, with the customer's
// SendGain when withGain is set (gain and ok are zero otherwise). It reads
// the feature records in one ordered pass and, merged in by key order, the
// customers' decision states (both tables are keyed by cliente_ref: no
// point reads); blocks of records are decoded, matched and scored by one
// worker per CPU; fn sees them in order on the calling goroutine. An error
// from fn stops the scan and is returned.
func (bd *BatchDecider) ScanSegment(seg *Segment, withGain bool, fn func(clienteRef string, g Gain) error) error {
	return bd.scan(seg, withGain, nil, fn)
}

// ScanList is ScanSegment over a list of customers given by next (which
// returns false at the end): every listed customer, with history or not,
// in the list's order. The reads are seeks that cost little when the list
// is in ascending cliente_ref order.
func (bd *BatchDecider) ScanList(next func() (string, bool), withGain bool, fn func(clienteRef string, g Gain) error) error {
	return bd.scan(nil, withGain, next, fn)
}

func (bd *BatchDecider) scan(seg *Segment, withGain bool, list func() (string, bool), fn func(clienteRef string, g Gain) error) error {
	// One scoring worker per core, each on a low-priority thread; the
	// cores, not GOMAXPROCS, which serve sets above them.
	workers := max(1, runtime.NumCPU())
	work := make(chan *scanBlock, workers)
	ordered := make(chan *scanBlock, 2*workers+2)
	free := make(chan *scanBlock, 2*workers+4)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			LowPriority()
			defer wg.Done()
			var f Features
			var scratch gainScratch
			for blk := range work {
				bd.scoreBlock(blk, seg, withGain, &f, &scratch)
				close(blk.done)
			}
		}()
	}
	var scanErr error
	go func() {
		LowPriority()
		defer close(ordered)
		defer close(work)
		scanErr = bd.scanBlocks(withGain, list, &stop, free, func(blk *scanBlock) {
			blk.done = make(chan struct{})
			work <- blk
			ordered <- blk
		})
	}()
	var fnErr error
	for blk := range ordered {
		<-blk.done
		if fnErr == nil {
			for i := range blk.items {
				it := &blk.items[i]
				if it.match {
					if err := fn(it.ref, it.gain); err != nil {
						fnErr = err
						stop.Store(true)
						break
					}
				}
			}
		}
		select {
		case free <- blk:
		default:
		}
	}
	wg.Wait()
	if fnErr != nil {
		return fnErr
	}
	return scanErr
}

// scanBlock is a run of consecutive customers on their way through a scan:
// their raw records, then what the workers made of them.
type scanBlock struct {
	buf   []byte
	items []scanItem
	done  chan struct{}
}

type scanItem struct {
	ref        string
	val, state [2]int // spans of buf; [0] < 0: no record
	match      bool
	gain       Gain
}

const scanBlockSize = 512

// scanBlocks reads the customers' feature records (all of them in order,
// or those of list by seeks) and, when withGain, their decision states,
// and hands them over in blocks.
func (bd *BatchDecider) scanBlocks(withGain bool, list func() (string, bool), stop *atomic.Bool, free chan *scanBlock, emit func(*scanBlock)) error {
	sc := &blockScanner{free: free, emit: emit}
	sc.blk = sc.newBlock()
	if withGain {
		cs, err := bd.e.db.CustomerStateCursor(bd.t.ID)
		if err != nil {
			return err
		}
		defer cs.Close()
		sc.states = cs
	}
	var err error
	if list == nil {
		err = sc.all(bd.e.db, bd.t.ID, stop)
	} else {
		err = sc.listed(bd.e.db, bd.t.ID, list, stop)
	}
	if len(sc.blk.items) > 0 && err == nil {
		emit(sc.blk)
	}
	if err == nil && sc.states != nil {
		err = sc.states.Err()
	}
	return err
}

// blockScanner fills scan blocks: each customer's feature record and, with
// states, its decision state, found by walking the customer states in step
// with the customers (both are in cliente_ref order).
type blockScanner struct {
	free   chan *scanBlock
	emit   func(*scanBlock)
	blk    *scanBlock
	states *store.RefCursor // nil: no decision states wanted
}

func (sc *blockScanner) newBlock() *scanBlock {
	select {
	case blk := <-sc.free:
		blk.buf, blk.items = blk.buf[:0], blk.items[:0]
		return blk
	default:
		return &scanBlock{buf: make([]byte, 0, scanBlockSize*256), items: make([]scanItem, 0, scanBlockSize)}
	}
}

// all adds every customer with a feature record, in order.
func (sc *blockScanner) all(db *store.DB, tenant string, stop *atomic.Bool) error {
	lo, hi := store.FeaturesSpan(tenant)
	return db.Scan(lo, hi, func(k, v []byte) error {
		if stop.Load() {
			return store.ErrStop
		}
		ref, ok := store.FeaturesRef(tenant, k)
		if !ok {
			return nil
		}
		return sc.add(string(ref), ref, v, false)
	})
}

// listed adds the customers list gives, seeking each one's feature record.
func (sc *blockScanner) listed(db *store.DB, tenant string, list func() (string, bool), stop *atomic.Bool) error {
	fc, err := db.FeaturesCursor(tenant)
	if err != nil {
		return err
	}
	defer fc.Close()
	for !stop.Load() {
		ref, more := list()
		if !more {
			break
		}
		var val []byte
		if fc.SeekExact([]byte(ref)) {
			if val, err = fc.Value(); err != nil {
				return err
			}
			if val == nil {
				val = []byte{}
			}
		}
		if err = sc.add(ref, []byte(ref), val, true); err != nil {
			return err
		}
	}
	return fc.Err()
}

// add appends one customer; val nil: no feature record. seek: the customer
// states cursor seeks to the customer instead of stepping to it.
func (sc *blockScanner) add(ref string, refBytes, val []byte, seek bool) error {
	blk := sc.blk
	it := scanItem{ref: ref, val: [2]int{-1, -1}, state: [2]int{-1, -1}}
	if val != nil {
		it.val = [2]int{len(blk.buf), len(blk.buf) + len(val)}
		blk.buf = append(blk.buf, val...)
	}
	if sc.states != nil {
		v, found, err := sc.state(refBytes, seek)
		if err != nil {
			return err
		}
		if found {
			it.state = [2]int{len(blk.buf), len(blk.buf) + len(v)}
			blk.buf = append(blk.buf, v...)
		}
	}
	blk.items = append(blk.items, it)
	if len(blk.items) == scanBlockSize {
		sc.emit(blk)
		sc.blk = sc.newBlock()
	}
	return nil
}

// state moves the customer states cursor to ref's state and returns it
// (valid until the cursor moves); found false when ref has none.
func (sc *blockScanner) state(ref []byte, seek bool) (v []byte, found bool, err error) {
	cs := sc.states
	valid := cs.Valid()
	if seek {
		valid = cs.Seek(ref)
	}
	for valid {
		c := bytes.Compare(cs.Ref(), ref)
		if c > 0 {
			return nil, false, nil
		}
		if c == 0 {
			v, err := cs.Value()
			return v, err == nil, err
		}
		valid = cs.Next()
	}
	return nil, false, nil
}

// scoreBlock decodes, matches and (withGain) scores a block's customers.
// Without seg (a list) every customer matches, with history or not.
func (bd *BatchDecider) scoreBlock(blk *scanBlock, seg *Segment, withGain bool, f *Features, scratch *gainScratch) {
	for i := range blk.items {
		it := &blk.items[i]
		it.match, it.gain = false, Gain{}
		if it.val[0] < 0 {
			if seg != nil {
				continue
			}
			f.Decode(nil) // zero features: a customer without history
		} else if !f.Decode(blk.buf[it.val[0]:it.val[1]]) {
			if seg != nil {
				continue
			}
			// A damaged record: the decision quarantines it and decides
			// the customer as one without history; here the customer
			// just cannot keep a send.
			it.match = true
			continue
		}
		if seg != nil {
			if _, has := f.LastEvent(); !has {
				continue
			}
			if !seg.Todos() && !seg.Match(f, bd.now) {
				continue
			}
		}
		it.match = true
		if !withGain {
			continue
		}
		var cs customerState
		if it.state[0] >= 0 {
			if err := unmarshalCustomerState(blk.buf[it.state[0]:it.state[1]], &cs); err != nil {
				continue // damaged: as above
			}
		}
		it.gain = bd.gain(it.ref, f, &cs, scratch)
	}
}

// Decide decides one customer of the job. noSend restricts the choice to 0
// (the customer fell outside the budget cut). The record is durable after
// the next Flush (called automatically every chunk of decisions).
func (bd *BatchDecider) Decide(clienteRef string, noSend bool) (*Decision, error) {
	req := Request{ClienteRef: clienteRef, Canal: bd.campaign.Canal, CampanaID: bd.campaign.ID, CapExempt: true, JobID: bd.jobID, NoSend: noSend, Explain: bd.Explain}
	if err := bd.lockCustomer(clienteRef); err != nil {
		return nil, err
	}
	d, rec, err := bd.e.decideInto(bd.ts, bd.t, bd.now, req, bd.b)
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.Accion != 0 {
		bd.spent = true
	}
	bd.tally.add(rec)
	bd.pending++
	chunk := batchChunk
	if bd.e.onlineSince(bd.e.now()) < onlineWindow {
		chunk = batchChunkOnline
	}
	if bd.pending >= chunk {
		if err := bd.Flush(); err != nil {
			return nil, err
		}
		bd.pace.Step() // the locks are released: yield to online decisions
	}
	return d, nil
}

// Flush commits the pending decisions with Sync and releases the customer
// locks.
func (bd *BatchDecider) Flush() error {
	defer bd.unlock()
	if bd.pending == 0 {
		return nil
	}
	var spent []string
	if bd.spent {
		spent = append(spent, bd.campaign.ID)
	}
	err := bd.e.Campaigns.commitBudgets(bd.ts, bd.t.ID, bd.b, spent, nil)
	bd.b.Close()
	bd.b = bd.e.db.NewBatch()
	bd.pending = 0
	if err == nil {
		bd.e.counters.addTally(bd.t.ID, &bd.tally)
	}
	bd.tally = decisionTally{}
	bd.spent = false
	return err
}

func (bd *BatchDecider) unlock() {
	for _, i := range bd.held {
		bd.ts.custLocks[i].Unlock()
		bd.heldBits[i/64] = 0
	}
	bd.held = bd.held[:0]
	if bd.locked {
		bd.ts.budgetGate.Unlock()
		bd.locked = false
	}
}

// lockCustomer takes, for the chunk, the budget gate and the lock of
// clienteRef (see Locking on BatchDecider). When the customer's lock is
// taken by someone else, the chunk is committed first and the decider then
// waits holding the gate alone.
func (bd *BatchDecider) lockCustomer(clienteRef string) error {
	if !bd.locked {
		bd.ts.budgetGate.Lock()
		bd.locked = true
	}
	i := bd.ts.custLockIndex(bd.e.seed, clienteRef)
	bit := uint64(1) << (i % 64)
	if bd.heldBits[i/64]&bit != 0 {
		return nil
	}
	if !bd.ts.custLocks[i].TryLock() {
		if err := bd.Flush(); err != nil {
			return err
		}
		bd.ts.budgetGate.Lock()
		bd.locked = true
		bd.ts.custLocks[i].Lock()
	}
	bd.heldBits[i/64] |= bit
	bd.held = append(bd.held, i)
	return nil
}

// Close releases the decider; call Flush first to keep pending decisions.
// Pending decisions are dropped, and the budget they reserved is read again
// from the store.
func (bd *BatchDecider) Close() {
	if bd.pending > 0 && bd.spent {
		bd.e.Campaigns.dropBudgetCache(bd.ts, bd.campaign.ID)
	}
	bd.pending = 0
	bd.unlock()
	bd.b.Close()
}

func lockAll(ls *[custLockCount]sync.Mutex) {
	for i := range ls {
		ls[i].Lock()
	}
}

func unlockAll(ls *[custLockCount]sync.Mutex) {
	for i := range ls {
		ls[i].Unlock()
	}
}

// VoidJob undoes the committed decisions of a batch job that failed: no
// result file ever reached the caller, so none of its coupons was sent.
// Each still unconfirmed decision of the job becomes rechazada ("lote
// fallido"), gives its send back to the campaign budget and stops holding
// its customer's reward window, so the customer can be decided again at
// once. It returns the number of decisions voided. It scans the tenant's
// decisions once; a job fails rarely.
func (e *Engine) VoidJob(tenant, jobID string) (int, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return 0, err
	}
	var nonces []string
	type damaged struct {
		key, val []byte
		err      error
	}
	var bad []damaged
	lo, hi := store.DecisionSpan(tenant)
	err = e.db.Scan(lo, hi, func(k, v []byte) error {
		var r DecisionRecord
		if err := unmarshalRecord(v, &r); err != nil {
			bad = append(bad, damaged{bytes.Clone(k), bytes.Clone(v), err})
			return nil
		}
		if r.JobID == jobID && r.Estado == EstadoPendiente && !r.EnRespaldo {
			nonces = append(nonces, r.Nonce)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, d := range bad {
		e.quarantine(tenant, d.key, d.val, d.err)
	}
	for i := 0; i < len(nonces); i += batchChunk {
		if err := e.voidChunk(ts, tenant, nonces[i:min(i+batchChunk, len(nonces))]); err != nil {
			return i, err
		}
	}
	return len(nonces), nil
}

// motivoLoteFallido is the motivo_rechazo VoidJob gives the decisions it
// voids (DecisionRecord.Anulada marks them).
const motivoLoteFallido = "lote fallido: la decisión no se entregó"

// legacyVoided reports whether r, a record stored before
// DecisionRecord.Anulada existed, is one VoidJob voided: then a batch
// decision rechazada with motivoLoteFallido was one. Only the decoder asks,
// of such records; a record written since carries Anulada.
func legacyVoided(r *DecisionRecord) bool {
	return r.JobID != "" && r.Estado == EstadoRechazada && r.MotivoRechazo == motivoLoteFallido
}

// voidSend gives the send of r, a decision being voided, back to its
// campaign in rel, unless its expiry already did: a learner pass that found
// it unconfirmed after caduca_en gave it back and deleted its expiry
// queue entry, so the entry's presence is what still counts the send.
// The entry is deleted with the release. The caller holds the customer
// lock of r.
func (e *Campaigns) voidSend(b *store.Batch, rel Releases, tenant string, r *DecisionRecord) error {
	if r.Accion == 0 || r.CampanaID == "" {
		return nil
	}
	xk := queueKey(tenant, r.CaducaEn, queueExpiry, r.Nonce)
	counted, err := e.db.Has(xk)
	if err != nil || !counted {
		return err
	}
	b.Delete(xk)
	rel.add(r)
	return nil
}

// voidChunk voids the decisions named by nonces in one synced commit,
// holding every customer lock (as a batch chunk does) and, first, the
// learner lock: a learner pass reads records without their customers'
// locks and writes back what it read (its expiries' releases too), so a
// void committed during a pass was undone and its sends given back twice.
func (e *Engine) voidChunk(ts *tenantState, tenant string, nonces []string) error {
	ts.learnMu.Lock()
	defer ts.learnMu.Unlock()
	_, now, err := e.tenantNow(tenant)
	if err != nil {
		return err
	}
	ts.budgetGate.Lock()
	defer ts.budgetGate.Unlock()
	lockAll(&ts.custLocks)
	defer unlockAll(&ts.custLocks)
	b := e.db.NewBatch()
	defer b.Close()
	released := Releases{}
	var voided []time.Time
	for _, nonce := range nonces {
		r, err := e.loadDecision(tenant, nonce)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile, or damaged (quarantined)
		}
		if err != nil {
			return err
		}
		if r.Estado != EstadoPendiente {
			continue // confirmed meanwhile
		}
		r.Estado, r.MotivoRechazo, r.Anulada = EstadoRechazada, motivoLoteFallido, true
		voided = append(voided, r.At)
		at := now
		r.ConfirmadaEn = &at
		putRecord(b, tenant, r)
		if err := e.Campaigns.voidSend(b, released, tenant, r); err != nil {
			return err
		}
		cs, err := e.loadCustomerState(tenant, r.ClienteRef, true)
		if err != nil {
			return err
		}
		if cs.OpenNonce == r.Nonce {
			cs.OpenNonce, cs.OpenAt, cs.OpenVersion = "", time.Time{}, ""
			b.Set(customerStateKey(tenant, r.ClienteRef), marshalCustomerState(&cs))
		}
	}
	if err := e.Campaigns.commitBudgets(ts, tenant, b, nil, released); err != nil {
		return err
	}
	e.counters.voided(tenant, voided)
	return nil
}
