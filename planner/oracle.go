package planner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// Rank kinds: the ranks of a layout that run different programs. Without
// pipeline parallelism every rank runs the same one (All).
const (
	All    = "all"
	First  = estimate.KindFirst
	Middle = estimate.KindMiddle
	Last   = estimate.KindLast
)

// RankMemory is the predicted memory of one kind of rank.
type RankMemory struct {
	Kind          string `json:"kind"`
	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	DeviceTotal   int64  `json:"device_total_bytes"`
}

// Busiest is an oracle's answer for a layout: the rank with the largest
// device total, and every kind of rank.
type Busiest struct {
	RankMemory
	Kinds []RankMemory `json:"kinds"`
	// Stopped says the oracle stopped estimating once the busiest rank
	// passed the level it was given (Stopper): DeviceTotal is then a
	// lower bound, above that level, and Kinds are incomplete.
	Stopped bool `json:"stopped,omitempty"`
}

// Oracle predicts the memory of a layout's ranks.
type Oracle interface {
	// Estimate returns the busiest rank of spec run with layout l, or an
	// error: a *NotSimulatedError when it cannot simulate the layout.
	Estimate(spec *model.Spec, l Layout) (Busiest, error)
}

// NotSimulatedError is returned by an Oracle for a layout it cannot
// simulate yet (Simulator: tensor, pipeline or context parallelism, and
// expert parallelism with a ZeRO stage).
type NotSimulatedError struct {
	// What lists the parallelisms, such as "tensor parallelism".
	What []string
}

func (e *NotSimulatedError) Error() string {
	return strings.Join(e.What, ", ") + " not yet simulated"
}

// MaxPipelineMicrobatches is the most micro-batches per step a pipeline
// layout may have for Simulator to estimate it unless its
// MaxMicrobatches says otherwise. The simulator replays a schedule
// micro-batch by micro-batch, so a plan over hundreds of accumulation
// steps would take minutes; such layouts are reported as not simulated
// instead.
// 32 hid the best layout of the 70B request of docs/planner.md §4 (a 1F1B
// pipeline of 64 micro-batches, its step a quarter shorter by the proxy).
const MaxPipelineMicrobatches = 64

// Simulator is the Oracle backed by memplan's estimator: it simulates
// data parallelism with ZeRO stages 0–3, tensor parallelism with sequence
// and loss parallelism (torchtitan's plan, Llama models), pipeline
// parallelism with the gpipe, 1f1b and interleaved schedules (each kind of
// stage; under the interleaved schedule DDP and ZeRO 1 wrap each stage
// module),
// expert parallelism under DDP or FSDP (ZeRO 0, 2, 3; docs/moe.md §4; in
// pipeline stages too, §5; with context parallelism under FSDP, §6),
// context parallelism alone, with tensor parallelism inside each cp rank
// or with FSDP over dp·cp (docs/parallelism.md §3.3), checkpointing and
// any micro-batch and accumulation, and returns a *NotSimulatedError for
// layouts with CP together with DDP or ZeRO 1,
// EP with ZeRO 1, EP with CP without FSDP, EP with TP but without SP or
// under DDP (TP of a mixture of experts is simulated: docs/moe.md §7–8),
// and tensor parallelism of models the plan does not cover. Pipelines run
// gpipe, 1f1b or interleaved, with TP or CP inside their stages, tied
// embeddings split as Megatron-LM splits them (docs/parallelism.md).
type Simulator struct {
	// MaxMicrobatches is the most micro-batches per step of a pipeline
	// layout it estimates (0: MaxPipelineMicrobatches); longer pipelines
	// are not simulated.
	MaxMicrobatches int64
}

// maxMicrobatches is sim's cap on a pipeline's micro-batches.
func (sim Simulator) maxMicrobatches() int64 {
	if sim.MaxMicrobatches > 0 {
		return sim.MaxMicrobatches
	}
	return MaxPipelineMicrobatches
}

// Simulates implements Screener: the layouts Estimate refuses before
// simulating (tensor parallelism of models the plan does not cover is
// found only by lowering the model, in Estimate).
func (sim Simulator) Simulates(spec *model.Spec, l Layout) error {
	if err := notSimulated(l); err != nil {
		return err
	}
	if spec.Training.LoRA.Enabled() {
		var u *model.UnsimulatedLoRA
		if err := Apply(spec, l).LoRALayoutOK(); errors.As(err, &u) {
			return &NotSimulatedError{What: []string{u.What}}
		}
	}
	if n := sim.maxMicrobatches(); l.PP > 1 && l.Accum > n {
		return &NotSimulatedError{What: []string{fmt.Sprintf(
			"a pipeline of %d micro-batches in the planner (at most %d: --max-microbatches; estimate --pp replays any number)",
			l.Accum, n)}}
	}
	return nil
}

// LowerBound implements Bounder with stateBound: the model state, the
// activations and the loads the simulator allocates at once, counted
// without simulating (TestStateBound checks it never exceeds Estimate).
func (Simulator) LowerBound(spec *model.Spec) func(Layout) (int64, string) {
	return LowerBoundWith(spec, model.Params(spec.Model.Lower()))
}

