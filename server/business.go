package server

import (
	"errors"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// business are the /metrics series of what the service does for the
// retailer: decisions, learning, batch jobs, webhooks, abuse. Their labels
// are low-cardinality (action ids of the catalogs, a handful of outcomes);
// a "tenant" label is added to every one of them only when the operator
// turns it on (serve --metrics-tenant-label), for installs with few
// tenants.
//
// Adding a series is one entry: a counter in newBusiness and a call where
// the event happens, or a tenantGauge in gauges (its value taken at scrape
// time from the tenantReading, which readTenant fills once per tenant), or
// for a process-wide value m.reg.MustRegister(prometheus.NewGaugeFunc(…)).
type business struct {
	tenantLabel bool

	decisions   *prometheus.CounterVec // source, action, outcome
	folded      *prometheus.CounterVec
	notLearned  *prometheus.CounterVec // reason
	batchJobs   *prometheus.CounterVec // estado
	batchLines  *prometheus.CounterVec
	webhooks    *prometheus.CounterVec // outcome
	escalations *prometheus.CounterVec // step

	// decided caches the coupond_decisions_total counter of each label
	// set (decisionLabels → prometheus.Counter): WithLabelValues hashes
	// and looks up four strings, about 4 µs of every online decision.
	decided sync.Map

	// actionsMu guards actions: per tenant ("" without the tenant label)
	// the action ids besides 0 that have a label of their own.
	actionsMu sync.Mutex
	actions   map[string]map[int]bool

	gauges []tenantGauge
	// read reads a tenant for the gauges, once per tenant and scrape.
	read func(tenant string) tenantReading
}

// maxActionLabels bounds the action ids besides 0 that
// coupond_decisions_total carries, per tenant with the tenant label: the
// largest catalog. A catalog's ids are the tenant's to choose (up to
// 1000000) and replace, so the ids met after the first maxActionLabels
// count under action="other" (actionOther) rather than adding series
// without end.
const maxActionLabels = 1000

// actionOther is the action label of the ids past maxActionLabels.
const actionOther = "other"

// decisionLabels keys business.decided.
type decisionLabels struct {
	tenant, source, outcome string
	accion                  int
}

// tenantGauge is a per-tenant value shown at scrape time, taken from the
// tenant's tenantReading. Without the tenant label the tenants' values are
// summed, or their maximum taken with max or their minimum with min (0
// without tenants).
type tenantGauge struct {
	name, help string
	max, min   bool
	value      func(r *tenantReading) (float64, error)
}

// tenantReading is what the tenant gauges show of one tenant, read once
// per scrape and tenant (business.read): the learner backlog is a scan of
// the tenant's due rewards (up to backlogLimit keys, and the deleted ones
// until compaction), which two gauges read once each per scrape. An error
// leaves out of the scrape only the gauges that show that part.
type tenantReading struct {
	backlog    engine.LearnerBacklog
	backlogErr error
	guard      guardReading
	guardErr   error
	// quarantined counts the event requests held in abuse quarantine.
	quarantined int
}

// guardReading is what the gauges show of the tenant's policy guard
// (engine's Learner.Guard).
type guardReading struct {
	active, gateOpen bool
	switches         int
	policy           float64 // the policy's estimated value, MXN per decision
	estimated        bool    // a reward was learned: policy is an estimate
	vsBaseline       float64 // the smallest policy value minus a baseline's; 0 without any
	vsBaselineZ      float64 // the smallest of those differences over its standard error; 0 without any
}

// Decision outcomes (label outcome of coupond_decisions_total).
const (
	outcomeExplored  = "explored"  // drawn by exploration
	outcomeExploited = "exploited" // the policy's best action
	outcomeControl   = "control"   // control group
	outcomeFallback  = "fallback"  // the engine's or the caller's fallback rule
	// outcomeWindowOpen: no new decision, the customer's reward window is
	// open (the answer names the open decision; the console's decision
	// counts leave it out too).
	outcomeWindowOpen = "window_open"
)

func newBusiness(reg *prometheus.Registry, tenantLabel bool) *business {
	b := &business{tenantLabel: tenantLabel, actions: map[string]map[int]bool{}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		if tenantLabel {
			labels = append([]string{"tenant"}, labels...)
		}
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(v)
		return v
	}
	b.decisions = counter("coupond_decisions_total",
		"Decisions answered, by source (online, batch, respaldo: fallback records of the caller), action id and outcome (explored, exploited, control, fallback, window_open: no new decision, the customer's reward window is open); an idempotent replay counts again.",
		"source", "action", "outcome")
	b.folded = counter("coupond_rewards_folded_total", "Final rewards the learner folded into a model.")
	b.notLearned = counter("coupond_rewards_not_learned_total",
		"Final rewards the learner closed without learning, by reason (unconfirmed, modified, replaced: a decision a fallback record replaced, voided: a batch decision of a job that failed, control).", "reason")
	b.batchJobs = counter("coupond_batch_jobs_total", "Batch jobs ended, by estado (completado, fallido).", "estado")
	b.batchLines = counter("coupond_batch_lines_total", "Lines decided by batch jobs (one per customer).")
	b.webhooks = counter("coupond_webhook_deliveries_total",
		"Webhook delivery attempts by outcome: delivered (2xx), retry (failed, retried later), given_up (failed on the last attempt), dropped (no usable registration).",
		"outcome")
	b.escalations = counter("coupond_abuse_escalations_total",
		"Abuse escalation steps taken, by step reached (aviso: warning, freno: brake, cuarentena: quarantine, suspension).", "step")
	if !tenantLabel {
		b.known("")
	}
	return b
}

// known makes the counters' known label values of tenant (ignored
// without the tenant label) start at 0, so that rate(), increase() and the
// alerts see a series before its first event: a series born at 1 would
// never show an increase (the first webhook given up, say). Without the
// label it runs once, at start; with it, for every tenant at every scrape
// (collect), so a tenant's series are there from the scrape after its
// creation. Idempotent.
func (b *business) known(tenant string) {
	b.with(b.folded, tenant)
	b.with(b.batchLines, tenant)
	for _, r := range []string{"unconfirmed", "modified", "replaced", "voided", "control"} {
		b.with(b.notLearned, tenant, r)
	}
	for _, e := range []string{api.EstadoCompletado, api.EstadoFallido} {
		b.with(b.batchJobs, tenant, e)
	}
	for _, o := range []string{batch.WebhookDelivered, batch.WebhookRetry, batch.WebhookGivenUp, batch.WebhookDropped} {
		b.with(b.webhooks, tenant, o)
	}
	for _, step := range levelNames[1:] {
		b.with(b.escalations, tenant, step)
	}
}

// with returns the label values, the tenant first when the label is on.
func (b *business) with(v *prometheus.CounterVec, tenant string, values ...string) prometheus.Counter {
	if b.tenantLabel {
		values = append([]string{tenant}, values...)
	}
	return v.WithLabelValues(values...)
}

// decision counts one decision answered from source.
func (b *business) decision(tenant, source string, d *engine.Decision) {
	outcome := outcomeExploited
	switch {
	case d.EnRespaldo:
		outcome = outcomeFallback
	case (*api.Decision)(d).VentanaAbierta():
		outcome = outcomeWindowOpen
	case d.EnControl:
		outcome = outcomeControl
	case d.Explorado:
		outcome = outcomeExplored
	}
	key := decisionLabels{source: source, outcome: outcome, accion: d.Accion}
	if b.tenantLabel {
		key.tenant = tenant
	}
	c, ok := b.decided.Load(key)
	if !ok {
		action, own := b.actionLabel(key.tenant, d.Accion)
		if !own {
			// Not cached: decided stays as bounded as the series.
			b.with(b.decisions, tenant, source, action, outcome).Inc()
			return
		}
		c, _ = b.decided.LoadOrStore(key, b.with(b.decisions, tenant, source, action, outcome))
	}
	c.(prometheus.Counter).Inc()
}

// actionLabel returns the action label of id for tenant ("" without the
// tenant label): its own (own true) for 0 and the first maxActionLabels
// ids met, else actionOther.
func (b *business) actionLabel(tenant string, id int) (label string, own bool) {
	if id == 0 {
		return "0", true
	}
	b.actionsMu.Lock()
	defer b.actionsMu.Unlock()
	ids := b.actions[tenant]
	if ids == nil {
		ids = map[int]bool{}
		b.actions[tenant] = ids
	}
	if !ids[id] {
		if len(ids) >= maxActionLabels {
			return actionOther, false
		}
		ids[id] = true
	}
	return strconv.Itoa(id), true
}

// answered counts what an API answer tells the business series: an
// online decision (the pipeline calls it for every answer it writes;
// tenant is nil on public routes).
func (b *business) answered(tenant *store.Tenant, body any) {
	if d, ok := body.(*engine.Decision); ok {
		b.decision(tenant.ID, "online", d)
	}
}

func (b *business) learned(tenant string, st engine.LearnStats) {
	if st.Folded > 0 {
		b.with(b.folded, tenant).Add(float64(st.Folded))
	}
	for reason, n := range map[string]int{"unconfirmed": st.Unconfirmed, "modified": st.Modified, "replaced": st.Replaced, "voided": st.Voided, "control": st.Control} {
		if n > 0 {
			b.with(b.notLearned, tenant, reason).Add(float64(n))
		}
	}
}

func (b *business) jobEnded(tenant, estado string, lines int) {
	b.with(b.batchJobs, tenant, estado).Inc()
	b.with(b.batchLines, tenant).Add(float64(lines))
}

// collect reads each of tenants once (b.read) and sends every tenant
// gauge of them; with the tenant label it also starts each tenant's
// counters at 0 (known).
func (b *business) collect(ch chan<- prometheus.Metric, tenants []string) {
	readings := make([]tenantReading, len(tenants))
	for i, t := range tenants {
		readings[i] = b.read(t)
		if b.tenantLabel {
			b.known(t)
		}
	}
	for _, g := range b.gauges {
		if b.tenantLabel {
			desc := prometheus.NewDesc(g.name, g.help, []string{"tenant"}, nil)
			for i, t := range tenants {
				if v, err := g.value(&readings[i]); err == nil {
					ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, t)
				}
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, g.help, nil, nil), prometheus.GaugeValue, g.combine(readings))
	}
}

