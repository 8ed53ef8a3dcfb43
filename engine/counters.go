package engine

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/coupond/coupond/store"
)

// Counters are per-tenant hourly operating counters for the operator
// console: decisions, confirmations by the hour of their decision, events,
// rewards folded, error answers by codigo. They are counted where the work
// happens, in memory (one mutex, no store read, no allocation once the
// tenant's hour is known), and written to the store by Flush, which adds
// the pending deltas to the stored hour records. A crash forgets at most
// the counts since the last Flush; serve flushes every few seconds.
//
// Hours are hours of the tenant clock (store.Tenant.Now), so a sandbox
// tenant's counters follow its test clock. Records live in TableMeta under
// the name "hourly", one JSON object of name → count per tenant and hour.
// Counters are safe for concurrent use; a nil *Counters counts nothing.
type Counters struct {
	db *store.DB

	// flushMu keeps readers from seeing the moment when deltas have left
	// pending but are not yet committed.
	flushMu sync.RWMutex
	mu      sync.Mutex
	pending map[hourKey]*hourDelta
	// lastKey/last cache the most recent delta: most adds hit the same
	// tenant and hour as the one before.
	lastKey hourKey
	last    *hourDelta
}

// Counter names. Names not listed here (error:<codigo>, webhook:<outcome>)
// are counted through Add.
const (
	CountDecisions  = "decisions" // new decision records (online and batch), by decision hour
	CountExplored   = "explored"  // of which explorado
	CountSent       = "sent"      // of which accion != 0
	CountControl    = "control"   // of which en_control
	CountShadow     = "shadow"    // of which made in shadow mode
	CountConfirmed  = "confirmed" // confirmations, by the hour of the decision they confirm
	CountEjecutada  = "confirmed:ejecutada"
	CountModificada = "confirmed:modificada"
	CountRechazada  = "confirmed:rechazada"
	CountFallbacks  = "fallbacks"       // fallback records
	CountEvents     = "events"          // events accepted
	CountFolded     = "folded"          // rewards folded into the model, by learner hour
	CountVersions   = "policy_versions" // policy versions published
	CountErrorPfx   = "error:"          // error answers, by codigo
	CountWebhookPfx = "webhook:"        // webhook attempts: delivered, failed, given_up, dropped
)

// fixedNames are the counters kept in an array (the decision path's).
var fixedNames = [...]string{CountDecisions, CountExplored, CountSent, CountControl, CountShadow, CountConfirmed}

const (
	fixDecisions = iota
	fixExplored
	fixSent
	fixControl
	fixShadow
	fixConfirmed
)

type hourKey struct {
	tenant string
	hour   int64 // unix hours
}

type hourDelta struct {
	fixed [len(fixedNames)]int64
	other map[string]int64
}

// NewCounters builds the counters over db.
func NewCounters(db *store.DB) *Counters {
	return &Counters{db: db, pending: map[hourKey]*hourDelta{}}
}

