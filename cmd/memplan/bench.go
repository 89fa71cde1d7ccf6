package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/bench"
	"github.com/memplan/memplan/internal/units"
)

func benchCmd() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "compare predictions with measurements from a GPU",
		Subcommands: []*cli.Command{{
			Name:      "compare",
			Usage:     "predict every measured configuration and summarise the errors",
			ArgsUsage: "FILE...",
			Description: `FILE is JSON lines written by bench/torch/measure.py (bench/torch/grid.sh).
Prints measured and predicted peak allocated, peak reserved and device total
per configuration, then the median and worst relative errors and the number
of predictions more than 3% under the measurement, for the tuning set and the
held-out set (--heldout) separately, and the targets missed.

Example:
   memplan bench compare bench/results/2026-11-22-h100.jsonl --heldout bench/results/2026-11-22-h100-heldout.jsonl`,
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "heldout", Usage: "measurements never used to tune the estimator"},
				&cli.StringFlag{Name: "root", Value: ".", Usage: "directory the records' spec paths are relative to"},
				formatFlag,
			},
			Action: func(c *cli.Context) error {
				f, err := format(c)
				if err != nil {
					return err
				}
				if c.NArg() == 0 {
					return usageError{"bench compare: missing FILE argument"}
				}
				rep, err := bench.Compare(c.String("root"), c.Args().Slice(), c.StringSlice("heldout"))
				if err != nil {
					return err
				}
				if f == "json" {
					return writeJSON(c.App.Writer, rep)
				}
				printReport(c.App.Writer, rep)
				return nil
			},
		}},
	}
}

func printReport(w io.Writer, rep *bench.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tset\tallocated\tpredicted\terr\treserved\tpredicted\terr\tdevice\tpredicted\terr\t")
	gib := units.Scale{Name: "GiB", Size: units.GiB}
	for _, r := range rep.Rows {
		set := "tuning"
		if r.HeldOut {
			set = "held-out"
		}
		fmt.Fprintf(tw, "%s\t%s\t", r.Label, set)
		for m := 0; m < bench.NumMetrics; m++ {
			fmt.Fprintf(tw, "%s\t%s\t%+.1f%%\t", gib.In(r.Measured[m]), gib.In(r.Predicted[m]), 100*r.Err[m])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, s := range []struct {
		name string
		sum  bench.Summary
	}{{"tuning", rep.Tuning}, {"held-out", rep.HeldOut}, {"all", rep.All}} {
		if s.sum.N == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d configurations):\n", s.name, s.sum.N)
		for m := 0; m < bench.NumMetrics; m++ {
			fmt.Fprintf(w, "  %-15s median %5.1f%%  worst %5.1f%%  under by >3%%: %d\n", bench.MetricNames[m],
				100*s.sum.Median[m], 100*s.sum.Worst[m], s.sum.Under[m])
		}
		for _, miss := range s.sum.Missed() {
			fmt.Fprintf(w, "  target missed: %s\n", miss)
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped (failed on the GPU): %s\n", s)
	}
}
