package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/diagnose"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

func diagnoseCmd() *cli.Command {
	return &cli.Command{
		Name:      "diagnose",
		Usage:     "say why a job ran out of GPU memory: pressure, fragmentation, a leak or another process",
		ArgsUsage: "FILE... [SPEC.yaml]",
		Description: `Reads what PyTorch left after a CUDA out-of-memory error, each file's kind
detected by its content: a log with the torch.OutOfMemoryError message (every
rank's, with "[rank1]:" or torchrun's "[default1]:" prefixes), the JSON of
torch.cuda.memory_stats() (one dump or one line per step), the text of
torch.cuda.memory_summary(), and a snapshot pickle from
torch.cuda.memory._dump_snapshot() (gzipped files too). With the job's
description (a SPEC.yaml argument, or --hf config.json with the same flags as
estimate) the memory seen is held against memplan's prediction.

Exit codes: 0 a verdict, 1 failure at run time, 2 bad usage or a file that
cannot be read (named in the error). docs/diagnose.md has the rules.

Example:
   memplan diagnose train.log
   memplan diagnose stats.jsonl summary.txt --hf config.json --batch 16 --seq 1024
   memplan diagnose snapshot.pickle --format json`,
		Flags: append(overrideFlags(), formatFlag,
			&cli.Float64Flag{Name: "fraction", Usage: "the job's torch.cuda.set_per_process_memory_fraction, if it set one"}),
		Action: runDiagnose,
	}
}

func runDiagnose(c *cli.Context) error {
	f, err := format(c)
	if err != nil {
		return err
	}
	var files []string
	specPath := ""
	for _, a := range c.Args().Slice() {
		if strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".yml") {
			specPath = a
			continue
		}
		files = append(files, a)
	}
	if len(files) == 0 {
		if specPath != "" {
			return usageError{fmt.Sprintf("diagnose: give at least one evidence FILE (%s was taken as the job's SPEC; see memplan diagnose --help)", specPath)}
		}
		return usageError{"diagnose: give at least one evidence FILE (see memplan diagnose --help)"}
	}
	var evs []*diagnose.Evidence
	for _, p := range files {
		e, err := diagnose.Read(p)
		if err != nil {
			var ie *diagnose.InputError
			if errors.As(err, &ie) {
				return usageError{err.Error()}
			}
			return usageError{fmt.Sprintf("%s: %v", p, err)}
		}
		evs = append(evs, e)
	}
	job, err := diagnoseJob(c, specPath)
	if err != nil {
		return err
	}
	r := diagnose.Diagnose(evs, job)
	if f == "json" {
		return writeJSON(c.App.Writer, r)
	}
	return printDiagnosis(c.App.Writer, r)
}

// diagnoseJob reads the job's description, when given, and predicts it.
func diagnoseJob(c *cli.Context, specPath string) (diagnose.Job, error) {
	job := diagnose.Job{Fraction: c.Float64("fraction")}
	var spec *model.Spec
	var err error
	switch {
	case c.String("hf") != "":
		if specPath != "" {
			return job, usageError{"diagnose: give either SPEC or --hf, not both"}
		}
		if c.Int64("seq") == 0 {
			return job, usageError{"diagnose --hf: --seq is required (a config has no sequence length)"}
		}
		o := overrides(c)
		if o.Batch == 0 {
			o.Batch = 1
		}
		spec, err = model.LoadHF(c.String("hf"), o)
	case specPath != "":
		spec, err = model.Load(specPath, overrides(c))
	default:
		if d := c.String("device"); d != "" {
			dev, ok := model.LookupDevice(d)
			if !ok {
				return job, usageError{fmt.Sprintf("--device %q: not in the catalog (memplan devices)", d)}
			}
			job.DeviceMemory = dev.Memory
		}
		return job, nil
	}
	if err != nil {
		return job, err
	}
	job.DeviceMemory = spec.Device.Memory
	if job.Predicted, err = diagnose.Predict(spec, job.Fraction); err != nil {
		return job, fmt.Errorf("estimate %s: %w", spec.File, err)
	}
	return job, nil
}

func printDiagnosis(w io.Writer, r *diagnose.Report) error {
	for _, fk := range r.Files {
		fmt.Fprintf(w, "read %s (%s)\n", fk.File, fk.Kind)
	}
	vs := r.Ranks
	if len(vs) == 0 {
		vs = []diagnose.Verdict{r.Verdict}
	}
	for _, v := range vs {
		fmt.Fprintln(w)
		if v.Rank >= 0 {
			fmt.Fprintf(w, "rank %d: ", v.Rank)
		}
		fmt.Fprintf(w, "cause: %s", v.Cause)
		if v.Confidence != diagnose.High {
			fmt.Fprintf(w, " (%s confidence)", v.Confidence)
		}
		fmt.Fprintf(w, "\n  %s\n", v.Reason)
		for _, a := range v.Alternatives {
			fmt.Fprintf(w, "  or %s: %s\n", a.Cause, a.Why)
		}
		printFigures(w, v)
		if len(v.Sites) > 0 {
			fmt.Fprintln(w, "  never freed, by where it was allocated:")
			for _, s := range v.Sites {
				fmt.Fprintf(w, "    %s: %d allocations, %s\n", s.Frame, s.Allocs, units.Format(s.Bytes))
			}
		}
		if len(v.Fixes) > 0 {
			fmt.Fprintln(w, "  fixes:")
			for _, f := range v.Fixes {
				fmt.Fprintf(w, "    - %s\n", f)
			}
		}
	}
	return nil
}

func printFigures(w io.Writer, v diagnose.Verdict) {
	f := v.Figures
	rows := []struct {
		name string
		v    int64
	}{
		{"request", f.Request}, {"limit for this process", f.Limit}, {"device total", f.DeviceTotal},
		{"device free", f.DeviceFree}, {"other processes", f.OtherProcesses}, {"outside the allocator", f.NonPyTorch},
		{"allocated", f.Allocated}, {"reserved", f.Reserved}, {"reserved but free", f.Stranded},
		{"largest free block", f.LargestFree}, {"missing", f.Missing}, {"growth per step", f.GrowthPerStep},
		{"kept per step, nothing freed", f.KeptPerStep}, {"carried from earlier steps", f.CarriedBytes},
		{"DDP's old bucket, kept past its rebuild", f.DDPRaceBytes},
	}
	if p := v.Predicted; p != nil {
		rows = append(rows, struct {
			name string
			v    int64
		}{"predicted peak reserved", p.PeakReserved})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range rows {
		if r.v > 0 {
			fmt.Fprintf(tw, "  %s\t%s\t\n", r.name, units.Format(r.v))
		}
	}
	tw.Flush()
	if f.Retries > 0 || f.OOMs > 0 {
		fmt.Fprintf(w, "  cudaMalloc retries %d, out-of-memory errors %d\n", f.Retries, f.OOMs)
	}
}
