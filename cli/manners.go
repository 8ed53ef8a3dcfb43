package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictGroups makes every command that only groups subcommands refuse an
// unknown subcommand: cobra's default prints the help and exits 0, so a
// typo ("admin tenant lst") looked like success. Without arguments the
// group prints its help.
func strictGroups(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strictGroups(c)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2 // cobra sets it on the root only
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[groupAnnotation] = "true"
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

// groupAnnotation marks the commands strictGroups made refuse an unknown
// subcommand, so that flagError can tell a mistyped subcommand from a
// mistyped flag.
const groupAnnotation = "coupond-group"

// unknownCommand is the error for an unknown subcommand of cmd, with
// cobra's suggestions.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return fmt.Errorf("%s\n\nRun '%s --help' for usage", msg, cmd.CommandPath())
}

// namedArgs makes a wrong count of positional arguments an error that
// names the arguments the command takes, from its usage line: cobra's
// "accepts 1 arg(s), received 0" named none, so "admin tenant create" with
// its id forgotten did not say what was missing.
func namedArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		namedArgs(c)
	}
	check, names := cmd.Args, argNames(cmd.Use)
	if check == nil || len(names) == 0 {
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			return fmt.Errorf("want %s (%s), got %d (usage: %s)", plural(len(names), "argument"), strings.Join(names, " "), len(args), c.UseLine())
		}
		return nil
	}
}

// plural is "1 argument", "2 arguments".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// argNames are the positional arguments a usage line names ("rotate
// CLIENT_ID [--grace 24h]": CLIENT_ID): its words after the command's name
// but flags, their values and what brackets hold.
func argNames(use string) []string {
	var names []string
	words := strings.Fields(use)
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case strings.HasPrefix(w, "["):
			for !strings.HasSuffix(words[i], "]") && i+1 < len(words) {
				i++
			}
		case strings.HasPrefix(w, "-"):
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") && !strings.HasPrefix(words[i+1], "[") {
				i++ // the flag's value
			}
		default:
			names = append(names, w)
		}
	}
	return names
}

// flagError adds the closest flag name to cobra's unknown-flag errors. On a
// group given an argument before the flag, the argument is a mistyped
// subcommand ("admin evalute --tenant acme"): cobra, which parses the
// group's flags before it looks at the argument, said "unknown flag:
// --tenant", blaming the flag the subcommand meant would have taken; the
// error then names the subcommand, with suggestions.
func flagError(cmd *cobra.Command, err error) error {
	if args := cmd.Flags().Args(); cmd.Annotations[groupAnnotation] != "" && len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	if plain := valueError(err); plain != err {
		return fmt.Errorf("%w\n\nRun '%s --help' for usage", plain, cmd.CommandPath())
	}
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return fmt.Errorf("%w\n\nRun '%s --help' for usage", err, cmd.CommandPath())
	}
	best, bestD := "", 3 // suggest within an edit distance of 2
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return fmt.Errorf("%w\n\nDid you mean this?\n\t--%s", err, best)
	}
	return fmt.Errorf("%w\n\nRun '%s --help' for usage", err, cmd.CommandPath())
}

// valueWant is what valueError says a flag of each pflag value type wants.
var valueWant = map[string]string{
	"bool": "true or false", "int": "a whole number", "int64": "a whole number", "uint": "a whole number",
	"uint64": "a whole number", "float64": "a number",
}

// valueError rewrites pflag's refusal of a value that does not parse as its
// flag's type ("invalid argument \"yes\" for \"--json\" flag:
// strconv.ParseBool: parsing \"yes\": invalid syntax") in the words of
// coupond's own flag checks, naming the flag first so that envSource can add
// the variable it came from: --json: want true or false, got "yes". Any
// other error is returned as it is.
func valueError(err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	want, ok := valueWant[ive.GetFlag().Value.Type()]
	if !ok {
		return err
	}
	return fmt.Errorf("--%s: want %s, got %q", ive.GetFlag().Name, want, ive.GetValue())
}

// editDistance is the Levenshtein distance of a and b (flag names: short).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// useColor reports whether output to w may carry ANSI colours: only on a
// terminal, and never when NO_COLOR is set and not empty (no-color.org).
func useColor(w io.Writer) bool {
	return isTerminal(w) && os.Getenv("NO_COLOR") == ""
}

// flagMin is an integer flag's value and the least it may be.
type flagMin struct {
	flag     string
	v, least int
}

// checkAtLeast returns an error naming the first flag below its least.
func checkAtLeast(fs ...flagMin) error {
	for _, c := range fs {
		if c.v < c.least {
			return fmt.Errorf("--%s: want at least %d, got %d", c.flag, c.least, c.v)
		}
	}
	return nil
}

// flagMax is an integer flag's value and the most it may be.
type flagMax struct {
	flag    string
	v, most int
}

// checkAtMost returns an error naming the first flag above its most.
func checkAtMost(fs ...flagMax) error {
	for _, c := range fs {
		if c.v > c.most {
			return fmt.Errorf("--%s: want at most %d, got %d", c.flag, c.most, c.v)
		}
	}
	return nil
}
