package privacy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// AccessEntry is one entry of a tenant's access log (store.AccessLogKey:
// time, trace id): who exported which customer, when. After the customer's
// deletion ClienteRef is empty and ClienteHash names them.
type AccessEntry struct {
	At          time.Time `json:"at"`
	ClientID    string    `json:"client_id"`
	ClienteRef  string    `json:"cliente_ref,omitempty"`
	ClienteHash string    `json:"cliente_hash,omitempty"`
	TraceID     string    `json:"trace_id"`
	Accion      string    `json:"accion"`
}

// logAccess appends an access-log entry, synced. A customer with a
// deletion record is logged by keyed hash only, so an export after (or
// while) deleting never writes the identifier back.
func (s *Service) logAccess(tenant, clienteRef, clientID, trace, accion string, deleted bool) error {
	at := s.now().UTC()
	a := AccessEntry{At: at, ClientID: clientID, ClienteRef: clienteRef, TraceID: trace, Accion: accion}
	if deleted {
		a.ClienteRef, a.ClienteHash = "", s.CustomerHash(tenant, clienteRef)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.AccessLogKey(tenant, at, trace), &a); err != nil {
		return err
	}
	return b.Commit()
}

// AccessLog returns the tenant's access-log entries in time order. An
// entry that does not decode (contract §8) is left out and moved to
// quarantine, where admin check and /metrics report it and a deletion of
// the customer it names still reaches it; it never fails the listing.
func (s *Service) AccessLog(tenant string) ([]AccessEntry, error) {
	type bad struct {
		key, val []byte
		err      error
	}
	out := []AccessEntry{}
	var damaged []bad
	lo, hi := store.AccessLogSpan(tenant)
	err := s.db.Scan(lo, hi, func(k, v []byte) error {
		var a AccessEntry
		if err := json.Unmarshal(v, &a); err != nil {
			damaged = append(damaged, bad{bytes.Clone(k), bytes.Clone(v), fmt.Errorf("access-log entry: %w", err)})
			return nil
		}
		out = append(out, a)
		return nil
	})
	for _, d := range damaged {
		// Logged and counted by Quarantine; a failure to move it (a full
		// disk) leaves it where it is, skipped again next time.
		_ = s.rec.Quarantine(tenant, d.key, d.val, d.err)
	}
	return out, err
}

// ---- export ----
