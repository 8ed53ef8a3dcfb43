package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/store"
)

// minWatchInterval is the shortest --interval of batch watch: each poll
// reads the job from the store, and a shorter one (1ns was accepted)
// polls as fast as it can, a core spent on a progress line.
const minWatchInterval = 100 * time.Millisecond

// maxWatchInterval is the longest --interval of batch watch: a watch ends
// at its deadline, and a longer one (2562047h was accepted) polled once
// before it and showed no progress at all.
const maxWatchInterval = time.Hour

func batchWatchCmd(a *app) *cobra.Command {
	var tenant, progress string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch --tenant ID JOB_ID",
		Short: "Show a job's progress until it ends (--json: print the final job)",
		Long: "Polls the batch job and shows its progress (lines decided of the total, rate, ETA) until the job is\n" +
			"completado or fallido. Exits 1 if the job failed. Without a running 'coupond serve' on the data\n" +
			"dir nothing runs jobs: the command shows the job once and fails if it has not ended.\n\n" +
			"--progress: tty redraws one line in place; plain writes a line every few seconds (for pipes and\n" +
			"files); off writes only the final summary; auto (default) is tty on a terminal, plain otherwise,\n" +
			"and off with --json. With --json, stdout carries only the final job and progress goes to stderr.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := progressMode(progress, a.terminal(cmd), jsonFlag(cmd))
			if err != nil {
				return err
			}
			if interval < minWatchInterval || interval > maxWatchInterval {
				return fmt.Errorf("--interval: want %s to %s, got %s", minWatchInterval, maxWatchInterval, interval)
			}
			return a.withTenant(cmd, tenant, func(e *env, _ *store.Tenant) error {
				runner := e.svc.batch
				poll := func() (*batch.Job, error) { return runner.Job(tenant, args[0]) }
				if _, err := poll(); errors.Is(err, batch.ErrNotFound) {
					return fmt.Errorf("tenant %q has no batch job %q", tenant, args[0])
				}
				progressOut := cmd.OutOrStdout()
				if jsonFlag(cmd) {
					progressOut = cmd.ErrOrStderr() // stdout: one JSON value
				}
				j, err := watchJob(cmd.Context(), progressOut, poll, interval, mode, a.live != nil, e.now)
				if err != nil {
					return err
				}
				switch {
				case jsonFlag(cmd):
					if err := printJSON(cmd.OutOrStdout(), viewBatchJob(j)); err != nil {
						return err
					}
				case mode == progressOff:
					fmt.Fprintln(cmd.OutOrStdout(), jobSummary(j))
				}
				if j.Estado == api.EstadoFallido {
					return &ExitError{Code: 1}
				}
				return nil
			})
		},
	}
	tenantFlag(cmd, &tenant)
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "how often to poll the job (100ms to 1h)")
	cmd.Flags().StringVar(&progress, "progress", "auto", "progress display: auto, tty, plain or off")
	return cmd
}

// Progress displays of "batch watch".
const (
	progressTTY   = "tty"   // one line redrawn in place with '\r'
	progressPlain = "plain" // a line every plainEvery, no control characters
	progressOff   = "off"   // the final summary only (nothing with --json)
)

// plainEvery is the least time between two plain progress lines.
const plainEvery = 5 * time.Second

// progressMode resolves --progress: auto is tty on a terminal and plain
// otherwise, off with --json (stdout then carries one JSON value).
func progressMode(flag string, terminal, asJSON bool) (string, error) {
	switch flag {
	case progressTTY, progressPlain, progressOff:
		return flag, nil
	case "auto":
		switch {
		case asJSON:
			return progressOff, nil
		case terminal:
			return progressTTY, nil
		}
		return progressPlain, nil
	}
	return "", fmt.Errorf("--progress: want auto, tty, plain or off, got %q", flag)
}

// batchJobView is the admin view of a job: the API's status fields plus the
// tenant, the number of sends and, once it ended, the real time it ran.
type batchJobView struct {
	JobID        string     `json:"job_id"`
	Tenant       string     `json:"tenant"`
	CampanaID    string     `json:"campana_id"`
	Estado       string     `json:"estado"`
	CreadoEn     time.Time  `json:"creado_en"`
	IniciadoEn   *time.Time `json:"iniciado_en"`
	CompletadoEn *time.Time `json:"completado_en"`
	Total        int        `json:"total"`
	Procesados   int        `json:"procesados"`
	Envios       int        `json:"envios"`
	Error        string     `json:"error,omitempty"`
	// RealElapsed is the real (wall) time the job ran, in seconds to the
	// millisecond (realElapsed); null until it ended or when not known.
	RealElapsed *float64 `json:"real_elapsed_s"`
}

func viewBatchJob(j *batch.Job) batchJobView {
	v := batchJobView{JobID: j.ID, Tenant: j.Tenant, CampanaID: j.CampanaID, Estado: j.Estado, CreadoEn: j.CreadoEn,
		IniciadoEn: j.IniciadoEn, CompletadoEn: j.CompletadoEn, Total: j.Total, Procesados: j.Procesados, Envios: j.Envios, Error: j.Error}
	if d, ok := realElapsed(j); ok {
		s := d.Round(time.Millisecond).Seconds()
		v.RealElapsed = &s
	}
	return v
}

