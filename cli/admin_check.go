package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// checkCmd is "admin check": decode every stored record with the decoders
// the readers use, report what fails and, with --repair, move it to
// quarantine (contract §8); read the backup registry too and report a
// damaged one (damaged_registry; --repair leaves it to the next backup or
// deletion, which rebuilds it) or an unreadable one (damaged_registry too:
// the operator's to fix; deletions are owed to every backup meanwhile). It exits 1 when damaged records or a
// damaged registry are left in place, 0 otherwise (a --repair run that
// quarantined all it found exits 0). It also reads every completed batch
// job's result file whole and reports those missing or damaged (exit 1),
// and lists the store's notes of write-ahead logs found damaged at open
// (damaged_logs; exit 1 until --repair acknowledges them).
func checkCmd(a *app) *cobra.Command {
	var tenant string
	var repair bool
	cmd := a.envCmd("check [--tenant ID] [--repair]", "Decode every stored record and report damaged ones; --repair moves them to quarantine", cobra.NoArgs, func(cmd *cobra.Command, _ []string, e *env) error {
		st, err := e.svc.engine.Quarantine.CheckWithProgress(cmd.Context(), tenant, repair, checkProgress(progressWriter(cmd), e.now))
		if errors.Is(err, engine.ErrNoTenant) {
			return fmt.Errorf("no tenant %q", tenant)
		}
		if err != nil {
			return err
		}
		if st.Repaired > 0 {
			// A deletion whose queue entry went to quarantine is stranded:
			// serve's worker queues it again at its next pass, not within
			// the hour of its sweep.
			e.svc.privacy.SweepStranded()
		}
		// Tenant and credential records the store could not decode at
		// open: not movable to a tenant's quarantine; a backup restores them.
		unreadable := append([]string{}, e.db.Unreadable()...)
		// Damaged backup registries, set aside once rebuilt, and damaged
		// lines of the deletions owed to backups, set aside once read
		// (privacy.Backups); CheckOwed reads those now.
		owedErr := e.svc.backups.CheckOwed()
		if owedErr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "deletions owed to backups: %v\n", owedErr)
		}
		aside := e.svc.backups.SetAside()
		registry := registryDamage(e.svc.backups.CheckRegistry())
		// Result files a download would stop in (missing, damaged).
		results, err := e.svc.batch.CheckResults(tenant)
		if err != nil {
			return err
		}
		// The log notes are the whole store's: --repair with --tenant
		// leaves them.
		ackLogs := repair && tenant == ""
		logs, err := logDamage(e.db, ackLogs)
		if err != nil {
			return err
		}
		left := len(st.Damaged) - st.Repaired + len(unreadable) + len(aside) + len(results)
		if !ackLogs {
			left += len(logs)
		}
		if owedErr != nil {
			left++
		}
		if registry != nil {
			left++
		}
		if jsonFlag(cmd) {
			if err := printJSON(cmd.OutOrStdout(), map[string]any{"ok": left == 0, "tenants": st.Tenants, "records": st.Records,
				"damaged": st.Damaged, "repaired": st.Repaired, "quarantined": st.Quarantined, "unreadable": unreadable,
				"set_aside": aside, "damaged_registry": registry, "damaged_results": nonNil(results), "damaged_logs": logs}); err != nil {
				return err
			}
		} else {
			printCheckText(cmd.OutOrStdout(), st, repair, unreadable, aside, registry, results)
			printLogDamage(cmd.OutOrStdout(), logs, ackLogs)
		}
		if left > 0 {
			return &ExitError{Code: 1}
		}
		return nil
	})
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant (default: every tenant)")
	cmd.Flags().BoolVar(&repair, "repair", false, "move the damaged records to quarantine")
	cmd.PreRunE = refuseEmptyTenant(&tenant)
	return cmd
}

// checkProgressEvery is the least time between two of admin check's
// progress lines.
const checkProgressEvery = 2 * time.Second

// checkProgress returns admin check's progress: a line on w, at most one
// every checkProgressEvery by now, with the records read so far. A check
// reads every record of the store (11 million records of a year's data in
// 11 s on the 2-core VM), and it printed nothing until its report.
func checkProgress(w io.Writer, now func() time.Time) engine.CheckProgress {
	start := now()
	last := start
	return func(tenant string, records int) {
		t := now()
		if t.Sub(last) < checkProgressEvery {
			return
		}
		last = t
		fmt.Fprintf(w, "check: %d records read (tenant %s), %s\n", records, tenant, t.Sub(start).Round(time.Second))
	}
}

// refuseEmptyTenant is the PreRunE of a command whose --tenant is optional
// (without it: every tenant): a --tenant given empty, as a shell variable
// that expanded to nothing gives it, is an error naming the flag. It ran
// the command over every tenant, and "check --repair --tenant \"$T\""
// then also acknowledged the whole store's damaged logs, which only a
// repair without --tenant does.
func refuseEmptyTenant(tenant *string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if cmd.Flags().Changed("tenant") && *tenant == "" {
			return fmt.Errorf("--tenant: want a tenant id, got an empty value (leave --tenant out for every tenant)")
		}
		return nil
	}
}

