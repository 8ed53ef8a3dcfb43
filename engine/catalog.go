package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
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
	// Arm is the key the model knows the coupon by (policy.Arm.ID; 0: the
	// id itself), set by ReplaceCatalog (armFor), so that an id given to
	// another coupon (another tipo_cupon) does not inherit what the model
	// learned of the one it named before. Never in the API.
	Arm int `json:"arm,omitempty"`
}

// armShift places a coupon's tipo_cupon tag above its catalog id in its
// model key: ids are at most 1,000,000 (the catalog schema), below 2^20.
const armShift = 30

// armKey is the key the model knows a as (Action.Arm).
func (a *Action) armKey() int {
	if a.Arm != 0 {
		return a.Arm
	}
	return a.ID
}

// newArmKey is the model key of the coupon with catalog id and tipo when
// the id named another coupon before: the id in the high bits, so that
// keys sort as their ids, and a tag of tipo (1 to 2^30-1) in the low ones.
// The same id and tipo always give the same key.
func newArmKey(id int, tipo string) int {
	h := fnv.New32a()
	h.Write([]byte(tipo))
	return id<<armShift | int(1+h.Sum32()%(1<<armShift-1))
}

// catalogID is the catalog id of a model key (Action.Arm): 0 for 0.
func catalogID(key int) int {
	if key >= 1<<armShift {
		return key >> armShift
	}
	return key
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
	// Retired are the last maxRetired coupons that left the catalog (their
	// id gone, or given another coupon), oldest first, with their
	// tipo_cupon, model key and, since retirements keep them, sending cost
	// and descuento_max only (retired before: 0): an id that names one of
	// them again is that coupon (armFor), and a confirmation may name one
	// sent before it left (Known). Never in the API.
	Retired []Action `json:"retiradas,omitempty"`
}

// maxRetired bounds Catalog.Retired. A coupon that left the catalog more
// than maxRetired retirements ago, its id named by nothing since, comes back
// under its id as model key.
const maxRetired = 1000

// Action returns the action with id, or nil.
func (c *Catalog) Action(id int) *Action {
	for i := range c.Acciones {
		if c.Acciones[i].ID == id {
			return &c.Acciones[i]
		}
	}
	return nil
}

// Known returns the coupon id names for a confirmation or a record made
// before the catalog changed: the action of the catalog with id, or else
// the coupon that left it last under id (Retired: id, tipo_cupon, model
// key and money only); nil for an id no catalog of the last maxRetired
// retirements held.
func (c *Catalog) Known(id int) *Action {
	if a := c.Action(id); a != nil {
		return a
	}
	for i := len(c.Retired) - 1; i >= 0; i-- {
		if c.Retired[i].ID == id {
			return &c.Retired[i]
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

// armFor is the model key (Action.Arm) of a, an action of the catalog that
// replaces c: the key c gave the same coupon (same id and tipo_cupon), in
// its actions or those retired; newArmKey when c, or its retired actions,
// knew the id only as other coupons; 0 (the id itself) for an id c never
// knew.
func (c *Catalog) armFor(a *Action) int {
	known := false
	if was := c.Action(a.ID); was != nil {
		if was.TipoCupon == a.TipoCupon {
			return was.Arm
		}
		known = true
	}
	for i := len(c.Retired) - 1; i >= 0; i-- {
		if r := &c.Retired[i]; r.ID == a.ID {
			if r.TipoCupon == a.TipoCupon {
				return r.Arm
			}
			known = true
		}
	}
	if !known {
		return 0
	}
	return newArmKey(a.ID, a.TipoCupon)
}

// retiredAfter is the Retired list of the catalog that replaces c with
// actions: c's, less the coupons that are back, plus c's coupons that
// left, by their id or by another coupon taking their id (so that a coupon
// an id names again, A then B then A, is A's key again).
func (c *Catalog) retiredAfter(actions []Action) []Action {
	type coupon struct {
		id   int
		tipo string
	}
	in := make(map[coupon]bool, len(actions))
	for _, a := range actions {
		in[coupon{a.ID, a.TipoCupon}] = true
	}
	var out []Action
	for _, r := range c.Retired {
		if !in[coupon{r.ID, r.TipoCupon}] {
			out = append(out, r)
		}
	}
	for _, a := range c.Acciones {
		if !in[coupon{a.ID, a.TipoCupon}] {
			out = append(out, Action{ID: a.ID, TipoCupon: a.TipoCupon, Arm: a.Arm,
				CostoEnvioCents: a.CostoEnvioCents, DescuentoMaxCents: a.DescuentoMaxCents})
		}
	}
	return out[max(0, len(out)-maxRetired):]
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
// about actions that stay is kept; new actions start without support. A
// coupon is its id and tipo_cupon (what CUPON_RECIBIDO.clave carries): an
// id that keeps its tipo_cupon is the same coupon, re-priced, renamed or
// with other categorias, while an id given another tipo_cupon is a new
// coupon, which the model knows under another key (Action.Arm).
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
	for i := range c.Acciones {
		c.Acciones[i].Arm = old.armFor(&c.Acciones[i])
	}
	c.Retired = old.retiredAfter(c.Acciones)
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
// action is kept under its key, so a catalog put again carries on, except
// for an id that had been given another coupon: with the damaged record
// went its key (Action.Arm), and the id is read as its first coupon).
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
