// Package batch runs batch decision jobs: the durable job queue, the runner
// that decides a campaign's customers with the engine's shared decider and
// writes zstd JSONL result files, HMAC-signed result URLs and signed
// webhook deliveries.
package batch

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Job is a batch job's durable record (TableJob, key = job_id).
type Job struct {
	ID           string          `json:"job_id"`
	Tenant       string          `json:"tenant"`
	CampanaID    string          `json:"campana_id"`
	Estado       string          `json:"estado"`
	CreadoEn     time.Time       `json:"creado_en"`
	IniciadoEn   *time.Time      `json:"iniciado_en,omitempty"`
	CompletadoEn *time.Time      `json:"completado_en,omitempty"`
	Total        int             `json:"total"`
	Procesados   int             `json:"procesados"`
	Envios       int             `json:"envios"`
	Error        string          `json:"error,omitempty"`
	Segmento     json.RawMessage `json:"segmento,omitempty"`
	Chunks       int             `json:"chunks,omitempty"` // stored chunks of clientes
	Result       string          `json:"result,omitempty"` // result file, relative to the results dir
	RealCreadoEn time.Time       `json:"real_creado_en"`   // real time, for result retention
	// RealIniciadoEn and RealCompletadoEn are when the runner started and
	// ended the job by its real clock (IniciadoEn and CompletadoEn are the
	// tenant's, which stands still or jumps on a sandbox tenant), for the
	// job's real elapsed time; a failed run's end is when it stopped, not
	// when its decisions were voided. Zero when not known: a job stored
	// before they were kept, or one Recover ended after a restart
	// stopped its run.
	RealIniciadoEn   time.Time `json:"real_iniciado_en,omitzero"`
	RealCompletadoEn time.Time `json:"real_completado_en,omitzero"`
	// Explain: the job's credential had explicar:leer, so every result
	// line carries detalle.
	Explain bool `json:"explicar,omitempty"`
	// WaitsForSpace: the job's run met a full disk and its decisions are
	// voided; it stays en_curso and runs again from its start once the
	// store takes writes (waitForSpace).
	WaitsForSpace bool `json:"espera_espacio,omitempty"`
}

// Submission is a validated batch request.
type Submission struct {
	CampanaID string
	// Exactly one of Clientes and Segmento is set.
	Clientes    []string
	Segmento    *engine.Segment
	SegmentoRaw json.RawMessage
	// Explain adds detalle to every result line (scope explicar:leer).
	Explain bool
	// Idempotency, when keyed, makes a repeat within
	// engine.IdempotencyTTL of the same body (engine.HashBatchBody) return
	// the first job and create nothing (see Submit).
	Idempotency engine.Idempotency
}

// Submission errors.
var (
	ErrBusy     = errors.New("batch: another job of the tenant is in progress")
	ErrHourly   = errors.New("batch: at most one job per hour")
	ErrNotFound = errors.New("batch: no such job")
)

