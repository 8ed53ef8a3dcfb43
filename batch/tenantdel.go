package batch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// A tenant's deletion (privacy): its running job is cancelled first
// (CancelTenant), its records go with its key space, and its result files
// with its directory of the results dir (RemoveTenantResults).

// stoppable is work that a tenant's deletion stops and waits for (the
// Runner's running job, a tenant's webhook delivery pass): cancel ends the
// context it runs under, done closes once it has returned (ended).
type stoppable struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// newStoppable returns the handle of work about to start and the context,
// under ctx, it runs under.
func newStoppable(ctx context.Context) (*stoppable, context.Context) {
	sctx, cancel := context.WithCancel(ctx)
	return &stoppable{cancel: cancel, done: make(chan struct{})}, sctx
}

// ended says the work has returned: its context is cancelled and every
// stop waiting for it returns. Called once.
func (s *stoppable) ended() {
	s.cancel()
	close(s.done)
}

// stop cancels the work and returns once it has ended, or with ctx's error
// if ctx is done first.
func (s *stoppable) stop(ctx context.Context) error {
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runningJob is the job a Runner runs now, of tenant; it has ended once
// process has returned.
type runningJob struct {
	tenant string
	ctx    context.Context // the job's, done once cancelled
	*stoppable
}

// startRun registers j as the running job and returns the context it runs
// under and the func that unregisters it once process is done with it.
func (r *Runner) startRun(ctx context.Context, j *Job) (context.Context, func()) {
	run, jctx := newStoppable(ctx)
	rj := &runningJob{tenant: j.Tenant, ctx: jctx, stoppable: run}
	r.mu.Lock()
	r.running = rj
	r.mu.Unlock()
	return jctx, func() {
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		rj.ended()
	}
}

// CancelTenant stops tenant's running job, if any, and returns once the
// runner is done with it, and forgets that the tenant may hold queued jobs; the tenant is being deleted (store's
// MarkTenantDeleting hid it first), so the job ends with no record
// written (process). It gives up with ctx's error.
func (r *Runner) CancelTenant(ctx context.Context, tenant string) error {
	r.mu.Lock()
	rj := r.running
	if r.queued != nil {
		delete(r.queued, tenant) // no job of it to look for again
	}
	r.mu.Unlock()
	if rj == nil || rj.tenant != tenant {
		return nil
	}
	return rj.stop(ctx)
}

// RemoveTenantResults removes tenant's directory of the results dir: every
// result file of its jobs, and the temporary file of one that was running.
func (r *Runner) RemoveTenantResults(tenant string) error {
	r.resultMu.Lock()
	defer r.resultMu.Unlock()
	dir := r.resultPath(tenant)
	err := os.RemoveAll(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	r.verified.Range(func(k, _ any) bool {
		if p, ok := k.(string); ok && filepath.Dir(p) == dir {
			r.verified.Delete(k)
		}
		return true
	})
	return nil
}
