package engine

import (
	"encoding/json"
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
	// SpendCeiling bounds what its budget can have counted: for each cap,
	// the highest it had since the campaign was defined, unknownSpend when
	// it was ever without it. A budget lost to damage reads at it
	// (spentBudget): caps lowered since stood below the spend. PutCampaign
	// sets it; nil in a record stored before it did, read as the caps.
	SpendCeiling *budget `json:"spend_ceiling,omitempty"`
}

// ceiling is c.SpendCeiling, or its caps when it has none.
func (c *Campaign) ceiling() budget {
	if c.SpendCeiling != nil {
		return *c.SpendCeiling
	}
	return budget{Envios: capOr(c.MaxEnvios), DescuentoCents: capOr(c.MaxDescuentoCents)}
}

// capOr is the cap p, unknownSpend when there is none.
func capOr(p *int64) int64 {
	if p == nil {
		return unknownSpend
	}
	return *p
}

// budget is a campaign's spent budget: sends (accion ≠ 0) and their
// expected discount, both saturated at the int64 range (featAdd): a
// campaign without max_descuento_mxn counts up to 1,000,000,000 MXN a send
// with no bound, and a wrapped sum would read as room under a cap set
// later. The expected discount of a send is the action's
// descuento_max (the most the coupon can give), so the campaign's
// max_descuento_mxn is never exceeded whatever is redeemed; a percentage
// coupon without descuento_max has no bound, and a campaign with that cap
// never sends it (unbounded).
type budget struct {
	Envios         int64 `json:"envios"`
	DescuentoCents int64 `json:"descuento_cents"`
}

// ErrNotFound is returned for an unknown campaign, decision or job.
var ErrNotFound = errors.New("engine: not found")

