package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/tuner"
)

// Exit codes of memplan check.
const (
	checkFits     = 0
	checkAboveTop = 3
	checkNoFit    = 4
)

// Verdict is memplan check's result.
type Verdict struct {
	Verdict     string     `json:"verdict"` // fits, above-target, does-not-fit
	ExitCode    int        `json:"exit_code"`
	Batch       int64      `json:"batch"`
	DeviceTotal int64      `json:"device_total_bytes"`
	Memory      int64      `json:"device_memory_bytes"`
	Fill        float64    `json:"fill"`
	Band        tuner.Band `json:"band"`
	// Limit is the fill at or below which the job fits: the band's upper
	// edge less the safety margin (tuner.Fits).
	Limit    float64     `json:"limit"`
	Device   string      `json:"device"`
	Estimate interface{} `json:"estimate"`
}

func checkCmd() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "pre-flight: does this job fit? (exit code says)",
		ArgsUsage: "SPEC",
		Description: `Predicts the job's device total and prints a one-line verdict.

Exit codes:
   0  fits inside the target (at or below the band's upper edge less --margin)
   3  fits the device, but above that edge
   4  does not fit the device
   2  bad input (spec or flags)
   1  could not run (with --probe: no driver, no device, wrong index)

Example:
   memplan check specs/gpt2-124m.yaml --batch 32 --device a100-40gb
   memplan check specs/llama-3.2-1b.yaml --batch 8 --target 0.80-0.90 --format json
   memplan check specs/llama-3.2-1b.yaml --batch 8 --probe`,
		Flags: append(append(overrideFlags(), probeFlags()...), targetFlag, formatFlag, marginFlag),
		Action: func(c *cli.Context) error {
			f, band, spec, err := targetArgs(c)
			if err != nil {
				return err
			}
			var used int64
			var est any
			if c.Bool("probe") {
				s, err := probeSession(c, spec, 1)
				if err != nil {
					return err
				}
				used, err = s.Measure(spec)
				if cerr := s.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				est = "measured on the device by --probe"
			} else {
				r, err := estimate.Estimate(spec)
				if err != nil {
					return err
				}
				used, est = r.DeviceTotal, r
			}
			v := Verdict{Batch: spec.Training.Batch, DeviceTotal: used, Memory: spec.Device.Memory,
				Fill: float64(used) / float64(spec.Device.Memory), Band: band, Device: spec.Device.Name, Estimate: est}
			margin := c.Float64("margin")
			if c.Bool("probe") {
				margin = 0 // the probe measures the device
			}
			switch tuner.Fits(used, spec.Device.Memory, band, margin) {
			case tuner.NoFit:
				v.Verdict, v.ExitCode = tuner.NoFit.String(), checkNoFit
			case tuner.AboveTarget:
				v.Verdict, v.ExitCode = tuner.AboveTarget.String(), checkAboveTop
			default:
				v.Verdict, v.ExitCode = tuner.FitsTarget.String(), checkFits
			}
			v.Limit = tuner.Limit(band, tuner.Constraints{Margin: margin})
			if f == "json" {
				if err := writeJSON(c.App.Writer, v); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(c.App.Writer, "%s: %s at batch %d: %s of %s (%.1f%%, target ≤ %.1f%%: %.0f%% less a %.1f%% safety margin)\n", v.Verdict, spec.Name,
					v.Batch, units.Format(v.DeviceTotal), units.Format(v.Memory), 100*v.Fill, 100*v.Limit, 100*band.Hi, 100*margin)
			}
			if v.ExitCode != 0 {
				return exitCode{v.ExitCode, silent{}}
			}
			return nil
		},
	}
}

// silent is an error that prints nothing: the verdict already said it.
type silent struct{}

func (silent) Error() string { return "" }
