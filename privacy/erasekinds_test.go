package privacy

import (
	"testing"

	"github.com/coupond/coupond/store"
)

// erasedBy names, for every kind of stored record, what erases a deleted
// customer's records of it (an eraser of eraseCustomer, or the deletion
// hooks), or why its records name no customer. It is the checklist a new
// table meets: TestErasureCoversEveryKind fails on a kind it does not
// name, since a missing eraser fails no other test (the deletion tests
// write the records of the tables they know).
var erasedBy = map[store.Kind]string{
	store.KindEvent:            "events: the records the customer's event index names",
	store.KindCustomerEvent:    "events: the customer's event index",
	store.KindFeatures:         "features",
	store.KindDecision:         "decisions: the records the customer's decision index names",
	store.KindCustomerDecision: "decisions: the customer's decision index",
	store.KindRewardQueue:      "decisions: ForgetDecision deletes their learner queue entries",
	store.KindAttribution:      "attributions",
	store.KindIdempotency:      "idempotency: a scan for the customer's ref and decision ids",
	store.KindDaily:            "daily",
	store.KindCustomerState:    "customerState",
	store.KindQuarantine:       "quarantinedEvents: the held batches' events of the customer",
	store.KindHeldEvent:        "quarantinedEvents: the index entries of those events",
	store.KindAccessLog:        "accessLog",
	store.KindDamaged:          "damaged: quarantined copies of the customer's records",
	store.KindJobChunk:         "the deletion hooks' batch scrubber (cli batchScrubber): a job's stored request",
	store.KindJob:              "none named: a job record holds its campaign, segment and counts; its customers are in its chunks and result file",
	store.KindWebhookQueue:     "none named: a delivery names its job and result link",
	store.KindCatalog:          "none named: the tenant's actions",
	store.KindCampaign:         "none named: a campaign's settings",
	store.KindBudget:           "none named: a campaign's counts",
	store.KindModel:            "none named: the policy's weights",
	store.KindWebhook:          "none named: the tenant's webhook settings",
	store.KindQuality:          "none named: the tenant's data-quality counters",
	store.KindAbuse:            "none named: a credential's abuse steps",
	store.KindHourly:           "none named: the tenant's hourly counters",
	store.KindDeletion:         "kept as the deletion's proof, keyed by the customer's keyed hash: no cliente_ref",
	store.KindDeletionQueue:    "the deletion's own queue entry, by keyed hash, removed once it completes",
	store.KindMeta:             "none written beside the customer state and hourly counters",
}

// TestErasureCoversEveryKind: every kind of record store lists says, in
// erasedBy, how a deleted customer's records of it go, or why it has none.
func TestErasureCoversEveryKind(t *testing.T) {
	for _, k := range store.Kinds() {
		if erasedBy[k] == "" {
			t.Errorf("kind %d: erasedBy does not say what erases a deleted customer's records of it (add an eraser to eraseCustomer and a deletion test, then its line)", k)
		}
	}
}
