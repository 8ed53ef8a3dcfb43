package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/spf13/cobra"
)

// rawResult is what "bench raw-pebble" prints (one JSON line).
type rawResult struct {
	Events  int64   `json:"events"`
	Seconds float64 `json:"seconds"`
}

func (r rawResult) rate() float64 { return float64(r.Events) / r.Seconds }

// runRawPebble runs the raw Pebble baseline in a child process on a
// temporary directory.
func runRawPebble(ctx context.Context, f *benchFlags, conc, batch int) (rawResult, error) {
	dir, err := os.MkdirTemp("", "coupond-rawpebble-")
	if err != nil {
		return rawResult{}, err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return rawResult{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "bench", "raw-pebble", "--dir", dir, "--concurrency", strconv.Itoa(conc), "--batch", strconv.Itoa(batch),
		"--duration", f.duration.String(), "--customers", strconv.Itoa(f.customers), "--seed", strconv.FormatUint(f.seed, 10))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.SysProcAttr = childAttr()
	out, err := cmd.Output()
	if err != nil {
		return rawResult{}, fmt.Errorf("raw pebble baseline: %v: %s", err, errb.String())
	}
	var r rawResult
	if err := json.Unmarshal(out, &r); err != nil || r.Seconds <= 0 {
		return rawResult{}, fmt.Errorf("raw pebble baseline: bad output %q", out)
	}
	return r, nil
}

// benchRawPebbleCmd is the baseline of "bench events --baseline": the same
// records the events bench posts (the same templates, seed and batch
// size), each written as its key and JSON body in Pebble batches committed
// with Sync, --concurrency writers at a time. Records are made before the
// clock starts (eight batches per writer, reused with a fresh key suffix)
// so that only Pebble is timed.
func benchRawPebbleCmd() *cobra.Command {
	var dir string
	var conc, batch, customers int
	var duration time.Duration
	var seed uint64
	cmd := internalCmd("raw-pebble", "Raw Pebble Sync baseline of bench events (internal)", func(cmd *cobra.Command) error {
		pools := make([][][]store.RawRecord, conc)
		for w := range pools {
			for seq, tmpl := range eventTemplates(seed, "raw", w, batch, customers) {
				var req struct {
					Eventos []json.RawMessage `json:"eventos"`
				}
				json.Unmarshal(fillSeq(tmpl, seq), &req)
				var recs []store.RawRecord
				for _, ev := range req.Eventos {
					var id struct {
						EventID    string `json:"event_id"`
						ClienteRef string `json:"cliente_ref"`
						TS         string `json:"ts"`
					}
					json.Unmarshal(ev, &id)
					recs = append(recs, store.RawRecord{Key: []byte("bench\x00ev\x00" + id.ClienteRef + "\x00" + id.TS + "\x00" + id.EventID), Value: ev})
				}
				pools[w] = append(pools[w], recs)
			}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), duration)
		defer cancel()
		events, took, err := store.RawSyncWrites(ctx, dir, pools)
		if err != nil {
			return err
		}
		return json.NewEncoder(cmd.OutOrStdout()).Encode(rawResult{Events: events, Seconds: took.Seconds()})
	})
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "Pebble directory")
	fl.IntVar(&conc, "concurrency", 4, "writers")
	fl.IntVar(&batch, "batch", 1000, "records per batch")
	fl.IntVar(&customers, "customers", 100_000, "distinct cliente_ref")
	fl.DurationVar(&duration, "duration", 20*time.Second, "how long to write")
	fl.Uint64Var(&seed, "seed", 1, "random seed")
	cmd.MarkFlagRequired("dir")
	return cmd
}

// benchBatchCmd measures a batch job: POST to completado and the server's
// peak RSS while the job ran.
func benchBatchCmd(f *benchFlags) *cobra.Command {
	var size int
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Time a batch job of --size customers from POST to completado, with the server's peak RSS",
		Long: `batch posts POST /v1/lotes-decision for --size customers (of the --customers whose history the
spawned server was loaded with) and polls it until completado; it prints the time from POST to
completado and the server's peak resident memory during the job (VmHWM, reset just before the POST).
A job lists at most 500,000 customers: a larger --size (which must then be --customers) is posted as the
segment of every customer with history ({"todos": true}).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if size < 0 {
				return fmt.Errorf("--size: want at least 1 (0: --customers), got %d", size)
			}
			out := benchOut(cmd)
			if size == 0 {
				size = f.customers
			}
			if size > maxBatchList && size != f.customers {
				return fmt.Errorf("--size %d: a job lists at most %d customers; a larger one is the segment of all --customers", size, maxBatchList)
			}
			t, err := prepareCoupond(cmd.Context(), f, 4, out)
			if err != nil {
				return err
			}
			defer t.close()
			if t.pid == 0 {
				return fmt.Errorf("bench batch needs the server's process: run it without --client-id, or give --server-pid")
			}
			fmt.Fprintf(out, "load average before: %s; %d cores; server RSS peak before the job %d MiB\n", loadavg(), numCPU(), readRSSPeak(t.pid)>>20)
			// Writing 5 to clear_refs resets VmHWM to the current RSS.
			reset := os.WriteFile("/proc/"+strconv.Itoa(t.pid)+"/clear_refs", []byte("5"), 0) == nil
			cpu0 := readCPU(t.pid)
			d, id, err := runBatchJob(cmd.Context(), t, size, nil)
			if err != nil {
				return err
			}
			cpu := readCPU(t.pid).minus(cpu0)
			peak := readRSSPeak(t.pid)
			what := "peak RSS during the job"
			if !reset {
				what = "peak RSS since the server started (could not reset VmHWM)"
			}
			fmt.Fprintf(out, "batch %s of %d customers: POST to completado in %.1fs; %s %d MiB; server CPU %.1fs (%.2f cores)\nload average after: %s\n",
				id, size, d.Seconds(), what, peak>>20, cpu.cpu.Seconds(), cpu.cpu.Seconds()/d.Seconds(), loadavg())
			return benchJSON(cmd, map[string]any{"job_id": id, "customers": size, "seconds": d.Seconds(),
				"peak_rss_mib": peak >> 20, "peak_rss_reset": reset, "server_cpu_seconds": cpu.cpu.Seconds()})
		},
	}
	cmd.Flags().IntVar(&size, "size", 0, "customers in the job (default --customers)")
	return cmd
}
