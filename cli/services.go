package cli

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// services are the long-lived parts built over the store, shared by
// "serve" and by admin commands run without a server.
type services struct {
	env      *env
	engine   *engine.Engine
	privacy  *privacy.Service
	backups  *privacy.Backups
	batch    *batch.Runner
	webhooks *batch.Webhooks
	api      *server.Server
	ready    atomic.Bool
	// consoleURL is the console's address when serve runs one.
	consoleURL string
	// tenantGrace is how long after its mark a tenant's deletion waits
	// before its sweep, inside serve (privacy.TenantHooks.Grace).
	tenantGrace time.Duration
	// consoleErr is why serve runs no console though --console-addr asked
	// for one (its port was taken, say); nil otherwise.
	consoleErr error
}

// serviceOptions are the serve flags the services need.
type serviceOptions struct {
	baseURL             string
	webhookAllowPrivate bool
	metricsTenantLabel  bool
	// featuresCache is engine.Config.FeaturesCache (0: the engine's
	// default), from serve's --features-cache-mib.
	featuresCache int
	// trustedProxies is server.Deps.TrustedProxies, from serve's
	// --trusted-proxies.
	trustedProxies []netip.Prefix
	// resumedAfterFullDisk is batch.RunnerConfig.ResumedAfterFullDisk:
	// serve restarted itself in place after a write failed for want of
	// space (resumedEnv).
	resumedAfterFullDisk bool
	// readTimeout is serve's --read-timeout (0: none given, an admin
	// command's services): a tenant's deletion sweeps no sooner than it
	// and half a minute after its mark (tenantGrace).
	readTimeout time.Duration
	// now is the env's clock (nil: time.Now).
	now func() time.Time
	// seed and policy are engine.Config's Seed and Policy (0 and nil: a
	// random seed and the default policy); only the lab's servers
	// (coupond lab --over-http) set them, so that a world's engine over
	// HTTP draws as the in-process one does.
	seed   uint64
	policy *policy.Config
}

func newServices(_ context.Context, e *env, opt serviceOptions) (*services, error) {
	if opt.baseURL == "" {
		opt.baseURL = "http://127.0.0.1:8080"
	}
	eng := engine.New(engine.Config{DB: e.db, Secrets: e.secrets, Log: e.log, Now: e.now, FeaturesCache: opt.featuresCache,
		Seed: opt.seed, Policy: opt.policy})
	signer, err := batch.NewURLSigner(e.secrets.URL, opt.baseURL)
	if err != nil {
		return nil, fmt.Errorf("--base-url: %w", err)
	}
	hooks := batch.NewWebhooks(e.db, batch.NewDeliverer(batch.DelivererConfig{AllowPrivate: opt.webhookAllowPrivate}),
		e.log, e.now, uint64(e.now().UnixNano()))
	hooks.CountInto(eng.Counters())
	hooks.QuarantineInto(eng.Records().Quarantine)
	runner := batch.NewRunner(batch.RunnerConfig{
		DB: e.db, Engine: eng, Log: e.log, Dir: e.resultsPath(), Now: e.now,
		Signer: signer, Webhooks: hooks, ResumedAfterFullDisk: opt.resumedAfterFullDisk,
	})
	backups := privacy.NewBackups(e.dataDir, e.now, e.log)
	priv := privacy.New(privacy.Config{DB: e.db, Engine: eng, Secrets: e.secrets, Now: e.now, Log: e.log, Ledger: backups.Ledger,
		HeldEvent: server.HeldEvent})
	svc := &services{env: e, engine: eng, batch: runner, webhooks: hooks, privacy: priv, backups: backups,
		tenantGrace: tenantGrace(opt.readTimeout)}
	svc.api = server.New(server.Deps{
		Log: e.log, DB: e.db, Secrets: e.secrets, Now: e.now, Ready: svc.ready.Load,
		Engine: eng, Privacy: priv, Batch: runner, Webhooks: hooks, WebhookAllowPrivate: opt.webhookAllowPrivate,
		MetricsTenantLabel: opt.metricsTenantLabel, TrustedProxies: opt.trustedProxies, SetAside: backups.SetAside,
		BackupRegistryUnusable: backups.RegistryUnusable,
	})
	// Batch jobs, webhooks and the learner report to /metrics.
	obs, learned := svc.api.Observers()
	runner.Observe(obs)
	runner.OnJobEnd(priv.RetryWaiting) // deletions waiting for a tenant's job go on when it ends
	hooks.Observe(obs)
	eng.Learner.ObserveLearn(learned)
	return svc, nil
}

// close writes the console's pending counters.
func (s *services) close() {
	if err := s.engine.Counters().Flush(); err != nil {
		s.env.log.Error().Err(err).Msg("flush console counters")
	}
}

// quotaUsage adds to usage what tenant t took today (the UTC day of its
// clock) of its daily quotas (quota_decisions_today, quota_events_today), and
// returns a warning for each quota used up: the API answers 429
// limite_excedido until the tenant's next midnight.
func (s *services) quotaUsage(t *store.Tenant, usage map[string]any) (warnings []string, err error) {
	now := t.Now(s.env.now())
	for _, q := range []struct{ kind, key, name, route string }{
		{engine.QuotaDecisions, "quota_decisions_today", "decision", "POST /v1/decisiones"},
		{engine.QuotaEvents, "quota_events_today", "event", "POST /v1/eventos (new events)"},
	} {
		used, err := s.engine.Quotas.Used(t.ID, q.kind, now)
		if err != nil {
			return nil, fmt.Errorf("daily %s quota: %w", q.name, err)
		}
		usage[q.key] = used
		limit := t.Settings.QuotaDecisionsDay
		if q.kind == engine.QuotaEvents {
			limit = t.Settings.QuotaEventsDay
		}
		if limit > 0 && used >= limit {
			warnings = append(warnings, fmt.Sprintf("daily %s quota used up (%d of %d on %s, UTC day of the tenant clock): %s answers 429 limite_excedido until 00:00 UTC",
				q.name, used, limit, now.UTC().Format(time.DateOnly), q.route))
		}
	}
	return warnings, nil
}

