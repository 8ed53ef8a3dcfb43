package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// EventLoteCompletado is the only webhook event.
const EventLoteCompletado = "lote.completado"

// Registration is a tenant's webhook (TableWebhook), stored as the API
// shows it. The signing secret (Secreto) is kept as issued: the server
// needs it to sign deliveries.
type Registration = api.RegistroWebhook

// queued is one pending delivery (TableWebhookQueue, key = due time, id).
type queued struct {
	ID      string          `json:"id"`
	Body    json.RawMessage `json:"body"`
	Attempt int             `json:"attempt"` // attempts made so far
	// InFlight: the last attempt (Attempt, WebhookAttempts) is recorded
	// as being made. The pass that made it deletes the message once it
	// ends; one that finds it was cut short (a crash, a stop of serve) and
	// makes it again (Cut), with the same webhook-id.
	InFlight bool `json:"in_flight,omitempty"`
	// Cut counts the times the last attempt was found cut short and made
	// again, at most lastAttemptCuts.
	Cut int `json:"cut,omitempty"`
}

// lastAttemptCuts bounds how many times a message's last attempt is made
// again after a crash or a stop cut it short: a receiver whose answer
// brings serve down cannot have it attempted at every restart for ever.
// Past it the message is given up.
const lastAttemptCuts = 3

// Webhooks keeps registrations and the durable retry queue, and delivers.
type Webhooks struct {
	db       *store.DB
	deliver  *Deliverer
	schedule *RetrySchedule
	log      zerolog.Logger
	now      func() time.Time
	wake     waker
	// qmu orders Delete with the recording of attempts (take): once Delete
	// returns, no delivery pass records or makes an attempt of a message
	// it dropped.
	qmu sync.Mutex
	// mu guards inflight, the tenants whose delivery pass is running: one
	// pass per tenant at a time, so a message is never attempted twice at
	// once, while a slow receiver holds up only its own tenant.
	mu       sync.Mutex
	inflight map[string]*stoppable
	slots    chan struct{} // bounds the tenant passes running at once
	obs      Observer
	counters *engine.Counters
	// quarantine moves a record that does not decode out of the way
	// (QuarantineInto); nil: it is only logged and skipped.
	quarantine func(tenant string, key, v []byte, cause error) error
	// postponed is set while the queue cannot record attempts (a full
	// disk): the postponement is logged once, not on every pass.
	postponed atomic.Bool
	// beforeRecord, when set (tests), is called by take between its check
	// that the message is still queued and the commit recording its
	// attempt.
	beforeRecord func()
}

// NewWebhooks builds the webhook service.
func NewWebhooks(db *store.DB, d *Deliverer, log zerolog.Logger, now func() time.Time, seed uint64) *Webhooks {
	return &Webhooks{db: db, deliver: d, schedule: NewRetrySchedule(mathrand.NewPCG(seed, seed+1)), log: log, now: now, wake: newWaker(),
		inflight: map[string]*stoppable{}, slots: make(chan struct{}, webhookParallel)}
}

// webhookParallel is how many tenants' deliveries run at once: a receiver
// that answers slowly (up to the attempt timeout) delays its own tenant's
// messages, not the others'.
const webhookParallel = 32

func webhookKey(tenant string) []byte { return store.WebhookKey(tenant) }

// Register stores (replacing) the tenant's webhook and returns it with a
// new signing secret, shown once; a tenant not in the store (deleted) is
// engine.ErrNoTenant.
func (w *Webhooks) Register(tenant, url string, eventos []string, now time.Time) (*Registration, error) {
	if _, ok := w.db.Tenant(tenant); !ok {
		// Deleted since its request was authenticated (privacy's
		// DeleteTenant): no registration, nor secret, for a tenant gone.
		return nil, fmt.Errorf("batch: %w: %q", engine.ErrNoTenant, tenant)
	}
	r := &Registration{URL: url, Eventos: eventos, Secreto: NewWebhookSecret(), CreadoEn: now.UTC()}
	b := w.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(webhookKey(tenant), r); err != nil {
		return nil, err
	}
	return r, b.Commit()
}

