package engine

import (
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// BatchDecider decides a batch job's customers with the same code as online
// decisions, writing records in synced chunks instead of one commit each.
// It is used by one goroutine.
type BatchDecider struct {
	e        *Engine
	ts       *tenantState
	t        *store.Tenant
	now      time.Time
	campaign *Campaign
	jobID    string
	b        *store.Batch
	pending  int
	spent    bool
}

// batchChunk is how many decisions one synced commit carries.
const batchChunk = 1000

// ErrNoCampaign is returned when a batch names a campaign that is not defined.
var ErrNoCampaign = errors.New("engine: campaign not defined")

// NewBatchDecider prepares a batch job's decisions for campaign campana.
// The tenant clock is read once: every line of a job has the same decision
// time.
func (e *Engine) NewBatchDecider(tenant, jobID, campana string) (*BatchDecider, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	t, now, err := e.tenantNow(tenant)
	if err != nil {
		return nil, err
	}
	camp, err := e.Campaign(tenant, campana)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNoCampaign, campana)
	}
	if err != nil {
		return nil, err
	}
	return &BatchDecider{e: e, ts: ts, t: t, now: now, campaign: camp, jobID: jobID, b: e.db.NewBatch()}, nil
}

// Now is the decision time of the job.
func (bd *BatchDecider) Now() time.Time { return bd.now }

// SendBudget is how many sends the campaign can still afford; limited is
// false when the campaign has no cap on sends or discount.
func (bd *BatchDecider) SendBudget() (remaining int64, limited bool) {
	c := bd.campaign
	if c.MaxEnvios == nil && c.MaxDescuentoCents == nil {
		return 0, false
	}
	bd.ts.budgetMu.Lock()
	defer bd.ts.budgetMu.Unlock()
	bu, err := bd.e.budgetLocked(bd.ts, bd.t.ID, c.ID)
	if err != nil {
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
			if a.Activa && a.AllowsChannel(c.Canal) && (cheapest < 0 || a.DescuentoMaxCents < cheapest) {
				cheapest = a.DescuentoMaxCents
			}
		}
		if cheapest > 0 {
			remaining = min(remaining, max(0, (*c.MaxDescuentoCents-bu.DescuentoCents)/cheapest))
		}
	}
	return remaining, true
}

// SendGain is the expected margin a send adds for the customer: the best
// eligible action's μ minus μ of sending nothing (cents). The budget cut of
// a batch keeps the customers with the highest gains.
func (bd *BatchDecider) SendGain(clienteRef string) (float64, error) {
	cust, err := bd.e.customer(bd.t.ID, clienteRef, bd.now, bd.t.Settings.RewardWindow)
	if err != nil {
		return 0, err
	}
	cands, _ := eligible(bd.ts.catalog.Load(), Request{ClienteRef: clienteRef, Canal: bd.campaign.Canal}, cust)
	sc := bd.ts.model.Load().score(cust, cands, bd.t.Settings.RewardWindow)
	best, zero := 0.0, 0.0
	found := false
	for _, c := range sc.cands {
		if c.id == 0 {
			zero = c.mu
		} else if !found || c.mu > best {
			best, found = c.mu, true
		}
	}
	if !found {
		return -1e18, nil
	}
	return best - zero, nil
}

// Decide decides one customer of the job. noSend restricts the choice to 0
// (the customer fell outside the budget cut). The record is durable after
// the next Flush (called automatically every batchChunk decisions).
func (bd *BatchDecider) Decide(clienteRef string, noSend bool) (*Decision, error) {
	req := Request{ClienteRef: clienteRef, Canal: bd.campaign.Canal, CampanaID: bd.campaign.ID, CapExempt: true, JobID: bd.jobID, NoSend: noSend}
	lock := bd.ts.custLock(bd.e.seed, clienteRef)
	lock.Lock()
	d, rec, err := bd.e.decideInto(bd.ts, bd.t, bd.now, req, bd.b)
	lock.Unlock()
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.Accion != 0 {
		bd.spent = true
	}
	bd.pending++
	if bd.pending >= batchChunk {
		if err := bd.Flush(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Flush commits the pending decisions with Sync.
func (bd *BatchDecider) Flush() error {
	if bd.pending == 0 {
		return nil
	}
	err := bd.b.Commit()
	bd.b.Close()
	bd.b = bd.e.db.NewBatch()
	bd.pending = 0
	if err != nil && bd.spent {
		bd.e.dropBudgetCache(bd.ts, bd.campaign.ID)
	}
	bd.spent = false
	return err
}

// Close releases the decider; call Flush first to keep pending decisions.
func (bd *BatchDecider) Close() { bd.b.Close() }

// TopK keeps the k keys with the highest scores.
type TopK struct {
	k int
	h gainHeap
}

// NewTopK returns an empty TopK of capacity k.
func NewTopK(k int) *TopK { return &TopK{k: k} }

// Add offers one key with its score.
func (t *TopK) Add(key string, score float64) {
	if t.k <= 0 {
		return
	}
	if len(t.h) < t.k {
		heap.Push(&t.h, gainItem{key, score})
		return
	}
	if score > t.h[0].score {
		t.h[0] = gainItem{key, score}
		heap.Fix(&t.h, 0)
	}
}

// Set returns the kept keys.
func (t *TopK) Set() map[string]bool {
	m := make(map[string]bool, len(t.h))
	for _, it := range t.h {
		m[it.key] = true
	}
	return m
}

type gainItem struct {
	key   string
	score float64
}

type gainHeap []gainItem

func (h gainHeap) Len() int           { return len(h) }
func (h gainHeap) Less(i, j int) bool { return h[i].score < h[j].score }
func (h gainHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *gainHeap) Push(x any)        { *h = append(*h, x.(gainItem)) }
func (h *gainHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
