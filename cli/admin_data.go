package cli

// Customer data operations: the deletion worker's wiring (backup ledgers,
// batch files), "admin access-log", "admin deletions", "admin backup" and
// "admin restore".
//
// How deletion reaches backups (contract section 7):
//
//   - "admin backup --out DIR" first registers DIR in <data-dir>/backups.json
//     and creates DIR/deletions.jsonl (the deletion ledger), then takes a
//     Pebble checkpoint into DIR/db, copies keys.json and writes
//     DIR/manifest.json (taken_at) last. A backup without a manifest is
//     incomplete and restore refuses it.
//   - The deletion worker, before it removes anything of a customer, appends
//     {tenant, keyed hash, requested_at, client_id} to the ledger of every
//     registered backup younger than BackupRetention (30 days). Registration
//     precedes the checkpoint, so a deletion requested after a checkpoint
//     reaches that backup's ledger; one requested before it is in the
//     checkpoint as a deletion record.
//   - "admin restore --from DIR" (server stopped) copies DIR/db into a
//     staging directory, opens it, re-schedules every deletion of the ledger
//     and every deletion record found in the backup, runs them all to
//     completado (finding customers by keyed hash), and only then swaps the
//     staging store in. Nothing is served from the restored store before
//     every deletion is applied.
//   - Backups older than BackupRetention receive no more ledger entries and
//     restore refuses them: they can no longer be brought back, so they are
//     the operator's to destroy (they are outside the data dir).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// BackupRetention is how long a backup keeps receiving deletions and can be
// restored.
const BackupRetention = 30 * 24 * time.Hour

const (
	backupsFile        = "backups.json"    // in the data dir: the registered backups
	ledgerFile         = "deletions.jsonl" // in a backup dir: deletions after it was taken
	backupManifestFile = "manifest.json"   // in a backup dir: written last
	backupFormat       = 1
	deletionInterval   = 2 * time.Second
)

// ---- backup registry and ledgers ----

type backupEntry struct {
	Dir      string    `json:"dir"`
	TakenAt  time.Time `json:"taken_at"`
	Complete bool      `json:"complete"`
}

type backupRegistry struct {
	Backups []backupEntry `json:"backups"`
}

// registryMu serialises the registry and ledger writers of the process
// (admin backup runs inside serve when serve runs).
var registryMu sync.Mutex

func loadRegistry(dataDir string) (*backupRegistry, error) {
	var r backupRegistry
	data, err := os.ReadFile(filepath.Join(dataDir, backupsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", backupsFile, err)
	}
	return &r, nil
}

func saveRegistry(dataDir string, r *backupRegistry) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dataDir, backupsFile), data)
}

