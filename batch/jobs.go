// Package batch runs batch decision jobs: the durable job queue, the runner
// that decides a campaign's customers with the engine's shared decider and
// writes zstd JSONL result files, HMAC-signed result URLs and signed
// webhook deliveries.
package batch

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Job states (spec: States and transitions, batch job).
const (
	EnCola     = "en_cola"
	EnCurso    = "en_curso"
	Completado = "completado"
	Fallido    = "fallido"
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
}

// Submission is a validated batch request.
type Submission struct {
	CampanaID string
	// Exactly one of Clientes and Segmento is set.
	Clientes    []string
	Segmento    *engine.Segment
	SegmentoRaw json.RawMessage
}

// Submission errors.
var (
	ErrBusy     = errors.New("batch: another job of the tenant is in progress")
	ErrHourly   = errors.New("batch: at most one job per hour")
	ErrNotFound = errors.New("batch: no such job")
)

// RetryError carries how long to wait before a new submission can succeed.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// clientChunk is how many cliente_ref one stored chunk of a request holds.
const clientChunk = 10_000

// ResultRetention is how long result files are kept after a job completes.
const ResultRetention = 7 * 24 * time.Hour

// Runner owns the job queue and runs one job at a time.
type Runner struct {
	db     *store.DB
	eng    *engine.Engine
	log    zerolog.Logger
	dir    string // results root
	now    func() time.Time
	Signer *URLSigner
	hooks  *Webhooks

	mu       sync.Mutex
	progress map[string]int // job key → decided so far (running jobs)
	wake     chan struct{}
}

// RunnerConfig is what a Runner needs.
type RunnerConfig struct {
	DB       *store.DB
	Engine   *engine.Engine
	Log      zerolog.Logger
	Dir      string
	Now      func() time.Time
	Signer   *URLSigner
	Webhooks *Webhooks
}

// NewRunner builds a runner; call Recover before Run.
func NewRunner(c RunnerConfig) *Runner {
	return &Runner{db: c.DB, eng: c.Engine, log: c.Log, dir: c.Dir, now: c.Now, Signer: c.Signer, hooks: c.Webhooks,
		progress: map[string]int{}, wake: make(chan struct{}, 1)}
}

func jobKey(tenant, id string) []byte { return store.Key(tenant, store.TableJob, id) }

func newJobID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "lote_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// Submit queues a job: one in progress per tenant and at most one per hour
// of the tenant clock (failed jobs do not count). The request's customers
// are stored with the job so it survives a restart.
func (r *Runner) Submit(tenant string, s Submission) (*Job, error) {
	t, ok := r.db.Tenant(tenant)
	if !ok {
		return nil, fmt.Errorf("batch: tenant %q: %w", tenant, ErrNotFound)
	}
	now := t.Now(r.now())
	if _, err := r.eng.Campaign(tenant, s.CampanaID); err != nil {
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
	for _, j := range jobs {
		if j.Estado == EnCola || j.Estado == EnCurso {
			return nil, &RetryError{Err: ErrBusy, After: time.Minute}
		}
		if j.Estado != Fallido && now.Sub(j.CreadoEn) < time.Hour {
			return nil, &RetryError{Err: ErrHourly, After: j.CreadoEn.Add(time.Hour).Sub(now)}
		}
	}
	j := &Job{ID: newJobID(), Tenant: tenant, CampanaID: s.CampanaID, Estado: EnCola, CreadoEn: now, RealCreadoEn: r.now().UTC(), Segmento: s.SegmentoRaw}
	b := r.db.NewBatch()
	defer b.Close()
	if s.Clientes != nil {
		seen := make(map[string]struct{}, len(s.Clientes))
		uniq := s.Clientes[:0:0]
		for _, c := range s.Clientes {
			if _, dup := seen[c]; !dup {
				seen[c] = struct{}{}
				uniq = append(uniq, c)
			}
		}
		j.Total = len(uniq)
		for i := 0; i < len(uniq); i += clientChunk {
			chunk := uniq[i:min(i+clientChunk, len(uniq))]
			if err := b.SetJSON(store.Key(tenant, store.TableJobClients, j.ID, j.Chunks), chunk); err != nil {
				return nil, err
			}
			j.Chunks++
		}
	}
	if err := b.SetJSON(jobKey(tenant, j.ID), j); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	r.poke()
	return j, nil
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// list returns the tenant's jobs.
func (r *Runner) list(tenant string) ([]*Job, error) {
	var out []*Job
	lo, hi := store.TableSpan(tenant, store.TableJob)
	err := r.db.Scan(lo, hi, func(_, v []byte) error {
		var j Job
		if err := json.Unmarshal(v, &j); err != nil {
			return err
		}
		out = append(out, &j)
		return nil
	})
	return out, err
}

// Job returns a job of tenant with live progress, or ErrNotFound.
func (r *Runner) Job(tenant, id string) (*Job, error) {
	var j Job
	err := r.db.GetJSON(jobKey(tenant, id), &j)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if n, ok := r.progress[tenant+"/"+id]; ok {
		j.Procesados = n
	}
	r.mu.Unlock()
	return &j, nil
}

func (r *Runner) save(j *Job) error {
	b := r.db.NewBatch()
	defer b.Close()
	if err := b.SetJSON(jobKey(j.Tenant, j.ID), j); err != nil {
		return err
	}
	return b.Commit()
}

// Recover ends jobs that a stop interrupted: a job that was running when
// the process died ends fallido with an error that says so (its decisions
// up to the last synced chunk are recorded and hold their customers'
// reward windows); queued jobs stay queued and run.
func (r *Runner) Recover() error {
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if j.Estado == EnCurso {
				j.Estado = Fallido
				j.Error = "interrumpido por un reinicio del servicio; envíe el lote de nuevo"
				now := t.Now(r.now())
				j.CompletadoEn = &now
				if err := r.save(j); err != nil {
					return err
				}
				r.log.Warn().Str("tenant", j.Tenant).Str("job_id", j.ID).Msg("batch job interrupted by restart: fallido")
			}
		}
	}
	r.poke()
	return nil
}

