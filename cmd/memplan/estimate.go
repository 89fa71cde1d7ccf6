package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
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
that holds the peak, how full the device would be, the allocator's cache at
the peak (fragmentation), and, when another PYTORCH_ALLOC_CONF setting would
lower the device total by more than 2% (re-estimated under it), which.

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
			// The advice's estimates run beside the spec's own on a
			// machine with more than one core.
			bg := tuner.StartAdviceEstimates(spec)
			r, err := estimate.Estimate(spec)
			if err != nil {
				return fmt.Errorf("estimate %s: %w", spec.File, err)
			}
			// The advice is extra: if a re-estimate fails, the estimate
			// still stands, with a note.
			var adv *tuner.AllocAdvice
			if tuner.AdviceMayHelp(spec, r) {
				oracle := tuner.AnalyticStop
				if bg != nil {
					oracle = bg.Oracle
				}
				adv, err = tuner.AdviseAllocConfStop(spec, r.DeviceTotal, oracle)
				if err != nil {
					r.Notes = append(r.Notes, fmt.Sprintf("no allocator advice: %v", err))
				}
			}
			if f == "json" {
				return writeJSON(c.App.Writer, estimateJSON{r, adv})
			}
			for _, n := range r.Notes {
				fmt.Fprintf(c.App.ErrWriter, "memplan: note: %s\n", n)
			}
			return printEstimate(c.App.Writer, r, adv)
		},
	}
}

// estimateJSON is estimate's --format json: the estimate, and the
// allocator advice when there is some (docs/json.md).
type estimateJSON struct {
	*estimate.Result
	AllocAdvice *tuner.AllocAdvice `json:"alloc_advice,omitempty"`
}

// printFragmentation prints the allocator's cache on one line: how far
// peak reserved is above peak allocated, and Result.Fragmentation, the
// reserved but unallocated memory when reserved first reached its peak
// (docs/allocator.md §5). The two differ when that happened after a large
// free, e.g. in the first optimizer step, after backward freed the
// activations.
func printFragmentation(w io.Writer, r *estimate.Result) {
	f := r.Fragmentation
	if f == nil {
		return
	}
	fmt.Fprintf(w, "  fragmentation: peak reserved is %s above peak allocated; %s reserved but unallocated when reserved first peaked (largest cached block %s)\n",
		units.Format(r.PeakReserved-r.PeakAllocated), units.Format(f.Unallocated), units.Format(f.LargestFree))
}

// printSteps says, when the allocator's cache grew after the second
// optimizer step, in which step it last grew and by how much: the
// estimate simulates steps until one repeats the step before it
// (docs/allocator.md §8), and a run measured for two steps shows less.
func printSteps(w io.Writer, r *estimate.Result) {
	var per []int64 // peak reserved by step
	for _, p := range r.Phases {
		for len(per) <= p.Iteration {
			per = append(per, 0)
		}
		per[p.Iteration] = max(per[p.Iteration], p.PeakReserved)
	}
	last := 0
	for i := 1; i < len(per); i++ {
		if per[i] > per[i-1] {
			last = i
		}
	}
	if last >= 2 {
		fmt.Fprintf(w, "  steps: reserved grew until step %d, %s above the second step's peak (%d steps simulated)\n",
			last+1, units.Format(per[last]-per[1]), len(per))
	}
}

// printAllocAdvice prints the allocator setting that lowers the device
// total by more than tuner.AdviceThreshold, if any (docs/allocator.md §9).
func printAllocAdvice(w io.Writer, adv *tuner.AllocAdvice) {
	if adv != nil {
		fmt.Fprintf(w, "advice: PYTORCH_ALLOC_CONF=%s would lower the device total to %s (%s less, %.1f%%; re-estimated)\n",
			adv.AllocConf, units.Format(adv.DeviceTotal), units.Format(adv.Saved), 100*adv.Fraction)
	}
}

// printLoRA prints the trainable and frozen parameters of a LoRA run, and
// the base's bitsandbytes storage (docs/lora.md).
func printLoRA(w io.Writer, r *estimate.Result) {
	t := r.Training
	if r.Trainable == 0 {
		return
	}
	base := ""
	if q := t.Quant; q != "" {
		if t.DoubleQuant {
			q += " with double quantization"
		}
		base = " (" + q + ", bitsandbytes: modelled from source, unmeasured)"
	}
	adt := "fp32"
	if t.LoRA != nil && t.LoRA.AdapterDtype == model.AdapterBase {
		adt = "base dtype"
	}
	fmt.Fprintf(w, "LoRA: %s trainable (adapters, %s), %s frozen%s\n", commas(r.Trainable), adt, commas(r.Frozen), base)
}

