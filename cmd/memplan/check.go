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
	Verdict     string      `json:"verdict"` // fits, above-target, does-not-fit
	ExitCode    int         `json:"exit_code"`
	Batch       int64       `json:"batch"`
	DeviceTotal int64       `json:"device_total_bytes"`
	Memory      int64       `json:"device_memory_bytes"`
	Fill        float64     `json:"fill"`
	Band        tuner.Band  `json:"band"`
	Device      string      `json:"device"`
	Estimate    interface{} `json:"estimate"`
}

func checkCmd() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "pre-flight: does this job fit? (exit code says)",
		ArgsUsage: "SPEC",
		Description: `Predicts the job's device total and prints a one-line verdict.

Exit codes:
   0  fits inside the target (at or below the band's upper edge)
   3  fits the device, but above the band's upper edge
   4  does not fit the device
   2  bad input (spec or flags)
   1  could not run (with --probe: no driver, no device, wrong index)

Example:
   memplan check specs/gpt2-124m.yaml --batch 32 --device a100-40gb
   memplan check specs/llama-3.2-1b.yaml --batch 8 --target 0.80-0.90 --format json
   memplan check specs/llama-3.2-1b.yaml --batch 8 --probe`,
		Flags: append(append(overrideFlags(), probeFlags()...), targetFlag, formatFlag),
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
			switch {
			case used > spec.Device.Memory:
				v.Verdict, v.ExitCode = "does-not-fit", checkNoFit
			case v.Fill > band.Hi:
				v.Verdict, v.ExitCode = "above-target", checkAboveTop
			default:
				v.Verdict, v.ExitCode = "fits", checkFits
			}
			if f == "json" {
				if err := writeJSON(c.App.Writer, v); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(c.App.Writer, "%s: %s at batch %d: %s of %s (%.1f%%, target ≤ %.0f%%)\n", v.Verdict, spec.Name,
					v.Batch, units.Format(v.DeviceTotal), units.Format(v.Memory), 100*v.Fill, 100*band.Hi)
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