// Run processes queued jobs until ctx ends, oldest first.
func (r *Runner) Run(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		for ctx.Err() == nil {
			j, err := r.nextQueued()
			if err != nil {
				r.log.Error().Err(err).Msg("batch queue")
				break
			}
			if j == nil {
				break
			}
			r.process(ctx, j)
		}
		r.cleanup()
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick.C:
		}
	}
}

func (r *Runner) nextQueued() (*Job, error) {
	var next *Job
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.Estado == EnCola && (next == nil || j.RealCreadoEn.Before(next.RealCreadoEn)) {
				next = j
			}
		}
	}
	return next, nil
}

func (r *Runner) resultPath(rel string) string { return filepath.Join(r.dir, rel) }

// process runs one job to completado or fallido.
func (r *Runner) process(ctx context.Context, j *Job) {
	t, ok := r.db.Tenant(j.Tenant)
	if !ok {
		return
	}
	started := t.Now(r.now())
	j.Estado, j.IniciadoEn = EnCurso, &started
	if err := r.save(j); err != nil {
		r.log.Error().Err(err).Str("job_id", j.ID).Msg("batch start")
		return
	}
	key := j.Tenant + "/" + j.ID
	r.mu.Lock()
	r.progress[key] = 0
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.progress, key)
		r.mu.Unlock()
	}()
	log := r.log.With().Str("tenant", j.Tenant).Str("job_id", j.ID).Logger()
	log.Info().Int("total", j.Total).Msg("batch job started")
	runErr := r.run(ctx, j, key)
	t, _ = r.db.Tenant(j.Tenant)
	done := t.Now(r.now())
	j.CompletadoEn = &done
	if runErr != nil {
		j.Estado, j.Error = Fallido, publicError(runErr)
		log.Error().Err(runErr).Msg("batch job failed")
	} else {
		j.Estado = Completado
		log.Info().Int("lineas", j.Procesados).Int("envios", j.Envios).Dur("took", r.now().Sub(j.RealCreadoEn)).Msg("batch job completed")
	}
	if err := r.save(j); err != nil {
		log.Error().Err(err).Msg("batch save")
		return
	}
	if j.Estado == Completado && r.hooks != nil {
		if err := r.hooks.Enqueue(j); err != nil {
			log.Error().Err(err).Msg("webhook enqueue")
		}
	}
}

// publicError is what a failed job shows to the integrator: the reason,
// without internals.
func publicError(err error) string {
	switch {
	case errors.Is(err, engine.ErrNoCampaign):
		return "la campaña ya no está definida"
	case errors.Is(err, context.Canceled):
		return "interrumpido por la parada del servicio; envíe el lote de nuevo"
	default:
		return "error interno al procesar el lote"
	}
}

