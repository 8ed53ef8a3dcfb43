package cli

// Customer data operations: the deletion worker's wiring (backup ledgers,
// batch files), "admin access-log", "admin deletions", "admin backup" and
// "admin restore" ("admin backups" is in admin_backups.go). The rules live
// in package privacy (see privacy/backup.go for how deletion reaches
// backups); this file is flags, output and wiring.

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
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// deletionInterval is how often serve's deletion worker passes.
const deletionInterval = 2 * time.Second

// owedInterval is how often serve tries the deletions owed to backups whose
// directories were missing (privacy.Backups.RunOwed), from its start.
const owedInterval = privacy.DefaultOwedEvery

// ---- batch data ----

// batchScrubber removes a customer from the tenant's batch data: the lines
// of retained result files (rewritten here) and the stored request chunks
// (rewritten in the deletion's batch, which it commits). A job queued or
// running makes the deletion wait (pending), except offline (restore),
// where no job runs and queued jobs are scrubbed too.
func batchScrubber(svc *services, offline bool) func(tenant, ref string, b *store.Batch) ([][]byte, bool, error) {
	return func(tenant, ref string, b *store.Batch) ([][]byte, bool, error) {
		db := svc.env.db
		resultsDir := filepath.Join(svc.env.resultsPath(), tenant)
		temps := tempResults(resultsDir)    // before the jobs: see removeStaleResults
		jobs, err := svc.batch.Jobs(tenant) // a damaged job record is quarantined, not a stop (contract §8)
		if err != nil {
			return nil, false, err
		}
		pending := false
		busy := map[string]bool{}
		var changed [][]byte
		needle := []byte(`"cliente_ref":"` + ref + `"`)
		for _, j := range jobs {
			if (j.Estado == api.EstadoEnCola || j.Estado == api.EstadoEnCurso) && !offline {
				pending, busy[j.ID] = true, true
				continue
			}
			keys, err := scrubChunks(db, b, tenant, j, ref)
			if err != nil {
				return nil, false, err
			}
			changed = append(changed, keys...)
			if err := scrubResult(svc, j, needle); err != nil {
				return nil, false, err
			}
		}
		if err := removeStaleResults(resultsDir, temps, busy); err != nil {
			return nil, false, err
		}
		return changed, pending, nil
	}
}

// scrubResult rewrites the result file of job j without the lines that
// hold needle. A file that cannot be rewritten (damaged: it does not
// decompress or fails its checksum; or no room for the copy) must not keep
// the customer either (contract §8): it is removed and the job answers as
// for a result past retention, so the deletion never waits on it.
func scrubResult(svc *services, j *batch.Job, needle []byte) error {
	_, err := svc.batch.RewriteResult(j, func(line []byte) bool { return !bytes.Contains(line, needle) })
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	svc.env.log.Warn().Err(err).Str("tenant", j.Tenant).Str("job_id", j.ID).
		Msg("result file cannot be rewritten without a deleted customer: removed, the job keeps no result")
	if err := svc.batch.DropResult(j, "archivo de resultados dañado: eliminado al borrar los datos de un cliente"); err != nil {
		return fmt.Errorf("result file of %s: %w", j.ID, err)
	}
	return nil
}