// writeFileSync writes path atomically (tmp, fsync, rename, fsync dir).
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// appendLedger appends one deletion to a backup's ledger, synced.
func appendLedger(dir string, l engine.LedgerEntry) error {
	line, err := json.Marshal(l)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ledgerFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ledgerHook records a deletion in every registered backup within
// retention. Backups past retention, and registered directories that no
// longer exist, are dropped from the registry.
func ledgerHook(dataDir string, now func() time.Time, log zerolog.Logger) func(engine.LedgerEntry) error {
	return func(l engine.LedgerEntry) error {
		registryMu.Lock()
		defer registryMu.Unlock()
		reg, err := loadRegistry(dataDir)
		if err != nil {
			return err
		}
		kept := reg.Backups[:0:0]
		for _, b := range reg.Backups {
			if now().Sub(b.TakenAt) > BackupRetention {
				log.Info().Str("backup", b.Dir).Msg("backup past retention: it receives no more deletions and restore refuses it")
				continue
			}
			if _, err := os.Stat(b.Dir); errors.Is(err, fs.ErrNotExist) {
				log.Warn().Str("backup", b.Dir).Msg("registered backup directory is gone; forgotten")
				continue
			}
			if err := appendLedger(b.Dir, l); err != nil {
				return fmt.Errorf("backup %s: %w", b.Dir, err)
			}
			kept = append(kept, b)
		}
		if len(kept) != len(reg.Backups) {
			reg.Backups = kept
			return saveRegistry(dataDir, reg)
		}
		return nil
	}
}

// ---- batch data ----

// batchScrubber removes a customer from the tenant's batch data: the lines
// of retained result files and the stored request chunks. A job queued or
// running makes the deletion wait (pending), except offline (restore),
// where no job runs and queued jobs are scrubbed too.
func batchScrubber(svc *services, offline bool) func(tenant, ref string) ([][]byte, bool, error) {
	return func(tenant, ref string) ([][]byte, bool, error) {
		db := svc.env.db
		var jobs []batch.Job
		lo, hi := store.TableSpan(tenant, store.TableJob)
		if err := db.Scan(lo, hi, func(_, v []byte) error {
			var j batch.Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			jobs = append(jobs, j)
			return nil
		}); err != nil {
			return nil, false, err
		}
		pending := false
		busy := map[string]bool{}
		var changed [][]byte
		b := db.NewBatch()
		defer b.Close()
		needle := []byte(`"cliente_ref":"` + ref + `"`)
		for i := range jobs {
			j := &jobs[i]
			if (j.Estado == batch.EnCola || j.Estado == batch.EnCurso) && !offline {
				pending, busy[j.ID] = true, true
				continue
			}
			for c := 0; c < j.Chunks; c++ {
				key := store.Key(tenant, store.TableJobClients, j.ID, c)
				var chunk []string
				err := db.GetJSON(key, &chunk)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, false, err
				}
				kept := chunk[:0:0]
				for _, r := range chunk {
					if r != ref {
						kept = append(kept, r)
					}
				}
				if len(kept) != len(chunk) {
					if err := b.SetJSON(key, kept); err != nil {
						return nil, false, err
					}
					changed = append(changed, key)
				}
			}
			if path, ok := svc.batch.ResultFile(j); ok {
				if _, err := batch.RewriteResult(path, func(line []byte) bool { return !bytes.Contains(line, needle) }); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, false, fmt.Errorf("result file of %s: %w", j.ID, err)
				}
			}
		}
		if !b.Empty() {
			if err := b.Commit(); err != nil {
				return nil, false, err
			}
		}
		// Temporary result files left by a crash mid-write: only those of
		// jobs that are not running.
		dir := filepath.Join(svc.env.dataDir, "results", tenant)
		if names, err := os.ReadDir(dir); err == nil {
			for _, n := range names {
				name := n.Name()
				if !strings.HasSuffix(name, ".tmp") {
					continue
				}
				job, _, _ := strings.Cut(name, ".")
				if busy[job] {
					continue
				}
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, false, err
				}
			}
		}
		return changed, pending, nil
	}
}

func deletionHooks(svc *services, offline bool) engine.DeletionHooks {
	h := engine.DeletionHooks{External: batchScrubber(svc, offline)}
	if !offline {
		h.Ledger = ledgerHook(svc.env.dataDir, svc.env.now, svc.env.log)
	}
	return h
}

// runDeletionWorker is serve's deletion worker.
func runDeletionWorker(ctx context.Context, svc *services) {
	svc.engine.RunDeletions(ctx, deletionInterval, deletionHooks(svc, false))
}

// ---- admin commands ----

func dataCmds(a *app) []*cobra.Command {
	return []*cobra.Command{accessLogCmd(a), deletionsCmd(a), backupCmd(a), restoreCmd(a)}
}

type accessView struct {
	Time         time.Time `json:"time"`
	ClientID     string    `json:"client_id"`
	Customer     string    `json:"customer,omitempty"`
	CustomerHash string    `json:"customer_hash,omitempty"`
	Action       string    `json:"action"`
	TraceID      string    `json:"trace_id"`
}