// PutCampaign creates or replaces a campaign, keeping its creation time,
// its spent budget and the ceiling of that spend (SpendCeiling): the
// highest of c's caps and the old ceiling.
func (e *Campaigns) PutCampaign(tenant string, c Campaign, now time.Time) (*Campaign, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	ts.budgetMu.Lock()
	defer ts.budgetMu.Unlock()
	now = now.UTC()
	c.CreadoEn, c.ActualizadoEn = now, now
	c.SpendCeiling = nil
	ceil := c.ceiling()
	switch old, err := e.loadCampaign(tenant, c.ID); {
	case err == nil:
		c.CreadoEn = old.CreadoEn
		was := old.ceiling()
		ceil = budget{Envios: max(ceil.Envios, was.Envios), DescuentoCents: max(ceil.DescuentoCents, was.DescuentoCents)}
	case !errors.Is(err, ErrNotFound): // a damaged one is defined again from now
		return nil, err
	}
	c.SpendCeiling = &ceil
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

// Campaign returns a campaign, or ErrNotFound; an error wrapping ErrDamaged
// and ErrNotFound when its record is damaged (see loadCampaign).
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
	c, err := e.loadCampaign(tenant, id)
	if errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDamaged) {
		if len(ts.campaigns) < maxCampaignCache {
			ts.campaigns[id] = nil // callers choose the ids: past the bound, a miss costs a point read
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	ts.campaigns[id] = c
	return c, nil
}

// loadCampaign reads a campaign record: ErrNotFound when none was defined.
// A record that does not decode is moved to quarantine, and until the
// campaign is defined again (PUT) it reads as damaged, an error wrapping
// ErrDamaged and ErrNotFound, also after a restart (its copy in quarantine
// says so). A damaged campaign is not an undefined one: its caps are
// unknown, so its online decisions send nothing (fitBudget) rather than
// send without a cap; GET finds nothing and a batch for it is refused as
// for an undefined campaign (contract: defined with PUT).
func (e *Campaigns) loadCampaign(tenant, id string) (*Campaign, error) {
	key := store.CampaignKey(tenant, id)
	v, err := e.db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		switch inQuarantine, err := e.db.Has(store.DamagedKey(tenant, key)); {
		case err != nil:
			return nil, err
		case inQuarantine:
			return nil, damagedErr(fmt.Sprintf("campaign %q", id), errors.New("its record is in quarantine"))
		}
		return nil, fmt.Errorf("campaign %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var c Campaign
	if err := json.Unmarshal(v, &c); err != nil {
		err = fmt.Errorf("campaign record: %w", err)
		e.quarantine(tenant, key, v, err)
		return nil, damagedErr(fmt.Sprintf("campaign %q", id), err)
	}
	return &c, nil
}

// countsSends reports whether campaign id has a budget that counts sends:
// it is defined, or its record is damaged (its caps unknown, its spend
// still counted for when it is defined again).
func (e *Campaigns) countsSends(tenant, id string) (bool, error) {
	_, err := e.Campaign(tenant, id)
	switch {
	case err == nil, errors.Is(err, ErrDamaged):
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, err
}

// unknownSpend is the count a spent budget holds for a cap the campaign
// did not have (or that could not be read) when its record was damaged:
// far above any cap an operator sets, and far from overflow when sends are
// added to it.
const unknownSpend = int64(1) << 50

// budgetLocked returns the cached counters of campaign id, reading them on
// first use. The caller holds ts.budgetMu. A budget record that does not
// decode is moved to quarantine and the campaign's spend is then unknown:
// counting it from zero could overspend, so the budget reads as spent
// (spentBudget). A budget whose record is in quarantine and was not
// written again since (a restart in between, or admin check --repair) reads
// the same way.
func (e *Campaigns) budgetLocked(ts *tenantState, tenant, id string) (*budget, error) {
	if b, ok := ts.budgets[id]; ok {
		return b, nil
	}
	key := store.BudgetKey(tenant, id)
	var b budget
	v, err := e.db.Get(key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		inQuarantine, err := e.db.Has(store.DamagedKey(tenant, key))
		if err != nil {
			return nil, err
		}
		if inQuarantine {
			b = e.spentBudget(ts, tenant, id)
		}
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(v, &b); err != nil {
			e.quarantine(tenant, key, v, fmt.Errorf("budget record: %w", err))
			b = e.spentBudget(ts, tenant, id)
		}
	}
	ts.budgets[id] = &b
	return &b, nil
}

// spentBudget is the reading of a budget whose record was lost to damage:
// counters at the campaign's SpendCeiling (the highest caps it had,
// unknownSpend where it was ever without one: no lower count is sure to
// hold the sends made, caps lowered since included), so no further send
// fits, while sends still pending give theirs back when
// rejected or expired. It is stored at once, so that a cap raised later
// (PUT) allows exactly the sends it adds, and logged: the operator decides,
// from the campaign's decisions, how far to raise the caps. The caller
// holds ts.budgetMu; a failure to store it is logged and the reading kept
// in memory.
func (e *Campaigns) spentBudget(ts *tenantState, tenant, id string) budget {
	b := budget{Envios: unknownSpend, DescuentoCents: unknownSpend}
	if c, err := e.campaignLocked(ts, tenant, id); err == nil {
		b = c.ceiling()
	}
	ev := e.log.Error().Str("tenant", tenant).Str("campana_id", id).Int64("envios", b.Envios).Int64("descuento_cents", b.DescuentoCents)
	wb := e.db.NewBatch()
	defer wb.Close()
	err := wb.SetJSON(store.BudgetKey(tenant, id), &b)
	if err == nil {
		err = wb.Commit()
	}
	if err != nil {
		ev = ev.AnErr("store_error", err)
	}
	ev.Msg("campaign budget record damaged (in quarantine): its spend is unknown, so the budget counts as spent at the highest caps the campaign had and it sends nothing more; raise max_envios / max_descuento_mxn with PUT /v1/campanas/{campana_id} to allow more sends")
	return b
}

// affordable reports whether one more send of a fits the campaign's budget.
// It adds nothing that could wrap: a budget read as spent at a max_envios
// of 9223372036854775807 affords no send.
func (c *Campaign) affordable(b *budget, a *Action) bool {
	if c.MaxEnvios != nil && b.Envios >= *c.MaxEnvios {
		return false
	}
	if c.MaxDescuentoCents != nil && (unbounded(a) || featAdd(b.DescuentoCents, a.DescuentoMaxCents) > *c.MaxDescuentoCents) {
		return false
	}
	return true
}

// unbounded reports whether a's discount has no upper bound: a percentage
// without descuento_max_mxn.
func unbounded(a *Action) bool { return a.DescuentoPct > 0 && a.DescuentoMaxCents == 0 }

// Campaigns keeps each tenant's catalog, campaigns and campaign budgets:
// the catalog and campaign records, the budget counters that decisions
// reserve and confirmations and expiries release, and their in-memory
// caches in the tenant state.
type Campaigns struct{ *core }
