// Package cli builds coupond's commands. It is the one place where the store,
// engine, batch runner and server are constructed and wired by hand.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// Version information, set at build time with -ldflags.
var (
	version = "dev"
	commit  = "unknown"
)

// ExitError carries a process exit code.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Run executes coupond with args (without the program name), reading stdin
// and writing stdout and stderr. It is what main calls; tests call it in
// process.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return run(ctx, time.Now, args, stdin, stdout, stderr)
}

// run is Run with the clock the data dir's services read (the engine's,
// the batch runner's, the deletion worker's: app.now): tests that open a
// data dir made on another day run it at that day.
func run(ctx context.Context, now func() time.Time, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{args: args, now: now}
	root := newRoot(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	// cobra adds "completion" as it executes; added here, once its output
	// is set (it keeps the one it finds), strictGroups refuses "completion
	// bsh" too, which printed the help and exited 0.
	root.InitDefaultCompletionCmd()
	strictGroups(root)
	return a.envSource(root.ExecuteContext(ctx))
}

// envSource adds to an error about a flag ("--log-level: want …") the
// environment variable that set it, when one did: the operator, not
// finding the flag on the command line, was left to guess.
func (a *app) envSource(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, name := range a.fromEnv {
		rest, ok := strings.CutPrefix(msg, "--"+name)
		if ok && (rest == "" || strings.ContainsRune(" :=", rune(rest[0]))) {
			return fmt.Errorf("%w (--%s came from %s)", err, name, envVar(name))
		}
	}
	return err
}

// app is the state shared by the commands of one invocation.
type app struct {
	args    []string
	dataDir string
	// now is the clock of the services opened on the data dir (Run:
	// time.Now).
	now func() time.Time
	// live is set when the commands run inside "serve" on behalf of an admin
	// client connected to the admin socket: they then act on the running
	// process's store instead of opening it.
	live *env
	// fromEnv are the flags applyEnv set from their variables.
	fromEnv []string
	// clientTerminal is, with live, whether the admin client's stdout is a
	// terminal (the command's own output is the socket).
	clientTerminal bool
	// clientPID is, with live, the admin client's process id as the
	// socket's peer credentials give it (0 or less: unknown).
	clientPID int
}

// terminal reports whether cmd's output reaches a terminal, directly or
// through the admin socket.
func (a *app) terminal(cmd *cobra.Command) bool {
	if a.live != nil {
		return a.clientTerminal
	}
	return isTerminal(cmd.OutOrStdout())
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "coupond",
		Short:         "Coupon decision engine: decides, logs propensities, learns, evaluates",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.live != nil {
				return nil // serve's environment is not the admin client's: its flags came forwarded
			}
			set, err := applyEnv(cmd.Flags())
			for _, arg := range set {
				name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
				a.fromEnv = append(a.fromEnv, name)
			}
			// Forwarded through the admin socket with the rest, in front:
			// after a "--" they would be arguments.
			a.args = append(set, a.args...)
			if err != nil {
				return err
			}
			return checkDataDirFlag(cmd, a.dataDir)
		},
	}
	root.PersistentFlags().StringVar(&a.dataDir, "data-dir", "./coupond-data", "data directory (env COUPOND_DATA_DIR); serve, admin tenant create and admin restore create a missing one, other admin commands refuse one that is missing or holds no coupond data")
	root.AddCommand(newServeCmd(a), newAdminCmd(a), newVersionCmd(), newLabCmd(), newBenchCmd(), newWebhookCmd(), newDocsCmd())
	root.SetFlagErrorFunc(flagError)
	strictGroups(root)
	namedArgs(root)
	return root
}

// checkDataDirFlag refuses an empty --data-dir (or COUPOND_DATA_DIR set
// empty) for the commands that use the data dir, serve and admin's: it
// read as the working directory, or failed with "mkdir : no such file or
// directory".
func checkDataDirFlag(cmd *cobra.Command, dataDir string) error {
	path := strings.Fields(cmd.CommandPath())
	if dataDir != "" || len(path) < 2 || (path[1] != "serve" && path[1] != "admin") {
		return nil
	}
	return fmt.Errorf("--data-dir: want a directory, got an empty value (from the flag or COUPOND_DATA_DIR)")
}

// applyEnv sets every flag not given on the command line from its
// environment variable COUPOND_<FLAG> (dashes to underscores): flags win;
// a typedOnly flag has none.
// It returns the flags it set as arguments ("--flag=value").
func applyEnv(fs *pflag.FlagSet) ([]string, error) {
	var err error
	var set []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil || f.Annotations[typedOnly] != nil {
			return
		}
		name := envVar(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = valueError(e)
				if err == e {
					err = fmt.Errorf("%s: %w", name, e)
				}
			}
			set = append(set, "--"+f.Name+"="+v)
		}
	})
	return set, err
}

// typedOnly annotates a flag that is never read from the environment: a
// confirmation the operator types on the command line (admin tenant
// delete's --confirm), which a variable left set would otherwise give.
const typedOnly = "typed-only"

// envVar is the environment variable of the flag name: COUPOND_<FLAG>,
// dashes to underscores.
func envVar(name string) string {
	return "COUPOND_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ExitCode maps an error from Run to a process exit code.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := leafCmd("version", "Print version, commit, policy algorithm and store format", func(cmd *cobra.Command) error {
		v := map[string]any{"version": version, "commit": commit, "policy": policy.Algorithm(), "store_format": store.Format}
		if asJSON {
			return printJSON(cmd.OutOrStdout(), v)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "coupond %s (commit %s)\npolicy: %s\nstore format: %d (reads stores of formats up to it)\n",
			version, commit, policy.Algorithm(), store.Format)
		return nil
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	return cmd
}