func accessLogCmd(a *app) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "access-log --tenant ID",
		Short: "Who exported which customer, when (deleted customers appear by keyed hash)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withEnv(cmd, func(e *env) error {
				if _, ok := e.db.Tenant(tenant); !ok {
					return fmt.Errorf("no tenant %q", tenant)
				}
				log, err := e.svc.engine.AccessLog(tenant)
				if err != nil {
					return err
				}
				views := make([]accessView, 0, len(log))
				for _, l := range log {
					views = append(views, accessView{Time: l.At.UTC(), ClientID: l.ClientID, Customer: l.ClienteRef, CustomerHash: l.ClienteHash, Action: l.Accion, TraceID: l.TraceID})
				}
				if jsonFlag(cmd) {
					return printJSON(cmd.OutOrStdout(), map[string]any{"tenant": tenant, "entries": views})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TIME\tCLIENT_ID\tCUSTOMER\tACTION\tTRACE_ID")
				for _, v := range views {
					who := v.Customer
					if who == "" {
						who = "deleted:" + v.CustomerHash
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Time.Format(time.RFC3339), v.ClientID, who, v.Action, v.TraceID)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	cmd.MarkFlagRequired("tenant")
	return cmd
}

type deletionView struct {
	CustomerHash string     `json:"customer_hash"`
	State        string     `json:"state"`
	RequestedAt  time.Time  `json:"requested_at"`
	ClientID     string     `json:"client_id"`
	CompletedAt  *time.Time `json:"completed_at,omitempty"`
	Attempts     int        `json:"failed_attempts,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	Waiting      string     `json:"waiting,omitempty"`
}

func deletionsCmd(a *app) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "deletions --tenant ID",
		Short: "Customer deletions of a tenant: keyed hash, state (programado, completado), when, by which credential",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withEnv(cmd, func(e *env) error {
				if _, ok := e.db.Tenant(tenant); !ok {
					return fmt.Errorf("no tenant %q", tenant)
				}
				recs, err := e.svc.engine.Deletions(tenant)
				if err != nil {
					return err
				}
				views := make([]deletionView, 0, len(recs))
				for _, r := range recs {
					views = append(views, deletionView{CustomerHash: r.Hash, State: r.Estado, RequestedAt: r.SolicitadoEn.UTC(), ClientID: r.ClientID,
						CompletedAt: r.CompletadoEn, Attempts: r.Intentos, LastError: r.UltimoError, Waiting: r.Espera})
				}
				if jsonFlag(cmd) {
					return printJSON(cmd.OutOrStdout(), map[string]any{"tenant": tenant, "deletions": views})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CUSTOMER_HASH\tSTATE\tREQUESTED\tCOMPLETED\tCLIENT_ID\tNOTE")
				for _, v := range views {
					done := "-"
					if v.CompletedAt != nil {
						done = v.CompletedAt.UTC().Format(time.RFC3339)
					}
					note := v.Waiting
					if v.LastError != "" {
						note = fmt.Sprintf("%d failed attempts: %s", v.Attempts, v.LastError)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.CustomerHash, v.State, v.RequestedAt.Format(time.RFC3339), done, v.ClientID, note)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	cmd.MarkFlagRequired("tenant")
	return cmd
}

// backupManifest is DIR/manifest.json.
type backupManifest struct {
	Format        int       `json:"format"`
	TakenAt       time.Time `json:"taken_at"`
	CompletedAt   time.Time `json:"completed_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	RetentionDays int       `json:"retention_days"`
	Version       string    `json:"coupond_version"`
	Bytes         int64     `json:"bytes"`
	Files         int       `json:"files"`
	Tenants       []string  `json:"tenants"`
}

// setArg replaces the value of flag in args (as "--flag v" or "--flag=v").
func setArg(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		switch {
		case a == "--"+flag && i+1 < len(out):
			out[i+1] = value
		case strings.HasPrefix(a, "--"+flag+"="):
			out[i] = "--" + flag + "=" + value
		}
	}
	return out
}

func backupCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "backup --out DIR",
		Short: "Consistent online backup (Pebble checkpoint, keys, manifest) that later deletions reach through its ledger",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := filepath.Abs(out)
			if err != nil {
				return err
			}
			// The server resolves paths from its own working directory.
			a.args = setArg(a.args, "out", dir)
			return a.withEnv(cmd, func(e *env) error {
				m, err := runBackup(cmd.Context(), e, dir, progressWriter(cmd))
				if err != nil {
					return err
				}
				if jsonFlag(cmd) {
					return printJSON(cmd.OutOrStdout(), map[string]any{"dir": dir, "taken_at": m.TakenAt, "completed_at": m.CompletedAt,
						"expires_at": m.ExpiresAt, "bytes": m.Bytes, "files": m.Files, "tenants": m.Tenants})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "backup in %s: %d files, %.1f MB, taken at %s; restorable until %s\n",
					dir, m.Files, float64(m.Bytes)/1e6, m.TakenAt.Format(time.RFC3339), m.ExpiresAt.Format(time.RFC3339))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "backup directory (must not exist or be empty)")
	cmd.MarkFlagRequired("out")
	return cmd
}

// progressWriter is where progress goes: stdout, except with --json (one
// JSON value on stdout) where it is dropped.
func progressWriter(cmd *cobra.Command) io.Writer {
	if jsonFlag(cmd) {
		return io.Discard
	}
	return cmd.OutOrStdout()
}