// scrubChunks rewrites, in b, the stored request chunks of job j without
// ref and returns the keys it rewrote. A chunk that does not decode never
// stops the deletion (contract §8): it is deleted when its bytes name ref
// (its job then fails on it, as on any damaged chunk), else left to its
// job.
func scrubChunks(db *store.DB, b *store.Batch, tenant string, j *batch.Job, ref string) ([][]byte, error) {
	var changed [][]byte
	for c := 0; c < j.Chunks; c++ {
		key := store.JobChunkKey(tenant, j.ID, c)
		v, err := db.Get(key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var chunk []string
		if json.Unmarshal(v, &chunk) != nil {
			if bytes.Contains(v, []byte(ref)) {
				b.Delete(key)
				changed = append(changed, key)
			}
			continue
		}
		kept := chunk[:0:0]
		for _, r := range chunk {
			if r != ref {
				kept = append(kept, r)
			}
		}
		if len(kept) != len(chunk) {
			if err := b.SetJSON(key, kept); err != nil {
				return nil, err
			}
			changed = append(changed, key)
		}
	}
	return changed, nil
}

// tempResults lists the temporary result files (".tmp") in dir.
func tempResults(dir string) []string {
	entries, _ := os.ReadDir(dir) // no dir: no files
	var names []string
	for _, n := range entries {
		if strings.HasSuffix(n.Name(), ".tmp") {
			names = append(names, n.Name())
		}
	}
	return names
}

// removeStaleResults removes from dir the temporary result files names
// (tempResults) left by a crash mid-write, except those of jobs that are
// queued or running (busy). names must be listed before the jobs' states
// are read: a job that starts after that read is not in busy, and its
// temporary file, created after the listing, must not be taken for one a
// crash left.
func removeStaleResults(dir string, names []string, busy map[string]bool) error {
	for _, name := range names {
		if job, _, _ := strings.Cut(name, "."); busy[job] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// deletionHooks reach the batch data, the API server's memory (a tenant's
// deletion) and, for the live store, the backups' ledgers; offline (a
// restore's staging store) a tenant's deletion sweeps at once.
func deletionHooks(svc *services, offline bool) privacy.DeletionHooks {
	h := privacy.DeletionHooks{External: batchScrubber(svc, offline), Tenant: tenantHooks(svc, svc.tenantGrace)}
	if !offline {
		h.Ledger = svc.backups.Ledger
	} else {
		h.Tenant.Grace = 0
	}
	return h
}

// runDeletionWorker is serve's deletion worker.
func runDeletionWorker(ctx context.Context, svc *services) {
	svc.privacy.RunDeletions(ctx, deletionInterval, deletionHooks(svc, false))
}

// ---- admin commands ----

func dataCmds(a *app) []*cobra.Command {
	return []*cobra.Command{accessLogCmd(a), deletionsCmd(a), withDeadline(backupCmd(a), longAdmin), withDeadline(backupsCmd(a), longAdmin), restoreCmd(a)}
}

type accessView struct {
	Time         time.Time `json:"time"`
	ClientID     string    `json:"client_id"`
	Customer     string    `json:"customer,omitempty"`
	CustomerHash string    `json:"customer_hash,omitempty"`
	Action       string    `json:"action"`
	TraceID      string    `json:"trace_id"`
}

// accessLogCmd lists the tenant's access log, all of it or the entries
// that pass the filters (accessFilter). Entries that do not decode are not
// listed (AccessLog moves them to quarantine); how many of the tenant's
// access-log entries sit in quarantine is shown after the table and as
// "quarantined_entries" with --json.
func accessLogCmd(a *app) *cobra.Command {
	row := func(v accessView) string {
		who := v.Customer
		if who == "" {
			who = "deleted:" + v.CustomerHash
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", v.Time.Format(time.RFC3339), v.ClientID, who, v.Action, v.TraceID)
	}
	var f accessFilter
	cmd := a.tenantCmd("access-log --tenant ID [--customer REF] [--since TIME] [--until TIME]", "Who exported which customer, when (deleted customers appear by keyed hash)", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		keep, err := f.matcher(e.svc.privacy, t.ID)
		if err != nil {
			return err
		}
		entries, err := e.svc.privacy.AccessLog(t.ID)
		if err != nil {
			return err
		}
		views := make([]accessView, 0, len(entries))
		for _, l := range entries {
			if keep(l) {
				views = append(views, accessView{Time: l.At.UTC(), ClientID: l.ClientID, Customer: l.ClienteRef, CustomerHash: l.ClienteHash, Action: l.Accion, TraceID: l.TraceID})
			}
		}
		damaged, err := quarantinedAccessEntries(e, t.ID)
		if err != nil {
			return err
		}
		out := map[string]any{"tenant": t.ID, "entries": views, "quarantined_entries": damaged}
		if err := printList(cmd, out, views, "TIME\tCLIENT_ID\tCUSTOMER\tACTION\tTRACE_ID", row); err != nil {
			return err
		}
		if damaged > 0 && !jsonFlag(cmd) {
			fmt.Fprintf(cmd.OutOrStdout(), "%d damaged access-log entries are in quarantine, not listed ('coupond admin check' shows them)\n", damaged)
		}
		return nil
	})
	cmd.Flags().StringVar(&f.customer, "customer", "", "only the exports of this cliente_ref (found by keyed hash too, after its deletion)")
	cmd.Flags().StringVar(&f.since, "since", "", "only entries at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&f.until, "until", "", "only entries before this time (RFC 3339)")
	return cmd
}

// quarantinedAccessEntries counts the tenant's access-log entries held in
// quarantine.
func quarantinedAccessEntries(e *env, tenant string) (int, error) {
	q, err := e.svc.engine.Quarantine.Quarantined(tenant)
	if err != nil {
		return 0, err
	}
	damaged := 0
	for _, d := range q {
		if d.Table == "access_log" {
			damaged++
		}
	}
	return damaged, nil
}

// accessFilter holds the filter flags of "admin access-log", as given.
type accessFilter struct {
	customer, since, until string
}

// matcher checks the flags and returns the test an entry must pass: the
// customer's own (raw cliente_ref, or its keyed hash once deleted), at or
// after --since, before --until. Errors name the flag, never echo a
// --customer value (the audit log and serve's log keep errors).
func (f accessFilter) matcher(p *privacy.Service, tenant string) (func(privacy.AccessEntry) bool, error) {
	if f.customer != "" && (len(f.customer) < 8 || !schema.ValidID(f.customer)) {
		return nil, errors.New("--customer: not a cliente_ref (8 to 128 characters of the ID pattern)")
	}
	since, err := filterTime("since", f.since)
	if err != nil {
		return nil, err
	}
	until, err := filterTime("until", f.until)
	if err != nil {
		return nil, err
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return nil, errors.New("--since must be before --until")
	}
	hash := ""
	if f.customer != "" {
		hash = p.CustomerHash(tenant, f.customer)
	}
	return func(a privacy.AccessEntry) bool {
		return (f.customer == "" || a.ClienteRef == f.customer || a.ClienteHash == hash) &&
			(since.IsZero() || !a.At.Before(since)) && (until.IsZero() || a.At.Before(until))
	}, nil
}

// filterTime parses the RFC 3339 value of flag name ("" is no bound).
func filterTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s: not an RFC 3339 time (like 2026-12-01T00:00:00Z)", name)
	}
	return t, nil
}

// privacyListCmd is an admin command listing one tenant's privacy records:
// list reads them, view turns each into the row shown; --json prints
// {"tenant": ID, key: rows}, the table is header then row of each.
func privacyListCmd[R, V any](a *app, use, short string, list func(*privacy.Service, string) ([]R, error), view func(R) V,
	key, header string, row func(V) string) *cobra.Command {
	return a.tenantCmd(use, short, func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		recs, err := list(e.svc.privacy, t.ID)
		if err != nil {
			return err
		}
		views := make([]V, 0, len(recs))
		for _, r := range recs {
			views = append(views, view(r))
		}
		return printList(cmd, map[string]any{"tenant": t.ID, key: views}, views, header, row)
	})
}

// utcOrNil is t in UTC, or nil: admin data commands print every time in
// UTC, whatever zone a record was stored with.
func utcOrNil(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// deletionView is the admin view of a deletion record; its times are UTC.
type deletionView struct {
	CustomerHash string     `json:"customer_hash"`
	State        string     `json:"state"`
	RequestedAt  time.Time  `json:"requested_at"`
	ClientID     string     `json:"client_id"`
	CompletedAt  *time.Time `json:"completed_at,omitempty"`
	Attempts     int        `json:"failed_attempts,omitempty"`
	LastError    string     `json:"last_error,omitempty"`    // which step failed, never the error's text
	LastErrorID  string     `json:"last_error_id,omitempty"` // error_id of serve's log line with the error
	Waiting      string     `json:"waiting,omitempty"`
}

func deletionsCmd(a *app) *cobra.Command {
	view := func(r privacy.DeletionRecord) deletionView {
		return deletionView{CustomerHash: r.Hash, State: r.Estado, RequestedAt: r.SolicitadoEn.UTC(), ClientID: r.ClientID,
			CompletedAt: utcOrNil(r.CompletadoEn), Attempts: r.Intentos, LastError: r.UltimoError,
			LastErrorID: r.UltimoErrorID, Waiting: r.Espera}
	}
	return privacyListCmd(a, "deletions --tenant ID", "Customer deletions of a tenant: keyed hash, state (programado, completado), when, by which credential",
		(*privacy.Service).Deletions, view, "deletions", "CUSTOMER_HASH\tSTATE\tREQUESTED\tCOMPLETED\tCLIENT_ID\tNOTE", func(v deletionView) string {
			done := "-"
			if v.CompletedAt != nil {
				done = v.CompletedAt.Format(time.RFC3339)
			}
			note := v.Waiting
			if v.LastError != "" {
				note = fmt.Sprintf("%d failed attempts: %s", v.Attempts, v.LastError)
			}
			if v.LastErrorID != "" {
				note += " (error_id " + v.LastErrorID + " in serve's log)"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", v.CustomerHash, v.State, v.RequestedAt.Format(time.RFC3339), done, v.ClientID, note)
		})
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
	cmd := leafCmd("backup --out DIR", "Consistent online backup (Pebble checkpoint, keys, manifest) that later deletions reach through its ledger", func(cmd *cobra.Command) error {
		if out == "" {
			return fmt.Errorf("--out: want the backup's directory, got an empty value")
		}
		dir, err := filepath.Abs(out)
		if err != nil {
			return err
		}
		// The server resolves paths from its own working directory.
		a.args = setArg(a.args, "out", dir)
		return a.withEnv(cmd, func(e *env) error {
			if err := sameOutDir(dir, a.clientRoot()); err != nil {
				return err
			}
			m, err := runBackup(cmd.Context(), e, dir, progressWriter(cmd))
			if err != nil {
				return outPathError(err, dir)
			}
			taken, expires := m.TakenAt.UTC(), m.ExpiresAt.UTC()
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"dir": dir, "taken_at": taken, "completed_at": m.CompletedAt.UTC(),
					"expires_at": expires, "bytes": m.Bytes, "files": m.Files, "tenants": m.Tenants})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup in %s: %d files, %.1f MB, taken at %s; restorable until %s\n",
				dir, m.Files, float64(m.Bytes)/1e6, taken.Format(time.RFC3339), expires.Format(time.RFC3339))
			return nil
		})
	})
	cmd.Flags().StringVar(&out, "out", "", "backup directory (must not exist or be empty)")
	cmd.MarkFlagRequired("out")
	return cmd
}

