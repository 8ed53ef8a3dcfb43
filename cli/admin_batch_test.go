package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
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
