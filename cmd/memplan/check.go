package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
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
	// IfPaused is the verdict the job would get if its loop paused after
	// its first optimizer step (--step-pause 0.2): set when the job does
	// not fit the target and the estimate keeps DDP's old bucket (its
	// rebuild race, docs/multigpu.md).
	IfPaused *Paused `json:"if_paused,omitempty"`
}

// Paused is check's verdict with DDP's rebuild race removed by a pause.
type Paused struct {
	StepPause   float64 `json:"step_pause"`
	Verdict     string  `json:"verdict"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
}

func checkCmd() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "pre-flight: does this job fit? (exit code says)",
		ArgsUsage: "SPEC",
		Description: `Predicts the job's device total and prints a one-line verdict. When a
DDP or ZeRO-1 job misses the target and its estimate keeps DDP's old gradient
bucket (the rebuild race, docs/multigpu.md), a second line gives the verdict
if the loop synchronized and slept 0.2 s after its first step
(--step-pause 0.2); the exit code stays the job's as described.

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
		Flags:  append(append(overrideFlags(), probeFlags()...), targetFlag, formatFlag, marginFlag),
		Action: checkAction,
	}
}

func checkAction(c *cli.Context) error {
	f, band, spec, err := targetArgs(c)
	if err != nil {
		return err
	}
	used, est, err := checkUse(c, spec)
	if err != nil {
		return err
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
	if r, ok := est.(*estimate.Result); ok && v.ExitCode != 0 && r.DDPRaceBytes > 0 {
		if v.IfPaused, err = ifPaused(spec, band, margin); err != nil {
			return err
		}
	}
	if f == "json" {
		if err := writeJSON(c.App.Writer, v); err != nil {
			return err
		}
	} else {
		printCheck(c.App.Writer, spec, v, band, margin)
	}
	if v.ExitCode != 0 {
		return exitCode{v.ExitCode, silent{}}
	}
	return nil
}

// checkUse is the job's device total: estimated, or measured with --probe.
func checkUse(c *cli.Context, spec *model.Spec) (int64, any, error) {
	if !c.Bool("probe") {
		r, err := estimate.Estimate(spec)
		if err != nil {
			return 0, nil, err
		}
		return r.DeviceTotal, r, nil
	}
	s, err := probeSession(c, spec, 1)
	if err != nil {
		return 0, nil, err
	}
	used, err := s.Measure(spec)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, nil, err
	}
	return used, "measured on the device by --probe", nil
}

// printCheck writes check's verdict line, and the verdict with the pause
// when there is one.
func printCheck(w io.Writer, spec *model.Spec, v Verdict, band tuner.Band, margin float64) {
	fmt.Fprintf(w, "%s: %s at batch %d: %s of %s (%.1f%%, target ≤ %.1f%%: %.0f%% less a %.1f%% safety margin)\n", v.Verdict, spec.Name,
		v.Batch, units.Format(v.DeviceTotal), units.Format(v.Memory), 100*v.Fill, 100*v.Limit, 100*band.Hi, 100*margin)
	if p := v.IfPaused; p != nil {
		// The pause: torch.cuda.synchronize() then time.sleep after the
		// first optimizer step, which frees DDP's old gradient bucket.
		fmt.Fprintf(w, "  %s: %s, %s (%.1f%%)\n", ifPausedLead(p.StepPause), p.Verdict, units.Format(p.DeviceTotal), 100*p.Fill)
	}
	if r, ok := v.Estimate.(*estimate.Result); ok {
		printLeak(w, r)
	}
}

// printLeak says, for a run that leaks memory every step, how much and
// that its figures are its last step's (estimate.Result.LeakPerStep).
func printLeak(w io.Writer, r *estimate.Result) {
	if r.LeakPerStep > 0 {
		fmt.Fprintf(w, "  the run keeps %s more after every step (a checkpointed recompute's unwaited collectives, docs/parallelism.md §3.1.6): the figures are step %d's (--steps gives the run's length; without checkpointing nothing leaks)\n",
			units.Format(r.LeakPerStep), r.LeakSteps)
	}
}

// silent is an error that prints nothing: the verdict already said it.
type silent struct{}

func (silent) Error() string { return "" }

// ifPaused re-estimates spec as if its loop paused estimate.DDPSettle after
// its first optimizer step, which frees DDP's old bucket at the rebuild.
func ifPaused(spec *model.Spec, band tuner.Band, margin float64) (*Paused, error) {
	r, err := estimate.Estimate(pausedSpec(spec))
	if err != nil {
		return nil, err
	}
	return &Paused{StepPause: estimate.DDPSettle, Verdict: tuner.Fits(r.DeviceTotal, spec.Device.Memory, band, margin).String(),
		DeviceTotal: r.DeviceTotal, Fill: float64(r.DeviceTotal) / float64(spec.Device.Memory)}, nil
}

// ifPausedLead opens check's and tune's line for a loop that pauses p
// seconds after its first step.
func ifPausedLead(p float64) string {
	return fmt.Sprintf("if the loop syncs and sleeps %g s after its first step (--step-pause %g)", p, p)
}

// pausedSpec is a copy of spec whose loop pauses estimate.DDPSettle after
// its first optimizer step (check's and tune's second answer).
func pausedSpec(spec *model.Spec) *model.Spec {
	s := *spec
	s.Training.StepPause = estimate.DDPSettle
	return &s
}