// RetryError carries how long to wait before a new submission can succeed,
// and the job that holds the tenant's slot ("" when unknown): what a caller
// whose 202 was lost needs to follow the job it did create.
type RetryError struct {
	Err   error
	After time.Duration
	JobID string
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// clientChunk is how many cliente_ref one stored chunk of a request holds.
const clientChunk = 10_000

// ResultRetention is how long result files are kept after a job
// completes (real time); then the file is removed and the job stays
// completado, without resultado_url (its result answers 404).
const ResultRetention = 7 * 24 * time.Hour

// resultSuffix names committed result files: <results>/<tenant>/<job_id>.jsonl.zst.
const resultSuffix = ".jsonl.zst"

// Messages of a job's error field.
const (
	errRestart  = "interrumpido por un reinicio del servicio; envíe el lote de nuevo"
	errStop     = "interrumpido por la parada del servicio; envíe el lote de nuevo"
	errNoCamp   = "la campaña ya no está definida"
	errNoTenant = "el inquilino ya no existe"
	errInternal = "error interno al procesar el lote"
	// errDiskFull is kept on a job whose run met a full disk while it
	// waits en_curso for its decisions to be voided; voided, it waits for
	// space (waitForSpace), never fallido, so it shows in no status.
	errDiskFull = "disco lleno al procesar el lote; se reanuda cuando haya espacio"
	errResultIO = "no se pudo escribir el archivo de resultados (error del disco); envíe el lote de nuevo"
)

// Runner owns the job queue and runs one job at a time.
type Runner struct {
	db  *store.DB
	eng *engine.Engine
	// voidJob is eng.VoidJob (tests make it fail).
	voidJob func(tenant, jobID string) (int, error)
	log     zerolog.Logger
	dir     string        // results root
	fs      atomicfile.FS // where result files are written
	now     func() time.Time
	Signer  *URLSigner
	hooks   *Webhooks

	// saveFault, when set, is called before a job's record is saved
	// (save, finish) and its error fails the save (tests; nil otherwise).
	saveFault func(j *Job) error
	// resumed: the process restarted in place after a write failed for
	// want of space (RunnerConfig.ResumedAfterFullDisk; Recover).
	resumed bool

	// Lock order: runMu, then resultMu, then mu.
	runMu sync.Mutex // one RunPending at a time
	// stuck (under runMu): a failed job's decisions could not be voided,
	// it waits en_curso for the next RunPending (endStuck).
	stuck bool
	// waiting (under runMu): jobs wait for the store to take writes again;
	// the wait is logged once, not every round.
	waiting bool
	// unsaved (under runMu): job key → the reason of a failed job whose
	// end could not be saved (endFailed, recoverJob), so that endStuck
	// ends it for that reason, not errInternal, while the process lives.
	unsaved map[string]string
	// verified: result file path → the resultStamp VerifyResult last read
	// it whole at; removeResult forgets the files it removes.
	verified sync.Map

	// resultMu is held by whoever changes a completed job's result: its
	// record's Result (cleanup, which reads the record again under it, and
	// DropResult) and its file (their removal; RewriteResult's rename, made
	// only while the record still names the file). The deletion worker
	// calls DropResult and RewriteResult without runMu, which a running
	// job holds for its run.
	resultMu sync.Mutex
	// cleanupRead, when set, is called by cleanup with a job it read,
	// before it takes resultMu to remove the job's result (tests).
	cleanupRead func(j *Job)
	// rewriteWritten, when set, is called by RewriteResult once the new
	// file is written, before it takes resultMu to rename it (tests).
	rewriteWritten func()

	// resultsDue (under runMu, as finish and cleanup are): no result is
	// past its retention before it, so cleanup reads no job until then
	// (resultsKnown false: not known, cleanup reads every tenant's jobs).
	resultsDue   time.Time
	resultsKnown bool
	// listed, when set, is called by list with each tenant whose jobs it
	// reads (tests count the reads of an idle runner).
	listed func(tenant string)

	mu       sync.Mutex
	progress map[string]progress // job key → live counters of a running job
	running  *runningJob         // the job process runs now (CancelTenant)
	// queued (under mu): the tenants that may hold a job to run, each
	// with the generation of its last mark (markQueued); nil until the
	// first nextQueued has read every tenant's jobs.
	queued    map[string]uint64
	gen       uint64
	hookEvery int
	hook      func(j Job)
	// jobEnded (under mu) is OnJobEnd's fn.
	jobEnded func(tenant string)
	wake     waker
	obs      Observer
}

// progress is what a running job has done so far.
type progress struct{ procesados, total int }

// RunnerConfig is what a Runner needs.
type RunnerConfig struct {
	DB       *store.DB
	Engine   *engine.Engine
	Log      zerolog.Logger
	Dir      string
	Now      func() time.Time
	Signer   *URLSigner
	Webhooks *Webhooks
	// FS is where result files are written and removed (nil: the
	// operating system's); tests give one that fails as a full disk does.
	FS atomicfile.FS
	// ResumedAfterFullDisk: the process restarted in place after a write
	// failed inside the store for want of space (serve's restart in
	// place). A job running then could save neither its failure nor its
	// wait, so Recover takes a job it finds en_curso with no recorded
	// reason for one whose run met that full disk: voided, it waits for
	// space and runs again (waitForSpace), rather than ending fallido as
	// one a restart interrupted (errRestart).
	ResumedAfterFullDisk bool
}

// NewRunner builds a runner; call Recover before Run.
func NewRunner(c RunnerConfig) *Runner {
	fsys := c.FS
	if fsys == nil {
		fsys = atomicfile.OS{}
	}
	return &Runner{db: c.DB, eng: c.Engine, voidJob: c.Engine.VoidJob, log: c.Log, dir: c.Dir, fs: fsys, now: c.Now, Signer: c.Signer, hooks: c.Webhooks,
		resumed: c.ResumedAfterFullDisk, unsaved: map[string]string{}, progress: map[string]progress{}, wake: newWaker()}
}

// OnJobEnd makes the runner call fn(tenant), from its own goroutine, once
// a job of tenant has ended (completado or fallido, its end saved; not one
// left en_curso waiting for space): serve wakes the customer deletions
// that waited for it (privacy.Service.RetryWaiting). Set it before Run.
func (r *Runner) OnJobEnd(fn func(tenant string)) {
	r.mu.Lock()
	r.jobEnded = fn
	r.mu.Unlock()
}

// OnProgress makes the runner call fn, from its own goroutine, every `every`
// decided lines of a running job (and when its total becomes known), with
// the job as its status would show it then. For tests and tooling; set it
// before Run or RunPending.
func (r *Runner) OnProgress(every int, fn func(j Job)) {
	r.mu.Lock()
	r.hookEvery, r.hook = every, fn
	r.mu.Unlock()
}

func jobKey(tenant, id string) []byte { return store.JobKey(tenant, id) }

func newJobID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "lote_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// Submit queues a job: one in progress per tenant and at most one per hour
// of the tenant clock (failed jobs do not count). The request's customers
// are stored with the job so it survives a restart. With a keyed
// s.Idempotency, the job and the key's record commit in one synced batch,
// and a repeat of the same body within engine.IdempotencyTTL returns the
// first answer's job (ID, Estado and CreadoEn as first answered) and
// creates nothing, whatever the hourly limit and the campaign's state;
// engine.ErrIdempotencyConflict for another body or while the first runs.
// A record whose answer is no job's is quarantined and read as absent.
func (r *Runner) Submit(tenant string, s Submission) (*Job, error) {
	t, ok := r.db.Tenant(tenant)
	if !ok {
		// Deleted since its request was authenticated (privacy's
		// DeleteTenant): the API answers it as every later one, 401.
		return nil, fmt.Errorf("batch: %w: %q", engine.ErrNoTenant, tenant)
	}
	now := t.Now(r.now())
	// A stored answer needs no claim: a retry beside another retry is a
	// replay (KeyClaims.Stored); a damaged one is left to the claim.
	if ans, err := r.eng.KeyClaims.Stored(tenant, now, s.Idempotency); err != nil {
		return nil, err
	} else if ans != nil {
		if j, err := replayedJob(ans); err == nil {
			return j, nil
		}
	}
	claim, err := r.eng.KeyClaims.Claim(tenant, now, s.Idempotency)
	if err != nil {
		return nil, err
	}
	defer claim.Release()
	if ans := claim.Answer(); ans != nil {
		j, err := replayedJob(ans)
		if err == nil {
			return j, nil
		}
		claim.Damaged(err) // quarantined (contract §8): answered afresh
	}
	if _, err := r.eng.Campaigns.Campaign(tenant, s.CampanaID); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			return nil, engine.ErrNoCampaign
		}
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs, err := r.list(tenant)
	if err != nil {
		return nil, err
	}
	if re := slotTaken(jobs, now); re != nil {
		return nil, re
	}
	j := &Job{ID: newJobID(), Tenant: tenant, CampanaID: s.CampanaID, Estado: api.EstadoEnCola, CreadoEn: now, RealCreadoEn: r.now().UTC(), Segmento: s.SegmentoRaw, Explain: s.Explain}
	if err := r.commitJob(j, s.Clientes, claim); err != nil {
		return nil, err
	}
	r.markQueuedLocked(tenant)
	r.wake.poke()
	return j, nil
}

// created is the answer to a batch creation (202), which the key's
// idempotency record holds: it names no customer.
type created struct {
	JobID    string    `json:"job_id"`
	Estado   string    `json:"estado"`
	CreadoEn time.Time `json:"creado_en"`
}

// replayedJob is the job of a replay's stored answer ans, as first
// answered; an error when ans is no batch answer (a damaged record).
func replayedJob(ans json.RawMessage) (*Job, error) {
	var c created
	if err := json.Unmarshal(ans, &c); err != nil {
		return nil, fmt.Errorf("batch: idempotency record: %w", err)
	}
	if c.JobID == "" {
		return nil, errors.New("batch: idempotency record: not a batch answer")
	}
	return &Job{ID: c.JobID, Estado: c.Estado, CreadoEn: c.CreadoEn}, nil
}

