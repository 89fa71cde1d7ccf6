package estimate

import (
	"sync/atomic"

	"github.com/memplan/memplan/model"
)

// Options change how a run is simulated.
type Options struct {
	// ReservedLimit caps the caching allocator's reserved memory, as
	// torch.cuda.set_per_process_memory_fraction(ReservedLimit / total)
	// does; the result's OOM says whether the run would fail under it.
	ReservedLimit int64
	// StopAbove, when positive, ends the simulation as soon as the device
	// total is known to be above it (reserved memory so far plus the
	// overheads outside the allocator that the run has for certain). The
	// result then has Stopped set, Fits false and a device total above
	// StopAbove: enough for a search that only asks whether a run fits,
	// at a fraction of the cost when it is far over. Results that stay
	// under it are Estimate's.
	StopAbove int64
}

// EstimateOptions is Estimate with options.
func EstimateOptions(spec *model.Spec, o Options) (*Result, error) {
	var stop *atomic.Bool
	if o.StopAbove > 0 {
		stop = new(atomic.Bool)
	}
	return estimateWith(spec, nil, func(s *sim) {
		s.al.limit = o.ReservedLimit
		s.stopAbove, s.al.stopped = o.StopAbove, stop
	})
}

// surelyOutside is the device memory outside the caching allocator that
// a rank of run holds whatever it computes: the CUDA context, the kernel
// modules every run loads, and NCCL's communicators (a pipeline rank's
// with its point-to-point buffers). overhead adds to it what the
// simulation finds (the half-precision GEMM modules). Under a pipeline it
// is for the rank s.pp is before the simulation starts (the schedule
// points s.pp at each of the rank's stages in turn).
func (s *sim) surelyOutside(run model.Training) []Item {
	nccl := ncclFor(run, s.tpAllToAll)
	if s.pp != nil {
		nccl = pipelineNCCL(s.pp, run)
	}
	return overhead(usage{}, nccl)
}

func total(items []Item) int64 {
	var n int64
	for _, it := range items {
		n += it.Bytes
	}
	return n
}

// stopSignal is what the allocator panics with when a simulation with
// Options.StopAbove passes it (allocator.mallocOn); simulateRank recovers
// it and returns stoppedResult.
type stopSignal struct{}

// stoppedResult is the Result of a simulation stopped at its allocator's
// last malloc: the peaks so far, with the overheads the run has for
// certain, so that its device total is a lower bound of the whole run's.
// A rank stopped because another rank of its estimate passed the level
// (pipeline stages, expert-parallel kinds) has a total under it.
func (s *sim) stoppedResult(spec *model.Spec, run model.Training) *Result {
	// s.outside is what stopAt was set from.
	r := &Result{
		SchemaVersion: SchemaVersion,
		Name:          spec.Name,
		ModelType:     spec.Model.Type,
		Params:        spec.Params(),
		Training:      run,
		Device:        spec.Device,
		PeakAllocated: s.peak.allocated,
		PeakReserved:  s.peak.reserved,
		PeakPhase:     s.phase,
		Overhead:      s.outside,
		Stopped:       true,
	}
	if a := s.al.a; a != nil {
		// The malloc that stopped came in the middle of an op, before
		// observe recorded it in s.peak.
		r.PeakAllocated = max(r.PeakAllocated, a.Allocated())
		r.PeakReserved = max(r.PeakReserved, a.Reserved())
	}
	r.DeviceTotal = r.PeakReserved + r.OverheadBytes()
	if spec.Device.Memory > 0 {
		r.Fill = float64(r.DeviceTotal) / float64(spec.Device.Memory)
	}
	r.Notes = []string{"the simulation stopped once the device total passed the level it was asked about: the figures are lower bounds"}
	return r
}

// armStop sets the reserved memory past which the allocator stops the
// simulation (Options.StopAbove less surelyOutside).
func (s *sim) armStop(run model.Training) {
	s.outside = s.surelyOutside(run)
	s.al.stopAt = s.stopAbove - total(s.outside)
}

// recoverStop, deferred by simulateRank, turns the allocator's stopSignal
// into the stopped Result; any other panic goes on.
func (s *sim) recoverStop(spec *model.Spec, run model.Training, r **Result, err *error) {
	e := recover()
	if e == nil {
		return
	}
	if _, ok := e.(stopSignal); !ok {
		panic(e)
	}
	*r, *err = s.stoppedResult(spec, run), nil
	s.slab.release(s.tape)
}
