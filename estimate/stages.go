package estimate

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// Rank kinds of a pipeline: the stages run different programs.
const (
	KindFirst  = "first stage"
	KindMiddle = "middle stage"
	KindLast   = "last stage"
)

// StageMemory is one kind of pipeline rank's estimate.
type StageMemory struct {
	// Kind is KindFirst, KindMiddle or KindLast; Stage the stage (from 0)
	// whose figures these are: the busiest of its kind. Under the
	// interleaved schedule Stage is the rank (the first rank holds the
	// first stage, the last rank the last) and Blocks its stages' blocks.
	Kind   string `json:"kind"`
	Stage  int64  `json:"stage"`
	Blocks int64  `json:"blocks"`
	Params int64  `json:"parameters"`

	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	DeviceTotal   int64  `json:"device_total_bytes"`
	PeakPhase     Phase  `json:"peak_phase"`
	AtPeak        []Item `json:"at_peak"`
}

// Pipeline says how the stages of a pipeline-parallel run differ; the
// Result's figures are the busiest stage's (docs/parallelism.md §3.2).
type Pipeline struct {
	Stages   int64  `json:"stages"`
	Schedule string `json:"schedule"`
	// Virtual is the stages each rank holds (interleaved schedule).
	Virtual      int64 `json:"virtual_stages,omitempty"`
	MicroBatches int64 `json:"micro_batches"`
	// Busiest is the stage with the largest device total.
	Busiest int64 `json:"busiest_stage"`
	// Kinds are the first, middle (with more than two stages) and last
	// stage, in that order.
	Kinds []StageMemory `json:"kinds"`
}

// estimatePipeline simulates every stage of a pipeline-parallel run and
// returns the busiest stage's Result with the Pipeline of every kind. The
// stages are independent simulations, run on up to GOMAXPROCS goroutines
// (one at a time under a test's inspect hook); the result does not depend
// on how many run at once.
func estimatePipeline(spec *model.Spec, inspect func(*sim), setup func(*sim)) (*Result, error) {
	t := spec.Training
	rs, err := simulateStages(spec, inspect, setup, stageWorkers(inspect, t.PP))
	if err != nil {
		return nil, err
	}
	var best *Result
	var kinds []StageMemory
	for st, r := range rs {
		st := int64(st)
		kind := KindMiddle
		switch st {
		case 0:
			kind = KindFirst
		case t.PP - 1:
			kind = KindLast
		}
		sm := StageMemory{Kind: kind, Stage: st, Blocks: r.blocks, Params: r.Params,
			PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved, DeviceTotal: r.DeviceTotal,
			PeakPhase: r.PeakPhase, AtPeak: r.AtPeak}
		if n := len(kinds); n > 0 && kinds[n-1].Kind == kind {
			if sm.DeviceTotal > kinds[n-1].DeviceTotal {
				kinds[n-1] = sm
			}
		} else {
			kinds = append(kinds, sm)
		}
		if best == nil || r.DeviceTotal > best.DeviceTotal {
			best = r.Result
			best.Pipeline = &Pipeline{Stages: t.PP, Schedule: t.PPSchedule, MicroBatches: t.GradAccum, Busiest: st}
			if v := t.Virtual(); v > 1 {
				best.Pipeline.Virtual = v
			}
		}
	}
	best.Pipeline.Kinds = kinds
	best.Params = spec.Params() // the model's; each kind has its stage's
	if m := &spec.Model; m.Tied {
		best.Notes = append(best.Notes, fmt.Sprintf("tied embeddings: split as Megatron-LM splits them, the last stage's head holding a copy of the %d×%d vocabulary matrix (counted in its parameters), the two gradients all-reduced over the first and last stages' ranks after each backward, one more NCCL communicator on those ranks (torchtitan refuses tied weights under a pipeline)",
			m.Vocab, m.Hidden))
	}
	return best, nil
}

// stageResult is one pipeline rank's Result and the blocks its stages hold.
type stageResult struct {
	*Result
	blocks int64
}

// stageWorkers is how many stages estimatePipeline simulates at once: one
// under a test's inspect hook (which sees one simulation at a time), else
// up to GOMAXPROCS.
func stageWorkers(inspect func(*sim), stages int64) int {
	if inspect != nil {
		return 1
	}
	return int(min(int64(runtime.GOMAXPROCS(0)), stages))
}