// Delete removes the tenant's webhook and drops its pending deliveries, in
// one commit: a webhook registered later gets none of them. An attempt
// already in flight ends as it goes; its retry, if any, is dropped too.
func (w *Webhooks) Delete(tenant string) error {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	b := w.db.NewBatch()
	defer b.Close()
	b.Delete(webhookKey(tenant))
	b.DeleteRange(store.WebhookQueueSpan(tenant))
	return b.Commit()
}

// QuarantineInto makes the service hand the records it cannot decode (a
// registration, a queued message) to fn, engine.Records.Quarantine, as
// every reader of stored records does (contract section 8).
func (w *Webhooks) QuarantineInto(fn func(tenant string, key, v []byte, cause error) error) {
	w.quarantine = fn
}

// Registration returns the tenant's webhook, or nil. One that does not
// decode is quarantined and read as none: the tenant registers again, and
// its jobs complete meanwhile without a notification.
func (w *Webhooks) Registration(tenant string) (*Registration, error) {
	key := webhookKey(tenant)
	v, err := w.db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Registration
	if err := json.Unmarshal(v, &r); err != nil {
		w.damaged(tenant, key, v, fmt.Errorf("webhook registration: %w", err))
		return nil, nil
	}
	return &r, nil
}

// damaged logs the record at key that does not decode and quarantines it.
func (w *Webhooks) damaged(tenant string, key, v []byte, cause error) {
	w.log.Warn().Str("tenant", tenant).Str("error", cause.Error()).Msg("damaged webhook record: quarantined and skipped")
	if w.quarantine == nil {
		return
	}
	if err := w.quarantine(tenant, key, v, cause); err != nil {
		w.log.Error().Err(err).Str("tenant", tenant).Msg("quarantine of a damaged webhook record")
	}
}

// Enqueue queues lote.completado for a completed job if the tenant has a
// webhook registered for it. The first attempt is due at once.
func (w *Webhooks) Enqueue(j *Job) error {
	b := w.db.NewBatch()
	defer b.Close()
	queued, err := w.enqueue(b, j)
	if err != nil || !queued {
		return err
	}
	if err := b.Commit(); err != nil {
		return err
	}
	w.wake.poke()
	return nil
}

// enqueue adds lote.completado for j to b if the tenant has a webhook
// registered for it, so that the job's completion and its notification are
// committed together.
func (w *Webhooks) enqueue(b *store.Batch, j *Job) (bool, error) {
	reg, err := w.Registration(j.Tenant)
	if err != nil || reg == nil || !slices.Contains(reg.Eventos, EventLoteCompletado) {
		return false, err
	}
	var done *string
	if j.CompletadoEn != nil {
		s := j.CompletadoEn.UTC().Format(time.RFC3339Nano)
		done = &s
	}
	body, err := json.Marshal(struct {
		Tipo         string  `json:"tipo"`
		JobID        string  `json:"job_id"`
		CampanaID    string  `json:"campana_id"`
		Estado       string  `json:"estado"`
		Lineas       int     `json:"lineas"`
		CompletadoEn *string `json:"completado_en"`
	}{EventLoteCompletado, j.ID, j.CampanaID, j.Estado, j.Procesados, done})
	if err != nil {
		return false, err
	}
	q := queued{ID: "msg_" + j.ID, Body: body}
	if err := b.SetJSON(store.WebhookDeliveryKey(j.Tenant, w.now(), q.ID), q); err != nil {
		return false, err
	}
	return true, nil
}

// Run delivers due messages until ctx ends; failed attempts are
// rescheduled by RetrySchedule in the same durable queue. Every second (or
// when a message is queued) it starts a delivery pass for each tenant with
// due messages and none running, without waiting for the passes to end:
// one tenant's slow or unreachable receiver does not delay another's
// deliveries. It returns once ctx ends and the running passes are done.
func (w *Webhooks) Run(ctx context.Context) {
	var wg sync.WaitGroup
	w.wake.loop(ctx, time.Second, nil, func() { w.startDue(ctx, &wg, nil) })
	wg.Wait()
}