// clientRoot is the root of the admin client's view of the file system
// (its /proc root) when serve runs the command on its behalf and knows
// its process; "" otherwise.
func (a *app) clientRoot() string {
	if a.live == nil || a.clientPID <= 0 {
		return ""
	}
	return fmt.Sprintf("/proc/%d/root", a.clientPID)
}

// sameOutDir refuses a backup directory dir that serve, which writes the
// backup for an admin client, sees elsewhere than the client does
// (clientRoot: the client's root, "" when unknown): the shipped unit gives
// serve a private /tmp (PrivateTmp) and hides /home (ProtectHome), so
// "admin backup --out /tmp/x" answered "backup in /tmp/x" while the
// backup went to serve's own /tmp, out of the operator's sight and
// removed with it when the service stops (before an upgrade, say). The
// nearest directory of dir that serve finds is compared with the same
// path in the client's view; one the client's view does not show is
// another directory too, and a view that cannot be read tells nothing.
func sameOutDir(dir, clientRoot string) error {
	if clientRoot == "" {
		return nil
	}
	if _, err := os.Stat(clientRoot); err != nil {
		return nil // no /proc, or the client gone: nothing to compare with
	}
	for at := dir; ; at = filepath.Dir(at) {
		mine, err := os.Stat(at)
		if err == nil {
			theirs, err := os.Stat(filepath.Join(clientRoot, at))
			if err == nil && os.SameFile(mine, theirs) || err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("--out %s: coupond serve, which writes the backup, sees another %s than this command does "+
				"(its service unit gives it a private /tmp and hides home directories): the backup would go where you cannot see it, "+
				"and under /tmp be removed when the service stops; give --out a directory the service can write, such as /var/backups/coupond/NAME", dir, at)
		}
		if !errors.Is(err, fs.ErrNotExist) || at == filepath.Dir(at) {
			return nil
		}
	}
}

