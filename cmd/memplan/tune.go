package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/shellquote"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
	"github.com/memplan/memplan/tuner"
)

// marginFlag is the safety margin tune, check and report share, so they
// apply one rule for "fits" (tuner.Fits).
var marginFlag = &cli.Float64Flag{Name: "margin", Value: tuner.DefaultMargin, Usage: "safety margin below the band's upper edge for the estimator's error, as a fraction of it (0 for none; ignored with --probe)"}

var targetFlag = &cli.StringFlag{Name: "target", Value: "0.85-0.90", Usage: "target fill of device memory, LO-HI"}

func tuneCmd() *cli.Command {
	return &cli.Command{
		Name:      "tune",
		Usage:     "find the largest micro-batch that fits a target fill",
		ArgsUsage: "SPEC",
		Description: `Finds the largest micro-batch whose predicted device total stays at or below
the target band's upper edge (default 85-90% of device memory), and warns when
the best batch falls below the band. With --global-batch and --dp it splits the
global batch into micro-batch x gradient accumulation. With --alloc-conf auto it
also picks the allocator setting with the largest batch. For DDP and ZeRO 1 it
adds the larger micro-batch a pause after the first step would allow, if any
(--step-pause; docs/multigpu.md, "DDP's bucket rebuild race"). When batch 1
does not fit, it lists the spec changes that would, cheapest first, each with
its predicted total (exit code 4); when none of them fits, it gives memplan
plan's first layout at --global-batch (tensor, pipeline, context and expert
parallelism), or the memplan plan command to run without one.

Example:
   memplan tune specs/gpt2-124m.yaml
   memplan tune specs/llama-3.2-1b.yaml --device a100-80gb --multiple-of 2 --global-batch 256 --dp 8
   memplan tune specs/bert-base.yaml --device h100-80gb --cap --target 0.85-0.90
   memplan tune specs/gpt2-124m.yaml --probe --device-index 0
   memplan tune specs/llama-3-8b.yaml --checkpointing none
   memplan tune specs/resnet-50.yaml --alloc-conf auto   # and the allocator setting`,
		Flags:  tuneFlags(),
		Action: runTune,
	}
}

// runTune is memplan tune.
func runTune(c *cli.Context) error {
	f, band, spec, err := targetArgs(c)
	if err != nil {
		return err
	}
	cons := tuner.Constraints{MultipleOf: c.Int64("multiple-of"), PowersOfTwo: c.Bool("pow2"), Min: c.Int64("min"), Max: c.Int64("max"),
		Margin: c.Float64("margin")}
	if cons.Margin < 0 || cons.Margin >= 0.5 {
		return usageError{fmt.Sprintf("--margin: want a fraction from 0 to 0.5, got %g", cons.Margin)}
	}
	if cons.Seqs, err = seqsArg(c); err != nil {
		return err
	}
	auto, err := allocAutoArg(c)
	if err != nil {
		return err
	}
	oracle, closeProbe, err := tuneOracle(c, spec, band, &cons)
	if err != nil {
		return err
	}
	defer closeProbe()
	r, choice, terr := tuneAlloc(spec, band, cons, oracle, auto)
	if terr != nil && !errors.Is(terr, tuner.ErrNoFit) {
		return terr
	}
	if terr == nil && c.Int64("global-batch") > 0 {
		if r.Plan, err = tuner.Split(c.Int64("global-batch"), spec.Training.DP, r.Batch); err != nil {
			return usageError{err.Error()}
		}
	}
	var paused *pausedBatch
	if terr == nil && choice == nil && !c.Bool("probe") && estimate.MayRace(spec.Training) {
		if paused, err = tuneIfPaused(spec, band, cons, oracle, r); err != nil {
			return err
		}
	}
	// None of tune's changes fits: memplan plan's first layout.
	var planned *planner.Candidate
	needPlan := terr != nil && !tuner.SomeFixFits(r.Fixes)
	if gb := c.Int64("global-batch"); needPlan && gb > 0 && !c.Bool("probe") {
		planned, err = planner.FirstLayout(spec, planner.Request{GlobalBatch: gb, Band: band, Margin: cons.Margin})
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
	}
	if f == "json" {
		if err := writeJSON(c.App.Writer, tuneJSON{r, choice, paused, planned}); err != nil {
			return err
		}
	} else {
		printTune(c.App.Writer, spec, r, c.Bool("cap"))
		printAllocChoice(c.App.Writer, choice)
		if paused != nil {
			fmt.Fprintf(c.App.Writer, "  %s: micro-batch %d, %s (%.1f%%)\n",
				ifPausedLead(paused.StepPause), paused.Batch, units.Format(paused.DeviceTotal), 100*paused.Fill)
		}
		if needPlan {
			printPlanFallback(c.App.Writer, planCommand(c), c.Int64("global-batch"), planned)
		}
	}
	if terr != nil {
		return exitCode{4, terr}
	}
	return nil
}

