package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/store"
)

func keysCmd(a *app) *cobra.Command {
	return groupCmd("keys", "The installation's signing keys: rotate them after a leak", keysRotateCmd(a))
}

// Why "admin keys rotate" refuses the decision and hash keys: each signs
// or keys what the store keeps, and a new one would void it for good.
const (
	decisionNotRotated = "the decision key is not rotated: it signs the decision_id of every decision awaiting its confirmation " +
		"and its events (CUPON_RECIBIDO, redemptions), which a new key would refuse, losing their rewards"
	hashNotRotated = "the hash key is not rotated: it keys the customer hashes that deletion records and backup ledgers are matched by, " +
		"so a new key would stop a restored backup from erasing the customers deleted since"
)

// keysRotateCmd is "admin keys rotate token url": new token and/or URL
// keys (store.RotateSecrets), in force at once in the running server. The
// keys are named by arguments, not flags: a flag named --token would have
// the admin audit log take the next argument for a secret (redactArgs).
func keysRotateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate token|url...",
		Short: "Replace the access tokens' and/or result links' signing key (after keys.json leaked)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRotation(args)
			if err != nil {
				return err
			}
			return a.withEnv(cmd, func(e *env) error {
				names, err := e.rotateKeys(r)
				if err != nil {
					return err
				}
				return printRotation(cmd, names, e.now().UTC())
			})
		},
	}
	return cmd
}

// parseRotation reads the keys "admin keys rotate" is given: token, url, or
// both; the decision and hash keys are refused, saying why.
func parseRotation(args []string) (store.Rotation, error) {
	var r store.Rotation
	for _, name := range args {
		switch name {
		case "token":
			r.Token = true
		case "url":
			r.URL = true
		case "decision":
			return r, errors.New(decisionNotRotated)
		case "hash":
			return r, errors.New(hashNotRotated)
		default:
			return r, fmt.Errorf("no key %q: name token (access tokens), url (result links), or both", name)
		}
	}
	return r, nil
}

// rotateKeys replaces the keys r names (store.RotateSecrets) and puts them
// in force in e's server at once (inside serve; for a command run without
// one, in the services it built, which end with it): tokens and result
// links signed with a replaced key are refused from then on. It logs the
// rotation, naming the keys and never their bytes, and returns the names.
func (e *env) rotateKeys(r store.Rotation) ([]string, error) {
	var names []string
	if r.Token {
		names = append(names, "token")
	}
	if r.URL {
		names = append(names, "url")
	}
	next, err := e.db.RotateSecrets(e.dataDir, r)
	if next != nil {
		e.svc.api.SetTokenKey(next.Token)
		if serr := e.svc.batch.Signer.SetKey(next.URL); serr != nil {
			return nil, serr
		}
		e.log.Warn().Strs("keys", names).Bool("settled", err == nil).Msg("signing keys rotated: tokens and result links signed before are refused")
	}
	if err != nil {
		if errors.Is(err, store.ErrRotationUnsettled) {
			return names, nil // in force now, on disk and at the next start
		}
		return nil, fmt.Errorf("keys not rotated: %w", err)
	}
	return names, nil
}

// printRotation prints what "admin keys rotate" did and what the
// integrators see.
func printRotation(cmd *cobra.Command, names []string, at time.Time) error {
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), map[string]any{"rotated": names, "rotated_at": at})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "rotated: %s key(s), in force now\n", strings.Join(names, ", "))
	for _, n := range names {
		switch n {
		case "token":
			fmt.Fprintln(w, "  every access token issued before is refused (401 no_autenticado): clients ask POST /v1/token for a new one")
		case "url":
			fmt.Fprintln(w, "  every resultado_url issued before is refused (404): GET /v1/lotes-decision/{job_id} gives a new one")
		}
	}
	fmt.Fprintln(w, "backups taken before keep the old keys: restoring one brings them back (rotate again after it)")
	return nil
}
