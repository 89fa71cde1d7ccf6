package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
	"github.com/memplan/memplan/tuner"
)

func planCmd() *cli.Command {
	// The layout sets the batch, accumulation, data parallelism, ZeRO
	// stage, checkpointing and offload: those overrides do not apply.
	var flags []cli.Flag
	for _, f := range overrideFlags() {
		switch f.Names()[0] {
		case "batch", "grad-accum", "dp", "zero", "checkpointing", "offload":
			continue
		}
		flags = append(flags, f)
	}
	return &cli.Command{
		Name:      "plan",
		Usage:     "choose how many GPUs and which layout (dp, tp, pp, cp, ep, ZeRO, checkpointing, micro-batch) for a global batch",
		ArgsUsage: "SPEC",
		Description: `Enumerates the layouts that reach --global-batch on exactly --gpus GPUs, or
on at most --max-gpus (default 1024; whole nodes once a layout spans more than
one), keeps those whose busiest rank fits the target band, and ranks them:
fewest GPUs first, then a throughput proxy (compute stretched by the pipeline
bubble and checkpointing's recompute, plus each group's communication at the
bandwidth of the links it crosses). Tensor parallelism stays inside a node of
--node-size GPUs. Prints the top layouts with the busiest rank's memory, and
the near misses with the reason each fails. Exit status 4 when none fits. On
a terminal, a search that takes more than a second shows its progress on
standard error.

Every layout is estimated by the same simulator as memplan estimate: data
parallelism with ZeRO stages 0-3, tensor and sequence parallelism,
pipelines (gpipe, 1f1b, interleaved; every stage, the busiest reported),
context and expert parallelism, gradient accumulation. Layouts it cannot
simulate yet (context parallelism with DDP or ZeRO 1; expert parallelism
with ZeRO 1, beside context parallelism without FSDP, or beside tensor
parallelism without sequence parallelism or under DDP; pipelines of more
than --max-microbatches micro-batches (default 64: each costs time); LoRA
with tensor parallelism, or at ZeRO 2 and 3 with context parallelism) are
listed as not yet simulated, unless a lower bound shows they cannot fit;
the model families tensor or context parallelism does not split are ruled
out with the reason. The search and the proxy are described in
docs/planner.md; its answers run as planned on four H200s are in
docs/accuracy.md (thirty-eighth session).

Example:
   memplan plan specs/llama-3-8b.yaml --global-batch 512 --max-gpus 64
   memplan plan specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024 --gpus 512 --format json`,
		Flags: append(flags, targetFlag, formatFlag,
			&cli.Int64Flag{Name: "global-batch", Usage: "samples per optimizer step (dp × micro-batch × accumulation)", Required: true},
			&cli.Int64Flag{Name: "gpus", Usage: "exactly N GPUs"},
			&cli.Int64Flag{Name: "max-gpus", Usage: "at most N GPUs (default 1024)"},
			&cli.Int64Flag{Name: "node-size", Value: model.NodeGPUs, Usage: "GPUs per node; tensor parallelism stays inside one"},
			&cli.IntFlag{Name: "top", Value: 10, Usage: "how many layouts to list"},
			&cli.Float64Flag{Name: "margin", Value: tuner.DefaultMargin, Usage: "safety margin below the band's upper edge, as a fraction of it"},
			&cli.Int64Flag{Name: "max-microbatches", Value: planner.MaxPipelineMicrobatches, Usage: "the most micro-batches per step of a pipeline layout the plan simulates (each costs time; longer ones are listed as not simulated)"},
		),
		Action: planAction,
	}
}

