package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// Campaign defines a channel and a budget. Absent caps are nil (no cap).
type Campaign struct {
	ID                string    `json:"campana_id"`
	Canal             string    `json:"canal"`
	Descripcion       string    `json:"descripcion"`
	MaxDescuentoCents *int64    `json:"max_descuento_cents,omitempty"`
	MaxEnvios         *int64    `json:"max_envios,omitempty"`
	CreadoEn          time.Time `json:"creado_en"`
	ActualizadoEn     time.Time `json:"actualizado_en"`
}

// budget is a campaign's spent budget: sends (accion ≠ 0) and their
// expected discount. The expected discount of a send is the action's
// descuento_max (the most the coupon can give), so the campaign's
// max_descuento_mxn is never exceeded whatever is redeemed.
type budget struct {
	Envios         int64 `json:"envios"`
	DescuentoCents int64 `json:"descuento_cents"`
}

// ErrNotFound is returned for an unknown campaign, decision or job.
var ErrNotFound = errors.New("engine: not found")

// PutCampaign creates or replaces a campaign, keeping its creation time and
// its spent budget.
func (e *Campaigns) PutCampaign(tenant string, c Campaign, now time.Time) (*Campaign, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	ts.budgetMu.Lock()
	defer ts.budgetMu.Unlock()
	now = now.UTC()
	c.CreadoEn, c.ActualizadoEn = now, now
	var old Campaign
	switch err := e.db.GetJSON(store.CampaignKey(tenant, c.ID), &old); {
	case err == nil:
		c.CreadoEn = old.CreadoEn
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.CampaignKey(tenant, c.ID), &c); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	cc := c
	ts.campaigns[c.ID] = &cc
	return &cc, nil
}

// Campaign returns a campaign, or ErrNotFound.
func (e *Campaigns) Campaign(tenant, id string) (*Campaign, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	ts.budgetMu.Lock()
	defer ts.budgetMu.Unlock()
	return e.campaignLocked(ts, tenant, id)
}

// maxCampaignCache bounds the campaign cache of a tenant; it only stops
// remembering ids known not to exist (any client can send made-up ones).
const maxCampaignCache = 10_000

func (e *Campaigns) campaignLocked(ts *tenantState, tenant, id string) (*Campaign, error) {
	if c, ok := ts.campaigns[id]; ok {
		if c == nil {
			return nil, fmt.Errorf("campaign %q: %w", id, ErrNotFound)
		}
		return c, nil
	}
	var c Campaign
	err := e.db.GetJSON(store.CampaignKey(tenant, id), &c)
	if errors.Is(err, store.ErrNotFound) {
		if len(ts.campaigns) < maxCampaignCache {
			ts.campaigns[id] = nil // callers choose the ids: past the bound, a miss costs a point read
		}
		return nil, fmt.Errorf("campaign %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	ts.campaigns[id] = &c
	return &c, nil
}

func (e *Campaigns) budgetLocked(ts *tenantState, tenant, id string) (*budget, error) {
	if b, ok := ts.budgets[id]; ok {
		return b, nil
	}
	var b budget
	if err := e.db.GetJSON(store.BudgetKey(tenant, id), &b); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	ts.budgets[id] = &b
	return &b, nil
}

// affordable reports whether one more send of a fits the campaign's budget.
func (c *Campaign) affordable(b *budget, a *Action) bool {
	if c.MaxEnvios != nil && b.Envios+1 > *c.MaxEnvios {
		return false
	}
	if c.MaxDescuentoCents != nil && b.DescuentoCents+a.DescuentoMaxCents > *c.MaxDescuentoCents {
		return false
	}
	return true
}

// Campaigns keeps each tenant's catalog, campaigns and campaign budgets:
// the catalog and campaign records, the budget counters that decisions
// reserve and confirmations and expiries release, and their in-memory
// caches in the tenant state.
type Campaigns struct{ *core }