// realElapsed is the real time job j ran, from the real start and end its
// record holds (not the tenant clock's, which a sandbox tenant's stands
// still or jumps); false until it ended, and when either is not known (a
// job stored by an earlier release, or one ended by a restart).
func realElapsed(j *batch.Job) (time.Duration, bool) {
	if !jobEnded(j) || j.RealIniciadoEn.IsZero() || j.RealCompletadoEn.Before(j.RealIniciadoEn) {
		return 0, false
	}
	return j.RealCompletadoEn.Sub(j.RealIniciadoEn), true
}

func jobEnded(j *batch.Job) bool {
	return j.Estado == api.EstadoCompletado || j.Estado == api.EstadoFallido
}

// watchJob polls a job until it ends and returns it, showing its progress
// on out as mode says: tty redraws one line at every change ('\r') and ends
// it; plain writes a line at a change at most every plainEvery (and the
// last one); both then print a summary line. off prints nothing. live says
// whether a runner is processing jobs; without one a job that has not ended
// never will, and watchJob returns an error after showing it once.
func watchJob(ctx context.Context, out io.Writer, poll func() (*batch.Job, error), interval time.Duration, mode string, live bool, now func() time.Time) (*batch.Job, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	var last string
	var width int
	var lastPlain time.Time
	var rate lineRate
	tick := time.NewTicker(interval)
	defer tick.Stop()
	endTTY := func() {
		if mode == progressTTY && last != "" {
			fmt.Fprintln(out)
		}
	}
	for {
		j, err := poll()
		if err != nil {
			return nil, err
		}
		at := now()
		line := progressLine(j, rate.add(at, j.Procesados))
		switch {
		case line == last:
		case mode == progressTTY:
			pad := ""
			if n := width - len([]rune(line)); n > 0 {
				pad = strings.Repeat(" ", n)
			}
			fmt.Fprint(out, "\r"+line+pad)
			last, width = line, max(width, len([]rune(line)))
		case mode == progressPlain && (lastPlain.IsZero() || at.Sub(lastPlain) >= plainEvery || jobEnded(j) || !live):
			fmt.Fprintln(out, line)
			last, lastPlain = line, at
		}
		if jobEnded(j) {
			endTTY()
			if mode != progressOff {
				fmt.Fprintln(out, jobSummary(j))
			}
			return j, nil
		}
		if !live {
			endTTY()
			return j, fmt.Errorf("job %s is %s and no 'coupond serve' runs on this data dir to run it", j.ID, j.Estado)
		}
		select {
		case <-ctx.Done():
			endTTY()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// barWidth is the number of cells of the progress bar.
const barWidth = 30

// progressLine renders one line: job, state, bar, percentage, counts and,
// while running, the decision rate.
func progressLine(j *batch.Job, perSec float64) string {
	frac := 0.0
	switch {
	case j.Estado == api.EstadoCompletado:
		frac = 1
	case j.Total > 0:
		frac = min(1, float64(j.Procesados)/float64(j.Total))
	}
	filled := int(frac * barWidth)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled)
	total := "?"
	if j.Total > 0 || j.Estado != api.EstadoEnCurso {
		total = fmt.Sprint(j.Total)
	}
	s := fmt.Sprintf("%s  %-10s [%s] %5.1f%%  %d/%s", j.ID, j.Estado, bar, 100*frac, j.Procesados, total)
	if j.Estado == api.EstadoEnCurso && perSec > 0 {
		s += fmt.Sprintf("  %.0f lines/s", perSec)
		if left := j.Total - j.Procesados; j.Total > 0 && left > 0 {
			s += "  ETA " + (time.Duration(float64(left) / perSec * float64(time.Second))).Round(time.Second).String()
		}
	}
	return s
}

// jobSummary is the line printed when a job ends: how long it took is its
// real elapsed time (realElapsed), or, when that is not known, the time
// between its start and end on the tenant clock.
func jobSummary(j *batch.Job) string {
	took := ""
	if d, ok := realElapsed(j); ok {
		took = fmt.Sprintf(" in %s", d.Round(time.Millisecond))
	} else if j.IniciadoEn != nil && j.CompletadoEn != nil && j.CompletadoEn.After(*j.IniciadoEn) {
		took = fmt.Sprintf(" in %s", j.CompletadoEn.Sub(*j.IniciadoEn).Round(time.Millisecond)) // tenant clock
	}
	if j.Estado == api.EstadoFallido {
		return fmt.Sprintf("failed%s: %s", took, j.Error)
	}
	s := fmt.Sprintf("completed%s: %s, %s", took, plural(j.Procesados, "line"), plural(j.Envios, "send"))
	if j.Error != "" {
		s += " (" + j.Error + ")"
	}
	return s
}

// lineRate estimates lines per second from the last two observations that
// differ.
type lineRate struct {
	at   time.Time
	n    int
	rate float64
}

func (r *lineRate) add(at time.Time, n int) float64 {
	switch {
	case r.at.IsZero() || n < r.n:
		r.at, r.n, r.rate = at, n, 0
	case n > r.n:
		if d := at.Sub(r.at).Seconds(); d > 0 {
			r.rate = float64(n-r.n) / d
		}
		r.at, r.n = at, n
	}
	return r.rate
}