func planAction(c *cli.Context) error {
	f, band, spec, err := targetArgs(c)
	if err != nil {
		return err
	}
	req := planner.Request{GlobalBatch: c.Int64("global-batch"), GPUs: c.Int64("gpus"), MaxGPUs: c.Int64("max-gpus"),
		NodeSize: c.Int64("node-size"), Top: c.Int("top"), Band: band, Margin: c.Float64("margin")}
	sim := planner.Simulator{MaxMicrobatches: c.Int64("max-microbatches")}
	switch {
	case req.GPUs > 0 && req.MaxGPUs > 0:
		return usageError{"plan: give --gpus or --max-gpus, not both"}
	case req.GlobalBatch <= 0 || req.GPUs < 0 || req.MaxGPUs < 0 || req.NodeSize <= 0 || req.Top <= 0 || sim.MaxMicrobatches <= 0:
		return usageError{"plan: --global-batch, --gpus, --max-gpus, --node-size, --top and --max-microbatches must be positive"}
	case req.Margin < 0 || req.Margin >= 0.5:
		return usageError{fmt.Sprintf("--margin: want a fraction from 0 to 0.5, got %g", req.Margin)}
	}
	var done func()
	req.Progress, done = planProgress(c.App.ErrWriter)
	r, perr := planner.Plan(spec, req, sim)
	done()
	if perr != nil && !errors.Is(perr, planner.ErrNoLayout) {
		return perr
	}
	if f == "json" {
		if err := writeJSON(c.App.Writer, r); err != nil {
			return err
		}
	} else {
		printPlan(c.App.Writer, r)
		printRaceHint(c.App.Writer, spec, r)
		printBuildHint(c.App.Writer, spec, r)
		printWrapHint(c.App.Writer, spec, r)
		printPipelineHint(c.App.Writer, r)
	}
	if perr != nil {
		return exitCode{4, perr}
	}
	return nil
}

func printPlan(w io.Writer, r *planner.Result) {
	fmt.Fprintf(w, "%s on %s (%s): global batch %d", r.Model, r.Device, units.Format(r.DeviceMemory), r.GlobalBatch)
	if r.Seq > 0 {
		fmt.Fprintf(w, " at seq %d", r.Seq)
	}
	fmt.Fprintf(w, ", busiest rank at most %s (%.0f%% less the safety margin)\n", units.Format(r.Limit), 100*r.Band.Hi)
	s := r.Stats
	fmt.Fprintf(w, "%s layouts, %s invalid for this model; in rank order: %s not yet simulated, %s estimates, %s pruned by bounds, %s ranked below the last one shown\n\n",
		commas(int64(s.Layouts)), commas(int64(s.Invalid)), commas(int64(s.NotSimulated)), commas(int64(s.OracleCalls)), commas(int64(s.Pruned)), commas(int64(s.Unvisited)))
	if len(r.Layouts) > 0 {
		var mems, comms []int64
		for _, c := range r.Layouts {
			mems, comms = append(mems, c.Memory.DeviceTotal), append(comms, c.Proxy.CommBytes)
		}
		ms, cs := units.CommonScale(mems...), units.CommonScale(comms...)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tGPUS\tLAYOUT\tBUSIEST RANK\tFILL\tSTEP (PROXY)\tCOMM/STEP\tLINKS\t")
		for i, c := range r.Layouts {
			links := "in node"
			if c.Proxy.CrossNode {
				links = "across nodes"
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t\n", i+1, c.GPUs, c.Name, ms.In(c.Memory.DeviceTotal), 100*c.Fill,
				seconds(c.Proxy.StepSeconds), cs.In(c.Proxy.CommBytes), links)
		}
		tw.Flush()
	} else {
		fmt.Fprintln(w, "no layout fits")
	}
	if len(r.NearMisses) > 0 {
		fmt.Fprintln(w, "\nnear misses (ranked ahead of the layouts above, or closest to fitting):")
		// The names' column: as wide as the longest name up to 48
		// characters; a longer name is followed by two spaces.
		width := 0
		for _, c := range r.NearMisses {
			width = min(max(width, utf8.RuneCountInString(c.Name)), 48)
		}
		for _, c := range r.NearMisses {
			fmt.Fprintf(w, "  %4d GPUs  %-*s  %s\n", c.GPUs, width, c.Name, c.Reason)
		}
	}
	for _, k := range r.Skipped {
		fmt.Fprintf(w, "\nnot enumerated: %s\n", k)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
	if len(r.InvalidReasons) > 0 {
		fmt.Fprintln(w, "\nlayouts this model rules out:")
		reasons := make([]string, 0, len(r.InvalidReasons))
		for k := range r.InvalidReasons {
			reasons = append(reasons, k)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := r.InvalidReasons[reasons[i]], r.InvalidReasons[reasons[j]]
			return a > b || (a == b && reasons[i] < reasons[j])
		})
		for _, k := range reasons[:min(5, len(reasons))] {
			fmt.Fprintf(w, "  %6s  %s\n", commas(int64(r.InvalidReasons[k])), k)
		}
		if len(reasons) > 5 {
			fmt.Fprintf(w, "  and %d other reasons (--format json lists them)\n", len(reasons)-5)
		}
	}
}

