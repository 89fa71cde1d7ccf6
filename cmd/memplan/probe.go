package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/probe"
)

func probeCmd() *cli.Command {
	return &cli.Command{
		Name:      "probe",
		Usage:     "ask the real GPU what it allows (needs the NVIDIA driver)",
		ArgsUsage: "SPEC",
		Description: `Creates a context on the GPU, replays the caching allocator's segments that
memplan plans for batch 1 as raw driver allocations, frees them, and grows the
batch (doubling, then bisection) until device use sits inside the target band.
It never allocates past the band's upper edge, frees everything on success,
error, Ctrl-C and SIGTERM, and refuses (without allocating) when batch 1 does
not fit the free memory. It runs no kernels: see docs/probe.md.

Exit codes: 0 done, 4 batch 1 does not fit, 1 the probe could not run
(no driver, no device, wrong index), 2 bad input.

Example:
   memplan probe specs/gpt2-124m.yaml
   memplan probe specs/llama-3.2-1b.yaml --device-index 1 --target 0.80-0.85 --format json`,
		Flags: append(overrideFlags(), targetFlag, formatFlag,
			&cli.IntFlag{Name: "device-index", Usage: "CUDA device ordinal"}),
		Action: func(c *cli.Context) error {
			f, band, spec, err := targetArgs(c)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := openDriver()
			if err != nil {
				return err
			}
			opts := probe.Options{DeviceIndex: c.Int("device-index"), Lo: band.Lo, Hi: band.Hi}
			if isTerminal(os.Stderr) {
				opts.Progress = func(s probe.Step) {
					fmt.Fprintf(c.App.ErrWriter, "  batch %-6d requested %10s  device used %10s  %5.1f%%  %s\n",
						s.Batch, units.Format(s.Requested), units.Format(s.DeviceUsed), 100*s.Fill, s.Note)
				}
			}
			r, perr := probe.Run(ctx, d, spec, opts)
			if errors.Is(perr, context.Canceled) {
				return fmt.Errorf("probe interrupted; all device memory was freed")
			}
			if perr != nil && !errors.Is(perr, probe.ErrNoFit) {
				return perr
			}
			if f == "json" {
				if err := writeJSON(c.App.Writer, r); err != nil {
					return err
				}
			} else {
				printProbe(c.App.Writer, r)
			}
			if perr != nil {
				return exitCode{4, perr}
			}
			return nil
		},
	}
}

// openDriver opens the CUDA driver; tests replace it with a fake device.
var openDriver = probe.Open

// probeSession opens the driver and a session on --device-index that never
// allocates past hi of the device, and points the spec at the real device's
// memory. Probe failures exit 1.
func probeSession(c *cli.Context, spec *model.Spec, hi float64) (*probe.Session, error) {
	d, err := openDriver()
	if err != nil {
		return nil, err
	}
	s, err := probe.NewSession(c.Context, d, c.Int("device-index"), hi)
	if err != nil {
		return nil, err
	}
	spec.Device.Memory = s.Total()
	return s, nil
}

func printProbe(w io.Writer, r *probe.Result) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "%s (device %d, driver %d.%d): %s total, %s in use at start\n", r.Device, r.Index,
		r.Driver/1000, r.Driver%1000/10, units.Format(r.Total), units.Format(r.UsedAtStart))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  batch %-6d requested %10s  device used %10s  %5.1f%%  %s\n",
			s.Batch, units.Format(s.Requested), units.Format(s.DeviceUsed), 100*s.Fill, s.Note)
	}
	if r.Batch > 0 {
		in := "inside"
		if !r.InBand {
			in = "below"
		}
		fmt.Fprintf(w, "largest batch: %d (%s the %.0f-%.0f%% band)\n", r.Batch, in, 100*r.Lo, 100*r.Hi)
		fmt.Fprintf(w, "fit over the measured steps: %s fixed + %s per sample\n", units.Format(r.FixedBytes), units.Format(r.PerSample))
	}
	for _, d := range r.Differences {
		fmt.Fprintf(w, "  - %s\n", d)
	}
}
