package batch

import "github.com/coupond/coupond/engine"

// Observer receives what the batch runner and the webhook service do, for
// the business metrics. Every field may be nil. Install it with
// Runner.Observe and Webhooks.Observe before Run; the callbacks run on the
// workers' goroutines (WebhookAttempt on several at once, one per tenant)
// and must not block.
type Observer struct {
	// Decision is called for every result line written.
	Decision func(tenant string, d *engine.Decision)
	// JobEnded is called when a job ends (estado completado or fallido)
	// with the lines it decided.
	JobEnded func(tenant, estado string, lines int)
	// WebhookAttempt is called for every delivery attempt with its outcome:
	// WebhookDelivered, WebhookRetry, WebhookGivenUp or WebhookDropped.
	WebhookAttempt func(tenant, outcome string)
}

// Outcomes of a webhook delivery attempt (Observer.WebhookAttempt).
const (
	WebhookDelivered = "delivered" // a 2xx answer
	WebhookRetry     = "retry"     // failed; another attempt is scheduled
	WebhookGivenUp   = "given_up"  // failed on the last attempt
	WebhookDropped   = "dropped"   // no registration, or one that cannot be used
)

// Observe installs o; call it before Run.
func (r *Runner) Observe(o Observer) { r.obs = o }

// Observe installs o (its WebhookAttempt); call it before Run.
func (w *Webhooks) Observe(o Observer) { w.obs = o }