// customers calls fn for every customer of the job, in order.
func (r *Runner) customers(j *Job, fn func(ref string) error) error {
	if j.Segmento == nil {
		for i := 0; i < j.Chunks; i++ {
			var chunk []string
			if err := r.db.GetJSON(store.Key(j.Tenant, store.TableJobClients, j.ID, i), &chunk); err != nil {
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
	seg, err := engine.ParseSegmentJSON(j.Segmento)
	if err != nil {
		return err
	}
	return r.eng.Customers(j.Tenant, seg, fn)
}

func (r *Runner) run(ctx context.Context, j *Job, key string) error {
	bd, err := r.eng.NewBatchDecider(j.Tenant, j.ID, j.CampanaID)
	if err != nil {
		return err
	}
	defer bd.Close()

	// Budget cut before any randomisation: keep the sends of the customers
	// with the highest expected margin gain.
	remaining, limited := bd.SendBudget()
	var keep map[string]bool
	var refs []string
	if limited || j.Segmento != nil {
		top := NewTopKFor(remaining, limited)
		if err := r.customers(j, func(ref string) error {
			if j.Segmento != nil {
				refs = append(refs, ref)
			}
			if limited {
				g, err := bd.SendGain(ref)
				if err != nil {
					return err
				}
				top.Add(ref, g)
			}
			return ctx.Err()
		}); err != nil {
			return err
		}
		if limited {
			keep = top.Set()
		}
		if j.Segmento != nil {
			j.Total = len(refs)
		}
	}

	rel := filepath.Join(j.Tenant, j.ID+".jsonl.zst")
	if err := os.MkdirAll(filepath.Dir(r.resultPath(rel)), 0o700); err != nil {
		return err
	}
	w, err := CreateResult(filepath.Dir(r.resultPath(rel)), filepath.Base(rel))
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			w.Abort()
		}
	}()
	n := 0
	decideOne := func(ref string) error {
		d, err := bd.Decide(ref, limited && !keep[ref])
		if err != nil {
			return err
		}
		if d.Accion != 0 {
			j.Envios++
		}
		line, err := json.Marshal(resultLine{ClienteRef: ref, Decision: d})
		if err != nil {
			return err
		}
		if err := w.WriteLine(line); err != nil {
			return err
		}
		n++
		if n%1000 == 0 {
			r.mu.Lock()
			r.progress[key] = n
			r.mu.Unlock()
		}
		return ctx.Err()
	}
	if refs != nil {
		for _, ref := range refs {
			if err := decideOne(ref); err != nil {
				return err
			}
		}
	} else if err := r.customers(j, decideOne); err != nil {
		return err
	}
	if err := bd.Flush(); err != nil {
		return err
	}
	if err := w.Commit(); err != nil {
		return err
	}
	committed = true
	j.Procesados, j.Result = n, rel
	return nil
}

// resultLine is one line of a result file: the online decision body plus
// cliente_ref.
type resultLine struct {
	ClienteRef string `json:"cliente_ref"`
	*engine.Decision
}

// NewTopKFor returns the top-k keeper for a remaining send budget.
func NewTopKFor(remaining int64, limited bool) *engine.TopK {
	if !limited {
		return engine.NewTopK(0)
	}
	return engine.NewTopK(int(min(remaining, 1<<31)))
}

// cleanup removes result files older than ResultRetention.
func (r *Runner) cleanup() {
	cutoff := r.now().Add(-ResultRetention)
	for _, t := range r.db.Tenants() {
		jobs, err := r.list(t.ID)
		if err != nil {
			continue
		}
		for _, j := range jobs {
			if j.Result != "" && j.RealCreadoEn.Before(cutoff) {
				os.Remove(r.resultPath(j.Result))
				j.Result = ""
				j.Error = "archivo de resultados eliminado por retención"
				r.save(j)
			}
		}
	}
}

// ResultFile returns the path of a completed job's result file.
func (r *Runner) ResultFile(j *Job) (string, bool) {
	if j.Estado != Completado || j.Result == "" {
		return "", false
	}
	return r.resultPath(j.Result), true
}

// Busy reports whether a new job of tenant would be refused now (one in
// progress, or one created in the last hour of the tenant clock) and how
// long to wait.
func (r *Runner) Busy(tenant string) (time.Duration, bool) {
	t, ok := r.db.Tenant(tenant)
	if !ok {
		return 0, false
	}
	now := t.Now(r.now())
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs, err := r.list(tenant)
	if err != nil {
		return time.Minute, true
	}
	for _, j := range jobs {
		if j.Estado == EnCola || j.Estado == EnCurso {
			return time.Minute, true
		}
		if j.Estado != Fallido && now.Sub(j.CreadoEn) < time.Hour {
			return j.CreadoEn.Add(time.Hour).Sub(now), true
		}
	}
	return 0, false
}
