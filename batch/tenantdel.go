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

// runningJob is the job a Runner runs now: cancel stops it, done closes
// once process has returned.
type runningJob struct {
	tenant string
	ctx    context.Context // the job's, done once cancelled
	cancel context.CancelFunc
	done   chan struct{}
}

// startRun registers j as the running job and returns the context it runs
// under and the func that unregisters it once process is done with it.
func (r *Runner) startRun(ctx context.Context, j *Job) (context.Context, func()) {
	jctx, cancel := context.WithCancel(ctx)
	rj := &runningJob{tenant: j.Tenant, ctx: jctx, cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	r.running = rj
	r.mu.Unlock()
	return jctx, func() {
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		cancel()
		close(rj.done)
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
	rj.cancel()
	select {
	case <-rj.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