// commitJob commits job j, its customers clientes (deduplicated, in
// cliente_ref order; nil for a segment job) and claim's idempotency
// record in one synced batch.
func (r *Runner) commitJob(j *Job, clientes []string, claim *engine.KeyClaim) error {
	b := r.db.NewBatch()
	defer b.Close()
	if clientes != nil {
		seen := make(map[string]struct{}, len(clientes))
		uniq := clientes[:0:0]
		for _, c := range clientes {
			if _, dup := seen[c]; !dup {
				seen[c] = struct{}{}
				uniq = append(uniq, c)
			}
		}
		// Decided and written in cliente_ref order, as segment jobs are:
		// the reads then go through the store in key order.
		slices.Sort(uniq)
		j.Total = len(uniq)
		for i := 0; i < len(uniq); i += clientChunk {
			chunk := uniq[i:min(i+clientChunk, len(uniq))]
			if err := b.SetJSON(store.JobChunkKey(j.Tenant, j.ID, j.Chunks), chunk); err != nil {
				return err
			}
			j.Chunks++
		}
	}
	if err := b.SetJSON(jobKey(j.Tenant, j.ID), j); err != nil {
		return err
	}
	ans, err := json.Marshal(created{JobID: j.ID, Estado: j.Estado, CreadoEn: j.CreadoEn})
	if err != nil {
		return err
	}
	if err := claim.Put(b, ans); err != nil {
		return err
	}
	return b.Commit()
}

// busy reports whether jobs leave room for a new one at now (tenant clock):
// none queued or running, none but failed ones created in the last hour.
// The wait is until the hour of the latest such job is over, and at least
// a minute while one is queued or running: a job in progress that
// completes still holds the tenant's hour (only a failed one gives it
// back), so a Retry-After of a minute sent the client back to a 429 for
// the rest of that hour. A job created more than clock.Slack ahead of now
// was created before the clock went back (a live tenant's machine clock):
// its hour is over (clock.Expired), or it would hold the tenant's hour for
// as long again as the clock went back.
func busy(jobs []*Job, now time.Time) (time.Duration, bool) {
	var wait time.Duration
	for _, j := range jobs {
		wait = max(wait, jobWait(j, now))
	}
	return max(wait, time.Second), wait > 0
}

// jobWait is how long job j alone holds the tenant's slot from now (busy):
// 0 or less when it does not.
func jobWait(j *Job, now time.Time) time.Duration {
	var wait time.Duration
	inProgress := j.Estado == api.EstadoEnCola || j.Estado == api.EstadoEnCurso
	if inProgress {
		wait = time.Minute
	}
	if (inProgress || j.Estado != api.EstadoFallido) && !clock.Expired(j.CreadoEn.Add(time.Hour), time.Hour, now) {
		wait = max(wait, j.CreadoEn.Add(time.Hour).Sub(now))
	}
	return wait
}

// blockingJob is the id of the newest of jobs that holds the tenant's slot
// at now (jobWait above 0): "" when none does.
func blockingJob(jobs []*Job, now time.Time) string {
	var last *Job
	for _, j := range jobs {
		if jobWait(j, now) > 0 && (last == nil || j.CreadoEn.After(last.CreadoEn)) {
			last = j
		}
	}
	if last == nil {
		return ""
	}
	return last.ID
}

// slotTaken is the refusal of a new job that jobs hold the tenant's slot
// against at now (busy), naming the job that holds it (blockingJob); nil
// when they leave room. Submit and Busy answer with it.
func slotTaken(jobs []*Job, now time.Time) *RetryError {
	if wait, busy := busy(jobs, now); busy {
		return &RetryError{Err: ErrBusy, After: wait, JobID: blockingJob(jobs, now)}
	}
	return nil
}

// list returns the tenant's jobs. A record that does not decode is moved to
// quarantine and left out (contract §8), so that it stops neither recovery
// nor any tenant's queue.
func (r *Runner) list(tenant string) ([]*Job, error) {
	var out []*Job
	type damaged struct {
		key, val []byte
		err      error
	}
	var bad []damaged
	if r.listed != nil {
		r.listed(tenant)
	}
	lo, hi := store.JobSpan(tenant)
	err := r.db.Scan(lo, hi, func(k, v []byte) error {
		j, err := decodeJob(tenant, k, v)
		if err != nil {
			bad = append(bad, damaged{bytes.Clone(k), bytes.Clone(v), err})
			return nil
		}
		out = append(out, j)
		return nil
	})
	for _, d := range bad {
		r.eng.Records().Quarantine(tenant, d.key, d.val, fmt.Errorf("job record: %w", d.err))
	}
	return out, err
}

// decodeJob decodes the job record v stored at key of tenant. A record
// whose tenant or id is not its key's, or whose result is not the file
// the runner names for it (tenant/job_id.jsonl.zst), is damaged like one
// that does not decode: retention and deletion remove the file a record
// names, which must never be another tenant's or lie outside the results
// dir.
func decodeJob(tenant string, key, v []byte) (*Job, error) {
	j := new(Job)
	if err := json.Unmarshal(v, j); err != nil {
		return nil, fmt.Errorf("job record: %w", err)
	}
	if j.Tenant != tenant || !bytes.Equal(jobKey(tenant, j.ID), key) {
		return nil, fmt.Errorf("job record: tenant %q, job_id %q: not its key's", j.Tenant, j.ID)
	}
	if j.Result != "" && j.Result != filepath.Join(j.Tenant, j.ID+resultSuffix) {
		return nil, fmt.Errorf("job record: result %q: not the job's file", j.Result)
	}
	return j, nil
}

// Jobs returns the tenant's jobs as stored (no live progress); a record
// that does not decode is moved to quarantine and left out, as in list.
func (r *Runner) Jobs(tenant string) ([]*Job, error) { return r.list(tenant) }

// Job returns a job of tenant with live progress, or ErrNotFound (also
// for a record that does not decode, which is moved to quarantine).
func (r *Runner) Job(tenant, id string) (*Job, error) {
	key := jobKey(tenant, id)
	v, err := r.db.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	j, err := decodeJob(tenant, key, v)
	if err != nil {
		r.eng.Records().Quarantine(tenant, key, v, err)
		return nil, ErrNotFound
	}
	r.mu.Lock()
	if p, ok := r.progress[tenant+"/"+id]; ok && j.Estado == api.EstadoEnCurso {
		j.Procesados, j.Total = p.procesados, p.total
	}
	r.mu.Unlock()
	return j, nil
}

// save stores j's record in one synced commit.
func (r *Runner) save(j *Job) error {
	b, err := r.jobBatch(j)
	if err != nil {
		return err
	}
	defer b.Close()
	return b.Commit()
}

