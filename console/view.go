package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// The pages read the engine's hourly counters (engine.Counters: at most
// historyHours small records per tenant), the tenant record, the
// data-quality counters, the abuse guard's in-memory states, and small
// bounded tables (batch jobs, pending deletions, webhook queue). Nothing
// scans a tenant's decisions or events per page view.
const (
	historyHours = 8 * 24 // hourly records read: confirmations count for 7 days, plus one to show what expired
	confirmHours = 7 * 24 // the confirmation window (engine.DecisionTTL)
	plotHours    = 48     // hourly plots
	minShare     = 0.95   // spec: more than 95 % confirmed; at least 95 % of coupons labelled
)

// hours is a tenant's hourly counters from its clock's current hour back
// historyHours hours: h[len(h)-1] is the current hour.
type hours struct {
	now  time.Time
	last int64 // unix hour of h[len-1]
	h    []map[string]int64
}

func (c *Console) loadHours(t *store.Tenant) (*hours, error) {
	now := t.Now(c.d.Now())
	last := engine.HourOf(now)
	h, err := c.d.Engine.Counters().Hours(t.ID, last-historyHours+1, last)
	if err != nil {
		return nil, err
	}
	return &hours{now: now, last: last, h: h}, nil
}

// sum adds counter name over the last n hours.
func (h *hours) sum(name string, n int) int64 {
	var s int64
	for _, m := range h.h[max(0, len(h.h)-n):] {
		s += m[name]
	}
	return s
}

// sumPrefix adds, per name suffix, the counters whose name starts with
// prefix over the last n hours.
func (h *hours) sumPrefix(prefix string, n int) map[string]int64 {
	out := map[string]int64{}
	for _, m := range h.h[max(0, len(h.h)-n):] {
		for k, v := range m {
			if strings.HasPrefix(k, prefix) {
				out[strings.TrimPrefix(k, prefix)] += v
			}
		}
	}
	return out
}

func (h *hours) hourStart(i int) time.Time {
	return time.Unix((h.last-int64(len(h.h)-1-i))*3600, 0).UTC()
}

// share is a fraction that may be undefined (no denominator).
type share struct {
	Num, Den int64
}

func (s share) Defined() bool { return s.Den > 0 }
func (s share) Value() float64 {
	if s.Den == 0 {
		return 0
	}
	return float64(s.Num) / float64(s.Den)
}
func (s share) String() string {
	if s.Den == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f %%", 100*s.Value())
}

// Low reports whether the share is defined and at or under the spec's 95 %.
func (s share) Low() bool { return s.Defined() && s.Value() <= minShare }

// labelledShare is the share of the coupons received since the tenant's
// creation that carry a decision_id (engine.Quality.Labelled).
func labelledShare(q *engine.Quality) share {
	n, of := q.Labelled()
	return share{n, of}
}

// tenantRow is one line of the tenants page.
type tenantRow struct {
	ID        string
	Status    []string // active|paused, shadow, sandbox
	Paused    bool
	Decisions int64 // last 24 h
	Events    int64 // last 24 h
	Confirmed share // decisions of the last 7 days confirmed
	Labelled  share // coupons received with a decision_id, since the tenant's creation
	Warnings  []string
}

// rank orders the tenants page: 0 for a red row (confirmations at or
// under 95 %), 1 for a yellow one (open warnings), 2 for the rest.
func (r tenantRow) rank() int {
	switch {
	case r.Confirmed.Low():
		return 0
	case len(r.Warnings) > 0:
		return 1
	}
	return 2
}

func statusWords(t *store.Tenant) []string {
	st := []string{"active"}
	if t.Settings.Paused {
		st[0] = "paused"
	}
	if t.Settings.Shadow {
		st = append(st, "shadow")
	}
	if t.Sandbox {
		st = append(st, "sandbox")
	}
	return st
}

func (c *Console) tenantRow(t *store.Tenant, h *hours) (tenantRow, error) {
	q, err := c.d.Engine.Ingester.Quality(t.ID)
	if err != nil {
		return tenantRow{}, err
	}
	warnings, err := c.d.Warnings(t)
	if err != nil {
		return tenantRow{}, err
	}
	return tenantRow{
		ID: t.ID, Status: statusWords(t), Paused: t.Settings.Paused,
		Decisions: h.sum(engine.CountDecisions, 24), Events: h.sum(engine.CountEvents, 24),
		Confirmed: share{h.sum(engine.CountConfirmed, confirmHours), h.sum(engine.CountDecisions, confirmHours)},
		Labelled:  labelledShare(q),
		Warnings:  warnings,
	}, nil
}

// loopView is the tenant page's loop section.
type loopView struct {
	Decisions24, Events24, Sent24, Control24 int64
	Confirmed7, Explored24                   share
	Folded7, Versions7                       int64
	PoliticaVersion                          string
	RewardsLearned                           int64
	CatalogActions                           int
	DecisionsPlot, ConfirmPlot, UnconfPlot   plot
	FoldedPlot, ExplorePlot                  plot
	Unconfirmed                              []ageBucket
}