// combine is g's value over every tenant, without the tenant label: the
// sum, or the largest (max) or smallest (min); 0 without any.
func (g tenantGauge) combine(readings []tenantReading) float64 {
	total, seen := 0.0, false
	for i := range readings {
		v, err := g.value(&readings[i])
		switch {
		case err != nil:
		case !g.max && !g.min:
			total += v
		case !seen || g.max && v > total || g.min && v < total: // a maximum may be below 0
			total = v
		}
		seen = seen || err == nil
	}
	return total
}

// tenantCollector adapts business.collect to the registry.
type tenantCollector struct {
	b       *business
	tenants func() []string
}

// Describe sends nothing: the collector is unchecked (its series depend on
// the tenants present at scrape time).
func (c tenantCollector) Describe(ch chan<- *prometheus.Desc) {}
func (c tenantCollector) Collect(ch chan<- prometheus.Metric) { c.b.collect(ch, c.tenants()) }

// backlogLimit bounds the learner backlog read per tenant and scrape.
const backlogLimit = 100_000

// watchTenants registers the gauges read at scrape time from the engine
// and the abuse guard, each tenant read once per scrape (readTenant).
func (s *Server) watchTenants() {
	b := s.metrics.business
	b.read = s.readTenant
	backlog := func(v func(bl engine.LearnerBacklog) float64) func(r *tenantReading) (float64, error) {
		return func(r *tenantReading) (float64, error) { return v(r.backlog), r.backlogErr }
	}
	guard := func(v func(g guardReading) float64) func(r *tenantReading) (float64, error) {
		return func(r *tenantReading) (float64, error) { return v(r.guard), r.guardErr }
	}
	b.gauges = append(b.gauges,
		tenantGauge{name: "coupond_learner_lag_seconds", max: true,
			help:  "How long the oldest final-but-unfolded reward has been due, by the tenant clock (0 when the learner keeps up); without the tenant label, the largest.",
			value: backlog(func(bl engine.LearnerBacklog) float64 { return bl.Lag.Seconds() })},
		tenantGauge{name: "coupond_learner_rewards_pending",
			help:  "Rewards whose window and grace have passed but that the learner has not made final yet (counted up to 100000 per tenant).",
			value: backlog(func(bl engine.LearnerBacklog) float64 { return float64(bl.Pending) })},
		tenantGauge{name: "coupond_policy_guard_active",
			help:  "1 while the tenant's policy guard is active: the learned policy is below a baseline (never-send or one action) with confidence and decisions exploit that baseline; without the tenant label, the number of such tenants.",
			value: guard(func(g guardReading) float64 { return boolGauge(g.active) })},
		tenantGauge{name: "coupond_policy_guard_switches",
			help:  "Policy guard activations and releases since the model began (summed without the tenant label).",
			value: guard(func(g guardReading) float64 { return float64(g.switches) })},
		tenantGauge{name: "coupond_policy_value_mxn",
			help: "The learned policy's estimated value per decision (doubly robust, MXN over the reward window, faded over about a window); a tenant with no reward learned yet has none and is left out; without the tenant label, the largest (0 when no tenant has one).", max: true,
			value: func(r *tenantReading) (float64, error) {
				if r.guardErr == nil && !r.guard.estimated {
					return 0, errNoEstimate
				}
				return r.guard.policy, r.guardErr
			}},
		tenantGauge{name: "coupond_policy_value_vs_baseline", min: true,
			help:  "The learned policy's estimated value minus its best baseline's (never-send or one action; doubly robust, MXN per decision, faded over about a window); 0 before any estimate; without the tenant label, the smallest.",
			value: guard(func(g guardReading) float64 { return g.vsBaseline })},
		tenantGauge{name: "coupond_policy_value_vs_baseline_z", min: true,
			help:  "The smallest of the learned policy's estimated value minus a baseline's, in standard errors of that difference (below -2: a baseline earns more with confidence; a baseline seldom sent reads near 0 however large its difference); 0 before any estimate; without the tenant label, the smallest.",
			value: guard(func(g guardReading) float64 { return g.vsBaselineZ })},
		tenantGauge{name: "coupond_policy_gate_open",
			help:  "1 while the tenant's send gate is open: the model's coupon choices beat never-send with confidence and are sent to all but the never-send share (0 while they are tested or the guard holds never-send); without the tenant label, the number of such tenants.",
			value: guard(func(g guardReading) float64 { return boolGauge(g.gateOpen) })},
		tenantGauge{name: "coupond_abuse_quarantined_requests",
			help:  "Event requests held in abuse quarantine, waiting for 'coupond admin abuse release'.",
			value: func(r *tenantReading) (float64, error) { return float64(r.quarantined), nil }},
	)
	s.metrics.reg.MustRegister(tenantCollector{b: b, tenants: func() []string {
		var ids []string
		for _, t := range s.DB.Tenants() {
			ids = append(ids, t.ID)
		}
		return ids
	}})
}