// jobBatch is the batch that stores j's record, for save and finish, which
// commit it (finish with more in it) and close it: the tests' saveFault
// runs first and its error is returned, as is SetJSON's, with no batch
// left open.
func (r *Runner) jobBatch(j *Job) (*store.Batch, error) {
	if r.saveFault != nil {
		if err := r.saveFault(j); err != nil {
			return nil, err
		}
	}
	b := r.db.NewBatch()
	if err := b.SetJSON(jobKey(j.Tenant, j.ID), j); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Recover runs before Run after a start: a job that was running when the
// process stopped ends fallido with an error that says so, and the
// decisions it had committed are voided (engine.VoidJob: no caller got
// them); one whose run met a full disk waits en_curso for space instead,
// as does, after a restart in place (RunnerConfig.ResumedAfterFullDisk),
// one that recorded no reason; queued jobs stay queued and run. Stale
// temporary result files and result files of jobs that did not complete
// are removed. One job or tenant that cannot be recovered does not hold up
// the others: a job whose decisions cannot be voided stays en_curso, its
// reason kept, and the next RunPending voids it again (endStuck); the
// result files are left alone while any tenant's jobs cannot be read. The
// error joins every failure.
func (r *Runner) Recover() error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	keep := map[string]bool{}
	var errs []error
	unread := false // a tenant whose jobs could not be listed
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			unread = true
			errs = append(errs, fmt.Errorf("batch: list jobs of %s: %w", t.ID, err))
			continue
		}
		for _, j := range jobs {
			if j.Estado == api.EstadoEnCurso {
				if err := r.recoverJob(t, j); err != nil {
					r.stuck = true
					errs = append(errs, err)
				}
			}
			if j.Estado == api.EstadoCompletado && j.Result != "" {
				keep[filepath.Clean(j.Result)] = true
			}
		}
	}
	if !unread {
		if err := r.sweep(keep); err != nil {
			errs = append(errs, err)
		}
	}
	r.wake.poke()
	return errors.Join(errs...)
}

// recoverJob ends j, a job of tenant t found en_curso at a start, fallido
// once its decisions are voided; one whose run met a full disk waits for
// space (waitForSpace), as before the restart (recoveryReason). Voided
// first: a stop before the job is recorded fallido leaves it en_curso,
// and the next start voids what is left. When they cannot be voided j
// stays en_curso with its reason kept, in the store if it can be saved
// and in memory (unsaved) for endStuck.
func (r *Runner) recoverJob(t *store.Tenant, j *Job) error {
	if j.WaitsForSpace { // voided before it was marked so, not run since
		return nil
	}
	reason := r.recoveryReason(j)
	err := r.recoverAs(t, j, reason)
	r.remember(j, reason, err == nil)
	return err
}

// recoveryReason is why j, found en_curso at a start, stopped running:
// the reason its failed run recorded (endFailed); else, after a restart in
// place (ResumedAfterFullDisk), errDiskFull: the store failed for want of
// space while j ran, so j could record nothing; else errRestart.
func (r *Runner) recoveryReason(j *Job) string {
	switch {
	case j.Error != "":
		return j.Error
	case r.resumed:
		return errDiskFull
	default:
		return errRestart
	}
}

// recoverAs ends j as recoverJob does, for reason.
func (r *Runner) recoverAs(t *store.Tenant, j *Job, reason string) error {
	voided, err := r.voidJob(j.Tenant, j.ID)
	if err != nil {
		j.Error = reason
		if serr := r.save(j); serr != nil {
			err = errors.Join(err, serr)
		}
		r.log.Error().Err(err).Str("tenant", j.Tenant).Str("job_id", j.ID).Msg("batch recovery: void failed, the job stays en_curso until its decisions are voided")
		return fmt.Errorf("batch: recover job %s/%s: %w", j.Tenant, j.ID, err)
	}
	if reason == errDiskFull {
		if !r.waitForSpace(j, voided, r.log.With().Str("tenant", j.Tenant).Str("job_id", j.ID).Logger()) {
			return fmt.Errorf("batch: recover job %s/%s: not saved", j.Tenant, j.ID)
		}
		return nil
	}
	j.Estado, j.Error = api.EstadoFallido, reason
	now := t.Now(r.now())
	j.CompletadoEn = &now
	j.Procesados, j.Result = 0, ""
	if err := r.finish(j); err != nil {
		return fmt.Errorf("batch: recover job %s/%s: %w", j.Tenant, j.ID, err)
	}
	r.log.Warn().Str("tenant", j.Tenant).Str("job_id", j.ID).Int("anuladas", voided).Msg("batch job interrupted by restart: fallido")
	return nil
}

// remember keeps reason, why j failed, in memory (unsaved) until j's end
// is saved (saved true), for endStuck. The caller holds runMu.
func (r *Runner) remember(j *Job, reason string, saved bool) {
	key := j.Tenant + "/" + j.ID
	if saved {
		delete(r.unsaved, key)
		return
	}
	r.unsaved[key] = reason
}

// sweep removes from the results dir every temporary file (left by a stop
// while a file was written) and every result file no completed job names.
func (r *Runner) sweep(keep map[string]bool) error {
	err := filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, rerr := filepath.Rel(r.dir, path)
		if rerr != nil {
			return nil
		}
		if strings.HasSuffix(path, tmpSuffix) || (strings.HasSuffix(path, resultSuffix) && !keep[rel]) {
			if err := r.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			r.log.Info().Str("file", rel).Msg("batch recovery: stale result file removed")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("batch: sweep results: %w", err)
	}
	return nil
}

// Wake makes Run look for queued jobs now rather than at its next minute:
// those of a tenant just resumed, which waited while it was paused.
func (r *Runner) Wake() { r.wake.poke() }

// Run processes queued jobs until ctx ends, oldest first, and applies the
// result retention: a round at once, then at every Wake, every minute, and
// within spacePoll of the store taking writes again after it refused them
// (below its disk reserve, or stopped after a failed write), so that a job
// that waited for space, and the customer deletions waiting for that job,
// go on within seconds of space coming back, not at the next minute. A
// paused tenant's queued jobs wait for its resume.
func (r *Runner) Run(ctx context.Context) {
	r.wake.loop(ctx, time.Minute, r.db.WritesRefused, func() { r.RunPending(ctx) })
}