func printEstimate(w io.Writer, r *estimate.Result, adv *tuner.AllocAdvice) error {
	t := r.Training
	fmt.Fprintf(w, "%s: %s, %s parameters\n", r.Name, r.ModelType, commas(r.Params))
	printLoRA(w, r)
	setup := fmt.Sprintf("batch %d", t.Batch)
	if t.Seq > 0 {
		setup += fmt.Sprintf(" × seq %d", t.Seq)
	}
	if t.Image > 0 {
		setup += fmt.Sprintf(" × image %d²", t.Image)
	}
	switch {
	case t.CP > 1 && t.Zero >= 2:
		// FSDP shards over dp·cp (torchtitan's dp_shard_cp).
		setup += fmt.Sprintf(", data-parallel %d, ZeRO stage %d over dp·cp = %d GPUs (per GPU below)", max(t.DP, 1), t.Zero, max(t.DP, 1)*t.CP)
	case t.DP > 1 || t.Zero > 0:
		setup += fmt.Sprintf(", %d GPUs data-parallel, ZeRO stage %d", max(t.DP, 1), t.Zero)
		if r := t.DPReplicate; r > 1 {
			setup += fmt.Sprintf(" over HSDP groups of %d (%d replicas)", t.FSDPShards(), r)
		}
		if n := t.ReshardAfterForward; n > 1 && n < t.FSDPShards() {
			setup += fmt.Sprintf(" resharded to %d GPUs after each forward", n)
		}
		setup += " (per GPU below)"
	}
	if mp := t.ModelParallel(); mp != "" {
		setup += ", " + mp
		if t.DP <= 1 && t.Zero == 0 {
			setup += " (per GPU below)"
		}
	}
	if t.Offload != "" && t.Offload != "none" {
		setup += ", offload " + t.Offload
	}
	if t.GradAccum > 1 && t.PP <= 1 {
		setup += fmt.Sprintf(", %d accumulation steps", t.GradAccum)
	}
	fmt.Fprintf(w, "training: %s, %s, %s, checkpointing %s, attention %s, zero_grad %s\n",
		setup, t.Precision, t.Optimizer, t.Checkpointing, t.Attention, t.ZeroGrad)
	fmt.Fprintf(w, "device: %s (%s)\n", r.Device.Name, units.Format(r.Device.Memory))
	if err := printPipeline(w, r); err != nil {
		return err
	}
	if err := printExperts(w, r); err != nil {
		return err
	}
	if k := r.Ranks; k != nil {
		fmt.Fprintf(w, "ranks differ (ZeRO-1 partition): figures for the busiest, rank %d; its optimizer state is %s more than the least loaded rank's\n",
			k.Busiest, units.Format(k.Spread))
	}
	fmt.Fprintln(w)
	if err := printBreakdown(w, r); err != nil {
		return err
	}
	printFragmentation(w, r)
	printSteps(w, r)
	verdict := "fits"
	// The device's whole memory, no margin: the one rule (tuner.Fits).
	if tuner.Fits(r.DeviceTotal, r.Device.Memory, tuner.Band{Lo: 1, Hi: 1}, 0) == tuner.NoFit {
		verdict = fmt.Sprintf("does NOT fit: %s over", units.Format(r.DeviceTotal-r.Device.Memory))
	}
	fmt.Fprintf(w, "\n%s: %.1f%% of %s — %s\n", r.Device.Name, 100*r.Fill, units.Format(r.Device.Memory), verdict)
	printAllocAdvice(w, adv)
	return nil
}

// printBreakdown writes the model state, the memory at the peak (with DDP's
// old bucket's share of the gradients when the rebuild race keeps it),
// what is outside the allocator, and the totals.
func printBreakdown(w io.Writer, r *estimate.Result) error {
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
	atPeak := r.AtPeak
	if r.DDPRaceBytes > 0 && r.PeakPhase.Iteration > 0 {
		// The peak comes after DDP's rebuild: its gradients include the old
		// flat bucket the rebuild race keeps (the note says why).
		atPeak = append(append([]estimate.Item(nil), atPeak...),
			estimate.Item{Name: "  of the gradients, DDP's old bucket (rebuild race)", Bytes: r.DDPRaceBytes})
	}
	section("at the peak: "+r.PeakPhase.String(), atPeak)
	section("outside the allocator", r.Overhead)
	section("totals", []estimate.Item{
		{Name: "peak allocated (max_memory_allocated)", Bytes: r.PeakAllocated},
		{Name: "peak reserved (max_memory_reserved)", Bytes: r.PeakReserved},
		{Name: "device total (with CUDA context)", Bytes: r.DeviceTotal},
	})
	return tw.Flush()
}
