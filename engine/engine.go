// Package engine is coupond's decider and learner: customer features from
// events, the policy and its exploration with exact propensities, campaign
// budgets, reward attribution, model updates and off-policy evaluation,
// and around them the tenants' daily quotas, the quarantine of damaged
// records and Records, the narrow door the privacy service erases and
// exports through. It knows no HTTP: the server and the batch runner call
// it.
package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// Config is what an Engine needs; cli builds it.
type Config struct {
	DB      *store.DB
	Secrets *store.Secrets
	Log     zerolog.Logger
	// Now is the real clock; each tenant's clock derives from it.
	Now func() time.Time
	// Seed fixes the exploration randomness (tests); 0 draws a random seed.
	Seed uint64
	// Policy configures every tenant's policy model; nil is
	// policy.DefaultConfig().
	Policy *policy.Config
	// FeaturesCache bounds the feature records ingestion keeps in memory
	// after committing them (see ingestTurn), every tenant's together
	// (featBudget), in bytes; 0 is DefaultFeaturesCache, negative keeps
	// none.
	FeaturesCache int
}

// DefaultFeaturesCache is Config.FeaturesCache's default: 32 MiB for all
// tenants together, the records of about 20,000 customers of a year's
// weekly tickets (1.5 KB each) or of the 100,000 of "coupond bench events"
// (15-20 MiB), beside serve's 192 MiB heap limit.
const DefaultFeaturesCache = 32 << 20

// Engine decides and learns for every tenant. It is safe for concurrent use.
//
// Engine itself is the decider (Decide, Confirm, Fallback, the decision
// records, batch decisions). Its other duties are types of their own, built
// by New over one shared core and reached through its fields, so a caller
// says which duty it uses (e.Learner.Status, e.Campaigns.PutCampaign) and
// Engine's method set stays the decider's: Campaigns (catalog, campaigns,
// budgets), Ingester (events), Learner (reward windows and model updates),
// Evaluator (off-policy evaluation), Quarantine (damaged records), Quotas
// (the tenants' daily quotas, counted by Decide and by Ingester.Receive;
// Ingest alone counts nothing) and KeyClaims (the Idempotency-Keys of batch
// creation).
type Engine struct {
	*core
	Campaigns  *Campaigns
	Ingester   *Ingester
	Learner    *Learner
	Evaluator  *Evaluator
	Quarantine *Quarantine
	Quotas     *Quotas
	// KeyClaims is the tenant's Idempotency-Keys for batch creation.
	KeyClaims *KeyClaims

	// nonceRand draws decision nonces (see freshNonce), apart from rng so
	// that ids do not shift the policy's draws.
	nonceMu   sync.Mutex
	nonceRand *rand.ChaCha8

	// scratch lends online decisions their scratch memory.
	scratch scratchPool

	// flights holds the Idempotency-Keys whose first request is running.
	flights keyFlights
}

// core is what every duty shares: the store, the clocks, the seeded
// randomness, each tenant's in-memory state and the readers of records
// more than one duty loads (which move damaged records to quarantine).
type core struct {
	db      *store.DB
	secrets *store.Secrets
	log     zerolog.Logger
	now     func() time.Time
	ids     decisionIDs

	rngMu sync.Mutex
	rng   *rand.Rand // the policy's draws: seeded, so tests can fix them

	mu      sync.Mutex
	tenants map[string]*tenantState

	seed maphash.Seed

	counters *Counters // operating counters for the console (counters.go)
	quotas   *Quotas   // the tenants' daily quotas (quotas.go)
	// damagedSeen counts the damaged records readers met (see quarantine).
	damagedSeen atomic.Int64
	// onlineAt is when the last online decision began (unix ns); batch jobs
	// and the learner pace themselves by it (pacing.go).
	onlineAt atomic.Int64

	policy policy.Config // every tenant's policy model's configuration

	featBudget *featBudget // Config.FeaturesCache resolved: every tenant's ingestTurn shares it
	featSpares featSpares  // every tenant's ingestTurn shares them
}

// tenantState is the in-memory state of one tenant: the published catalog
// and model (read without locks by decisions, swapped atomically), the
// campaign budgets, and the per-customer locks that serialise the
// read-check-write of one customer's decisions.
type tenantState struct {
	id        string
	catalogMu sync.Mutex
	catalog   atomic.Pointer[Catalog]
	model     atomic.Pointer[publishedModel]
	learnMu   sync.Mutex // one learner pass at a time
	models    modelGens  // the stored models (under learnMu)
	cats      catTally   // category names seen while the model has few main categories

	// learnCursor (under learnMu): the reward queue key the next learner
	// pass starts at (see Learn).
	learnCursor []byte
	// learnView: how the learner pass under way (none: nil) judges a
	// reward due; a confirmation of a reward it sees due waits for it.
	learnView atomic.Pointer[learnView]

	budgetMu  sync.Mutex
	campaigns map[string]*Campaign // nil value: known not to exist
	budgets   map[string]*budget

	// budgetGate: a batch chunk holds it (Lock) until its commit; other
	// writers of campaign budgets take it (RLock) before a customer lock.
	budgetGate sync.RWMutex

	// heldMu: the release of a held event batch (Ingester.releaseBatch)
	// holds it from its last read of the batch to its deletion; a
	// customer's erasure (Records.LockCustomer) takes it before ingestMu.
	heldMu sync.Mutex

	ingestMu  ingestTurn // event ingestion: requests fold, then apply, in order
	custLocks [custLockCount]sync.Mutex

	// The sandbox microsecond whose nonces need no store read (see
	// Engine.nonceFreeAt): nonceFree answers for nonceMicro once nonceSeen.
	nonceMu    sync.Mutex
	nonceSeen  bool
	nonceMicro int64
	nonceFree  bool
	// A block of nonceBlockSpan microseconds found empty: free from
	// nonceBlockFrom on (the latest microsecond drawn in it) while the clock
	// does not go back.
	nonceBlockSeen bool
	nonceBlock     int64
	nonceBlockFrom int64
}