// planProgress returns a progress callback that draws one line on w when w
// is a terminal and the search has taken more than a second (the estimates
// made, the layouts found, the one being estimated), and a function that
// clears the line; elsewhere nil and a no-op.
func planProgress(w io.Writer) (func(planner.Progress), func()) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil, func() {}
	}
	start, drawn := time.Now(), false
	progress := func(p planner.Progress) {
		if time.Since(start) < time.Second {
			return
		}
		drawn = true
		line := []rune(fmt.Sprintf("estimate %d, %d of %d layouts found: %s", p.Estimates, p.Fits, p.Top, p.Layout))
		fmt.Fprintf(w, "\r\033[K%s", string(line[:min(len(line), 99)])) // one line of a 100-column terminal
	}
	return progress, func() {
		if drawn {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}

// printRaceHint says, when DDP or ZeRO-1 layouts whose rebuild a pause
// would settle are listed (estimate.MayRace: not those that accumulate
// outside a pipeline, which rebuild inside their first step), that their
// figures keep DDP's old gradient bucket and how to plan for a loop that
// pauses (docs/multigpu.md, "DDP's bucket rebuild race").
func printRaceHint(w io.Writer, spec *model.Spec, r *planner.Result) {
	for _, c := range append(append([]planner.Candidate(nil), r.Layouts...), r.NearMisses...) {
		if estimate.MayRace(planner.Apply(spec, c.Layout).Training) {
			fmt.Fprintf(w, "\nDDP and ZeRO-1 layouts above keep DDP's old gradient bucket past its rebuild (docs/multigpu.md);\n"+
				"a loop that syncs and sleeps %g s after its first step frees it: plan it with --step-pause %g\n", estimate.DDPSettle, estimate.DDPSettle)
			return
		}
	}
}

// printPipelineHint gives, when pipeline layouts are listed, the headroom
// their estimates' note asks for (estimate.PipelineUnder): the worst
// measured pipeline run reserved that much more than memplan predicted,
// which the plan's fill does not include (docs/parallelism.md §3.2.12).
func printPipelineHint(w io.Writer, r *planner.Result) {
	for _, c := range r.Layouts {
		if c.Layout.PP > 1 {
			fmt.Fprintf(w, "\npipeline layouts above: measured pipeline runs reserved up to %.1f%% more than memplan predicted, from where\n"+
				"the driver places segments (docs/parallelism.md §3.2.11–§3.2.12); leave that headroom\n", 100*estimate.PipelineUnder)
			return
		}
	}
}

// printBuildHint says, when tensor-parallel layouts without a pipeline are
// listed, how their models are taken to be built: on the meta device, each
// shard allocated directly, unless the spec says they are built whole on
// the GPU first (fsdp_init gpu; docs/parallelism.md §3.1).
func printBuildHint(w io.Writer, spec *model.Spec, r *planner.Result) {
	if spec.Training.FSDPInit == model.FSDPInitGPU {
		return
	}
	for _, c := range r.Layouts {
		if l := c.Layout; l.TP > 1 && l.PP <= 1 {
			fmt.Fprintln(w, "\ntensor-parallel layouts above take the model as built on the meta device, each shard allocated\n"+
				"directly (torchtitan); for a script that builds it whole on the GPU first, plan with --fsdp-init gpu")
			return
		}
	}
}

// printWrapHint says, when FSDP2 layouts over a model whose whole
// parameters reach the GPU first are listed (estimate.WrapsWhole), that
// their figures keep the blocks those parameters leave cached, and how to
// plan for a script that empties the cache after fully_shard
// (docs/multigpu.md, "Wrapping a model built on the host").
func printWrapHint(w io.Writer, spec *model.Spec, r *planner.Result) {
	if spec.Training.EmptyCacheAfterWrap {
		return
	}
	for _, c := range r.Layouts {
		if estimate.WrapsWhole(planner.Apply(spec, c.Layout).Training) {
			fmt.Fprintln(w, "\nFSDP2 layouts above keep cached the blocks the model's whole parameters leave as fully_shard wraps it\n"+
				"(accelerate's way); for a script that empties the cache after, plan with --empty-cache-after-wrap")
			return
		}
	}
}

// seconds prints a proxy step time: three significant digits below 1,000
// seconds, whole seconds with thousands separators from there (not
// 1.15e+03).
func seconds(v float64) string {
	if v < 999.5 {
		return fmt.Sprintf("%.3g s", v)
	}
	return commas(int64(math.Round(v))) + " s"
}