// HourOf is the counters' hour of t, in unix hours.
func HourOf(t time.Time) int64 { return floorDiv(t.Unix(), 3600) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// delta returns the pending delta of (tenant, hour of at); call with mu held.
func (c *Counters) delta(tenant string, at time.Time) *hourDelta {
	k := hourKey{tenant, HourOf(at)}
	if c.last != nil && c.lastKey == k {
		return c.last
	}
	d := c.pending[k]
	if d == nil {
		d = &hourDelta{}
		c.pending[k] = d
	}
	c.lastKey, c.last = k, d
	return d
}

// Add adds n to the counter name of tenant in the hour of at.
func (c *Counters) Add(tenant string, at time.Time, name string, n int64) {
	if c == nil || n == 0 {
		return
	}
	c.mu.Lock()
	d := c.delta(tenant, at)
	if i := fixedIndex(name); i >= 0 {
		d.fixed[i] += n
	} else {
		if d.other == nil {
			d.other = map[string]int64{}
		}
		d.other[name] += n
	}
	c.mu.Unlock()
}

func fixedIndex(name string) int {
	for i, n := range fixedNames {
		if n == name {
			return i
		}
	}
	return -1
}

// decided counts a new decision record.
func (c *Counters) decided(tenant string, r *DecisionRecord) {
	if c == nil || r == nil || r.EnRespaldo {
		return
	}
	c.mu.Lock()
	d := c.delta(tenant, r.At)
	d.countDecision(r)
	c.mu.Unlock()
}

// confirmed counts a decision's first confirmation (or its voiding), in the
// hour of the decision.
func (c *Counters) confirmed(tenant string, r *DecisionRecord) {
	if c == nil || r == nil {
		return
	}
	c.mu.Lock()
	d := c.delta(tenant, r.At)
	d.fixed[fixConfirmed]++
	if d.other == nil {
		d.other = map[string]int64{}
	}
	d.other[CountConfirmed+":"+r.Estado]++
	c.mu.Unlock()
}

// hourlyKey is the store key of a tenant's counters of one hour.
func hourlyKey(tenant string, hour int64) []byte {
	return store.HourlyKey(tenant, hour)
}

// Flush adds the pending deltas to the stored hour records in one synced
// batch. On failure the deltas are kept for the next Flush. The deltas of
// a tenant the store no longer lists (deleted, or being deleted, since they
// were counted: a request of it that passed authentication before) are
// dropped: a tenant's deletion leaves no record of it behind.
func (c *Counters) Flush() error {
	if c == nil {
		return nil
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	taken := c.pending
	c.pending, c.last = map[hourKey]*hourDelta{}, nil
	c.mu.Unlock()
	if len(taken) == 0 {
		return nil
	}
	b := c.db.NewBatch()
	defer b.Close()
	var err error
	for k, d := range taken {
		if _, ok := c.db.Tenant(k.tenant); !ok {
			continue // deleted (or being deleted) since it counted: nothing of it is written again
		}
		m := map[string]int64{}
		if err = c.load(k, m); err != nil {
			break
		}
		d.addTo(m)
		if err = b.SetJSON(hourlyKey(k.tenant, k.hour), m); err != nil {
			break
		}
	}
	if err == nil {
		err = b.Commit()
	}
	if err != nil {
		c.mu.Lock()
		for k, d := range taken {
			cur := c.delta(k.tenant, time.Unix(k.hour*3600, 0))
			for i, n := range d.fixed {
				cur.fixed[i] += n
			}
			for name, n := range d.other {
				if cur.other == nil {
					cur.other = map[string]int64{}
				}
				cur.other[name] += n
			}
		}
		c.mu.Unlock()
	}
	return err
}

// load reads a stored hour record into m. An undecodable record counts as
// empty (it is overwritten by the next flush): counters never block.
func (c *Counters) load(k hourKey, m map[string]int64) error {
	v, err := c.db.Get(hourlyKey(k.tenant, k.hour))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var stored map[string]int64
	if json.Unmarshal(v, &stored) == nil {
		for name, n := range stored {
			m[name] += n
		}
	}
	return nil
}

func (d *hourDelta) addTo(m map[string]int64) {
	for i, n := range d.fixed {
		if n != 0 {
			m[fixedNames[i]] += n
		}
	}
	for name, n := range d.other {
		m[name] += n
	}
}

// Hours returns the tenant's counts for the hours from..to (unix hours,
// inclusive), stored and pending, indexed by hour - from. It reads at most
// to-from+1 small records: the cost of a page does not grow with the
// tenant's history.
func (c *Counters) Hours(tenant string, from, to int64) ([]map[string]int64, error) {
	if to < from {
		return nil, nil
	}
	out := make([]map[string]int64, to-from+1)
	for i := range out {
		out[i] = map[string]int64{}
	}
	if c == nil {
		return out, nil
	}
	c.flushMu.RLock()
	defer c.flushMu.RUnlock()
	lo, hi := hourlyKey(tenant, from), hourlyKey(tenant, to+1)
	err := c.db.Scan(lo, hi, func(k, v []byte) error {
		h, ok := store.ParseHourlyKey(tenant, k)
		if !ok {
			return nil
		}
		if h < from || h > to {
			return nil
		}
		var m map[string]int64
		if json.Unmarshal(v, &m) == nil {
			for name, n := range m {
				out[h-from][name] += n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for k, d := range c.pending {
		if k.tenant == tenant && k.hour >= from && k.hour <= to {
			d.addTo(out[k.hour-from])
		}
	}
	c.mu.Unlock()
	return out, nil
}

// Counters returns the engine's operating counters.
func (e *Engine) Counters() *Counters { return e.counters }

// learned counts a learner pass: rewards folded and, when any, the policy
// version it published.
func (c *Counters) learned(tenant string, now time.Time, folded int) {
	if folded > 0 {
		c.Add(tenant, now, CountFolded, int64(folded))
		c.Add(tenant, now, CountVersions, 1)
	}
}

// ingested counts accepted events at the tenant clock.
func (c *Counters) ingested(tenant string, now time.Time, n int) {
	c.Add(tenant, now, CountEvents, int64(n))
}

// voided counts the decisions of a failed batch job made rechazada, by
// decision hour.
func (c *Counters) voided(tenant string, at []time.Time) {
	for _, t := range at {
		c.confirmed(tenant, &DecisionRecord{At: t, Estado: EstadoRechazada})
	}
}

// decisionTally holds a batch chunk's decision counts until the chunk is
// committed.
type decisionTally struct {
	recs map[int64]*hourDelta
}

func (t *decisionTally) add(r *DecisionRecord) {
	if r == nil || r.EnRespaldo {
		return
	}
	if t.recs == nil {
		t.recs = map[int64]*hourDelta{}
	}
	h := HourOf(r.At)
	d := t.recs[h]
	if d == nil {
		d = &hourDelta{}
		t.recs[h] = d
	}
	d.countDecision(r)
}

// addTally adds a committed batch chunk's counts.
func (c *Counters) addTally(tenant string, t *decisionTally) {
	if c == nil || len(t.recs) == 0 {
		return
	}
	c.mu.Lock()
	for h, d := range t.recs {
		cur := c.delta(tenant, time.Unix(h*3600, 0))
		for i, n := range d.fixed {
			cur.fixed[i] += n
		}
	}
	c.mu.Unlock()
}

// countDecision counts one new decision record in d.
func (d *hourDelta) countDecision(r *DecisionRecord) {
	d.fixed[fixDecisions]++
	if r.Explorado {
		d.fixed[fixExplored]++
	}
	if r.Accion != 0 {
		d.fixed[fixSent]++
	}
	if r.EnControl {
		d.fixed[fixControl]++
	}
	if r.EnSombra {
		d.fixed[fixShadow]++
	}
}