// RunPending runs every queued job to its end, oldest first, and those
// waiting for space after a full disk (a full disk ends the round), then
// removes result files past their retention; it returns how many jobs
// ran. Run calls it; tests call it to run jobs synchronously.
func (r *Runner) RunPending(ctx context.Context) int {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	if r.stuck {
		r.stuck = !r.endStuck()
	}
	n := 0
	for ctx.Err() == nil {
		j, err := r.nextQueued()
		if err != nil {
			r.log.Error().Err(err).Msg("batch queue")
			break
		}
		if j == nil {
			break
		}
		if r.db.WritesRefused() {
			// Below the disk reserve, kept for deletions (contract §8): a
			// job would write a decision a customer and its result file.
			// It stays queued until space is back.
			ev := r.log.Warn()
			if r.waiting {
				ev = r.log.Debug()
			}
			ev.Str("tenant", j.Tenant).Str("job_id", j.ID).Msg("batch job waits: the store refuses writes (below its disk reserve, or stopped after a failed write)")
			r.waiting = true
			break
		}
		if r.waiting {
			r.waiting = false
			r.log.Info().Msg("batch jobs run again: the store takes writes")
		}
		ok := r.process(ctx, j)
		r.ended(j)
		if !ok {
			// The store refused the job's start, or its run met a full
			// disk: the job waits for the next round instead of being
			// picked again at once.
			break
		}
		n++
	}
	r.cleanup()
	return n
}

// ended calls OnJobEnd's fn for j, a job process returned, when j has
// ended.
func (r *Runner) ended(j *Job) {
	r.mu.Lock()
	fn := r.jobEnded
	r.mu.Unlock()
	if fn != nil && (j.Estado == api.EstadoCompletado || j.Estado == api.EstadoFallido) {
		fn(j.Tenant)
	}
}

// nextQueued returns the oldest job to run, nil if none: one queued, or
// one waiting en_curso for space after its run met a full disk
// (waitForSpace). A paused tenant's jobs are left waiting. It reads the
// jobs of the tenants that may hold one (queuedTenants), not of every
// tenant: job records are kept for good, and the runner looks every
// minute and at every creation.
func (r *Runner) nextQueued() (*Job, error) {
	var next *Job
	for _, t := range r.queuedTenants() {
		if t.Settings.Paused { // a pause stops a batch's decisions too: its jobs wait (Wake)
			continue
		}
		gen := r.queuedGen(t.ID)
		jobs, err := r.list(t.ID)
		if err != nil {
			return nil, err
		}
		none := true
		for _, j := range jobs {
			runnable := j.Estado == api.EstadoEnCola || j.Estado == api.EstadoEnCurso && j.WaitsForSpace
			none = none && !runnable
			if runnable && (next == nil || j.RealCreadoEn.Before(next.RealCreadoEn)) {
				next = j
			}
		}
		if none {
			r.unmarkQueued(t.ID, gen)
		}
	}
	return next, nil
}

func (r *Runner) resultPath(rel string) string { return filepath.Join(r.dir, rel) }

// setProgress publishes a running job's counters and calls the hook.
func (r *Runner) setProgress(j *Job, procesados int, force bool) {
	r.mu.Lock()
	r.progress[j.Tenant+"/"+j.ID] = progress{procesados, j.Total}
	hook, every := r.hook, r.hookEvery
	r.mu.Unlock()
	if hook != nil && (force || (every > 0 && procesados%every == 0)) {
		v := *j
		v.Procesados = procesados
		hook(v)
	}
}

// process runs one job to completado or fallido (or, when a failed job's
// decisions could not be voided, leaves it en_curso: endFailed; or, when
// its run met a full disk, leaves it en_curso waiting for space:
// waitForSpace; a completed job whose end could not be saved ends so too).
// It reports false when the round must stop: the job could not be marked
// en_curso and stays as it was, or its run met a full disk.
func (r *Runner) process(ctx context.Context, j *Job) bool {
	log := r.log.With().Str("tenant", j.Tenant).Str("job_id", j.ID).Logger()
	t, ok := r.db.Tenant(j.Tenant)
	if !ok {
		j.Estado, j.Error = api.EstadoFallido, errNoTenant
		if err := r.finish(j); err != nil {
			log.Error().Err(err).Msg("batch save")
			return false
		}
		return true
	}
	realStart := r.now()
	if !j.WaitsForSpace { // a job run again after a full disk keeps its first start
		started := t.Now(realStart)
		j.IniciadoEn, j.RealIniciadoEn = &started, realStart.UTC()
	}
	j.Estado, j.WaitsForSpace = api.EstadoEnCurso, false
	if err := r.save(j); err != nil {
		log.Error().Err(err).Msg("batch start")
		return false
	}
	key := j.Tenant + "/" + j.ID
	defer func() {
		r.mu.Lock()
		delete(r.progress, key)
		r.mu.Unlock()
	}()
	r.setProgress(j, 0, true)
	log.Info().Int("total", j.Total).Msg("batch job started")
	jctx, ended := r.startRun(ctx, j)
	defer ended()
	runErr := r.runSafe(jctx, j, log)
	t2, ok := r.db.Tenant(j.Tenant)
	if !ok {
		// Its tenant is being deleted (CancelTenant): the deletion erases
		// the job, its decisions and its files; nothing is written back.
		log.Warn().Err(runErr).Msg("batch job stopped: its tenant is being deleted")
		return true
	}
	t = t2
	if runErr != nil {
		reason := publicError(runErr)
		switch reason {
		case errDiskFull:
			log.Warn().Err(runErr).Msg("batch job met a full disk: its decisions are voided and it runs again once there is space")
		case errStop: // a routine stop or restart, no fault to alert on
			log.Warn().Err(runErr).Msg("batch job stopped by the service's shutdown: it ends fallido, its decisions voided; the caller sends it again")
		default:
			log.Error().Err(runErr).Msg("batch job failed")
		}
		j.Result, j.RealCompletadoEn = "", r.now().UTC() // the run's end, however late its decisions are voided
		if !r.endFailed(j, reason, log) {
			r.stuck = true
		}
		// A full disk stops the round: the next job would meet it too.
		return reason != errDiskFull
	}
	realDone := r.now()
	done := t.Now(realDone)
	j.CompletadoEn, j.RealCompletadoEn = &done, realDone.UTC()
	j.Estado = api.EstadoCompletado
	log.Info().Int("lineas", j.Procesados).Int("envios", j.Envios).Dur("took", realDone.Sub(realStart)).Msg("batch job completed")
	if err := r.finish(j); err != nil {
		// Not completado: the job ends as a failed run does, its result
		// never delivered (it stayed en_curso until a restart, the tenant
		// unable to create a job and its customers' deletions waiting).
		log.Error().Err(err).Msg("batch save: the completed job ends as a failed run")
		r.fs.Remove(r.resultPath(j.Result))
		reason := publicError(err)
		j.Estado, j.CompletadoEn, j.Result = api.EstadoEnCurso, nil, ""
		if !r.endFailed(j, reason, log) {
			r.stuck = true
		}
		return reason != errDiskFull
	}
	return true
}

