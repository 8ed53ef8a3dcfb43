package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// Action is one coupon of a tenant's catalog. Money is in cents.
type Action struct {
	ID                int      `json:"id"`
	Nombre            string   `json:"nombre"`
	TipoCupon         string   `json:"tipo_cupon"`
	CostoEnvioCents   int64    `json:"costo_envio_cents"`
	DescuentoMaxCents int64    `json:"descuento_max_cents"`
	DescuentoPct      float64  `json:"descuento_pct"`
	Canales           []string `json:"canales,omitempty"` // empty: every channel
	Activa            bool     `json:"activa"`
	// Categorias are the COMPRA_CAT claves the coupon applies to (optional):
	// the model reads the customer's affinity to them.
	Categorias []string `json:"categorias,omitempty"`
}

// HasDiscounts reports whether some action of the catalog gives a
// discount (a percentage or an amount); false for a nil catalog.
func (c *Catalog) HasDiscounts() bool {
	if c == nil {
		return false
	}
	for _, a := range c.Acciones {
		if a.DescuentoPct > 0 || a.DescuentoMaxCents > 0 {
			return true
		}
	}
	return false
}

// AllowsChannel reports whether the action can be sent on canal.
func (a *Action) AllowsChannel(canal string) bool {
	if len(a.Canales) == 0 {
		return true
	}
	for _, c := range a.Canales {
		if c == canal {
			return true
		}
	}
	return false
}

// Catalog is a tenant's action catalog, replaced as a whole. Version starts
// at 0 (no catalog yet) and grows by one with every replacement.
type Catalog struct {
	Acciones  []Action  `json:"acciones"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Action returns the action with id, or nil.
func (c *Catalog) Action(id int) *Action {
	for i := range c.Acciones {
		if c.Acciones[i].ID == id {
			return &c.Acciones[i]
		}
	}
	return nil
}

// ActionName is the name of an action id; 0 is "nada".
func (c *Catalog) ActionName(id int) string {
	if id == 0 {
		return "nada"
	}
	if a := c.Action(id); a != nil {
		return a.Nombre
	}
	return fmt.Sprintf("accion_%d", id)
}

// ErrDuplicateAction is returned when a catalog repeats an id; the index of
// the repeated entry is in the error.
var ErrDuplicateAction = errors.New("engine: duplicate action id")

// Catalog returns the tenant's current catalog (version 0 and no actions
// before the first PUT). The result is shared: do not modify it.
func (e *Campaigns) Catalog(tenant string) (*Catalog, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	return ts.catalog.Load(), nil
}

// ReplaceCatalog stores a new catalog as a whole. What the model learned
// about actions that stay is kept; new actions start without support.
func (e *Campaigns) ReplaceCatalog(tenant string, actions []Action, now time.Time) (*Catalog, error) {
	seen := map[int]bool{}
	for i, a := range actions {
		if seen[a.ID] {
			return nil, fmt.Errorf("%w: acciones[%d].id %d", ErrDuplicateAction, i, a.ID)
		}
		seen[a.ID] = true
	}
	ts, err := e.state(tenant)
	if err != nil {
		return nil, err
	}
	ts.catalogMu.Lock()
	defer ts.catalogMu.Unlock()
	old := ts.catalog.Load()
	c := &Catalog{Acciones: append([]Action{}, actions...), Version: old.Version + 1, UpdatedAt: now.UTC()}
	b := e.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.CatalogKey(tenant), c); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	ts.catalog.Store(c)
	return c, nil
}

// loadCatalog reads the tenant's catalog; none stored is the empty one. A
// record that does not decode is moved to quarantine (contract §8) and read
// as the empty catalog until the next PUT: nothing but action 0 is sent
// meanwhile, rather than the tenant stopping (what the model learned of each
// action is kept by action id, so a catalog put again carries on).
func (e *core) loadCatalog(tenant string) (*Catalog, error) {
	key := store.CatalogKey(tenant)
	v, err := e.db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return &Catalog{Acciones: []Action{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var c Catalog
	if err := json.Unmarshal(v, &c); err != nil {
		e.quarantine(tenant, key, v, fmt.Errorf("catalog record: %w", err))
		return &Catalog{Acciones: []Action{}}, nil
	}
	if c.Acciones == nil {
		c.Acciones = []Action{}
	}
	return &c, nil
}