// readTenant reads what the tenant gauges show of tenant: its learner
// backlog (one scan), its policy guard and its abuse quarantine.
func (s *Server) readTenant(tenant string) tenantReading {
	var r tenantReading
	r.backlog, r.backlogErr = s.Engine.Learner.Backlog(tenant, backlogLimit)
	g, err := s.Engine.Learner.Guard(tenant)
	r.guard, r.guardErr = guardReading{active: g.Active, gateOpen: g.Gate.Open(), switches: g.Switches, policy: g.Policy, estimated: g.Rewards > 0}, err
	// The smallest difference and the smallest z (0 without any; above 0
	// when the policy beats every baseline): below 0, some baseline is
	// estimated to earn more than the policy.
	zSeen := false
	for i, b := range g.Baselines {
		if i == 0 || b.Diff < r.guard.vsBaseline {
			r.guard.vsBaseline = b.Diff
		}
		if b.SE == nil || *b.SE <= 0 {
			continue
		}
		if z := b.Diff / *b.SE; !zSeen || z < r.guard.vsBaselineZ {
			r.guard.vsBaselineZ, zSeen = z, true
		}
	}
	r.quarantined = s.QuarantineCount(tenant)
	return r
}

// errNoEstimate leaves out of a gauge a tenant that has no value for it
// yet: a 0 would read as an estimate (and, without the tenant label,
// could hide the other tenants' largest value when they are below 0).
var errNoEstimate = errors.New("no estimate yet")

// boolGauge is 1 for true, 0 for false.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Observers returns the callbacks through which the batch runner, the
// webhook service and the learner report to /metrics; cli installs them.
func (s *Server) Observers() (batch.Observer, func(tenant string, st engine.LearnStats)) {
	b := s.metrics.business
	return batch.Observer{
		Decision:       func(tenant string, d *engine.Decision) { b.decision(tenant, "batch", d) },
		JobEnded:       b.jobEnded,
		WebhookAttempt: func(tenant, outcome string) { b.with(b.webhooks, tenant, outcome).Inc() },
	}, b.learned
}