// simulateStages simulates every rank of a pipeline, up to workers at a
// time, and returns their results by rank, or the first rank's error. The
// calling goroutine simulates stages itself; helpers join it while the
// process-wide pool of them (stageHelpers) has room, so that searches that
// run estimates on every core do not multiply the simulations in flight.
func simulateStages(spec *model.Spec, inspect func(*sim), setup func(*sim), workers int) ([]stageResult, error) {
	n := spec.Training.PP
	rs := make([]stageResult, n)
	errs := make([]error, n)
	var next atomic.Int64
	run := func() {
		// The last stage first: it holds the logits and is the busiest
		// of most layouts, so a simulation with Options.StopAbove stops
		// there before simulating the others.
		for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
			st := n - 1 - i
			var blocks int64
			simulate := func(role func(*sim)) (*Result, error) {
				p, err := newPipeline(spec, st)
				if err != nil {
					return nil, err
				}
				blocks = p.rankBlocks()
				return simulateRank(spec, inspect, func(s *sim) {
					s.pp = p
					if setup != nil {
						setup(s)
					}
					role(s)
				})
			}
			var r *Result
			var err error
			if spec.Training.EP > 1 {
				// Each kind of expert-parallel rank of the stage: the
				// one that sends may reserve more than the receiver.
				r, err = busiestExpertRank(spec, simulate)
			} else {
				r, err = simulate(func(*sim) {})
			}
			if err != nil {
				errs[st] = fmt.Errorf("pipeline stage %d: %w", st, err)
				continue
			}
			rs[st] = stageResult{r, blocks}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		select {
		case stageHelpers <- struct{}{}:
			wg.Add(1)
			go func() {
				defer func() { <-stageHelpers; wg.Done() }()
				run()
			}()
		default: // every helper busy: fewer at once
		}
	}
	run()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// stageHelpers holds a token for each helper goroutine simulating stages,
// process-wide: at most GOMAXPROCS (as the process started).
var stageHelpers = make(chan struct{}, runtime.GOMAXPROCS(0))

// p2pPeerBytes is what one more point-to-point peer that a rank both
// sends to and receives from adds to NCCL's memory (parallel.NCCLBytes:
// 384 MiB at the default channels and NCCL_BUFFSIZE).
func p2pPeerBytes() int64 {
	c := parallel.H200x2Defaults
	c.SendPeers, c.RecvPeers = 1, 1
	two := c
	two.SendPeers, two.RecvPeers = 2, 2
	return mustNCCL(parallel.NCCLBytes(two)) - mustNCCL(parallel.NCCLBytes(c))
}

// pipelineNCCL is the device memory NCCL holds on a pipeline rank: the
// communicators of its layout (communicators: the pipeline group's and one
// for each other parallel dimension larger than one, and the default
// group's when tensor parallelism draws the stage's DTensor parameters on
// a mesh of two dimensions or more; an expert- or context-parallel
// all-to-all adds its point-to-point buffers: layoutNCCL), and the
// point-to-point connections to each neighbouring rank. batch_isend_irecv runs on the pipeline
// group's communicator, so it adds no communicator of its own. A
// pipeline's modules are built on the meta device, so tensor parallelism's
// scatter of the parameters (loadWhole) is not there. The ranks of the
// first and the last stage of a model with tied embeddings have one more
// communicator, the embedding group's (Megatron-LM's; model's
// stageSlice), even where its two ranks are the pipeline group's. OLMo 2's
// and 3's stages under tensor parallelism connect their tp peers for the
// query and key norms' all-to-all (p.tpAllToAll; measured: 4 × H100,
// device in use 2.5–2.7% above the prediction without them,
// bench/results/2026-11-28-h100x4-pp-families).
func pipelineNCCL(p *pipeline, t model.Training) int64 {
	c := pipelineBaseNCCL(t, p.tpAllToAll)
	if p.embeddingGroup {
		c.Communicators++
	}
	n := mustNCCL(parallel.NCCLBytes(c))
	if peers := p.peers(t.PP); peers > 1 {
		// Every further neighbour: measured on the middle stages of four
		// (device in use less reserved 2,153 MiB against the first and
		// last stages' 1,769), what a peer of an all-to-all costs.
		n += (peers - 1) * p2pPeerBytes()
	}
	return n
}

// peers is the number of other ranks the rank's stages send to or receive
// from, of pp.
func (p *pipeline) peers(pp int64) int64 {
	rank := p.stage % pp
	seen := map[int64]bool{}
	for _, q := range p.local {
		if q.stage > 0 {
			seen[(q.stage-1)%pp] = true
		}
		if q.stage < q.stages-1 {
			seen[(q.stage+1)%pp] = true
		}
	}
	delete(seen, rank)
	return int64(len(seen))
}

// pipelineOverhead replaces the data-parallel NCCL line of a stage's
// result with the pipeline's and updates the device total.
func (s *sim) pipelineOverhead(r *Result) {
	var old int64
	items := r.Overhead[:0]
	for _, o := range r.Overhead {
		if o.Name == OverheadNCCL {
			old += o.Bytes
			continue
		}
		items = append(items, o)
	}
	n := pipelineNCCL(s.pp, r.Training)
	r.Overhead = append(items, Item{OverheadNCCL, n})
	r.DeviceTotal += n - old
	if r.Ranks != nil {
		for i := range r.Ranks.DeviceTotal {
			r.Ranks.DeviceTotal[i] += n - old
		}
	}
	if r.Device.Memory > 0 {
		r.Fill = float64(r.DeviceTotal) / float64(r.Device.Memory)
		r.Fits = r.DeviceTotal <= r.Device.Memory
	}
}
