package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// tenantSweepGrace is how long, inside serve, a tenant's deletion waits
// at least after its mark before it sweeps the tenant's key space again
// and compacts it (privacy.TenantHooks.Grace): a request that had passed
// authentication before the tenant was hidden ends within serve's read
// timeout (30 s by default) and its handler's time.
const tenantSweepGrace = time.Minute

// tenantGrace is the sweep's grace of a serve whose --read-timeout is
// readTimeout: tenantSweepGrace, or the read timeout and half a minute for
// the handler when that is longer, since a request authenticated before
// the mark may send the last of its body until its read timeout (and
// what its answer leaves, such as its 401's console counter, is written
// then).
func tenantGrace(readTimeout time.Duration) time.Duration {
	return max(tenantSweepGrace, readTimeout+tenantSweepGrace/2)
}

// tenantHooks are a tenant deletion's hooks of svc (privacy.TenantHooks):
// its batch runner's job and result files, its webhook delivery pass, the
// API server's memory.
func tenantHooks(svc *services, grace time.Duration) privacy.TenantHooks {
	stop := func(ctx context.Context, tenant string) error {
		if err := svc.batch.CancelTenant(ctx, tenant); err != nil {
			return err
		}
		// An attempt ending after Forget would report the tenant's
		// /metrics series again.
		return svc.webhooks.CancelTenant(ctx, tenant)
	}
	return privacy.TenantHooks{Stop: stop, Forget: svc.api.ForgetTenant,
		RemoveFiles: svc.batch.RemoveTenantResults, Grace: grace}
}

// tenantDeletionView is the admin view of a tenant's deletion.
type tenantDeletionView struct {
	Tenant      string     `json:"tenant"`
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	RequestedAt time.Time  `json:"requested_at"`
	By          string     `json:"by"`
	ErasedAt    *time.Time `json:"erased_at,omitempty"`
	DeletedAt   *time.Time `json:"deleted_at,omitempty"`
}

func viewTenantDeletion(d *store.TenantDeletion) tenantDeletionView {
	return tenantDeletionView{Tenant: d.Tenant, State: d.State, CreatedAt: d.CreatedAt, RequestedAt: d.RequestedAt,
		By: d.By, ErasedAt: d.ErasedAt, DeletedAt: d.DeletedAt}
}

func tenantDeleteCmd(a *app) *cobra.Command {
	var confirm string
	cmd := a.envCmd("delete ID --confirm ID", "Delete a tenant and all of its data, in the store, its files, memory and backups (--confirm repeats its id)",
		cobra.ExactArgs(1), func(cmd *cobra.Command, args []string, e *env) error {
			return deleteTenant(cmd, a, e, args[0])
		})
	cmd.Flags().StringVar(&confirm, "confirm", "", "the tenant's id again, typed: the deletion cannot be undone (never read from the environment)")
	_ = cmd.Flags().SetAnnotation("confirm", typedOnly, []string{"true"})
	// Checked before the data dir is opened or the command forwarded.
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if confirm == args[0] {
			return nil
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "coupond: refusing to delete tenant %q: --confirm must repeat its id (--confirm %s); "+
			"the deletion removes all of its data and cannot be undone\n", args[0], args[0])
		return &ExitError{Code: 2}
	}
	return cmd
}

// deleteTenant deletes tenant id and prints its tombstone; inside serve the
// deletion worker finishes it (the sweep waits services.tenantGrace), with
// serve stopped it is done when the command returns. Its line in the admin
// audit log is withEnv's, as every admin command's.
func deleteTenant(cmd *cobra.Command, a *app, e *env, id string) error {
	grace := time.Duration(0)
	if a.live != nil {
		grace = e.svc.tenantGrace
	}
	hooks := deletionHooks(e.svc, false)
	hooks.Tenant = tenantHooks(e.svc, grace)
	d, err := e.svc.privacy.DeleteTenant(cmd.Context(), id, fmt.Sprintf("uid %d", os.Getuid()), hooks)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no tenant %q", id)
	}
	if err != nil {
		if d != nil {
			return fmt.Errorf("tenant %s: deletion %s, not finished (the deletion worker of serve takes it further, or run the command again): %w", id, d.State, err)
		}
		return err
	}
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), viewTenantDeletion(d))
	}
	w := cmd.OutOrStdout()
	switch d.State {
	case store.TenantDeleted:
		fmt.Fprintf(w, "tenant %s deleted: its records, credentials, batch result files and in-memory state are gone; backups re-apply the deletion at restore\n", id)
	default:
		fmt.Fprintf(w, "tenant %s %s: its records, credentials and batch result files are gone and its tokens refused; "+
			"serve's deletion worker compacts them out of the store's files in about %s ('admin tenant deletions' shows when)\n", id, d.State, grace)
	}
	return nil
}

func tenantDeletionsCmd(a *app) *cobra.Command {
	return a.envCmd("deletions", "List the tenants deleted or being deleted (who asked, when, how far it went)", cobra.NoArgs,
		func(cmd *cobra.Command, _ []string, e *env) error {
			ds, err := e.svc.privacy.TenantDeletions()
			if err != nil {
				return err
			}
			views := []tenantDeletionView{}
			for i := range ds {
				views = append(views, viewTenantDeletion(&ds[i]))
			}
			return printList(cmd, views, views, "TENANT\tSTATE\tREQUESTED\tBY\tDELETED", func(v tenantDeletionView) string {
				done := "-"
				if v.DeletedAt != nil {
					done = v.DeletedAt.Format(time.RFC3339)
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", v.Tenant, v.State, v.RequestedAt.Format(time.RFC3339), v.By, done)
			})
		})
}
