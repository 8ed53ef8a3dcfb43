package cli

// "admin backups" and "admin backups prune": the operator's view of the
// registered backups (privacy.Backups.List, Prune). "admin backup --out"
// takes one; a command of its own lists them, as "admin deletions" does
// for deletions, rather than a "list" under "admin backup", which would
// make that command, with its required --out, both an action and a group.

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/privacy"
)

// backupsCmd is "admin backups": every registered backup, one a line,
// sorted by the time taken. A registry that cannot be used is reported
// and its copy listed, exit 1, as "admin check" does; a backup that
// restore refuses and only the operator can clear (needsOperator) also
// makes it exit 1, with or without --verify.
func backupsCmd(a *app) *cobra.Command {
	var verify bool
	cmd := a.envCmd("backups", "List the registered backups: taken, expiry (30-day retention), state, size, ledger and owed deletions", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string, e *env) error {
			l, err := e.svc.backups.List(cmd.Context(), verify, progressWriter(cmd))
			if err != nil {
				return err
			}
			registry := registryDamage(l.RegistryErr)
			if jsonFlag(cmd) {
				if err := printJSON(cmd.OutOrStdout(), backupsJSON(l, registry)); err != nil {
					return err
				}
			} else if err := printBackups(cmd, l, registry); err != nil {
				return err
			}
			if registry != nil || l.OwedErr != nil || needsOperator(l.Backups) {
				return &ExitError{Code: 1}
			}
			return nil
		})
	cmd.Long = "List the registered backups: taken, expiry (30-day retention), state, size, ledger and owed deletions.\n\n" +
		"Exits 1 when a listed backup is damaged, damaged-manifest or incomplete (one restore refuses and that stays until " +
		"you look at it and remove it: 'admin backups prune' leaves such a backup too, exit 1), or when the registry or the " +
		"owed deletions cannot be read; 0 otherwise (complete, being-taken, missing, past-retention). So a scheduled " +
		"'admin backups --verify' alerts on any backup that could not be restored."
	cmd.Flags().BoolVar(&verify, "verify", false, "check every file of each backup against its manifest's checksum, as restore does (reads every file)")
	cmd.AddCommand(backupsPruneCmd(a))
	return cmd
}

// needsOperator reports whether a listed backup is one restore refuses
// and that stays so until the operator removes it
// (privacy.BackupInfo.NeedsOperator): "admin backups" then exits 1, so
// that a scheduled "admin backups --verify" can alert; it exited 0 for an
// incomplete one while prune exited 1 for it.
func needsOperator(bs []privacy.BackupInfo) bool {
	return slices.ContainsFunc(bs, privacy.BackupInfo.NeedsOperator)
}

// backupsJSON is "admin backups --json": the backups, the registry's
// damage as "admin check" reports it (damaged_registry, null when it
// reads), the file they were listed from, and why the owed deletions
// could not all be counted.
func backupsJSON(l *privacy.BackupList, registry *registryCheck) map[string]any {
	from := privacy.RegistryFile
	switch {
	case l.FromCopy:
		from = privacy.RegistryCopyFile
	case registry != nil:
		from = ""
	}
	out := map[string]any{"backups": l.Backups, "damaged_registry": registry, "listed_from": from}
	if l.OwedErr != nil {
		out["owed_error"] = l.OwedErr.Error()
	}
	return out
}

// printBackups prints the table of "admin backups", then what is wrong
// with the registry or the owed deletions.
func printBackups(cmd *cobra.Command, l *privacy.BackupList, registry *registryCheck) error {
	err := printList(cmd, nil, l.Backups, "DIR\tTAKEN\tEXPIRES\tSTATE\tSIZE\tLEDGER\tOWED\tNOTE", func(b privacy.BackupInfo) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s", b.Dir, b.TakenAt.Format(time.RFC3339), b.ExpiresAt.Format(time.RFC3339),
			b.State, megabytes(b.Bytes), b.LedgerEntries, b.OwedDeletions, b.Note)
	})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	printRegistry(w, registry)
	switch {
	case l.FromCopy:
		fmt.Fprintf(w, "  the backups above are those of its copy, %s\n", privacy.RegistryCopyFile)
	case registry != nil:
		fmt.Fprintf(w, "  its copy, %s, cannot be read either: no backup listed\n", privacy.RegistryCopyFile)
	case len(l.Backups) == 0:
		fmt.Fprintln(w, "no backup registered ('admin backup --out DIR' takes one)")
	}
	if l.OwedErr != nil {
		fmt.Fprintf(w, "  deletions owed to backups: %v\n", l.OwedErr)
	}
	return nil
}

// megabytes is n bytes as the backup commands print sizes: in MB, in GB
// from 10 GB.
func megabytes(n int64) string {
	if n >= 10e9 {
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// backupsPruneCmd is "admin backups prune": remove the backups past
// retention (privacy.Backups.Prune). It exits 1 when one past retention
// was left in place (no manifest, a removal that failed): an operator's
// to look at.
func backupsPruneCmd(a *app) *cobra.Command {
	var dryRun bool
	cmd := a.envCmd("prune [--dry-run]", "Remove the backups past retention (directories and registrations); never one within retention", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string, e *env) error {
			pruned, err := e.svc.backups.Prune(dryRun)
			if err != nil {
				return err
			}
			var freed int64
			left := 0
			for _, p := range pruned {
				freed += p.Bytes
				if p.Outcome == privacy.PruneLeft || p.Outcome == privacy.PruneFailed {
					left++
				}
			}
			if jsonFlag(cmd) {
				err = printJSON(cmd.OutOrStdout(), map[string]any{"dry_run": dryRun, "backups": pruned, "bytes_freed": freed})
			} else {
				printPruned(cmd.OutOrStdout(), pruned, freed, dryRun)
			}
			if err == nil && left > 0 {
				return &ExitError{Code: 1}
			}
			return err
		})
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only show what would be removed; change nothing")
	return cmd
}

// printPruned prints what "admin backups prune" did, one backup a line,
// and the total.
func printPruned(w io.Writer, pruned []privacy.Pruned, freed int64, dryRun bool) {
	verb := map[string]string{privacy.PruneRemoved: "removed", privacy.PruneUnregistered: "unregistered", privacy.PruneLeft: "left", privacy.PruneFailed: "failed"}
	if dryRun {
		verb = map[string]string{privacy.PruneRemoved: "would remove", privacy.PruneUnregistered: "would unregister", privacy.PruneLeft: "would leave"}
	}
	removed := 0
	for _, p := range pruned {
		if p.Outcome == privacy.PruneRemoved {
			removed++
		}
		line := fmt.Sprintf("%-16s %s (taken %s, expired %s)", verb[p.Outcome], p.Dir, p.TakenAt.Format(time.RFC3339), p.ExpiresAt.Format(time.RFC3339))
		if p.Outcome == privacy.PruneRemoved {
			line += " " + megabytes(p.Bytes)
		}
		if p.Reason != "" {
			line += ": " + p.Reason
		}
		fmt.Fprintln(w, line)
	}
	noun := "backups"
	if removed == 1 {
		noun = "backup"
	}
	if dryRun {
		fmt.Fprintf(w, "would remove %d %s past retention, %s (dry run: nothing changed)\n", removed, noun, megabytes(freed))
		return
	}
	fmt.Fprintf(w, "removed %d %s past retention, %s\n", removed, noun, megabytes(freed))
}
