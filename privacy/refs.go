package privacy

import (
	"bytes"
	"encoding/json"

	"github.com/coupond/coupond/store"
)

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
	for _, sp := range []struct {
		table  byte
		prefix []any
	}{
		{store.TableCustomerEvent, nil},
		{store.TableFeatures, nil},
		{store.TableCustomerDecide, nil},
		{store.TableMeta, []any{"cust"}},
	} {
		if err := s.distinctRefs(tenant, sp.table, sp.prefix, check); err != nil {
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
	for _, table := range []byte{store.TableIdempotency, store.TableAccessLog} {
		lo, hi := store.TableSpan(tenant, table)
		if err := s.db.Scan(lo, hi, func(_, v []byte) error {
			if bytes.Contains(v, []byte(`"cliente_ref"`)) {
				check(refOf(v))
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	lo, hi := store.TableSpan(tenant, store.TableQuarantine)
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
	lo, hi = store.TableSpan(tenant, store.TableJobClients)
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

// distinctRefs calls fn once per cliente_ref that leads keys of table
// (after prefix), seeking past each customer's keys.
func (s *Service) distinctRefs(tenant string, table byte, prefix []any, fn func(ref string)) error {
	lo, hi := store.TableSpan(tenant, table, prefix...)
	return s.db.DistinctFirst(lo, hi, func(ref []byte) { fn(string(ref)) })
}
