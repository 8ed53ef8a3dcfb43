package batch

import "github.com/coupond/coupond/engine"

// CountInto makes the webhook service count its delivery attempts
// (webhook:delivered, failed, given_up, dropped) into c, by the hour of
// the tenant clock, for the operator console.
func (w *Webhooks) CountInto(c *engine.Counters) { w.counters = c }

func (w *Webhooks) count(tenant, outcome string) {
	if w.counters == nil {
		return
	}
	if t, ok := w.db.Tenant(tenant); ok {
		w.counters.Add(tenant, t.Now(w.now()), engine.CountWebhookPfx+outcome, 1)
	}
}