// DeliverDue makes one attempt for every message due now, for every tenant
// whose delivery pass is not already running (Run's), waits for them and
// returns how many attempts it made. Tests call it after moving the clock.
func (w *Webhooks) DeliverDue(ctx context.Context) int {
	var wg sync.WaitGroup
	var n atomic.Int64
	w.startDue(ctx, &wg, &n)
	wg.Wait()
	return int(n.Load())
}

// startDue starts, on wg, a delivery pass for every tenant that has due
// messages and no pass running, at most webhookParallel at once (it waits
// for a free slot, holding the tenant's claim: CancelTenant ends the wait),
// each on its own low-priority thread; each adds its attempts to n when n
// is not nil.
func (w *Webhooks) startDue(ctx context.Context, wg *sync.WaitGroup, n *atomic.Int64) {
	for _, t := range w.db.Tenants() {
		if ctx.Err() != nil {
			return
		}
		if t.Settings.Paused {
			// Nothing of a paused tenant leaves (its routes, signed links
			// included, answer 503): its messages wait, due as they are,
			// with no attempt spent, and go at the first pass after the
			// resume, as its queued batch jobs do.
			continue
		}
		pctx, ok := w.claim(ctx, t.ID)
		if !ok {
			continue
		}
		due := w.due(t.ID)
		if len(due) == 0 {
			w.release(t.ID)
			continue
		}
		select {
		case w.slots <- struct{}{}:
		case <-pctx.Done(): // serve stopping, or CancelTenant
			w.release(t.ID)
			continue
		}
		wg.Add(1)
		go func(tenant string) {
			engine.LowPriority() // a background worker, as Run's loop (ARCHITECTURE.md)
			defer wg.Done()
			defer func() { <-w.slots }()
			defer w.release(tenant)
			if c := w.deliverDue(pctx, tenant, due); n != nil {
				n.Add(int64(c))
			}
		}(t.ID)
	}
}

// claim marks tenant's delivery pass running and returns the context it
// runs under, which CancelTenant ends; false if a pass already runs, or
// the tenant is no longer listed (its deletion began: CancelTenant may
// have looked for its pass already).
func (w *Webhooks) claim(ctx context.Context, tenant string) (context.Context, bool) {
	w.mu.Lock()
	if w.inflight[tenant] != nil {
		w.mu.Unlock()
		return nil, false
	}
	pass, pctx := newStoppable(ctx)
	w.inflight[tenant] = pass
	w.mu.Unlock()
	if _, ok := w.db.Tenant(tenant); !ok {
		w.release(tenant)
		return nil, false
	}
	return pctx, true
}

func (w *Webhooks) release(tenant string) {
	w.mu.Lock()
	p := w.inflight[tenant]
	delete(w.inflight, tenant)
	w.mu.Unlock()
	p.ended()
}

// CancelTenant stops tenant's delivery pass, if one runs, and returns
// once it has ended: the attempt in flight is cut short (its retry stays
// queued) and no other is made. The tenant is being deleted (the store
// hid it first, so no pass starts for it again): no attempt of it is made
// or reported once this returns (the deletion drops its /metrics series
// next). It gives up with ctx's error.
func (w *Webhooks) CancelTenant(ctx context.Context, tenant string) error {
	w.mu.Lock()
	p := w.inflight[tenant]
	w.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(ctx)
}

// dueItem is a queued message due now, with its queue key.
type dueItem struct {
	key []byte
	q   queued
}

// due returns tenant's messages due now, oldest first. One that does not
// decode is quarantined (counted dropped): it was skipped at every pass,
// never reported.
func (w *Webhooks) due(tenant string) []dueItem {
	lo, hi := store.WebhookDueSpan(tenant, w.now())
	var due []dueItem
	type bad struct {
		key, v []byte
		err    error
	}
	var damaged []bad
	w.db.Scan(lo, hi, func(k, v []byte) error {
		var q queued
		if err := json.Unmarshal(v, &q); err != nil {
			damaged = append(damaged, bad{bytes.Clone(k), bytes.Clone(v), fmt.Errorf("queued webhook message: %w", err)})
			return nil
		}
		due = append(due, dueItem{bytes.Clone(k), q})
		return nil
	})
	for _, d := range damaged { // out of the scan: quarantine writes
		w.damaged(tenant, d.key, d.v, d.err)
		w.count(tenant, "dropped")
	}
	return due
}

