package cli

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

func abuseCmd(a *app) *cobra.Command {
	return groupCmd("abuse", "Abuse escalation: show steps, clear a credential, release quarantined events", abuseShowCmd(a), abuseClearCmd(a), abuseReleaseCmd(a))
}

// abuseShowCmd prints the escalation state of a tenant's credentials.
func abuseShowCmd(a *app) *cobra.Command {
	return a.tenantCmd("show --tenant ID", "Escalation state and recorded steps of the tenant's credentials", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		tenant := t.ID
		states := viewAbuseStates(e.svc.api.AbuseStates(tenant))
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), map[string]any{"tenant": tenant, "credentials": states, "quarantined_requests": e.svc.api.QuarantineCount(tenant)})
		}
		if len(states) == 0 {
			fmt.Fprintln(cmd.OutOrStdout(), "no escalation recorded")
		}
		for _, st := range states {
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", st.ClientID, st.Level)
			for _, s := range st.Steps {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s  %-11s %s\n", s.At.Format(time.RFC3339), s.Level, s.Reason)
			}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "quarantined event requests: %d\n", e.svc.api.QuarantineCount(tenant))
		return nil
	})
}

// abuseView is the admin view of a credential's escalation state: its level
// by the steps' names (normal, aviso, freno, cuarentena, suspension), as
// each step records it, never the number the state is stored with.
type abuseView struct {
	ClientID string             `json:"client_id"`
	Level    string             `json:"level"`
	Steps    []server.AbuseStep `json:"steps"`
}

func viewAbuse(st server.AbuseState) abuseView {
	steps := st.Steps
	if steps == nil {
		steps = []server.AbuseStep{}
	}
	return abuseView{ClientID: st.ClientID, Level: st.LevelName(), Steps: steps}
}

// viewAbuseStates returns the views of states ordered by client id (the
// server keeps them in a map: no order of its own); never nil.
func viewAbuseStates(states []server.AbuseState) []abuseView {
	views := make([]abuseView, 0, len(states))
	for _, st := range states {
		views = append(views, viewAbuse(st))
	}
	slices.SortFunc(views, func(a, b abuseView) int { return cmp.Compare(a.ClientID, b.ClientID) })
	return views
}

// abuseClearCmd resets a credential to normal.
func abuseClearCmd(a *app) *cobra.Command {
	cmd := a.envCmd("clear CLIENT_ID", "Reset a credential to normal (lifts brake, quarantine of new events and suspension)", cobra.ExactArgs(1), func(cmd *cobra.Command, args []string, e *env) error {
		if _, ok := e.db.Credential(args[0]); !ok {
			return fmt.Errorf("no credential %q", args[0])
		}
		st, err := e.svc.api.ClearAbuse(args[0], e.now())
		if errors.Is(err, server.ErrNoAbuseState) {
			return fmt.Errorf("credential %s is not escalated", args[0])
		}
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), viewAbuse(*st))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "credential %s cleared\n", args[0])
		return nil
	})
	return cmd
}

// abuseReleaseCmd applies a tenant's quarantined events.
func abuseReleaseCmd(a *app) *cobra.Command {
	return a.tenantCmd("release --tenant ID", "Apply the tenant's quarantined events", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		acc, dup, err := e.svc.api.QuarantineRelease(t.ID, t.Now(e.now()))
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), map[string]int{"accepted": acc, "duplicates": dup})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "released: %d events applied, %d duplicates\n", acc, dup)
		return nil
	})
}