// endFailed records j, a job that failed without delivering its result
// (reason: its public error), fallido once the decisions it committed are
// voided (engine.VoidJob: no caller got them); for errDiskFull, it waits
// en_curso for space instead (waitForSpace). While they cannot be voided
// j stays en_curso, its reason kept for its end (a status shows error only
// when fallido), and the next RunPending (endStuck), or Recover after a
// restart, voids them again: recorded fallido at once, its sends stayed
// reserved until they expired. It reports whether j's end was saved:
// recorded fallido, or waiting for space; until then reason is kept in
// memory (unsaved), so that endStuck ends j for it even when no save of
// j went through.
func (r *Runner) endFailed(j *Job, reason string, log zerolog.Logger) bool {
	saved := r.voidAndEnd(j, reason, log)
	r.remember(j, reason, saved)
	return saved
}

// voidAndEnd is endFailed but for remembering reason.
func (r *Runner) voidAndEnd(j *Job, reason string, log zerolog.Logger) bool {
	voided, err := r.voidJob(j.Tenant, j.ID)
	if err != nil {
		log.Error().Err(err).Msg("batch void failed: the job stays en_curso until its decisions are voided")
		j.Estado, j.Error, j.CompletadoEn = api.EstadoEnCurso, reason, nil
		if err := r.save(j); err != nil {
			log.Error().Err(err).Msg("batch save")
		}
		return false
	}
	if reason == errDiskFull {
		return r.waitForSpace(j, voided, log)
	}
	done := r.now()
	if t, ok := r.db.Tenant(j.Tenant); ok {
		done = t.Now(done)
	}
	j.Estado, j.Error, j.CompletadoEn = api.EstadoFallido, reason, &done
	if err := r.finish(j); err != nil {
		log.Error().Err(err).Msg("batch save")
		return false
	}
	log.Warn().Int("anuladas", voided).Msg("batch job fallido: its decisions voided")
	return true
}

// waitForSpace keeps j, a job whose run met a full disk and whose
// decisions are voided, en_curso (the spec leads en_curso only to
// completado or fallido) with its stored customers: RunPending picks it
// like a queued job and runs it again from its start once the store takes
// writes (it waits below the disk reserve). Its integrator gets one
// complete result, each customer decided once: the voided decisions were
// never delivered. It reports whether j was saved.
func (r *Runner) waitForSpace(j *Job, voided int, log zerolog.Logger) bool {
	defer r.markQueued(j.Tenant) // saved or not, its record may say en_curso waiting
	j.Estado, j.WaitsForSpace, j.Error, j.Result = api.EstadoEnCurso, true, "", ""
	j.CompletadoEn, j.RealCompletadoEn = nil, time.Time{}
	j.Procesados, j.Envios = 0, 0
	if err := r.save(j); err != nil {
		log.Error().Err(err).Msg("batch save")
		return false
	}
	log.Warn().Int("anuladas", voided).Msg("batch job waits en_curso for space: its decisions voided")
	return true
}

// endStuck ends the jobs whose failed run could not save its end
// (endFailed), voiding them first, for the reason the run met (kept in
// memory, else in the job's record; errInternal when neither has one):
// fallido, or waiting for space after a full disk. It reports whether
// none is left. The caller holds runMu: no job is running, so every
// en_curso job is one of them (Recover ends those of a process that
// stopped), but those waiting for space with their decisions voided
// (waitForSpace).
func (r *Runner) endStuck() bool {
	ended := true
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			r.log.Error().Err(err).Str("tenant", t.ID).Msg("batch queue")
			ended = false
			continue
		}
		for _, j := range jobs {
			if j.Estado != api.EstadoEnCurso || j.WaitsForSpace {
				continue
			}
			reason := cmp.Or(r.unsaved[j.Tenant+"/"+j.ID], j.Error, errInternal)
			log := r.log.With().Str("tenant", j.Tenant).Str("job_id", j.ID).Logger()
			if !r.endFailed(j, reason, log) {
				ended = false
			}
		}
	}
	return ended
}