func runBackup(_ context.Context, e *env, dir string, progress io.Writer) (*backupManifest, error) {
	dataAbs, _ := filepath.Abs(e.dataDir)
	if rel, err := filepath.Rel(dataAbs, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("--out %s is inside the data dir; put backups elsewhere", dir)
	}
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return nil, fmt.Errorf("--out %s exists and is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil { // it may exist, empty, with a wider mode
		return nil, err
	}
	// The ledger and the registration come before the checkpoint: a deletion
	// the checkpoint misses is then in the ledger.
	takenAt := e.now().UTC()
	if err := appendNothing(filepath.Join(dir, ledgerFile)); err != nil {
		return nil, err
	}
	registryMu.Lock()
	reg, err := loadRegistry(e.dataDir)
	if err == nil {
		reg.Backups = append(reg.Backups, backupEntry{Dir: dir, TakenAt: takenAt})
		err = saveRegistry(e.dataDir, reg)
	}
	registryMu.Unlock()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*backupManifest, error) {
		registryMu.Lock()
		if reg, rerr := loadRegistry(e.dataDir); rerr == nil {
			kept := reg.Backups[:0:0]
			for _, b := range reg.Backups {
				if b.Dir != dir {
					kept = append(kept, b)
				}
			}
			reg.Backups = kept
			saveRegistry(e.dataDir, reg)
		}
		registryMu.Unlock()
		os.RemoveAll(dir)
		return nil, err
	}

	total := int64(e.db.Pebble().Metrics().DiskSpaceUsage())
	fmt.Fprintf(progress, "backup: checkpoint of %.1f MB into %s\n", float64(total)/1e6, dir)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n, _ := dirSize(filepath.Join(dir, "db"))
				fmt.Fprintf(progress, "backup: %s\n", progressBar(n, total))
			}
		}
	}()
	err = e.db.Checkpoint(filepath.Join(dir, "db"))
	close(done)
	wg.Wait()
	if err != nil {
		return fail(err)
	}
	size, files := dirSizeFiles(filepath.Join(dir, "db"))
	fmt.Fprintf(progress, "backup: %s\n", progressBar(size, max(size, 1)))
	keys, err := os.ReadFile(filepath.Join(e.dataDir, store.SecretsFile))
	if err != nil {
		return fail(err)
	}
	if err := writeFileSync(filepath.Join(dir, store.SecretsFile), keys); err != nil {
		return fail(err)
	}
	if err := syncTree(filepath.Join(dir, "db")); err != nil {
		return fail(err)
	}
	m := &backupManifest{Format: backupFormat, TakenAt: takenAt, CompletedAt: e.now().UTC(), ExpiresAt: takenAt.Add(BackupRetention),
		RetentionDays: int(BackupRetention / (24 * time.Hour)), Version: version, Bytes: size, Files: files, Tenants: []string{}}
	for _, t := range e.db.Tenants() {
		m.Tenants = append(m.Tenants, t.ID)
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileSync(filepath.Join(dir, backupManifestFile), data); err != nil {
		return fail(err)
	}
	registryMu.Lock()
	reg, err = loadRegistry(e.dataDir)
	if err == nil {
		for i := range reg.Backups {
			if reg.Backups[i].Dir == dir {
				reg.Backups[i].Complete = true
			}
		}
		err = saveRegistry(e.dataDir, reg)
	}
	registryMu.Unlock()
	if err != nil {
		return nil, err
	}
	e.log.Info().Str("dir", dir).Int64("bytes", size).Msg("backup taken")
	return m, nil
}

// appendNothing creates path (empty, synced) if it does not exist.
func appendNothing(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func progressBar(n, total int64) string {
	if total <= 0 {
		total = 1
	}
	frac := min(float64(n)/float64(total), 1)
	const width = 30
	full := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%% %.1f/%.1f MB", strings.Repeat("#", full), strings.Repeat(".", width-full), frac*100, float64(n)/1e6, float64(total)/1e6)
}

func dirSize(dir string) (int64, error) {
	n, _ := dirSizeFiles(dir)
	return n, nil
}

func dirSizeFiles(dir string) (size int64, files int) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			size += info.Size()
			files++
		}
		return nil
	})
	return size, files
}

// syncTree fsyncs every file and directory under dir.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

func restoreCmd(a *app) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "restore --from DIR",
		Short: "Restore a backup (server stopped), re-applying every customer deletion recorded since it was taken",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Never forwarded to a running server: the store must be closed.
			sock := filepath.Join(a.dataDir, adminSocket)
			if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
				conn.Close()
				return fmt.Errorf("coupond serve is running on %s: stop it before restoring", a.dataDir)
			}
			src, err := filepath.Abs(from)
			if err != nil {
				return err
			}
			res, err := runRestore(cmd.Context(), a.dataDir, src, time.Now, progressWriter(cmd))
			if err != nil {
				return err
			}
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s (taken at %s) into %s; %d customer deletions re-applied\n",
				res.From, res.TakenAt.Format(time.RFC3339), res.DataDir, res.DeletionsReapplied)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "backup directory made by 'admin backup'")
	cmd.MarkFlagRequired("from")
	return cmd
}

