package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// ReportRow is one spec on one device.
type ReportRow struct {
	Spec   string `json:"spec"`
	Device string `json:"device"`
	Batch  int64  `json:"batch"`
	// DeviceTotal and Fill are predicted at the spec's batch.
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
	Fits        bool    `json:"fits"`
	// MaxBatch is the largest micro-batch inside the target band (0: even
	// batch 1 does not fit); Fix is the cheapest change that would fit then.
	MaxBatch int64  `json:"max_batch"`
	Fix      string `json:"fix,omitempty"`
}

func reportCmd() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "capacity planning: which GPUs run these jobs, and at what batch",
		ArgsUsage: "SPEC...",
		Description: `For every SPEC on every device (--devices, default the whole catalog):
the predicted device total at the spec's batch, whether it fits, the largest
micro-batch inside the target band, and when nothing fits, the cheapest
change that would. Training flags apply to every spec.

Example:
   memplan report specs/llama-3.2-1b.yaml specs/gpt2-xl.yaml --devices a100-40gb,a100-80gb,h100-80gb,l40s
   memplan report specs/*.yaml --format json`,
		Flags: append(overrideFlags(), targetFlag, formatFlag,
			&cli.StringFlag{Name: "devices", Usage: "comma-separated catalog names (default: all)"}),
		Action: func(c *cli.Context) error {
			f, err := format(c)
			if err != nil {
				return err
			}
			band, err := tuner.ParseBand(c.String("target"))
			if err != nil {
				return usageError{"--target: " + err.Error()}
			}
			if c.NArg() == 0 {
				return usageError{"report: missing SPEC arguments"}
			}
			devs := model.DeviceNames()
			if d := c.String("devices"); d != "" {
				devs = strings.Split(d, ",")
			}
			var rows []ReportRow
			for _, path := range c.Args().Slice() {
				for _, dev := range devs {
					o := overrides(c)
					o.Dev = strings.TrimSpace(dev)
					spec, err := model.Load(path, o)
					if err != nil {
						return err
					}
					r, err := estimate.Estimate(spec)
					if err != nil {
						return err
					}
					row := ReportRow{Spec: spec.Name, Device: spec.Device.Name, Batch: spec.Training.Batch,
						DeviceTotal: r.DeviceTotal, Fill: r.Fill, Fits: r.Fill <= band.Hi}
					t, err := tuner.Tune(spec, band, tuner.Constraints{Margin: tuner.DefaultMargin}, tuner.Analytic)
					switch {
					case err == nil:
						row.MaxBatch = t.Batch
					case errors.Is(err, tuner.ErrNoFit):
						for _, fx := range t.Fixes {
							if fx.Fits {
								row.Fix = fx.Change
								break
							}
						}
						if row.Fix == "" {
							row.Fix = "none on one GPU"
						}
					default:
						return err
					}
					rows = append(rows, row)
				}
			}
			if f == "json" {
				return writeJSON(c.App.Writer, rows)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "SPEC\tDEVICE\tBATCH\tPREDICTED\tFILL\tFITS %.0f%%\tMAX BATCH\tOR CHANGE\n", 100*band.Hi)
			for _, r := range rows {
				yes := "no"
				if r.Fits {
					yes = "yes"
				}
				max := fmt.Sprint(r.MaxBatch)
				if r.MaxBatch == 0 {
					max = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.1f%%\t%s\t%s\t%s\n", r.Spec, r.Device, r.Batch,
					units.GiB2(r.DeviceTotal), 100*r.Fill, yes, max, r.Fix)
			}
			return tw.Flush()
		},
	}
}
