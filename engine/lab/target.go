package lab

import (
	"context"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/engine"
	policypkg "github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// Target is the engine under test as a world's simulated retailer drives
// it: the inputs a retailer gives coupond (its catalog, decisions and
// their confirmations, events) and its sandbox tenant's clock. Every call
// is about the lab's one tenant. InProcess calls the engine in this
// process; the cli's --over-http target calls a coupond server through the
// client package. A world's measurements (the truth, the oracles, the
// engine's decision records, features and status) do not go through it:
// they read a Bench's store and engine.
type Target interface {
	// ReplaceCatalog makes acts the tenant's catalog.
	ReplaceCatalog(ctx context.Context, acts []engine.Action) error
	// Decide asks one online decision for clienteRef on channel push,
	// outside the daily cap (the lab's tenant is a sandbox without rate
	// limits), with its detalle when the target can give it (nil when
	// not: the world's model view then counts never-send's value).
	Decide(ctx context.Context, clienteRef string) (*api.Decision, error)
	// Confirm confirms decision id.
	Confirm(ctx context.Context, id string, c engine.Confirmation) error
	// Publish delivers evs, whose ts are not after the tenant clock; an
	// event refused is an error.
	Publish(ctx context.Context, evs []engine.IngestEvent) error
	// CloseWindow delivers the week's events evs (ts before the tenant
	// clock plus d) and moves the tenant clock d on, a reward window, so
	// that the rewards of the week's decisions come due, and returns once
	// the target's own way of moving the clock returns. In process the learner
	// has folded them all by then; over HTTP the clock moves as "coupond
	// admin clock advance" moves a running server's, and what the learner
	// has folded when the next decisions come is what the lab measures
	// (WorldWeek.LearnerLag).
	CloseWindow(ctx context.Context, evs []engine.IngestEvent, d time.Duration) error
}

// Bench is one world's engine under test: the Target its retailer drives,
// and the store and engine behind it, which the world's measurements read
// (never to decide, ingest or learn: those go through Target). Close
// releases it all.
type Bench struct {
	Target Target
	DB     *store.DB
	Engine *engine.Engine
	Close  func() error
}

// BenchSetup is what a world's bench is opened with: the lab's sandbox
// tenant to create (its clock is the run's start), the engine's seed and
// its policy configuration (nil: the default).
type BenchSetup struct {
	Tenant *store.Tenant
	Seed   uint64
	Policy *policypkg.Config
}

// Opener opens a world's Bench; InProcess is the lab's own.
type Opener func(ctx context.Context, s BenchSetup) (*Bench, error)

// labStart is the start of every run: a Monday 09:00 UTC, the tenant's
// clock and, in process, the engine's wall clock (openLab).
var labStart = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// labTenantSetup is the lab's one sandbox tenant: the lab's reward
// window, no grace, no rate limits, the lab's opt-out penalty and
// controlShare, its clock at labStart.
func labTenantSetup(controlShare float64) *store.Tenant {
	s := store.DefaultSettings()
	s.RewardWindow, s.RewardGrace = window, 0
	s.ControlShare, s.RateLimits = controlShare, false
	s.OptoutPenaltyCents = penaltyMXN * 100
	return &store.Tenant{ID: labTenant, CreatedAt: labStart, Sandbox: true, ClockNow: labStart, Settings: s}
}

// inProcess is the Target of InProcess: the engine's own calls, with the
// lab's clock (openLab), and the learner run to the end after each window.
type inProcess struct {
	lab *openedLab
}

// InProcess opens a world's bench in this process (openLab): a store on
// store.NewMemFS, so worlds may run concurrently, and the engine on the
// lab's clock, whose learner runs synchronously after each window.
func InProcess(_ context.Context, s BenchSetup) (*Bench, error) {
	l, err := openLab(s)
	if err != nil {
		return nil, err
	}
	return &Bench{Target: &inProcess{lab: l}, DB: l.db, Engine: l.eng, Close: l.db.Close}, nil
}

func (p *inProcess) ReplaceCatalog(_ context.Context, acts []engine.Action) error {
	_, now, err := tenantNow(p.lab.db)
	if err != nil {
		return err
	}
	_, err = p.lab.eng.Campaigns.ReplaceCatalog(labTenant, acts, now)
	return err
}

func (p *inProcess) Decide(_ context.Context, clienteRef string) (*api.Decision, error) {
	d, err := p.lab.eng.Decide(labTenant, engine.Request{ClienteRef: clienteRef, Canal: "push", CapExempt: true, Explain: true})
	return (*api.Decision)(d), err
}

func (p *inProcess) Confirm(_ context.Context, id string, c engine.Confirmation) error {
	_, err := p.lab.eng.Confirm(labTenant, id, c)
	return err
}

// Publish ingests evs through engine.Ingest, the API's event path, 2,000
// at a time.
func (p *inProcess) Publish(_ context.Context, evs []engine.IngestEvent) error {
	for len(evs) > 0 {
		n := min(len(evs), 2000)
		if _, err := p.lab.eng.Ingester.Ingest(labTenant, evs[:n]); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// CloseWindow ingests evs, moves the lab's clock d and runs the learner
// until a pass finds nothing due (advanceAndLearn).
func (p *inProcess) CloseWindow(ctx context.Context, evs []engine.IngestEvent, d time.Duration) error {
	if err := p.Publish(ctx, evs); err != nil {
		return err
	}
	return advanceAndLearn(p.lab, d)
}