type restoreResult struct {
	From               string    `json:"from"`
	DataDir            string    `json:"data_dir"`
	TakenAt            time.Time `json:"taken_at"`
	DeletionsReapplied int       `json:"deletions_reapplied"`
	Replaced           bool      `json:"replaced_existing_store"`
}

func runRestore(ctx context.Context, dataDir, src string, now func() time.Time, progress io.Writer) (*restoreResult, error) {
	var m backupManifest
	data, err := os.ReadFile(filepath.Join(src, backupManifestFile))
	if err != nil {
		return nil, fmt.Errorf("%s is not a complete backup (no %s): %w", src, backupManifestFile, err)
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Format != backupFormat {
		return nil, fmt.Errorf("%s/%s: not a coupond backup manifest", src, backupManifestFile)
	}
	if age := now().Sub(m.TakenAt); age > BackupRetention {
		return nil, fmt.Errorf("backup taken %s is past the %d-day retention: it no longer receives customer deletions, so it cannot be restored",
			m.TakenAt.Format(time.RFC3339), int(BackupRetention/(24*time.Hour)))
	}
	ledger, err := readLedger(filepath.Join(src, ledgerFile))
	if err != nil {
		return nil, err
	}
	keys, err := os.ReadFile(filepath.Join(src, store.SecretsFile))
	if err != nil {
		return nil, fmt.Errorf("backup keys: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	cur, err := os.ReadFile(filepath.Join(dataDir, store.SecretsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeFileSync(filepath.Join(dataDir, store.SecretsFile), keys); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case !bytes.Equal(bytes.TrimSpace(cur), bytes.TrimSpace(keys)):
		return nil, fmt.Errorf("the backup's keys.json differs from %s: it comes from another installation", filepath.Join(dataDir, store.SecretsFile))
	}
	secrets, err := store.LoadSecrets(dataDir)
	if err != nil {
		return nil, err
	}

	staging := filepath.Join(dataDir, "db.restoring")
	if err := os.RemoveAll(staging); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "restore: copying %s\n", filepath.Join(src, "db"))
	if err := copyTree(filepath.Join(src, "db"), staging, progress); err != nil {
		os.RemoveAll(staging)
		return nil, err
	}
	n, err := reapplyDeletions(ctx, dataDir, staging, secrets, ledger, now, progress)
	if err == nil {
		err = rotateManifest(staging)
	}
	if err != nil {
		os.RemoveAll(staging)
		return nil, err
	}

	// Swap the staging store in.
	live := filepath.Join(dataDir, "db")
	replaced := false
	if _, err := os.Stat(live); err == nil {
		replaced = true
		old := filepath.Join(dataDir, "db.replaced")
		os.RemoveAll(old)
		if err := os.Rename(live, old); err != nil {
			return nil, err
		}
		if err := os.Rename(staging, live); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(old); err != nil {
			return nil, err
		}
	} else if err := os.Rename(staging, live); err != nil {
		return nil, err
	}
	if err := syncDir(dataDir); err != nil {
		return nil, err
	}

	// The restored installation keeps feeding this backup's ledger.
	registryMu.Lock()
	reg, err := loadRegistry(dataDir)
	if err == nil {
		found := false
		for _, b := range reg.Backups {
			found = found || b.Dir == src
		}
		if !found {
			reg.Backups = append(reg.Backups, backupEntry{Dir: src, TakenAt: m.TakenAt, Complete: true})
			err = saveRegistry(dataDir, reg)
		}
	}
	registryMu.Unlock()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "restore: done\n")
	return &restoreResult{From: src, DataDir: dataDir, TakenAt: m.TakenAt, DeletionsReapplied: n, Replaced: replaced}, nil
}