type ageBucket struct {
	Label string
	N     int64
}

// unconfirmedByAge groups decisions still unconfirmed by their age: the
// decisions of an hour minus the confirmations of that hour's decisions.
func unconfirmedByAge(h *hours) []ageBucket {
	buckets := []struct {
		label  string
		lo, hi int // ages in hours [lo, hi)
	}{{"< 1 h", 0, 1}, {"1–6 h", 1, 6}, {"6–24 h", 6, 24}, {"1–3 d", 24, 72}, {"3–7 d", 72, confirmHours}, {"7–8 d (expired)", confirmHours, historyHours}}
	out := make([]ageBucket, len(buckets))
	for i, b := range buckets {
		out[i].Label = b.label
		for age := b.lo; age < b.hi && age < len(h.h); age++ {
			m := h.h[len(h.h)-1-age]
			out[i].N += max(0, m[engine.CountDecisions]-m[engine.CountConfirmed])
		}
	}
	return out
}

func (c *Console) loopView(t *store.Tenant, h *hours) (loopView, error) {
	st, err := c.d.Engine.Learner.Status(t.ID)
	if err != nil {
		return loopView{}, err
	}
	v := loopView{
		Decisions24: h.sum(engine.CountDecisions, 24), Events24: h.sum(engine.CountEvents, 24),
		Sent24: h.sum(engine.CountSent, 24), Control24: h.sum(engine.CountControl, 24),
		Confirmed7: share{h.sum(engine.CountConfirmed, confirmHours), h.sum(engine.CountDecisions, confirmHours)},
		Explored24: share{h.sum(engine.CountExplored, 24), h.sum(engine.CountDecisions, 24)},
		Folded7:    h.sum(engine.CountFolded, confirmHours), Versions7: h.sum(engine.CountVersions, confirmHours),
		PoliticaVersion: st.PoliticaVersion, RewardsLearned: st.RewardsLearned, CatalogActions: st.CatalogActions,
		Unconfirmed: unconfirmedByAge(h),
	}
	v.DecisionsPlot = barPlot("Decisions per hour (last 48 h)", h.series(plotHours, func(m map[string]int64) (float64, bool) {
		return float64(m[engine.CountDecisions]), true
	}), "%.0f", 0)
	v.ConfirmPlot = linePlot("Confirmed share by decision hour (last 7 days), 95 % line", h.series(confirmHours, func(m map[string]int64) (float64, bool) {
		d := m[engine.CountDecisions]
		return 100 * float64(m[engine.CountConfirmed]) / float64(max(d, 1)), d > 0
	}), "%.1f %%", 100, 95)
	v.ExplorePlot = linePlot("Exploration share per hour (last 48 h)", h.series(plotHours, func(m map[string]int64) (float64, bool) {
		d := m[engine.CountDecisions]
		return 100 * float64(m[engine.CountExplored]) / float64(max(d, 1)), d > 0
	}), "%.1f %%", 100, -1)
	v.FoldedPlot = barPlot("Rewards folded into the model per hour (last 7 days)", h.series(confirmHours, func(m map[string]int64) (float64, bool) {
		return float64(m[engine.CountFolded]), true
	}), "%.0f", 0)
	pts := make([]point, len(v.Unconfirmed))
	for i, b := range v.Unconfirmed {
		pts[i] = point{Label: b.Label, Value: float64(b.N), OK: true}
	}
	v.UnconfPlot = barPlot("Unconfirmed decisions by age", pts, "%.0f", 0)
	return v, nil
}

// series turns the last n hours into plot points.
func (h *hours) series(n int, f func(map[string]int64) (float64, bool)) []point {
	n = min(n, len(h.h))
	pts := make([]point, 0, n)
	for i := len(h.h) - n; i < len(h.h); i++ {
		v, ok := f(h.h[i])
		pts = append(pts, point{Label: h.hourStart(i).Format("01-02 15:00Z"), Value: v, OK: ok})
	}
	return pts
}

// healthView is the tenant page's health section.
type healthView struct {
	Errors         []codeCount // last 24 h and 7 days
	RateLimited24  int64
	Quality        []codeCount
	Abuse          []server.AbuseState
	Quarantined    int
	Jobs           []jobView
	Deletions      []deletionView
	DeletionsMore  bool
	Webhook        string // registered URL, "" when none
	WebhookCounts  []codeCount
	WebhookPending int
}

type codeCount struct {
	Name       string
	N24, N7    int64
	Alert      bool
	OnlyNumber bool
}

type jobView struct {
	batch.Job
	Percent float64
}

type deletionView struct {
	RequestedAt time.Time
	Record      privacy.DeletionRecord
}

// qualityCounts lists q's counters as "admin tenant show" names them
// (engine.Quality.Counts), in name order.
func qualityCounts(q *engine.Quality) []codeCount {
	counts := q.Counts()
	var out []codeCount
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, codeCount{Name: k, N7: counts[k], OnlyNumber: true})
	}
	return out
}