// printCheckText is admin check's text report.
func printCheckText(w io.Writer, st *engine.CheckStats, repair bool, unreadable, aside []string, registry *registryCheck, results []batch.ResultDamage) {
	printCheck(w, st, repair)
	for _, u := range unreadable {
		fmt.Fprintf(w, "  unreadable   %s (left out; restore it from a backup)\n", u)
	}
	for _, a := range aside {
		fmt.Fprintf(w, "  set aside    %s (%s; remove it once looked at)\n", a, setAsideWhat(a))
	}
	printRegistry(w, registry)
	for _, r := range results {
		fmt.Fprintf(w, "  damaged      %s job %s result file: %s; %s: run the job again\n", r.Tenant, r.JobID, r.Reason, resultDownload(r))
	}
}

// resultDownload is what a download of the job of r answers: a download
// reads the whole file before its status line, so a missing file is 404
// and one that does not decompress 500, never an answer cut short.
func resultDownload(r batch.ResultDamage) string {
	if r.Reason == batch.ResultMissing {
		return "its download answers 404 no_encontrado"
	}
	return "its download answers 500 error_interno"
}

// logDamage lists the store's notes of damaged write-ahead logs found at
// open (store.LogDamage); repair clears them once listed.
func logDamage(db *store.DB, repair bool) ([]store.LogDamage, error) {
	logs, err := db.LogDamage()
	if err == nil && repair && len(logs) > 0 {
		err = db.ClearLogDamage()
	}
	return nonNil(logs), err
}

// printLogDamage prints admin check's lines about damaged logs.
func printLogDamage(w io.Writer, logs []store.LogDamage, repair bool) {
	for _, d := range logs {
		fmt.Fprintf(w, "  damaged      %s; the writes before it are kept; events sent shortly before that time can be sent again (their event_id makes a resend safe)\n", d)
	}
	switch {
	case len(logs) > 0 && repair:
		fmt.Fprintf(w, "%s acknowledged: no longer listed\n", plural(len(logs), "damaged log note"))
	case len(logs) > 0:
		fmt.Fprintln(w, "run again with --repair and no --tenant to acknowledge the damaged logs (they concern every tenant)")
	}
}

// nonNil is s, or an empty slice for nil (a JSON list, never null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// setAsideWhat says what the set-aside file name (privacy.Backups.SetAside)
// held.
func setAsideWhat(name string) string {
	if strings.HasPrefix(name, "backups-owed.jsonl.") {
		return "damaged lines of the deletions owed to backups; the others are kept and delivered"
	}
	return "damaged backup registry, rebuilt"
}

// registryCheck is admin check's report of a damaged backup registry.
type registryCheck struct {
	File  string `json:"file"`
	Error string `json:"error"`
	// unreadable: it is there but cannot be read (not reported apart in
	// JSON: error says so).
	unreadable bool
}

// printRegistry prints admin check's line about the backup registry,
// nothing when it reads.
func printRegistry(w io.Writer, r *registryCheck) {
	switch {
	case r == nil:
	case r.unreadable:
		fmt.Fprintf(w, "  unreadable   %s (backup registry): %s; fix its permissions or disk: until then deletions are owed to every backup (backups-owed.jsonl) and no backup can be taken or restored\n",
			r.File, r.Error)
	default:
		fmt.Fprintf(w, "  damaged      %s (backup registry): %s; the next backup or customer deletion sets it aside and rebuilds it\n",
			r.File, r.Error)
	}
}

// registryDamage is the report of err, privacy.Backups.CheckRegistry's
// answer: nil when the registry reads.
func registryDamage(err error) *registryCheck {
	if err == nil {
		return nil
	}
	var unreadable *privacy.UnreadableRegistryError
	return &registryCheck{File: privacy.RegistryFile, Error: err.Error(), unreadable: errors.As(err, &unreadable)}
}

func printCheck(w io.Writer, st *engine.CheckStats, repair bool) {
	tenants := "tenants"
	if st.Tenants == 1 {
		tenants = "tenant"
	}
	fmt.Fprintf(w, "%d %s, %d records checked: %d damaged", st.Tenants, tenants, st.Records, len(st.Damaged))
	if repair {
		fmt.Fprintf(w, ", %d moved to quarantine", st.Repaired)
	}
	fmt.Fprintf(w, "; %d already in quarantine\n", len(st.Quarantined))
	for _, d := range st.Damaged {
		fmt.Fprintf(w, "  damaged      %s %s %s: %s (%d bytes)\n", d.Tenant, d.Table, d.Key, d.Error, d.Bytes)
	}
	for _, d := range st.Quarantined {
		fmt.Fprintf(w, "  quarantined  %s %s %s since %s: %s (%d bytes)\n", d.Tenant, d.Table, d.Key, d.At.Format("2006-01-02T15:04:05Z"), d.Error, d.Bytes)
	}
	if len(st.Damaged) > st.Repaired {
		fmt.Fprintln(w, "run again with --repair to move the damaged records to quarantine")
	}
}
