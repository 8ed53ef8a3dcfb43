package privacy

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/coupond/coupond/store"
)

// refsForHashes finds the cliente_ref of each keyed hash in want, among
// every customer the tenant's records name: the customer indexes,
// features and states, idempotency and access-log entries, held batches,
// damaged records and stored batch requests. Hashes it cannot match are
// missing from the map.
func (s *Service) refsForHashes(tenant string, want map[string]bool) (map[string]string, error) {
	found := map[string]string{}
	seen := map[string]bool{}
	check := func(ref string) {
		if ref == "" || seen[ref] {
			return
		}
		seen[ref] = true
		if h := s.CustomerHash(tenant, ref); want[h] {
			found[h] = ref
		}
	}
	for _, span := range []func(tenant string) (lo, hi []byte){
		store.CustomerEventIndexSpan, store.FeaturesSpan, store.CustomerDecisionIndexSpan, store.CustomerStateSpan,
	} {
		lo, hi := span(tenant)
		if err := s.db.DistinctFirst(lo, hi, func(ref []byte) { check(string(ref)) }); err != nil {
			return nil, err
		}
	}
	refOf := func(v []byte) string {
		var one struct {
			ClienteRef string `json:"cliente_ref"`
		}
		if json.Unmarshal(v, &one) != nil {
			return ""
		}
		return one.ClienteRef
	}
	for _, span := range []func(tenant string) (lo, hi []byte){store.IdempotencySpan, store.AccessLogSpan} {
		lo, hi := span(tenant)
		if err := s.db.Scan(lo, hi, func(_, v []byte) error {
			if bytes.Contains(v, []byte(`"cliente_ref"`)) {
				check(refOf(v))
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	lo, hi := store.QuarantineSpan(tenant)
	if err := s.db.Scan(lo, hi, func(_, v []byte) error {
		var q struct {
			Eventos []json.RawMessage `json:"eventos"`
		}
		if json.Unmarshal(v, &q) == nil {
			for _, raw := range q.Eventos {
				check(refOf(raw))
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Damaged records that name the customer, quarantined: for some
	// customers all that is left (contract §8: deletion reaches them).
	if err := s.rec.DamagedRefs(tenant, check); err != nil {
		return nil, err
	}
	lo, hi = store.JobChunkTableSpan(tenant)
	if err := s.db.Scan(lo, hi, func(_, v []byte) error {
		var refs []string
		if json.Unmarshal(v, &refs) == nil {
			for _, r := range refs {
				check(r)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return found, nil
}

// customerIndex is one of the two customer indexes (cliente_ref, time, id):
// its span for a customer and its key decoder.
type customerIndex struct {
	span  func(tenant, ref string) (lo, hi []byte)
	parse func(tenant string, key []byte) (ref string, at time.Time, id string, ok bool)
}

var (
	eventIndex    = customerIndex{store.CustomerEventSpan, store.ParseCustomerEventKey}
	decisionIndex = customerIndex{store.CustomerDecisionSpan, store.ParseCustomerDecisionKey}
)