func readLedger(path string) ([]engine.LedgerEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("backup deletion ledger: %w", err)
	}
	var out []engine.LedgerEntry
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l engine.LedgerEntry
		if err := json.Unmarshal(line, &l); err != nil {
			if i == len(lines)-1 {
				break // a torn last line: its deletion was not acknowledged as ledgered
			}
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// reapplyDeletions opens the staging store, schedules every deletion of the
// ledger and every deletion record already in the backup, and runs them to
// completado. It returns how many customers' deletions it applied.
func reapplyDeletions(ctx context.Context, dataDir, staging string, secrets *store.Secrets, ledger []engine.LedgerEntry, now func() time.Time, progress io.Writer) (int, error) {
	db, err := store.Open(staging, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	e := &env{db: db, secrets: secrets, now: now, log: zerolog.Nop(), dataDir: dataDir}
	svc, err := newServices(ctx, e, serviceOptions{})
	if err != nil {
		return 0, err
	}
	e.svc = svc
	if err := svc.batch.Recover(); err != nil {
		return 0, err
	}
	type key struct{ tenant, hash string }
	todo := map[key]engine.LedgerEntry{}
	for _, l := range ledger {
		if _, ok := db.Tenant(l.Tenant); !ok {
			continue // a tenant created after the backup: none of its data is in it
		}
		if old, ok := todo[key{l.Tenant, l.Hash}]; !ok || l.RequestedAt.After(old.RequestedAt) {
			todo[key{l.Tenant, l.Hash}] = l
		}
	}
	for _, t := range db.Tenants() {
		recs, err := svc.engine.Deletions(t.ID)
		if err != nil {
			return 0, err
		}
		for _, r := range recs {
			if _, ok := todo[key{t.ID, r.Hash}]; !ok {
				todo[key{t.ID, r.Hash}] = engine.LedgerEntry{Tenant: t.ID, Hash: r.Hash, RequestedAt: r.SolicitadoEn, ClientID: r.ClientID}
			}
		}
	}
	for _, l := range todo {
		if _, err := svc.engine.ScheduleDeletionByHash(l.Tenant, l.Hash, l.RequestedAt, l.ClientID); err != nil {
			return 0, err
		}
	}
	fmt.Fprintf(progress, "restore: re-applying %d customer deletions\n", len(todo))
	hooks := deletionHooks(svc, true)
	for {
		st, err := svc.engine.ProcessDeletions(ctx, hooks)
		if err != nil {
			return 0, fmt.Errorf("re-applying deletions: %w", err)
		}
		left, err := svc.engine.PendingDeletions()
		if err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
		if st.Completed == 0 {
			return 0, fmt.Errorf("re-applying deletions: %d cannot complete", left)
		}
	}
	if err := reconcileResults(db, filepath.Join(dataDir, "results")); err != nil {
		return 0, err
	}
	return len(todo), nil
}

// reconcileResults makes the results dir agree with the restored jobs.
// Result files are not part of a backup: a restored job whose file is not
// there says so (as after retention), and files of jobs the restored store
// does not know are removed, since no deletion would ever reach them.
func reconcileResults(db *store.DB, dir string) error {
	known := map[string]bool{}
	b := db.NewBatch()
	defer b.Close()
	for _, t := range db.Tenants() {
		lo, hi := store.TableSpan(t.ID, store.TableJob)
		if err := db.Scan(lo, hi, func(k, v []byte) error {
			var j batch.Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			if j.Result == "" {
				return nil
			}
			path := filepath.Join(dir, j.Result)
			if _, err := os.Stat(path); err == nil {
				known[path] = true
				return nil
			}
			j.Result = ""
			j.Error = "archivo de resultados no incluido en el respaldo restaurado"
			return b.SetJSON(append([]byte(nil), k...), &j)
		}); err != nil {
			return err
		}
	}
	if !b.Empty() {
		if err := b.Commit(); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !known[path] {
			return os.Remove(path)
		}
		return nil
	})
}

// rotateManifest reopens the store twice, flushing each time. Pebble starts
// a new MANIFEST at the first edit after opening and keeps one previous
// one, so after two rounds no MANIFEST holds the file boundaries of before
// the deletions (sstable boundary keys may name a customer).
func rotateManifest(dir string) error {
	for i := 0; i < 2; i++ {
		db, err := store.Open(dir, nil)
		if err != nil {
			return err
		}
		if err := db.Pebble().Flush(); err != nil {
			db.Close()
			return err
		}
		if err := db.Close(); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the regular files of src into dst (created), fsyncing
// each, with progress lines.
func copyTree(src, dst string, progress io.Writer) error {
	total, _ := dirSizeFiles(src)
	var done int64
	last := time.Now()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(out, in)
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		done += n
		if time.Since(last) > 250*time.Millisecond {
			fmt.Fprintf(progress, "restore: %s\n", progressBar(done, total))
			last = time.Now()
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "restore: %s\n", progressBar(done, max(total, 1)))
	return syncDir(dst)
}
