package engine

// The tenant's stored policy models (store.ModelKey). The learner stores
// each model it publishes under the next generation, and the same synced
// batch deletes the stored models but the one it replaces: the store holds
// the newest model and the last good one before it, and as each update is
// one batch, a crash at any point leaves both of one update or the other.
// A newest model that does not decode is quarantined alone and the tenant
// goes on from the last good one; only when neither decodes does it start
// again from the prior.

import (
	"bytes"
	"slices"

	"github.com/coupond/coupond/store"
)

// modelGens is what a tenant's learner knows of its stored models
// (tenantState.models, under learnMu once the tenant's state is loaded).
type modelGens struct {
	stored []uint64 // the generations stored, oldest first
	inUse  uint64   // the generation of the published model, if inUseOK
	// inUseOK: the published model is a stored one (not the prior).
	inUseOK bool
	// top is the highest generation stored or quarantined: none is
	// written again, so a quarantine entry stays the one model's.
	top uint64
}

// next is the generation of the next model stored.
func (g *modelGens) next() uint64 { return g.top + 1 }

// stale returns the generations a new model's batch deletes: every stored
// one but the model in use, which becomes the last good one.
func (g *modelGens) stale() []uint64 {
	var out []uint64
	for _, gen := range g.stored {
		if !g.inUseOK || gen != g.inUse {
			out = append(out, gen)
		}
	}
	return out
}

// saved records that the model of generation gen was committed (with the
// stale ones deleted) and published.
func (g *modelGens) saved(gen uint64) {
	g.stored = g.stored[:0]
	if g.inUseOK {
		g.stored = append(g.stored, g.inUse)
	}
	g.stored = append(g.stored, gen)
	g.inUse, g.inUseOK, g.top = gen, true, gen
}

// saveModel writes the model pm as the tenant's next generation to b and
// deletes the stale ones, and returns the generation for g.saved once b
// is committed. The caller holds the tenant's learnMu.
func saveModel(b *store.Batch, tenant string, g *modelGens, pm *publishedModel) (uint64, error) {
	data, err := pm.marshal()
	if err != nil {
		return 0, err
	}
	gen := g.next()
	b.Set(store.ModelKey(tenant, gen), data)
	for _, old := range g.stale() {
		b.Delete(store.ModelKey(tenant, old))
	}
	return gen, nil
}

// loadModel reads the tenant's newest stored model that decodes, and what
// it found stored. Newer ones, which do not decode, are quarantined, and
// the model's fallback note names the one loaded. With none that decodes
// (or none stored) the tenant starts from the prior, as it does when the
// newest that decodes is of an earlier format; the restart note says why.
func (e *core) loadModel(tenant string) (*publishedModel, modelGens, error) {
	g, vals, err := e.scanModels(tenant)
	if err != nil {
		return nil, g, err
	}
	damaged := 0
	for i := len(g.stored) - 1; i >= 0; i-- {
		gen := g.stored[i]
		pm, old, err := unmarshalModel(vals[i], e.policy)
		if err != nil {
			// The tenant goes on without it rather than stopping every
			// decision. One whose move failed (a full disk) stays stored,
			// not in use: the next update deletes it, as any stale one.
			if e.quarantine(tenant, store.ModelKey(tenant, gen), vals[i], err) == nil {
				g.stored = slices.Delete(g.stored, i, i+1)
			}
			damaged++
			continue
		}
		if old {
			e.log.Warn().Str("tenant", tenant).Msg("stored model of an earlier format: the policy starts afresh from the economic prior")
			pm.restarted = "its stored model is of an earlier format"
			if damaged > 0 {
				pm.restarted = "its newest stored model did not decode (quarantined) and the one before it is of an earlier format"
			}
			return pm, g, nil
		}
		g.inUse, g.inUseOK = gen, true
		if damaged > 0 {
			e.log.Warn().Str("tenant", tenant).Str("politica_version", pm.version).
				Msg("newest stored model did not decode: the last good model loaded")
			pm.fallback = "its newest stored model did not decode (quarantined); the last good one before it, politica_version " +
				pm.version + ", was loaded"
		}
		return pm, g, nil
	}
	pm := newPublishedModel(e.policy)
	switch {
	case damaged == 1:
		pm.restarted = "its stored model did not decode (quarantined)"
	case damaged > 1:
		pm.restarted = "its stored model and the last good one before it did not decode (quarantined)"
	}
	return pm, g, nil
}

// scanModels reads the tenant's stored models: their generations, oldest
// first, and their values; top is the highest generation stored or
// quarantined (the quarantine's model entries, a scan of a few keys).
func (e *core) scanModels(tenant string) (modelGens, [][]byte, error) {
	var g modelGens
	var vals [][]byte
	lo, hi := store.ModelSpan(tenant)
	err := e.db.Scan(lo, hi, func(k, v []byte) error {
		if gen, ok := store.ParseModelKey(tenant, k); ok {
			g.stored, g.top = append(g.stored, gen), max(g.top, gen)
			vals = append(vals, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		return g, nil, err
	}
	err = e.db.Scan(store.DamagedKey(tenant, lo), store.DamagedKey(tenant, hi), func(k, _ []byte) error {
		if gen, ok := store.ParseModelKey(tenant, store.DamagedOriginal(tenant, k)); ok {
			g.top = max(g.top, gen)
		}
		return nil
	})
	return g, vals, err
}
