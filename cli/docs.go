package cli

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newDocsCmd is "coupond docs": documentation generated from the commands
// themselves (hidden: for the README, whose configuration reference
// TestREADMEFlags keeps equal to "coupond docs flags").
func newDocsCmd() *cobra.Command {
	docs := &cobra.Command{Use: "docs", Short: "Documentation generated from the commands", Hidden: true}
	docs.AddCommand(&cobra.Command{
		Use:   "flags",
		Short: "Print every command's flags and environment variables as Markdown",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeFlagDocs(cmd.OutOrStdout(), cmd.Root())
		},
	})
	return docs
}

// envNote is the environment variable some usages name, as " (env
// COUPOND_X)" or, inside a parenthesis, as "; env COUPOND_X": the table
// has a column for it. The parenthesis that holds it stays: "(default
// http://ADDR; env COUPOND_BASE_URL)" becomes "(default http://ADDR)".
var envNote = regexp.MustCompile(` ?\(env COUPOND_[A-Z_]+\)|; ?env COUPOND_[A-Z_]+`)

// writeFlagDocs writes one Markdown table of every command's own flags, in
// command-path order: command, flag, default, environment variable and
// description. A persistent flag appears under the command that defines it
// and applies to its subcommands too.
func writeFlagDocs(w io.Writer, root *cobra.Command) error {
	fmt.Fprintln(w, "Every flag but `admin tenant delete`'s `--confirm` (typed, never read from the environment) can also be set by its environment variable (a flag given on the command line wins).")
	fmt.Fprintln(w, "A flag of a command applies to its subcommands too.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| command | flag | default | environment | description |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), "coupond"), " ")
		if path == "" {
			path = "(all)"
		}
		add := func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			def := f.DefValue
			switch {
			case def == "" || def == "[]" || f.Annotations[keepsSetting] != nil:
				def = ""
			case f.Value.Type() == "bool" && def == "false":
				def = ""
			default:
				def = "`" + def + "`"
			}
			env := "`" + envVar(f.Name) + "`"
			if f.Annotations[typedOnly] != nil {
				env = ""
			}
			usage := strings.ReplaceAll(envNote.ReplaceAllString(f.Usage, ""), "|", `\|`)
			fmt.Fprintf(w, "| %s | `--%s` | %s | %s | %s |\n", path, f.Name, def, env, usage)
		}
		c.LocalNonPersistentFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return nil
}
