package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
)

// fakeJob serves a scripted sequence of job states, one per poll.
func fakeJob(states ...batch.Job) func() (*batch.Job, error) {
	i := 0
	return func() (*batch.Job, error) {
		j := states[min(i, len(states)-1)]
		i++
		return &j, nil
	}
}

func TestWatchJobDrawsUntilEnd(t *testing.T) {
	start := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	done := start.Add(18 * time.Second)
	clock := start
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	poll := fakeJob(
		batch.Job{ID: "lote_a", Estado: api.EstadoEnCola, Total: 0},
		batch.Job{ID: "lote_a", Estado: api.EstadoEnCurso, Total: 1000, Procesados: 0, IniciadoEn: &start},
		batch.Job{ID: "lote_a", Estado: api.EstadoEnCurso, Total: 1000, Procesados: 500, IniciadoEn: &start},
		batch.Job{ID: "lote_a", Estado: api.EstadoCompletado, Total: 1000, Procesados: 1000, Envios: 120, IniciadoEn: &start, CompletadoEn: &done},
	)
	var out bytes.Buffer
	j, err := watchJob(context.Background(), &out, poll, time.Millisecond, progressTTY, true, now)
	if err != nil || j.Estado != api.EstadoCompletado {
		t.Fatalf("watchJob: %v %v", j, err)
	}
	s := out.String()
	for _, want := range []string{
		"\rlote_a  en_cola    [------------------------------]   0.0%  0/0",
		"\rlote_a  en_curso   [###############---------------]  50.0%  500/1000  250 lines/s  ETA 2s",
		"\rlote_a  completado [##############################] 100.0%  1000/1000",
		"\ncompleted in 18s: 1000 lines, 120 sends\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%q", want, s)
		}
	}
}

func TestWatchJobWithoutServer(t *testing.T) {
	poll := fakeJob(batch.Job{ID: "lote_b", Estado: api.EstadoEnCola})
	var out bytes.Buffer
	if _, err := watchJob(context.Background(), &out, poll, time.Millisecond, progressTTY, false, time.Now); err == nil || !strings.Contains(err.Error(), "no 'coupond serve'") {
		t.Errorf("queued job without a server: %v", err)
	}
	poll = fakeJob(batch.Job{ID: "lote_b", Estado: api.EstadoFallido, Error: "interrumpido"})
	out.Reset()
	j, err := watchJob(context.Background(), &out, poll, time.Millisecond, progressTTY, false, time.Now)
	if err != nil || j.Estado != api.EstadoFallido || !strings.Contains(out.String(), "failed: interrumpido") {
		t.Errorf("failed job: %v %v %q", j, err, out.String())
	}
}

// TestWatchJSONIsOneValue: with --json, stdout carries one JSON value
// (contract §1) whatever --progress says; progress lines and the summary
// go to stderr. With --progress plain or tty they were written to stdout
// before the JSON, which no JSON reader could parse.
func TestWatchJSONIsOneValue(t *testing.T) {
	dir := t.TempDir()
	job := completedJob(t, dir)
	for _, progress := range []string{"auto", "plain", "tty", "off"} {
		stdout, stderr, err := runCLI(t, "admin", "batch", "watch", "--tenant", "acme", "--json", "--progress", progress, job, "--data-dir", dir)
		if err != nil {
			t.Fatalf("--progress %s: %v\n%s", progress, err, stderr)
		}
		var got batchJobView
		dec := json.NewDecoder(strings.NewReader(stdout))
		if err := dec.Decode(&got); err != nil || dec.More() || got.JobID != job || got.Estado != api.EstadoCompletado {
			t.Errorf("--progress %s: stdout is not one JSON job (%v):\n%s", progress, err, stdout)
		}
		if progress != "auto" && progress != "off" && !strings.Contains(stderr, "completed") {
			t.Errorf("--progress %s: stderr lacks the progress summary:\n%s", progress, stderr)
		}
	}
}