// outPathError names --out in a backup's error about dir or a directory
// on its way ("mkdir /var/backups/coupond: permission denied" did not say
// which flag gave the path).
func outPathError(err error, dir string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && (strings.HasPrefix(dir, pe.Path) || strings.HasPrefix(pe.Path, dir)) && !strings.HasPrefix(err.Error(), "--out") {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	return err
}

// progressWriter is where progress goes: stdout, except with --json (one
// JSON value on stdout) where it is dropped.
func progressWriter(cmd *cobra.Command) io.Writer {
	if jsonFlag(cmd) {
		return io.Discard
	}
	return cmd.OutOrStdout()
}

// runBackup takes a backup of the open store into dir.
func runBackup(ctx context.Context, e *env, dir string, progress io.Writer) (*privacy.Manifest, error) {
	flushForBackup(e, progress)
	return e.svc.backups.Take(ctx, e.db, dir, version, progress)
}

// flushForBackup writes the counts kept in memory (the day's quota use,
// the credentials' last use, the console's counters; serve flushes them
// every 5 seconds) so that a backup holds them as of its start: restored,
// a tenant had the quota it used in those seconds back. A failure is
// printed and the backup goes on, with the counts last flushed.
func flushForBackup(e *env, progress io.Writer) {
	if err := errors.Join(e.svc.api.Flush(), e.svc.engine.Counters().Flush()); err != nil {
		fmt.Fprintf(progress, "backup: counters kept in memory not written first (the backup has them as last flushed): %v\n", err)
	}
}

func restoreCmd(a *app) *cobra.Command {
	var from string
	cmd := leafCmd("restore --from DIR", "Restore a backup (server stopped), re-applying every customer deletion recorded since it was taken", func(cmd *cobra.Command) error {
		if from == "" {
			return fmt.Errorf("--from: want a backup's directory, got an empty value")
		}
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
		// A data dir already there is held to serve's rules (contract
		// section 8): one group or others can write is refused before the
		// customers' data goes into it, and what the restore leaves there
		// (the dir itself, maybe 0755) is made owner-only once it is done.
		if info, err := os.Stat(a.dataDir); err == nil {
			if err := refuseSharedDataDir(a.dataDir, info); err != nil {
				return err
			}
		}
		err = restoreAndReport(cmd, a, src)
		auditRestore(cmd, a, err)
		return err
	})
	cmd.Flags().StringVar(&from, "from", "", "backup directory made by 'admin backup'")
	cmd.MarkFlagRequired("from")
	return cmd
}

// auditRestore writes the line of admin restore, which opened the data dir
// itself with serve stopped, with err its outcome, to the audit log of
// what it left there: restored, or as it was. A failed restore into a data
// dir it made removed it again, and gets none. The line is written holding
// the data dir's lock again, as withEnv writes its lines: a serve that
// waited for the restore's lock (waitForLock) and took it first writes
// lines of its own, and two processes appending at once may cut each
// other's (AppendFS mends a torn last line). The line is then lost, and a
// warning says so.
func auditRestore(cmd *cobra.Command, a *app, err error) {
	if !privacy.HoldsCoupondData(a.dataDir) {
		return
	}
	lock, lerr := privacy.LockDataDir(a.dataDir)
	if lerr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), auditUnwritten, lerr)
		return
	}
	defer lock.Close()
	a.auditDirect(cmd, a.dataDir, err)
}