// tenantStatus gathers usage, data quality and warnings for "tenant show".
func (s *services) tenantStatus(t *store.Tenant) (usage, quality map[string]any, guard policy.GuardStatus, warnings []string, err error) {
	creds := s.env.db.Credentials(t.ID)
	active := 0
	for _, c := range creds {
		if c.Active() {
			active++
		}
	}
	st, err := s.engine.Learner.Status(t.ID)
	if err != nil {
		return nil, nil, guard, nil, err
	}
	guard = st.Guard
	usage = map[string]any{
		"credentials_active": active, "credentials_total": len(creds),
		"policy_version": st.PoliticaVersion, "rewards_learned": st.RewardsLearned,
		"catalog_version": st.CatalogVersion, "catalog_actions": st.CatalogActions,
	}
	quotaWarnings, err := s.quotaUsage(t, usage)
	if err != nil {
		return nil, nil, guard, nil, err
	}
	q := st.Quality
	quality = map[string]any{}
	for name, n := range q.Counts() {
		quality[name] = n
	}
	warnings = []string{}
	if labelled, n := q.Labelled(); n >= 20 && float64(n-labelled) > 0.05*float64(n) {
		warnings = append(warnings, fmt.Sprintf("%.1f%% of CUPON_RECIBIDO events since the tenant's creation carry no decision_id (spec: at least 95%% must)",
			100*float64(n-labelled)/float64(n)))
	}
	if q.TicketsIVASospechoso > 0 {
		warnings = append(warnings, fmt.Sprintf("%d tickets look VAT-inclusive against extra.ticket_total: amounts must be without VAT", q.TicketsIVASospechoso))
	}
	if q.Redenciones >= 20 && float64(q.RedencionesCuponDesconocido) > 0.05*float64(q.Redenciones) {
		warnings = append(warnings, fmt.Sprintf("%d redemptions of coupons never received (CUPON_RECIBIDO missing or sent late)", q.RedencionesCuponDesconocido))
	}
	if g := st.Guard; g.Active {
		warnings = append(warnings, fmt.Sprintf("policy guard active: the learned policy is below baseline %d (0 = never send) with confidence; decisions exploit that baseline while it learns", g.Baseline))
	}
	if st.ModelFallback != "" {
		warnings = append(warnings, "learning goes on from the last good model: "+st.ModelFallback+
			"; the rewards of the update that stored the damaged one are not in it")
	}
	if st.ModelRestarted != "" {
		warnings = append(warnings, "learning started again from the economic prior: "+st.ModelRestarted+
			"; the send gate tests again, and the learner's next update stores a model of the current format")
	}
	if t.Settings.Paused {
		warnings = append(warnings, "tenant paused: every API call answers 503 inquilino_pausado")
	}
	warnings = append(warnings, quotaWarnings...)
	for _, st := range s.api.AbuseStates(t.ID) {
		if st.Level > 0 {
			last := st.Steps[len(st.Steps)-1]
			warnings = append(warnings, fmt.Sprintf("credential %s at abuse level %s since %s: %s", st.ClientID, st.LevelName(), last.At.Format(time.RFC3339), last.Reason))
		}
	}
	if n := s.api.QuarantineCount(t.ID); n > 0 {
		warnings = append(warnings, fmt.Sprintf("%d event requests in quarantine: release with 'admin abuse release --tenant %s'", n, t.ID))
	}
	return usage, quality, guard, warnings, nil
}

// clockMoved runs the learner for a sandbox tenant whose clock moved, so
// rewards whose window closed are folded before the command returns. The
// fold is background work beside online decisions (inside serve, through
// the admin socket), so it runs on a low-priority thread of its own, as
// the learner loop does (engine.LowPriority); the command waits for it.
func (s *services) clockMoved(t *store.Tenant) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.LowPriority()
		for {
			st, err := s.engine.Learner.Learn(t.ID)
			if err != nil {
				s.env.log.Error().Err(err).Str("tenant", t.ID).Msg("learner after clock advance")
				return
			}
			if !st.Worked() {
				return
			}
		}
	}()
	<-done
}

// extraAdminCmds are the admin commands beyond tenants, credentials and
// clocks.
func extraAdminCmds(a *app) []*cobra.Command {
	shadow := groupCmd("shadow", "Shadow mode reports", withDeadline(shadowReportCmd(a), longAdmin)) // reads every shadow decision
	// A watch lasts as long as its job (a large one runs for hours); a
	// profile samples up to 10 minutes.
	batch := groupCmd("batch", "Batch decision jobs: watch a job's progress", withDeadline(batchWatchCmd(a), 24*time.Hour))
	debug := groupCmd("debug", "Diagnostics of the running server (profiles)", withDeadline(pprofCmd(a), 15*time.Minute))
	return append([]*cobra.Command{withDeadline(evaluateCmd(a), longAdmin), shadow, abuseCmd(a), batch, consoleCmd(a),
		withDeadline(checkCmd(a), longAdmin), debug, keysCmd(a)}, dataCmds(a)...)
}

func scopeList() []string { return server.ScopeNames() }