// tuneFlags are tune's flags: the overrides, the probe's, and the search's
// constraints.
func tuneFlags() []cli.Flag {
	return append(append(overrideFlags(), probeFlags()...), targetFlag, formatFlag,
		&cli.Int64Flag{Name: "multiple-of", Usage: "micro-batch must be a multiple of N"},
		&cli.BoolFlag{Name: "pow2", Usage: "micro-batch must be a power of two"},
		&cli.Int64Flag{Name: "min", Usage: "smallest micro-batch"},
		&cli.Int64Flag{Name: "max", Usage: "largest micro-batch"},
		&cli.StringFlag{Name: "seqs", Usage: "sequence lengths the job sees, comma-separated (tunes at the longest)"},
		&cli.Int64Flag{Name: "global-batch", Usage: "target global batch (split over --dp; planned with memplan plan when nothing tune tries fits)"},
		marginFlag,
		&cli.BoolFlag{Name: "cap", Usage: "apply the target's upper edge as torch.cuda.set_per_process_memory_fraction does: a cap on the caching allocator, which frees its cache and retries before failing"},
	)
}

// tuneOracle is what tune's search asks: the estimator, the estimator under
// a cap (--cap), or the device itself (--probe, whose session the returned
// func closes). With the probe the margin is dropped (it measures the
// device) and the search starts from the estimator's answer, since each
// probe evaluation allocates on the device.
func tuneOracle(c *cli.Context, spec *model.Spec, band tuner.Band, cons *tuner.Constraints) (tuner.Oracle, func(), error) {
	if c.Bool("probe") {
		s, err := probeSession(c, spec, band.Hi)
		if err != nil {
			return nil, func() {}, err
		}
		cons.Margin = 0
		if a, err := tuner.Tune(spec, band, *cons, tuner.Analytic); err == nil {
			cons.Hint = a.Batch
		}
		return s.Measure, func() { s.Close() }, nil
	}
	if c.Bool("cap") {
		return tuner.Capped(tuner.Limit(band, *cons)), func() {}, nil
	}
	cons.Stop = tuner.AnalyticStop // the fixes' estimates stop once they cannot matter
	return tuner.Analytic, func() {}, nil
}

// seqsArg reads --seqs, the sequence lengths the job sees.
func seqsArg(c *cli.Context) ([]int64, error) {
	var seqs []int64
	if s := c.String("seqs"); s != "" {
		for _, p := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
			if err != nil || n <= 0 {
				return nil, usageError{fmt.Sprintf("--seqs: %q is not a positive length", p)}
			}
			seqs = append(seqs, n)
		}
	}
	return seqs, nil
}

func printTune(w io.Writer, spec *model.Spec, r *tuner.Result, capped bool) {
	mem := spec.Device.Memory
	if r.Batch == 0 {
		// The smallest batch the search tried (1 unless the constraints
		// rule it out), at its sequence length (--seqs), estimated again
		// for what the oracle's total leaves out: why it needs so much,
		// where the run leaks.
		one := *spec
		one.Training.Batch = 1
		if len(r.Trials) > 0 {
			one.Training.Batch = r.Trials[0].Batch
		}
		fmt.Fprintf(w, "%s: batch %d does not fit %s: %s predicted, %.1f%% of %s\n", spec.Name, one.Training.Batch, spec.Device.Name,
			units.Format(r.DeviceTotal), 100*r.Fill, units.Format(mem))
		if r.Seq > 0 {
			one.Training.Seq = r.Seq
		}
		if e, err := estimate.Estimate(&one); err == nil {
			printLeak(w, e)
		}
		fmt.Fprintln(w, "\nchanges that would make it fit, fewest GPUs first, then cheapest (each re-estimated):")
		for _, f := range r.Fixes {
			if f.DeviceTotal == 0 {
				fmt.Fprintf(w, "  %s (%s)\n", f.Change, f.Why)
				continue
			}
			mark := "fits"
			if !f.Fits {
				mark = "still too big (closest tried)"
			}
			fmt.Fprintf(w, "  %-70s %9s  %5.1f%%  %s — %s\n", f.Change, units.Format(f.DeviceTotal), 100*f.Fill, mark, f.Why)
		}
		return
	}
	fmt.Fprintf(w, "%s on %s: micro-batch %d", spec.Name, spec.Device.Name, r.Batch)
	if r.Seq > 0 {
		fmt.Fprintf(w, " at seq %d", r.Seq)
	}
	what := "predicted device total"
	if capped {
		what = "predicted peak reserved under the allocator cap"
	}
	fmt.Fprintf(w, "\n  %s %s = %.1f%% of %s (band %.0f-%.0f%%), %s below the upper edge",
		what, units.Format(r.DeviceTotal), 100*r.Fill, units.Format(mem), 100*r.Band.Lo, 100*r.Band.Hi, units.Format(r.Margin))
	if r.SafetyMargin > 0 {
		fmt.Fprintf(w, " (%.1f%% of it kept as a safety margin for the estimate's error; --margin 0 to use it)", 100*r.SafetyMargin)
	}
	fmt.Fprintln(w)
	for _, w2 := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", w2)
	}
	if p := r.Plan; p != nil {
		fmt.Fprintf(w, "  global batch %d over %d ranks: micro-batch %d × %d accumulation steps = %d", p.GlobalBatch, p.DP, p.MicroBatch, p.Accum, p.Achieved)
		if p.Note != "" {
			fmt.Fprintf(w, " (%s)", p.Note)
		}
		fmt.Fprintln(w)
	}
}