// restoreAndReport restores the backup src into a's data dir, makes it
// owner-only and prints what was done.
func restoreAndReport(cmd *cobra.Command, a *app, src string) error {
	res, err := runRestore(cmd.Context(), a.dataDir, src, a.now, progressWriter(cmd))
	if err != nil {
		return err
	}
	if err := prepareDataDir(a.dataDir); err != nil {
		return fmt.Errorf("restored, but: %w", err)
	}
	res.TakenAt = res.TakenAt.UTC() // as the manifest has it: any zone
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), res)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "restored %s (taken at %s) into %s; %d customer deletions re-applied, %d tenant deletions\n",
		res.From, res.TakenAt.Format(time.RFC3339), res.DataDir, res.DeletionsReapplied, res.TenantDeletionsReapplied)
	return nil
}

// runRestore restores the backup src into dataDir (server stopped), the
// staging store wired like "serve" but offline.
func runRestore(ctx context.Context, dataDir, src string, now func() time.Time, progress io.Writer) (*privacy.RestoreResult, error) {
	return privacy.NewBackups(dataDir, now, zerolog.Nop()).Restore(ctx, src, stagingOpener(dataDir, now), progress)
}

// stagingOpener wires a restore's staging store like "serve", but offline
// and over the staging results: its batch recovery and deletions never
// touch the live results, which stay as they are if the restore fails.
func stagingOpener(dataDir string, now func() time.Time) privacy.OpenStaging {
	return func(ctx context.Context, db *store.DB, secrets *store.Secrets, results string) (*privacy.Service, privacy.DeletionHooks, error) {
		e := &env{db: db, secrets: secrets, now: now, log: zerolog.Nop(), dataDir: dataDir, resultsDir: results}
		svc, err := newServices(ctx, e, serviceOptions{})
		if err != nil {
			return nil, privacy.DeletionHooks{}, err
		}
		e.svc = svc
		if err := svc.batch.Recover(); err != nil {
			return nil, privacy.DeletionHooks{}, err
		}
		return svc.privacy, deletionHooks(svc, true), nil
	}
}