// deliverDue makes one attempt for every message of due, tenant's due
// messages, that is still queued, and returns how many it made. It stops
// once ctx ends (serve stopping, CancelTenant): the messages it has not
// attempted stay due as they are, rather than each having an attempt
// recorded (one of the twelve, and the backoff) that could not be sent;
// a last attempt ctx cut short stays queued in flight, made again by the
// next pass (nextAttempt). The caller holds the tenant's claim.
func (w *Webhooks) deliverDue(ctx context.Context, tenant string, due []dueItem) int {
	n := 0
	for _, it := range due {
		if ctx.Err() != nil {
			break
		}
		q, ok := w.nextAttempt(tenant, it)
		if !ok {
			continue
		}
		log := w.log.With().Str("tenant", tenant).Str("webhook_id", q.ID).Int("attempt", q.Attempt).Logger()
		reg, err := w.Registration(tenant)
		if err != nil {
			log.Error().Err(err).Msg("webhook registration")
			break
		}
		rec, present, err := w.take(tenant, it.key, q)
		switch {
		case errors.Is(err, store.ErrTenantErased):
			// The tenant's deletion erased its queue since the pass
			// listed it: nothing is left to deliver, nothing postponed.
			log.Info().Msg("webhook deliveries stopped: the tenant was deleted, its queue with it")
			return n
		case err != nil:
			// Nothing is attempted that the queue does not record: the
			// message stays due for a later pass.
			w.notePostponed(err, log)
			return n
		case !present:
			continue // dropped by Delete since the pass listed it
		}
		if w.postponed.CompareAndSwap(true, false) {
			w.log.Info().Msg("webhook deliveries resumed: the queue records attempts again")
		}
		n++
		outcome := w.attempt(ctx, tenant, reg, q, rec.again, log)
		if outcome == "" {
			continue // a last attempt cut short: in flight still
		}
		if w.obs.WebhookAttempt != nil {
			w.obs.WebhookAttempt(tenant, outcome)
		}
		if outcome != WebhookRetry {
			w.unqueue(rec.next, log)
		}
	}
	return n
}

// unqueue deletes the message at key (its retry, or its last attempt in
// flight): it is delivered, dropped or given up.
func (w *Webhooks) unqueue(key []byte, log zerolog.Logger) {
	b := w.db.NewBatch()
	defer b.Close()
	b.Delete(key)
	if err := b.Commit(); err != nil {
		log.Error().Err(err).Msg("webhook queue commit")
	}
}

// nextAttempt is the attempt to make now of it, a due message: the one
// after those made, or, when its last attempt is in flight (the pass that
// made it ended before the attempt did: a crash, a stop of serve), that
// attempt again, up to lastAttemptCuts times. Past those it gives the
// message up (counted given_up, as a failed last attempt) and is false.
func (w *Webhooks) nextAttempt(tenant string, it dueItem) (queued, bool) {
	q := it.q
	switch {
	case !q.InFlight:
		q.Attempt++
		return q, true
	case q.Cut < lastAttemptCuts:
		q.Cut++
		return q, true
	}
	log := w.log.With().Str("tenant", tenant).Str("webhook_id", q.ID).Int("attempt", q.Attempt).Logger()
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if _, err := w.db.Get(it.key); err != nil {
		return q, false // dropped by Delete, or unreadable: left as it is
	}
	w.unqueue(it.key, log)
	log.Error().Int("cut", q.Cut).Msg("webhook given up: its last attempt was cut short by a crash or a stop every time it was made")
	w.count(tenant, "given_up")
	if w.obs.WebhookAttempt != nil {
		w.obs.WebhookAttempt(tenant, WebhookGivenUp)
	}
	return q, false
}