// finish stores a job that ended, drops its stored request and, for a
// completed job, queues its webhook, all in one synced commit. The
// request's chunks name its customers: the commit also marks their keys
// owed a compaction and a purge of the logs (store.Batch.OwePurge), which
// the deletion worker does first on its next pass, since a customer of
// the job deleted later finds no chunk left to scrub.
func (r *Runner) finish(j *Job) error {
	b, err := r.jobBatch(j)
	if err != nil {
		return err
	}
	defer b.Close()
	if j.Chunks > 0 {
		b.DeleteRange(store.JobChunksSpan(j.Tenant, j.ID))
		chunks := make([][]byte, j.Chunks)
		for i := range chunks {
			chunks[i] = store.JobChunkKey(j.Tenant, j.ID, i)
		}
		b.OwePurge(chunks)
	}
	queued := false
	if j.Estado == api.EstadoCompletado && r.hooks != nil {
		if queued, err = r.hooks.enqueue(b, j); err != nil {
			r.log.Error().Err(err).Str("job_id", j.ID).Msg("webhook enqueue")
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	if j.Estado == api.EstadoCompletado && j.Result != "" {
		r.resultKept(j.RealCompletadoEn)
	}
	if r.obs.JobEnded != nil {
		r.obs.JobEnded(j.Tenant, j.Estado, j.Procesados)
	}
	if queued {
		r.hooks.wake.poke()
	}
	return nil
}

// publicError is what a failed job shows to the integrator: the reason,
// without internals.
func publicError(err error) string {
	switch {
	case errors.Is(err, engine.ErrNoCampaign):
		return errNoCamp
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errStop
	case diskFull(err):
		return errDiskFull
	case errors.As(err, new(*resultIOError)):
		return errResultIO
	default:
		return errInternal
	}
}

// diskFull reports whether err is a full disk's, met by the result file
// (ENOSPC, EDQUOT) or by the store (store.ErrFull): the job waits for
// space rather than fail.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, store.ErrFull)
}

// clientes returns an iterator over a clientes job's stored customers and
// a function that reports the first read error after the iteration.
func (r *Runner) clientes(j *Job) (next func() (string, bool), err func() error) {
	var chunk []string
	var readErr error
	i, pos := 0, 0
	next = func() (string, bool) {
		for pos == len(chunk) {
			if i == j.Chunks || readErr != nil {
				return "", false
			}
			pos = 0
			if chunk, readErr = r.chunk(j, i); readErr != nil {
				return "", false
			}
			i++
		}
		pos++
		return chunk[pos-1], true
	}
	return next, func() error { return readErr }
}

// chunk reads chunk i of a clientes job's stored customers. A chunk that
// does not decode is moved to quarantine (contract §8) before its error is
// returned: the job then fails, and deleting the job's chunks must not
// lose it.
func (r *Runner) chunk(j *Job, i int) ([]string, error) {
	key := store.JobChunkKey(j.Tenant, j.ID, i)
	v, err := r.db.Get(key)
	if err != nil {
		return nil, err
	}
	var chunk []string
	if err := json.Unmarshal(v, &chunk); err != nil {
		err = fmt.Errorf("job %s customer list chunk %d: %w", j.ID, i, err)
		r.eng.Records().Quarantine(j.Tenant, key, v, err)
		return nil, err
	}
	return chunk, nil
}

// customers calls fn for every customer of a clientes job, in order.
func (r *Runner) customers(j *Job, fn func(ref string) error) error {
	for i := 0; i < j.Chunks; i++ {
		chunk, err := r.chunk(j, i)
		if err != nil {
			return err
		}
		for _, c := range chunk {
			if err := fn(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// runSafe is run with a panic turned into the job's failure, so that a bug
// met by one job neither kills the process nor leaves the job en_curso.
func (r *Runner) runSafe(ctx context.Context, j *Job, log zerolog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg("batch job panicked")
			err = fmt.Errorf("batch: panic: %v", p)
		}
	}()
	return r.run(ctx, j, log)
}

// run decides the job's customers and writes its result file.
//
// A first pass (segment jobs, and any job whose campaign caps sends) lists
// the segment's customers and computes each customer's expected gain of a
// send and the probability that its decision sends. The budget cut comes
// before any randomisation: the customers with the highest gains keep
// their sends, as many as their expected sends fill the budget (KeepTop),
// the rest are decided with 0 as the only choice; each send is still
// counted against the budget when decided, so the cap holds whatever the
// draws. The second pass decides every customer with the shared
// decider and streams the lines through zstd to a temporary file that is
// synced and renamed when complete.
func (r *Runner) run(ctx context.Context, j *Job, log zerolog.Logger) error {
	t0 := time.Now()
	bd, err := r.eng.NewBatchDecider(j.Tenant, j.ID, j.CampanaID)
	if err != nil {
		return err
	}
	defer bd.Close()
	bd.Explain = j.Explain

	refs, keep, limited, err := r.scan(ctx, j, bd)
	if err != nil {
		return err
	}
	scanned := time.Now()
	rel := filepath.Join(j.Tenant, j.ID+resultSuffix)
	n, err := r.writeResult(ctx, j, bd, rel, refs, limited, keep)
	if err != nil {
		return err
	}
	log.Info().Dur("scan", scanned.Sub(t0)).Dur("decide", time.Since(scanned)).Int("lineas", n).Msg("batch job phases (real time)")
	j.Procesados, j.Result = n, rel
	j.Total = n
	r.setProgress(j, n, true)
	return nil
}

// scan is the first pass of a job. A segment job lists its customers in
// refs (and counts them in j.Total). When a send budget limits the job,
// keep says which customers in job order may be sent something: those with
// the highest expected gain, as many as their expected sends fill the
// budget.
func (r *Runner) scan(ctx context.Context, j *Job, bd *engine.BatchDecider) (refs []string, keep []bool, limited bool, err error) {
	remaining, limited := bd.SendBudget()
	cents, capped := bd.DiscountBudget()
	if !capped {
		cents = -1
	}
	var gains, psend, cost []float64 // per customer in job order; gain NaN: cannot send
	addGain := func(g engine.Gain) {
		if !g.OK {
			g.Cents = math.NaN()
		}
		gains, psend, cost = append(gains, g.Cents), append(psend, g.PSend), append(cost, g.CostCents)
	}
	switch {
	case j.Segmento != nil:
		seg, err := engine.ParseSegmentJSON(j.Segmento)
		if err != nil {
			return nil, nil, false, err
		}
		if err := bd.ScanSegment(seg, limited, func(ref string, g engine.Gain) error {
			refs = append(refs, ref)
			if limited {
				addGain(g)
			}
			return ctx.Err()
		}); err != nil {
			return nil, nil, false, err
		}
		j.Total = len(refs)
		if err := r.save(j); err != nil {
			return nil, nil, false, err
		}
		r.setProgress(j, 0, true)
	case limited:
		next, nextErr := r.clientes(j)
		if err := bd.ScanList(next, true, func(_ string, g engine.Gain) error {
			addGain(g)
			return ctx.Err()
		}); err != nil {
			return nil, nil, false, err
		}
		if err := nextErr(); err != nil {
			return nil, nil, false, err
		}
	}
	if limited {
		keep = KeepTop(gains, psend, cost, remaining, cents)
	}
	return refs, keep, limited, nil
}

// writeResult decides for each customer of j (refs for a segment job, its
// stored list otherwise) and writes the result file rel whole; n is the
// number of lines. Under a send budget (limited), a customer keep does not
// keep is sent nothing.
func (r *Runner) writeResult(ctx context.Context, j *Job, bd *engine.BatchDecider, rel string, refs []string, limited bool, keep []bool) (n int, err error) {
	dir := filepath.Dir(r.resultPath(rel))
	if err := r.fs.MkdirAll(dir, 0o700); err != nil {
		return 0, ioError(err)
	}
	w, err := createResult(r.fs, dir, filepath.Base(rel))
	if err != nil {
		return 0, err
	}
	defer w.Abort() // no-op after Commit
	lw := newLineWriter(w)
	defer lw.close() // runs before Abort
	r.mu.Lock()
	every := r.hookEvery
	r.mu.Unlock()
	decideOne := func(ref string) error {
		noSend := limited && (n >= len(keep) || !keep[n])
		d, err := bd.Decide(ref, noSend)
		if err != nil {
			return err
		}
		if d.Accion != 0 {
			j.Envios++
		}
		if r.obs.Decision != nil {
			r.obs.Decision(j.Tenant, d)
		}
		if err := lw.add(ref, d); err != nil {
			return err
		}
		n++
		if n%progressStep == 0 || (every > 0 && n%every == 0) {
			r.setProgress(j, n, false)
		}
		return ctx.Err()
	}
	if j.Segmento != nil {
		for _, ref := range refs {
			if err := decideOne(ref); err != nil {
				return 0, err
			}
		}
	} else if err := r.customers(j, decideOne); err != nil {
		return 0, err
	}
	if err := bd.Flush(); err != nil {
		return 0, err
	}
	if err := lw.close(); err != nil {
		return 0, err
	}
	if err := w.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}

// progressStep is how often (in lines) a running job's progress is
// published to status queries.
const progressStep = 1000

// KeepTop returns which entries of gains keep their sends under a budget of
// k sends and, when cents is not negative, cents of discount: the highest
// gains (ties broken by position, earlier first), as many as it takes for
// their send probabilities psend to add up to k or their expected
// discounts cost to cents, whichever comes first, so that what the kept
// customers' decisions are expected to draw fills the budget (with every
// psend 1 and no discount cap, the k highest). Keeping only k customers
// would leave most of a budget unspent where the policy sends to a
// fraction of them (while it tests, to about half). A psend that is not a
// probability (NaN, outside [0, 1]) counts as 1, a cost that is not a
// finite non-negative amount as 0. A NaN gain marks a customer who cannot
// receive a send; it never keeps one.
func KeepTop(gains, psend, cost []float64, k, cents int64) []bool {
	keep := make([]bool, len(gains))
	idx := make([]int32, 0, len(gains))
	for i, g := range gains {
		if !math.IsNaN(g) {
			idx = append(idx, int32(i))
		}
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(gains[b], gains[a]) })
	sends, spent := 0.0, 0.0
	for _, i := range idx {
		if sends >= float64(k) || cents >= 0 && spent >= float64(cents) {
			break
		}
		keep[i] = true
		if p := psend[i]; p >= 0 && p <= 1 {
			sends += p
		} else {
			sends++ // not a probability (NaN): a sure send, not one that keeps every customer after it
		}
		if c := cost[i]; c >= 0 && !math.IsInf(c, 0) {
			spent += c
		}
	}
	return keep
}

// cleanup removes result files past ResultRetention, counted from the
// job's real completion (its creation for a record that lacks it): a job
// that waited queued, a paused tenant's, keeps its result as long as any
// other. Their jobs stay completado, without resultado_url. It reads the
// jobs only once a result may be past its retention (resultsDue): job
// records are kept for good, and RunPending runs every minute.
func (r *Runner) cleanup() {
	now := r.now()
	if r.resultsKnown && !now.After(r.resultsDue) {
		return
	}
	cutoff := now.Add(-ResultRetention)
	r.resultsKnown, r.resultsDue = true, time.Time{}
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			r.resultsKnown = false // read again next time
			continue
		}
		for _, j := range jobs {
			if j.Estado != api.EstadoCompletado || j.Result == "" {
				continue
			}
			kept := j.RealCompletadoEn
			if kept.IsZero() {
				kept = j.RealCreadoEn
			}
			if !kept.Before(cutoff) {
				r.resultKept(kept)
				continue
			}
			if r.cleanupRead != nil {
				r.cleanupRead(j)
			}
			if err := r.expire(j); err != nil {
				r.log.Error().Err(err).Str("job_id", j.ID).Msg("batch retention")
				r.resultsKnown = false
			}
		}
	}
	if r.resultsDue.IsZero() {
		r.resultsDue = noResultDue()
	}
}