// exitCode carries a specific exit status for commands with their own
// codes (check, tune).
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }
func (e exitCode) Unwrap() error { return e.err }

// pausedBatch is tune's answer for a DDP or ZeRO-1 job whose loop pauses
// after its first step, where that is a larger micro-batch.
type pausedBatch struct {
	StepPause   float64 `json:"step_pause"`
	Batch       int64   `json:"batch"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
}

// tuneIfPaused tunes spec again as if its loop paused estimate.DDPSettle
// after its first optimizer step (which frees DDP's old bucket at the
// rebuild: docs/multigpu.md) and returns the answer when its micro-batch
// is larger than r's, else nil.
func tuneIfPaused(spec *model.Spec, band tuner.Band, cons tuner.Constraints, oracle tuner.Oracle, r *tuner.Result) (*pausedBatch, error) {
	cons.Hint = r.Batch
	p, err := tuner.Tune(pausedSpec(spec), band, cons, oracle)
	switch {
	case err != nil && !errors.Is(err, tuner.ErrNoFit):
		return nil, fmt.Errorf("tune with --step-pause %g: %w", estimate.DDPSettle, err)
	case err != nil || p.Batch <= r.Batch:
		return nil, nil
	}
	return &pausedBatch{StepPause: estimate.DDPSettle, Batch: p.Batch, DeviceTotal: p.DeviceTotal, Fill: p.Fill}, nil
}

// printPlanFallback says what tensor, pipeline and context parallelism can
// do when none of tune's changes fits: the planned layout, or the memplan
// plan command to run (cmd, planCommand's).
func printPlanFallback(w io.Writer, cmd string, gb int64, c *planner.Candidate) {
	switch {
	case gb <= 0:
		fmt.Fprintf(w, "  tensor, pipeline and context parallel layouts: %s --global-batch N\n", cmd)
	case c == nil:
		fmt.Fprintf(w, "  memplan plan: no layout fits up to %d GPUs at global batch %d\n", planner.DefaultMaxGPUs, gb)
	default:
		fmt.Fprintf(w, "  memplan plan's layout at global batch %d: %s on %d GPUs, %s per GPU (%.1f%%)\n",
			gb, c.Name, c.GPUs, units.Format(c.Memory.DeviceTotal), 100*c.Fill)
	}
}

// planCommand is the memplan plan command for the job tune was given: its
// SPEC or --hf config and every flag it was given that plan takes too
// (planFlags).
func planCommand(c *cli.Context) string {
	args := []string{"memplan", "plan"}
	if p := c.Args().First(); p != "" {
		args = append(args, shellquote.Quote(p))
	}
	return strings.Join(append(args, planFlags(c)...), " ")
}

// planFlags is every flag c was given that memplan plan takes too, but
// --global-batch and those named in skip, quoted for a shell. Plan chooses
// the batch, data parallelism, ZeRO stage and checkpointing itself, so
// it has no such flags and they are left out.
func planFlags(c *cli.Context, skip ...string) []string {
	var args []string
	for _, f := range planCmd().Flags {
		name := f.Names()[0]
		if name == "global-batch" || slices.Contains(skip, name) || !c.IsSet(name) {
			continue
		}
		if v, ok := c.Value(name).(bool); ok {
			if v {
				args = append(args, "--"+name)
			}
			continue
		}
		args = append(args, "--"+name, shellquote.Quote(fmt.Sprint(c.Value(name))))
	}
	return args
}
