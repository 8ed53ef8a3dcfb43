package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"
)

func numCPU() int { return runtime.NumCPU() }

// background is work run inside the measured server during a step.
type background struct {
	done chan string
}

// finish waits for the background work (at most 5 minutes) and describes
// what it did.
func (b *background) finish() string {
	select {
	case s := <-b.done:
		return s
	case <-time.After(5 * time.Minute):
		return "still running 5 minutes after the step"
	}
}

// benchAdmin runs an admin command against the spawned server through its
// admin socket.
func benchAdmin(ctx context.Context, t *benchTarget, args ...string) error {
	var out, errb bytes.Buffer
	if err := Run(ctx, append([]string{"admin", "--data-dir", t.dataDir}, args...), nil, &out, &errb); err != nil {
		return fmt.Errorf("admin %v: %v %s", args, err, errb.String())
	}
	return nil
}

// startBackground starts kind ("batch" or "learner") in the server of t.
// batch: a batch job of size customers (the sandbox clock moves an hour
// first, since a tenant may create one job an hour). learner: a batch job
// of size customers is made first (outside the step) so that size rewards
// are pending, then the clock moves past their reward window and grace
// and the learner folds them all while the step runs.
func startBackground(ctx context.Context, t *benchTarget, kind string, size, customers int) *background {
	bg := &background{done: make(chan string, 1)}
	size = min(size, customers)
	fail := func(err error) *background { bg.done <- "failed: " + err.Error(); return bg }
	if err := benchAdmin(ctx, t, "clock", "advance", "--tenant", benchTenant, "--by", "61m"); err != nil {
		return fail(err)
	}
	if kind == "learner" {
		if _, _, err := runBatchJob(ctx, t, size, nil); err != nil {
			return fail(err)
		}
		go func() {
			start := time.Now()
			if err := benchAdmin(ctx, t, "clock", "advance", "--tenant", benchTenant, "--by", "31d"); err != nil {
				bg.done <- "failed: " + err.Error()
				return
			}
			bg.done <- fmt.Sprintf("learner folded the rewards of a %d-decision batch in %.1fs", size, time.Since(start).Seconds())
		}()
		return bg
	}
	go func() {
		d, _, err := runBatchJob(ctx, t, size, nil)
		if err != nil {
			bg.done <- "failed: " + err.Error()
			return
		}
		bg.done <- fmt.Sprintf("batch of %d customers: POST to completado in %.1fs", size, d.Seconds())
	}()
	return bg
}

// maxBatchList is the most customers POST /v1/lotes-decision lists.
const maxBatchList = 500_000

// runBatchJob posts a batch job for customers 0..size-1 on campaign
// "bench" (above maxBatchList: the segment of every customer with
// history, which must then be size customers) and polls it until it ends; it returns the time from POST to
// completado and the server's peak RSS while it ran (when sample is set,
// it is called every poll).
func runBatchJob(ctx context.Context, t *benchTarget, size int, sample func()) (time.Duration, string, error) {
	var body []byte
	if size > maxBatchList { // every customer with history: the spawned server has exactly size
		body, _ = json.Marshal(map[string]any{"campana_id": "bench", "segmento": map[string]any{"todos": true}})
	} else {
		refs := make([]string, size)
		for i := range refs {
			refs[i] = benchRef(i)
		}
		body, _ = json.Marshal(map[string]any{"campana_id": "bench", "clientes": refs})
	}
	var job struct {
		JobID  string `json:"job_id"`
		Estado string `json:"estado"`
		Error  string `json:"error"`
	}
	start := time.Now()
	st, err := t.client.do(ctx, "POST", "/v1/lotes-decision", body, &job)
	if err != nil || st != 202 {
		return 0, "", fmt.Errorf("POST /v1/lotes-decision: status %d: %v", st, err)
	}
	for {
		if sample != nil {
			sample()
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		st, err := t.client.do(ctx, "GET", "/v1/lotes-decision/"+job.JobID, nil, &job)
		if err != nil || st != 200 {
			return 0, "", fmt.Errorf("GET /v1/lotes-decision: status %d: %v", st, err)
		}
		switch job.Estado {
		case "completado":
			return time.Since(start), job.JobID, nil
		case "fallido":
			return 0, "", fmt.Errorf("batch job %s fallido: %s", job.JobID, job.Error)
		}
	}
}