// LowerBoundWith is Simulator.LowerBound for a model of params
// parameters (model.Params of its lowered layers), for callers that
// bound many trainings of one model (the report's fixes).
func LowerBoundWith(spec *model.Spec, params int64) func(Layout) (int64, string) {
	return newStateBound(spec, params).bytes
}

// Canonical implements Canonicalizer: under a pipeline, FSDP's stages 2
// and 3 are simulated alike (torchtitan's stages neither reshard after
// forward nor reduce-scatter before the step's last backward;
// estimate/schedule.go, trainPipeline, sets the gathered size for both,
// over the one place the simulator tells them apart, shardSetup), so a
// ZeRO-3 pipeline is estimated as its ZeRO-2 twin. TestCanonical checks
// the equality.
func (Simulator) Canonical(l Layout) Layout {
	if l.PP > 1 && l.Zero == 3 {
		l.Zero = 2
	}
	return l
}

// Estimate implements Oracle.
func (sim Simulator) Estimate(spec *model.Spec, l Layout) (Busiest, error) {
	return sim.EstimateAbove(spec, l, 0)
}

// EstimateAbove implements Stopper with estimate.Options.StopAbove: the
// simulation stops once the busiest rank's device total is above above
// (0: never).
func (sim Simulator) EstimateAbove(spec *model.Spec, l Layout, above int64) (Busiest, error) {
	if err := sim.Simulates(spec, l); err != nil {
		return Busiest{}, err
	}
	r, err := estimate.EstimateOptions(Apply(spec, l), estimate.Options{StopAbove: above})
	if errors.Is(err, model.ErrNotSplittable) {
		what := "tensor or context parallelism for " + spec.Model.TPRefusal()
		if spec.Model.TPRefusal() == "" {
			what = spec.Model.SeqSplitRefusal(&Apply(spec, l).Training)
		}
		return Busiest{}, &NotSimulatedError{What: []string{what}}
	}
	if err != nil {
		return Busiest{}, fmt.Errorf("estimate %s: %w", l, err)
	}
	m := RankMemory{Kind: All, PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved, DeviceTotal: r.DeviceTotal}
	if p := r.Pipeline; p != nil {
		// Each kind of stage, the busiest first stage, middle or last.
		var kinds []RankMemory
		for _, k := range p.Kinds {
			km := RankMemory{Kind: k.Kind, PeakAllocated: k.PeakAllocated, PeakReserved: k.PeakReserved, DeviceTotal: k.DeviceTotal}
			kinds = append(kinds, km)
			if k.Stage == p.Busiest {
				m = km
			}
		}
		return Busiest{RankMemory: m, Kinds: kinds, Stopped: r.Stopped}, nil
	}
	return Busiest{RankMemory: m, Kinds: []RankMemory{m}, Stopped: r.Stopped}, nil
}

func notSimulated(l Layout) error {
	var what []string
	add := func(on bool, s string) {
		if on {
			what = append(what, s)
		}
	}
	add(l.CP > 1 && (l.Zero == 1 || (l.DP > 1 && l.Zero == 0)), "context parallelism with DDP or ZeRO 1 (FSDP over dp·cp is simulated)")
	add(l.EP > 1 && l.Zero == 1, "expert parallelism with ZeRO 1")
	add(l.EP > 1 && l.CP > 1 && l.Zero == 0, "expert parallelism with context parallelism without FSDP")
	// model.CheckEP's rules for EP beside TP.
	add(l.EP > 1 && l.TP > 1 && !l.SP, "expert parallelism with tensor parallelism without sequence parallelism")
	add(l.EP > 1 && l.TP > 1 && l.DP > 1 && l.Zero < 2, "expert parallelism with tensor parallelism under DDP")
	if what != nil {
		return &NotSimulatedError{What: what}
	}
	return nil
}

// Apply returns a copy of spec whose training setup is the layout's data
// and tensor, pipeline and expert parallelism, ZeRO stage, checkpointing,
// micro-batch and accumulation, with nothing offloaded (the planner keeps
// all state on the GPUs).
func Apply(spec *model.Spec, l Layout) *model.Spec {
	s := *spec
	applyLayout(&s.Training, l)
	return &s
}

// applyLayout sets t to layout l (Apply).
func applyLayout(t *model.Training, l Layout) {
	t.DP, t.Zero, t.Checkpointing = l.DP, l.Zero, l.Checkpointing
	t.ReshardAfterForward = l.ReshardTo
	// Context parallelism: the estimator shards over dp·cp with FSDP
	// (docs/parallelism.md §3.3).
	t.CP = l.CP
	t.EP = l.EP
	t.Batch, t.GradAccum, t.Offload = l.Micro, l.Accum, model.OffloadNone
	t.PP, t.PPSchedule, t.PPVirtual = 0, "", 0
	if l.PP > 1 {
		t.PP, t.PPSchedule = l.PP, string(l.Schedule)
		if l.Schedule == Interleaved {
			t.PPVirtual = l.Virtual
		}
	}
	t.TP, t.SP, t.LossParallel = l.TP, l.SP, l.LossParallel
}