func (c *Console) healthView(t *store.Tenant, h *hours) (healthView, error) {
	var v healthView
	e24, e7 := h.sumPrefix(engine.CountErrorPfx, 24), h.sumPrefix(engine.CountErrorPfx, confirmHours)
	for _, k := range slices.Sorted(maps.Keys(e7)) {
		v.Errors = append(v.Errors, codeCount{Name: k, N24: e24[k], N7: e7[k], Alert: e24[k] > 0})
	}
	v.RateLimited24 = e24["limite_excedido"]
	q, err := c.d.Engine.Ingester.Quality(t.ID)
	if err != nil {
		return v, err
	}
	v.Quality = qualityCounts(q)
	v.Abuse = c.d.API.AbuseStates(t.ID)
	sort.Slice(v.Abuse, func(i, j int) bool { return v.Abuse[i].ClientID < v.Abuse[j].ClientID })
	v.Quarantined = c.d.API.QuarantineCount(t.ID)
	if v.Jobs, err = c.jobs(t.ID, 10); err != nil {
		return v, err
	}
	if v.Deletions, v.DeletionsMore, err = c.pendingDeletions(t.ID, 20); err != nil {
		return v, err
	}
	if reg, err := c.d.Webhooks.Registration(t.ID); err == nil && reg != nil {
		v.Webhook = maskedURL(reg.URL)
	}
	w24, w7 := h.sumPrefix(engine.CountWebhookPfx, 24), h.sumPrefix(engine.CountWebhookPfx, confirmHours)
	for _, k := range []string{"delivered", "failed", "given_up", "dropped"} {
		v.WebhookCounts = append(v.WebhookCounts, codeCount{Name: k, N24: w24[k], N7: w7[k], Alert: k != "delivered" && w24[k] > 0})
	}
	lo, hi := store.WebhookQueueSpan(t.ID)
	err = c.d.DB.Scan(lo, hi, func(_, _ []byte) error {
		v.WebhookPending++
		if v.WebhookPending >= 1000 {
			return store.ErrStop
		}
		return nil
	})
	return v, err
}

// jobs returns the tenant's last n batch jobs, newest first, with live
// progress for running ones.
func (c *Console) jobs(tenant string, n int) ([]jobView, error) {
	var all []batch.Job
	lo, hi := store.JobSpan(tenant)
	err := c.d.DB.Scan(lo, hi, func(_, v []byte) error {
		var j batch.Job
		if json.Unmarshal(v, &j) == nil {
			all = append(all, j)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].CreadoEn.After(all[j].CreadoEn) })
	out := []jobView{}
	for _, j := range all[:min(n, len(all))] {
		if j.Estado == api.EstadoEnCurso {
			if live, err := c.d.Batch.Job(tenant, j.ID); err == nil {
				j = *live
			}
		}
		jv := jobView{Job: j}
		switch {
		case j.Estado == api.EstadoCompletado:
			jv.Percent = 100
		case j.Total > 0:
			jv.Percent = min(100, 100*float64(j.Procesados)/float64(j.Total))
		}
		out = append(out, jv)
	}
	return out, nil
}

// pendingDeletions returns up to n queued deletion jobs with their records
// (keyed hashes only, never cliente_ref). A job's RequestedAt is its
// record's solicitado_en, as "admin deletions" shows it: the time of the
// request on the tenant's clock, which the queue's key (the real clock at
// scheduling, for the worker's order) is not for a sandbox tenant, nor for
// a deletion re-applied from a backup's ledger; the key's time stands in
// only when the record is missing.
func (c *Console) pendingDeletions(tenant string, n int) ([]deletionView, bool, error) {
	var out []deletionView
	more := false
	lo, hi := store.DeletionQueueSpan(tenant)
	err := c.d.DB.Scan(lo, hi, func(k, _ []byte) error {
		if len(out) == n {
			more = true
			return store.ErrStop
		}
		at, hash, ok := store.ParseDeletionQueueKey(tenant, k)
		if !ok {
			return nil
		}
		dv := deletionView{RequestedAt: at}
		_ = c.d.DB.GetJSON(store.DeletionKey(tenant, hash), &dv.Record)
		if dv.Record.Hash == "" {
			dv.Record.Hash = hash
		}
		if !dv.Record.SolicitadoEn.IsZero() {
			dv.RequestedAt = dv.Record.SolicitadoEn
		}
		out = append(out, dv)
		return nil
	})
	return out, more, err
}

// maskedURL is a webhook URL as the console shows it: a password (accepted
// before PUT /v1/webhooks refused them) as xxxxx, and the query's values as
// xxxxx, names kept, since a receiver's own token often travels there
// ("?token=…"); the console's operators need to know where deliveries go,
// not the receiver's credentials. A URL that does not parse is shown as
// registered.
func maskedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if u.RawQuery != "" {
		q := u.Query()
		for _, vs := range q {
			for i := range vs {
				vs[i] = "xxxxx"
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