// recorded is an attempt take recorded: next is the message's key from
// then on, again whether another attempt follows this one.
type recorded struct {
	next  []byte
	again bool
}

// take records attempt q.Attempt of the message at key (record). present
// is false, and nothing is recorded, when the message is no longer at key:
// Delete dropped it after the pass listed it. Under qmu, so that a Delete
// either drops the message before this check or drops the record written
// here.
func (w *Webhooks) take(tenant string, key []byte, q queued) (rec recorded, present bool, err error) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if _, err := w.db.Get(key); errors.Is(err, store.ErrNotFound) {
		return recorded{}, false, nil
	} else if err != nil {
		return recorded{}, false, err
	}
	if w.beforeRecord != nil {
		w.beforeRecord()
	}
	rec, err = w.record(tenant, key, q)
	return rec, err == nil, err
}

// notePostponed logs that the queue could not record an attempt (err),
// once until an attempt is recorded again: a store that refuses writes
// (a full disk, until a restart) would otherwise log an error every
// second for every tenant with messages due.
func (w *Webhooks) notePostponed(err error, log zerolog.Logger) {
	if w.postponed.CompareAndSwap(false, true) {
		log.Error().Err(err).Msg("webhook queue commit: deliveries postponed until the store takes writes again")
		return
	}
	log.Debug().Err(err).Msg("webhook queue commit: attempt postponed")
}

// record moves the message at key, before its attempt q.Attempt is made,
// to the time its next attempt is due (again) or, when this attempt is the
// last, marks it in flight, due at once: a stop during a retried attempt
// retries it after the backoff, a crash or stop during the last one leaves
// it for the next pass to make again (nextAttempt) instead of giving it up
// unmade, and the pass that makes it deletes it once it has ended
// (unqueue). A store that cannot record the attempt (a full disk) makes
// none.
func (w *Webhooks) record(tenant string, key []byte, q queued) (recorded, error) {
	b := w.db.NewBatch()
	defer b.Close()
	b.Delete(key)
	wait, again := w.schedule.NextAttempt(q.Attempt)
	if !again {
		wait, q.InFlight = 0, true
	}
	rec := recorded{next: store.WebhookDeliveryKey(tenant, w.now().Add(wait), q.ID), again: again}
	if err := b.SetJSON(rec.next, q); err != nil {
		return recorded{}, err
	}
	return rec, b.Commit()
}

// attempt makes attempt q.Attempt of a message whose attempt is recorded
// (again: another one is queued) and returns its outcome, or "" for a last
// attempt that ctx cut short (serve stopping, CancelTenant): it stays in
// flight, neither reported nor given up.
func (w *Webhooks) attempt(ctx context.Context, tenant string, reg *Registration, q queued, again bool, log zerolog.Logger) string {
	if reg == nil {
		log.Info().Msg("webhook dropped: no registration")
		w.count(tenant, "dropped")
		return WebhookDropped
	}
	status, err := w.deliver.Deliver(ctx, Delivery{ID: q.ID, URL: reg.URL, Secret: reg.Secreto, Body: q.Body})
	switch {
	case err == nil:
		log.Info().Int("status", status).Msg("webhook delivered")
		w.count(tenant, "delivered")
		return WebhookDelivered
	case errors.Is(err, ErrWebhookSecret) || errors.Is(err, ErrWebhookURL):
		log.Error().Err(err).Msg("webhook dropped: registration unusable")
		w.count(tenant, "dropped")
		return WebhookDropped
	case !again && ctx.Err() != nil:
		log.Info().Err(err).Msg("webhook last attempt cut short (serve stopping, or the tenant being deleted): it stays queued, made again by the next pass")
		return ""
	case again:
		log.Warn().Err(err).Int("status", status).Msg("webhook attempt failed; retry queued")
		w.count(tenant, "failed")
		return WebhookRetry
	default:
		log.Error().Err(err).Msg("webhook given up after the last attempt")
		w.count(tenant, "given_up")
		return WebhookGivenUp
	}
}
