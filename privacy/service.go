package privacy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Config wires a Service. Every field but Log is required.
type Config struct {
	DB     *store.DB
	Engine *engine.Engine
	// Secrets keys the customer hash.
	Secrets *store.Secrets
	// Now is the real clock, the engine's.
	Now func() time.Time
	Log zerolog.Logger
	// Ledger, optional, records a deletion in the ledger of every backup
	// when the deletion is requested (Backups.Ledger), so that a backup
	// restored before the worker ran the job still re-applies it. A failure
	// there does not refuse the request: the worker writes the entry
	// before it removes anything, and retries until it can.
	Ledger func(LedgerEntry) error
	// HeldEvent, optional, converts an event held by the abuse guard's
	// quarantine (its JSON as sent, checked when it arrived) as the
	// quarantine's release does (server.HeldEvent); ok false for one the
	// release would drop, an error for one that does not parse. Without
	// it the export leaves held events out.
	HeldEvent func(raw []byte) (ev engine.Event, ok bool, err error)
}

// Service carries out the customer data rights and the backups of one
// store. It is safe for concurrent use; build one per process (cli does)
// and share it, since its locks serialise deletion passes and deletion
// requests.
type Service struct {
	db      *store.DB
	secrets *store.Secrets
	rec     engine.Records
	now     func() time.Time
	log     zerolog.Logger
	ledger  func(LedgerEntry) error
	// heldEvent is Config.HeldEvent.
	heldEvent func(raw []byte) (engine.Event, bool, error)

	// deletionMu serialises worker passes; requestMu serialises deletion
	// requests (so two requests for one customer queue one job) without
	// making them wait for a pass's compactions, and an export's
	// access-log entry with them (logExport).
	deletionMu, requestMu sync.Mutex
	// lastSweep is when the worker last looked for stranded deletions
	// (requeueStranded); under deletionMu.
	lastSweep time.Time
	// sweepOwed makes the next pass look for them whatever lastSweep
	// says (SweepStranded).
	sweepOwed atomic.Bool
	// retryMu guards retryNow: the tenants whose deletions waiting for a
	// batch job the next pass runs whatever their retry time
	// (RetryWaiting). wake makes RunDeletions pass at once.
	retryMu  sync.Mutex
	retryNow map[string]bool
	wake     chan struct{}
	// eraseChunk is how many index entries of a customer's events one
	// chunk of an erasure reads (erasechunk.go); 0 is defaultEraseChunk.
	eraseChunk int
	// exportChunk is how many index entries of a customer's events or
	// decisions one chunk of an export reads (exportevents.go,
	// exportdecisions.go); 0 is defaultExportChunk.
	exportChunk int
	// snapshotWait is how long a deletion pass waits for the snapshots
	// older than its erasures to close (olderReadsDone); 0 is
	// defaultSnapshotWait.
	snapshotWait time.Duration

	// beforeCommit, when set (tests), runs in eraseCustomer after the
	// erasers, under the customer's locks, before the erasure commits.
	beforeCommit func()
	// afterChunk, when set (tests), runs in eraseCustomer after each chunk
	// of the customer's events is committed and its locks released.
	afterChunk func()
	// beforePurge, when set (tests), runs in a deletion pass after the
	// completado batch commits, before the write-ahead logs are purged; an
	// error it returns stands for the purge's.
	beforePurge func() error
	// afterExportChunk, when set (tests), runs after each chunk of an
	// export's events, decisions or confirmations is handed on; an error
	// it returns stands for a read's.
	afterExportChunk func() error
	// beforeAccessLog, when set (tests), runs in Export between its read
	// of the customer's deletion record and its access-log entry.
	beforeAccessLog func()
}

// New returns the Service of c.
func New(c Config) *Service {
	return &Service{db: c.DB, secrets: c.Secrets, rec: c.Engine.Records(), now: c.Now, log: c.Log, ledger: c.Ledger,
		heldEvent: c.HeldEvent, retryNow: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// CustomerHash is the keyed hash that stands for cliente_ref in deletion
// records, ledgers and the access log after deletion.
func (s *Service) CustomerHash(tenant, clienteRef string) string {
	return s.secrets.CustomerHash(tenant, clienteRef)
}