// custLockCount is the number of per-customer locks of a tenant. An online
// decision holds its customer's lock through its synced commit (about a
// millisecond), so two customers that share a lock wait for each other's
// fsync: with a few thousand locks, the dozen decisions in flight at
// thousands per second rarely share one.
const custLockCount = 4096

// New builds an engine over the store.
func New(cfg Config) *Engine {
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	pol := policy.DefaultConfig()
	if cfg.Policy != nil {
		pol = *cfg.Policy
	}
	c := &core{
		db: cfg.DB, secrets: cfg.Secrets, log: cfg.Log, now: cfg.Now,
		ids:      newDecisionIDs(cfg.Secrets.Decision),
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tenants:  map[string]*tenantState{},
		seed:     maphash.MakeSeed(),
		counters: NewCounters(cfg.DB),
		policy:   pol,
	}
	switch {
	case cfg.FeaturesCache == 0:
		c.featBudget = newFeatBudget(DefaultFeaturesCache)
	default:
		c.featBudget = newFeatBudget(cfg.FeaturesCache) // negative: none kept
	}
	c.quotas = newQuotas(c)
	camps := &Campaigns{core: c}
	e := &Engine{
		core:       c,
		Campaigns:  camps,
		Ingester:   &Ingester{core: c},
		Evaluator:  &Evaluator{core: c},
		Quarantine: &Quarantine{core: c},
		Quotas:     c.quotas,
		nonceRand:  newNonceSource(seed),
		flights:    keyFlights{m: map[string]struct{}{}},
	}
	e.Learner = &Learner{core: c, campaigns: camps, pruneIdempotency: e.PruneIdempotency}
	e.KeyClaims = &KeyClaims{core: c, flights: &e.flights}
	return e
}

// ErrNoTenant is returned for a tenant that does not exist.
var ErrNoTenant = errors.New("engine: no such tenant")

// state returns the tenant's in-memory state, loading it on first use.
func (e *core) state(tenant string) (*tenantState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ts, ok := e.tenants[tenant]; ok {
		return ts, nil
	}
	if _, ok := e.db.Tenant(tenant); !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
	}
	ts := &tenantState{id: tenant, campaigns: map[string]*Campaign{}, budgets: map[string]*budget{}}
	ts.ingestMu.budget, ts.ingestMu.spares = e.featBudget, &e.featSpares
	c, err := e.loadCatalog(tenant)
	if err != nil {
		return nil, err
	}
	ts.catalog.Store(c)
	m, gens, err := e.loadModel(tenant)
	if err != nil {
		return nil, err
	}
	ts.model.Store(m)
	ts.models = gens
	e.tenants[tenant] = ts
	return ts, nil
}

// custLock returns the lock that serialises decisions of one customer.
func (ts *tenantState) custLock(seed maphash.Seed, clienteRef string) *sync.Mutex {
	return &ts.custLocks[ts.custLockIndex(seed, clienteRef)]
}

// custLockIndex is the stripe of custLocks that clienteRef's lock is.
func (ts *tenantState) custLockIndex(seed maphash.Seed, clienteRef string) uint32 {
	return uint32(maphash.String(seed, clienteRef) % uint64(len(ts.custLocks)))
}

// uniform draws a uniform number in [0, 1) from the engine's seeded source.
func (e *core) uniform() float64 {
	e.rngMu.Lock()
	u := e.rng.Float64()
	e.rngMu.Unlock()
	return u
}

func newNonceSource(seed uint64) *rand.ChaCha8 {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "coupond decision nonces")
	return rand.NewChaCha8(key)
}

// tenantNow returns the tenant record and its clock.
func (e *core) tenantNow(tenant string) (*store.Tenant, time.Time, error) {
	t, ok := e.db.Tenant(tenant)
	if !ok {
		return nil, time.Time{}, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
	}
	return t, t.Now(e.now()), nil
}

// stateNow is state and tenantNow together: what a decision, a batch job
// and a learning run each start from.
func (e *core) stateNow(tenant string) (*tenantState, *store.Tenant, time.Time, error) {
	ts, err := e.state(tenant)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	t, now, err := e.tenantNow(tenant)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return ts, t, now, nil
}
