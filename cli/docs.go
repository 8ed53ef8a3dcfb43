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

// envNote is the "(env COUPOND_X)" some usages carry: the table has a
// column for it.
var envNote = regexp.MustCompile(`;? ?\(?env COUPOND_[A-Z_]+\)?`)

// writeFlagDocs writes one Markdown table per command that has flags of
// its own, in command-path order: flag, default, environment variable and
// description. Persistent flags appear under the command that defines them.
func writeFlagDocs(w io.Writer, root *cobra.Command) error {
	fmt.Fprintln(w, "Every flag can also be set by its environment variable (a flag given on the command line wins).")
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return nil
		}
		var rows []string
		add := func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			def := f.DefValue
			switch {
			case def == "" || def == "[]":
				def = ""
			case f.Value.Type() == "bool" && def == "false":
				def = ""
			default:
				def = "`" + def + "`"
			}
			env := "COUPOND_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			usage := strings.ReplaceAll(envNote.ReplaceAllString(f.Usage, ""), "|", `\|`)
			rows = append(rows, fmt.Sprintf("| `--%s` | %s | `%s` | %s |", f.Name, def, env, usage))
		}
		c.LocalNonPersistentFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		if len(rows) > 0 {
			fmt.Fprintf(w, "\n#### `%s`\n\n| flag | default | environment | description |\n|---|---|---|---|\n%s\n", c.CommandPath(), strings.Join(rows, "\n"))
		}
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root)
}
