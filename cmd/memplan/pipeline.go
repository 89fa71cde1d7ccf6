package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
)

// printPipeline prints how the stages of a pipeline-parallel estimate
// differ: one line per kind of stage (first, middle, last) with its peaks
// and where they fall; the rest of the estimate is the busiest stage's.
func printPipeline(w io.Writer, r *estimate.Result) error {
	p := r.Pipeline
	if p == nil {
		return nil
	}
	if p.Virtual > 1 {
		// Interleaved: the kinds are ranks (the first holds stage 0, the
		// last the last stage).
		fmt.Fprintf(w, "pipeline: %d ranks × %d stages, %s schedule, %d micro-batches of %d; figures below are the busiest rank's, rank %d\n",
			p.Stages, p.Virtual, p.Schedule, p.MicroBatches, r.Training.Batch, p.Busiest)
	} else {
		fmt.Fprintf(w, "pipeline: %d stages, %s schedule, %d micro-batches of %d; figures below are the busiest stage's, stage %d\n",
			p.Stages, p.Schedule, p.MicroBatches, r.Training.Batch, p.Busiest)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  stage\tblocks\tparameters\tpeak allocated\tpeak reserved\tdevice total\tpeak in")
	for _, k := range p.Kinds {
		fmt.Fprintf(tw, "  %s %d\t%d\t%s\t%s\t%s\t%s\t%s\n", k.Kind, k.Stage, k.Blocks, commas(k.Params),
			units.Format(k.PeakAllocated), units.Format(k.PeakReserved), units.Format(k.DeviceTotal), k.PeakPhase)
	}
	return tw.Flush()
}

// printExperts prints the kinds of rank of an expert-parallel estimate with
// skewed routing (the busiest receiver, a balanced one, and the ranks that
// receive the rest); the rest of the estimate is the one with the largest
// device total.
func printExperts(w io.Writer, r *estimate.Result) error {
	x := r.Experts
	if x == nil {
		return nil
	}
	fmt.Fprintf(w, "expert parallelism: figures below are the %s rank's\n", x.Busiest)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  rank\tpeak allocated\tpeak reserved\tdevice total")
	for _, k := range x.Kinds {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", k.Kind, units.Format(k.PeakAllocated), units.Format(k.PeakReserved), units.Format(k.DeviceTotal))
	}
	return tw.Flush()
}
