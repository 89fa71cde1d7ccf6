package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/tuner"
)

func estimateCmd() *cli.Command {
	return &cli.Command{
		Name:      "estimate",
		Usage:     "predict the peak GPU memory of a training run",
		ArgsUsage: "SPEC",
		Description: `Prints a breakdown of memory at the peak, the three totals (peak allocated as
torch.cuda.max_memory_allocated reports it, peak reserved as
max_memory_reserved, and the device total with the CUDA context), the phase
that holds the peak, and how full the device would be.

Example:
   memplan estimate specs/gpt2-124m.yaml
   memplan estimate specs/llama-3.2-1b.yaml --batch 8 --checkpointing every-block --device a100-80gb
   memplan estimate specs/resnet-50.yaml --format json
   memplan estimate --hf config.json --batch 8 --seq 4096 --precision bf16`,
		Flags: append(overrideFlags(), formatFlag),
		Action: func(c *cli.Context) error {
			f, err := format(c)
			if err != nil {
				return err
			}
			spec, err := loadSpec(c)
			if err != nil {
				return err
			}
			r, err := estimate.Estimate(spec)
			if err != nil {
				return fmt.Errorf("estimate %s: %w", spec.File, err)
			}
			if f == "json" {
				return writeJSON(c.App.Writer, r)
			}
			for _, n := range r.Notes {
				fmt.Fprintf(c.App.ErrWriter, "memplan: note: %s\n", n)
			}
			return printEstimate(c.App.Writer, r)
		},
	}
}

func printEstimate(w io.Writer, r *estimate.Result) error {
	t := r.Training
	fmt.Fprintf(w, "%s: %s, %s parameters\n", r.Name, r.ModelType, commas(r.Params))
	if r.Trainable > 0 {
		fmt.Fprintf(w, "LoRA: %s trainable (adapters, fp32), %s frozen\n", commas(r.Trainable), commas(r.Frozen))
	}
	setup := fmt.Sprintf("batch %d", t.Batch)
	if t.Seq > 0 {
		setup += fmt.Sprintf(" × seq %d", t.Seq)
	}
	if t.Image > 0 {
		setup += fmt.Sprintf(" × image %d²", t.Image)
	}
	if t.DP > 1 || t.Zero > 0 {
		setup += fmt.Sprintf(", %d GPUs data-parallel, ZeRO stage %d (per GPU below)", max(t.DP, 1), t.Zero)
	}
	if t.Offload != "" && t.Offload != "none" {
		setup += ", offload " + t.Offload
	}
	if t.GradAccum > 1 {
		setup += fmt.Sprintf(", %d accumulation steps", t.GradAccum)
	}
	fmt.Fprintf(w, "training: %s, %s, %s, checkpointing %s, attention %s, zero_grad %s\n",
		setup, t.Precision, t.Optimizer, t.Checkpointing, t.Attention, t.ZeroGrad)
	fmt.Fprintf(w, "device: %s (%s)\n\n", r.Device.Name, units.Format(r.Device.Memory))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	section := func(title string, items []estimate.Item) {
		var vals []int64
		for _, it := range items {
			vals = append(vals, it.Bytes)
		}
		sc := units.CommonScale(vals...)
		fmt.Fprintf(tw, "%s\t\n", title)
		for _, it := range items {
			fmt.Fprintf(tw, "  %s\t%12s\n", it.Name, sc.In(it.Bytes))
		}
	}
	section("model state (steady)", []estimate.Item{
		{Name: "parameters", Bytes: r.ParamBytes},
		{Name: "gradients", Bytes: r.GradBytes},
		{Name: "optimizer state", Bytes: r.OptimizerBytes},
		{Name: "activations saved at end of forward", Bytes: r.ActivationBytes},
	})
	section("at the peak: "+r.PeakPhase.String(), r.AtPeak)
	section("outside the allocator", r.Overhead)
	section("totals", []estimate.Item{
		{Name: "peak allocated (max_memory_allocated)", Bytes: r.PeakAllocated},
		{Name: "peak reserved (max_memory_reserved)", Bytes: r.PeakReserved},
		{Name: "device total (with CUDA context)", Bytes: r.DeviceTotal},
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "fits"
	// The device's whole memory, no margin: the one rule (tuner.Fits).
	if tuner.Fits(r.DeviceTotal, r.Device.Memory, tuner.Band{Lo: 1, Hi: 1}, 0) == tuner.NoFit {
		verdict = fmt.Sprintf("does NOT fit: %s over", units.Format(r.DeviceTotal-r.Device.Memory))
	}
	fmt.Fprintf(w, "\n%s: %.1f%% of %s — %s\n", r.Device.Name, 100*r.Fill, units.Format(r.Device.Memory), verdict)
	return nil
}
