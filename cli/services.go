package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// policyAlgorithm names the policy for "coupond version".
const policyAlgorithm = "per-action Bayesian ridge reward model + SquareCB inverse-gap exploration over optimistic scores, with a propensity floor"

// services are the long-lived parts built over the store, shared by
// "serve" and by admin commands run without a server.
type services struct {
	env      *env
	engine   *engine.Engine
	batch    *batch.Runner
	webhooks *batch.Webhooks
}

// serviceOptions are the serve flags the services need.
type serviceOptions struct {
	baseURL             string
	webhookAllowPrivate bool
}

func newServices(_ context.Context, e *env, opt serviceOptions) (*services, error) {
	if opt.baseURL == "" {
		opt.baseURL = "http://127.0.0.1:8080"
	}
	eng := engine.New(engine.Config{DB: e.db, Secrets: e.secrets, Log: e.log, Now: e.now})
	signer, err := batch.NewURLSigner(e.secrets.URL, opt.baseURL)
	if err != nil {
		return nil, fmt.Errorf("--base-url: %w", err)
	}
	hooks := batch.NewWebhooks(e.db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: opt.webhookAllowPrivate}),
		e.log, e.now, uint64(e.now().UnixNano()))
	runner := batch.NewRunner(batch.RunnerConfig{
		DB: e.db, Engine: eng, Log: e.log, Dir: filepath.Join(e.dataDir, "results"), Now: e.now,
		Signer: signer, Webhooks: hooks,
	})
	return &services{env: e, engine: eng, batch: runner, webhooks: hooks}, nil
}

func (s *services) close() {}

// tenantStatus gathers usage, data quality and warnings for "tenant show".
func (s *services) tenantStatus(t *store.Tenant) (usage, quality map[string]any, warnings []string, err error) {
	creds := s.env.db.Credentials(t.ID)
	active := 0
	for _, c := range creds {
		if c.Active() {
			active++
		}
	}
	usage = map[string]any{"credentials_active": active, "credentials_total": len(creds)}
	warnings = []string{}
	return usage, map[string]any{}, warnings, nil
}

// clockMoved tells the running services that a sandbox clock moved.
func (s *services) clockMoved(*store.Tenant) {}

func extraAdminCmds(*app) []*cobra.Command { return nil }

func scopeList() []string { return server.ScopeNames() }

func sortedMapKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
