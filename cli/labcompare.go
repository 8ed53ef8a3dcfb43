package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/engine/lab"
)

func newLabCompareCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Compare two many-worlds runs world by world (B against A)",
		Long: `compare reads two outputs of coupond lab --worlds N --json run on the same seeds (say, the
defaults and a --set probe) and compares B against A world by world: the mean difference of the
last third's capture over the worlds not flat in A (each clipped at -1) with its standard error,
how many worlds moved up or down by more than 0.02, the mean difference of the whole run's gain
over never-send (testing weeks included) with its standard error, the passes and the worlds above
never-send in each, and the worlds that moved. A change moves every world by its random path as well
as by itself: judge it on the means and their errors, not on counts that move a world at a time.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := readWorlds(args[0])
			if err != nil {
				return err
			}
			b, err := readWorlds(args[1])
			if err != nil {
				return err
			}
			c, err := lab.Compare(a, b)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), jsonSafe(c))
			}
			return printComparison(cmd.OutOrStdout(), args[0], args[1], c)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	return cmd
}

// readWorlds reads the worlds of a coupond lab --worlds --json output.
func readWorlds(path string) ([]*lab.WorldReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out worldsOutput
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: not the output of coupond lab --worlds --json: %w", path, err)
	}
	if len(out.Worlds) == 0 {
		return nil, fmt.Errorf("%s: no worlds (the output of coupond lab --worlds --json is wanted)", path)
	}
	for i, w := range out.Worlds {
		if w == nil {
			return nil, fmt.Errorf("%s: world %d is null (the output of coupond lab --worlds --json is wanted)", path, i+1)
		}
	}
	return out.Worlds, nil
}

// printComparison prints c, B (file b) against A (file a).
func printComparison(w io.Writer, a, b string, c lab.Comparison) error {
	fmt.Fprintf(w, "B = %s against A = %s, %d worlds paired by seed\n", b, a, c.Worlds)
	fmt.Fprintf(w, "last third, capture (worlds not flat in A, each clipped at -1): B - A = %s ± %s over %d; B higher by over 0.02 in %d, lower in %d\n",
		signed(c.CaptureDiff, 3), f3(c.CaptureSE), c.CaptureWorlds, c.Better, c.Worse)
	fmt.Fprintf(w, "whole run, gain over never-send: B - A = %s ± %s points (median world: A %s, B %s)\n",
		signed(100*c.WholeDiff, 2), fmt.Sprintf("%.2f", 100*c.WholeSE), pctN(c.WholeMedianA, 2), pctN(c.WholeMedianB, 2))
	fmt.Fprintf(w, "passes %d -> %d; above never-send over the last third %d -> %d, above greedy %d -> %d\n",
		c.PassA, c.PassB, c.AboveNeverA, c.AboveNeverB, c.AboveGreedyA, c.AboveGreedyB)
	fmt.Fprintf(w, "median capture %s -> %s; median vs the observable oracle %s -> %s; the model's effect bias (MXN) %s -> %s\n",
		f3(c.MedianA), f3(c.MedianB), f3(c.ObsMedianA), f3(c.ObsMedianB), signed(c.EffectBiasA, 2), signed(c.EffectBiasB, 2))
	fmt.Fprintf(w, "separable worlds not above never-send %d -> %d; of them, none of whose tests could have opened %d -> %d\n",
		c.StuckA, c.StuckB, c.UnopenableA, c.UnopenableB)
	if len(c.Changed) == 0 {
		fmt.Fprintln(w, "no world moved by more than 0.02")
		return nil
	}
	fmt.Fprintln(w, "\nworlds that moved (capture by more than 0.02 where not flat, or pass):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SEED\tCAPTURE A\tCAPTURE B\tWHOLE RUN A\tWHOLE RUN B\tPASS A\tPASS B\tFLAT\t")
	for _, m := range c.Changed {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Seed, f3(m.CaptureA), f3(m.CaptureB), pctN(m.WholeA, 2), pctN(m.WholeB, 2),
			yes(m.PassA), yes(m.PassB), yes(m.Flat))
	}
	return tw.Flush()
}

// signed is x with its sign and prec decimals ("-" for NaN).
func signed(x float64, prec int) string {
	if x != x {
		return "-"
	}
	return fmt.Sprintf("%+.*f", prec, x)
}