// expire removes the result of j, a completed job past its retention
// listed by cleanup, and saves the job without it (removeResult).
func (r *Runner) expire(listed *Job) error { return r.removeResult(listed, "") }

// DropResult removes the result file of job j and saves the job without
// one, reason in its error: the job then answers as after retention (no
// resultado_url, a download 404). It is for a result file that cannot be
// rewritten (RewriteResult failed on it), which must not keep a deleted
// customer's lines either (contract §8).
func (r *Runner) DropResult(j *Job, reason string) error {
	if j.Result == "" {
		return nil
	}
	return r.removeResult(j, reason)
}

// removeResult removes the result file that j, the caller's read of a
// completed job, names, and saves the job without one (reason, when not
// "", in its error). Under resultMu the record is read again and that is
// what is saved: a change saved since the caller's read is kept, and a
// result that retention expired or a drop removed since is left as it is
// (nil), so no reason lands on an expired job. The file goes first: a crash
// in between leaves a job whose file is missing, which reads as gone too.
func (r *Runner) removeResult(j *Job, reason string) error {
	r.resultMu.Lock()
	defer r.resultMu.Unlock()
	cur, err := r.Job(j.Tenant, j.ID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.Estado != api.EstadoCompletado || cur.Result != j.Result {
		return nil // its result is gone already
	}
	if err := r.fs.Remove(r.resultPath(cur.Result)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	r.forgetVerified(r.resultPath(cur.Result))
	cur.Result = ""
	if reason != "" {
		cur.Error = reason
	}
	return r.save(cur)
}

// RewriteResult rewrites completed job j's result file as the package's
// RewriteResult does (a job without one: 0, nil). The new file replaces
// the old one only if j's record, read under resultMu, still names it:
// retention and DropResult remove the file under resultMu, and a rename
// after them would put back a file no job names, with every line but the
// dropped ones. The error then wraps fs.ErrNotExist, as for a file
// removed before the rewrite.
func (r *Runner) RewriteResult(j *Job, keep func(line []byte) bool) (removed int, err error) {
	path, ok := r.ResultFile(j)
	if !ok {
		return 0, nil
	}
	return rewriteResult(path, keep, func(w *ResultWriter) error {
		if r.rewriteWritten != nil {
			r.rewriteWritten()
		}
		r.resultMu.Lock()
		defer r.resultMu.Unlock()
		cur, err := r.Job(j.Tenant, j.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err != nil || cur.Result != j.Result {
			return fmt.Errorf("batch: rewrite result of %s: removed meanwhile: %w", j.ID, fs.ErrNotExist)
		}
		return w.Commit()
	})
}

// ResultFile returns the path of a completed job's result file.
func (r *Runner) ResultFile(j *Job) (string, bool) {
	if j.Estado != api.EstadoCompletado || j.Result == "" {
		return "", false
	}
	return r.resultPath(j.Result), true
}

// Busy reports whether a new job of tenant would be refused now (one in
// progress, or one created in the last hour of the tenant clock): nil when
// not, else how long to wait and the job that holds the slot (none when
// the jobs could not be read).
func (r *Runner) Busy(tenant string) *RetryError {
	t, ok := r.db.Tenant(tenant)
	if !ok {
		return nil
	}
	now := t.Now(r.now())
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs, err := r.list(tenant)
	if err != nil {
		return &RetryError{Err: err, After: time.Minute}
	}
	return slotTaken(jobs, now)
}
