package privacy

import (
	"time"

	"github.com/coupond/coupond/store"
)

// trace id): who exported which customer, when. After the customer's
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

// AccessLog returns the tenant's access-log entries in time order.
func (s *Service) AccessLog(tenant string) ([]AccessEntry, error) {
	lo, hi := store.AccessLogSpan(tenant)
	return store.ScanJSON[AccessEntry](s.db, lo, hi)
}

// ---- export ----
