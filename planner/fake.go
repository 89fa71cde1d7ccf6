package planner

import (
	"time"

	"github.com/memplan/memplan/model"
)

// Fake is an Oracle for tests and benchmarks: a closed form of a Llama-
// style rank's memory that covers every layout (docs/planner.md §5), not
// memplan's simulation. Delay is spent on every call, to stand for what a
// real estimate costs; Calls counts them.
type Fake struct {
	Delay time.Duration
	Calls int
	// Unsupported, when set, makes layouts other than data parallelism
	// return a *NotSimulatedError, as Simulator does.
	Unsupported bool
	params      map[*model.Spec]int64
}

// Simulates implements Screener: with Unsupported, what Simulator
// does not simulate by the layout alone.
func (f *Fake) Simulates(_ *model.Spec, l Layout) error {
	if f.Unsupported {
		return notSimulated(l)
	}
	return nil
}

// Estimate implements Oracle: 16 bytes of model state per parameter
// (mixed-precision AdamW) split by TP·PP and sharded by ZeRO, activations
// of 34 bytes per token and hidden unit per layer (2 with checkpointing)
// split by TP and CP, times the micro-batches a pipeline's first stage
// holds, and 1 GiB of context and workspaces.
func (f *Fake) Estimate(spec *model.Spec, l Layout) (Busiest, error) {
	f.Calls++
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	if f.Unsupported {
		if err := notSimulated(l); err != nil {
			return Busiest{}, err
		}
	}
	if f.params == nil {
		f.params = map[*model.Spec]int64{}
	}
	p, ok := f.params[spec]
	if !ok {
		p = model.Params(spec.Model.Lower())
		f.params[spec] = p
	}
	d := float64(l.DP * l.CP)
	per := float64(p) / float64(l.TP*l.PP)
	state := per * 4 // parameters
	grads, opt := per*4, per*8
	if l.Zero >= 1 {
		opt /= d
	}
	if l.Zero >= 2 {
		grads /= d
	}
	if l.Zero >= 3 {
		state /= d
	}
	m := &spec.Model
	perLayer := 34.0
	if c := l.Checkpointing.Mode; c != "" && c != model.CkptNone {
		perLayer = 2
	}
	layers := float64((m.NumLayers + l.PP - 1) / l.PP)
	act := float64(l.Micro*spec.Training.Seq/l.CP*m.Hidden) * layers * perLayer / float64(l.TP)
	inflight := 1.0
	if l.PP > 1 {
		switch l.Schedule {
		case GPipe:
			inflight = float64(l.Accum)
		case Interleaved:
			inflight = float64(min(l.PP, l.Accum)) * (1 + float64(l.PP-1)/float64(l.PP*l.Virtual))
		default:
			inflight = float64(min(l.PP, l.Accum))
		}
	}
	total := int64(state+grads+opt+act*inflight) + 1<<30
	first := RankMemory{Kind: All, PeakAllocated: total, PeakReserved: total, DeviceTotal: total}
	if l.PP == 1 {
		return Busiest{RankMemory: first, Kinds: []RankMemory{first}}, nil
	}
	first.Kind = First
	last := first
	last.Kind = Last
	last.DeviceTotal -= int64(act * (inflight - 1))
	kinds := []RankMemory{first}
	if l.PP > 2 {
		mid := first
		mid.Kind = Middle
		kinds = append(kinds, mid)
	}
	return Busiest{RankMemory: first, Kinds: append(kinds, last)}, nil
}