// completedJob makes in dir a sandbox tenant acme with a catalog, a
// campaign and a completed batch job of two customers, and returns the
// job's id. The store is closed again.
func completedJob(t *testing.T, dir string) string {
	t.Helper()
	e, now := sandboxEnv(t, dir)
	defer e.close()
	diezCatalog(t, e.svc.engine, now)
	if _, err := e.svc.engine.Campaigns.PutCampaign("acme", engine.Campaign{ID: "camp1", Canal: "push", Descripcion: "d"}, now); err != nil {
		t.Fatal(err)
	}
	j, err := e.svc.batch.Submit("acme", batch.Submission{CampanaID: "camp1", Clientes: []string{"ana-00000001", "beto-0000002"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.svc.batch.RunPending(context.Background()); n != 1 {
		t.Fatalf("batch jobs run: %d", n)
	}
	return j.ID
}

// TestBatchJobRealElapsed: admin batch watch reports how long a job that
// ended ran in real time, from the real start and end its record holds
// (real_elapsed_s, and the summary's "in"), not from the tenant clock,
// which a sandbox tenant's stands still: its jobs read as taking no time.
func TestBatchJobRealElapsed(t *testing.T) {
	tenantAt := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	realStart := time.Date(2026, 12, 4, 9, 30, 0, 0, time.UTC)
	realEnd := realStart.Add(2500 * time.Millisecond)
	secs := func(s float64) *float64 { return &s }
	for _, tc := range []struct {
		name    string
		job     batch.Job
		want    *float64
		summary string // "": not printed (the job has not ended)
	}{
		{"completed, sandbox clock frozen", batch.Job{Estado: api.EstadoCompletado, Procesados: 2, IniciadoEn: &tenantAt, CompletadoEn: &tenantAt,
			RealIniciadoEn: realStart, RealCompletadoEn: realEnd}, secs(2.5), "completed in 2.5s: 2 lines, 0 sends"},
		{"failed", batch.Job{Estado: api.EstadoFallido, Error: "interno", IniciadoEn: &tenantAt, CompletadoEn: &tenantAt,
			RealIniciadoEn: realStart, RealCompletadoEn: realEnd}, secs(2.5), "failed in 2.5s: interno"},
		{"running", batch.Job{Estado: api.EstadoEnCurso, IniciadoEn: &tenantAt, RealIniciadoEn: realStart}, nil, ""},
		{"stored without real times", batch.Job{Estado: api.EstadoCompletado, Procesados: 2, IniciadoEn: &tenantAt, CompletadoEn: &tenantAt},
			nil, "completed: 2 lines, 0 sends"},
		{"one line, one send", batch.Job{Estado: api.EstadoCompletado, Procesados: 1, Envios: 1, IniciadoEn: &tenantAt, CompletadoEn: &tenantAt,
			RealIniciadoEn: realStart, RealCompletadoEn: realEnd}, secs(2.5), "completed in 2.5s: 1 line, 1 send"},
	} {
		if diff := cmp.Diff(tc.want, viewBatchJob(&tc.job).RealElapsed); diff != "" {
			t.Errorf("%s: real_elapsed_s (-want +got):\n%s", tc.name, diff)
		}
		if got := jobSummary(&tc.job); tc.summary != "" && got != tc.summary {
			t.Errorf("%s: summary %q, want %q", tc.name, got, tc.summary)
		}
	}

	dir := t.TempDir()
	job := completedJob(t, dir)
	var got map[string]any
	if err := json.Unmarshal(runIn(t, dir, "admin", "batch", "watch", "--tenant", "acme", "--json", job), &got); err != nil {
		t.Fatal(err)
	}
	if s, ok := got["real_elapsed_s"].(float64); !ok || s < 0 {
		t.Errorf("batch watch --json of a completed job: real_elapsed_s = %v, want seconds", got["real_elapsed_s"])
	}
}

// TestWatchIntervalFloor: batch watch refuses an --interval under 100ms
// naming the flag (1ns was accepted and polled the store as fast as it
// could), or over an hour (2562047h was accepted and polled once before
// the watch's deadline); 100ms and 1h themselves are accepted.
func TestWatchIntervalFloor(t *testing.T) {
	dir := t.TempDir()
	job := completedJob(t, dir)
	for _, tc := range []struct {
		interval string
		want     string // error text; "" for success
	}{
		{"1ns", "--interval: want 100ms to 1h0m0s, got 1ns"},
		{"99ms", "--interval: want 100ms to 1h0m0s, got 99ms"},
		{"-1s", "--interval: want 100ms to 1h0m0s, got -1s"},
		{"1h0m1s", "--interval: want 100ms to 1h0m0s, got 1h0m1s"},
		{"2562047h", "--interval: want 100ms to 1h0m0s, got 2562047h0m0s"},
		{"100ms", ""},
		{"1h", ""},
	} {
		_, stderr, err := runCLI(t, "admin", "batch", "watch", "--tenant", "acme", "--progress", "off", "--interval", tc.interval, job, "--data-dir", dir)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("--interval %s (-want +got):\n%s\n%s", tc.interval, diff, stderr)
		}
	}
}
