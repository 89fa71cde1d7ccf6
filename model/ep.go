package model

import (
	"errors"
	"fmt"
	"strconv"
)

// Expert parallelism (docs/moe.md §4): training.ep splits every
// mixture-of-experts block's experts over ep data-parallel ranks, which
// exchange the routed tokens by all-to-all; training.ep_skew is the rows
// the busiest rank receives over balanced routing's.

// MaxEPSkew bounds ep_skew: no rank can receive more than every token.
const MaxEPSkew = 1024

// decodeEP reads ep and ep_skew from the training mapping and applies
// their flags; it returns the line of ep for later checks (0: none).
func decodeEP(e *errs, tm *mapping, t *Training, o Overrides) int {
	line := 0
	if n := tm.get("ep"); n != nil {
		line = n.Line
	}
	tm.int("ep", &t.EP, false)
	tm.float("ep_skew", &t.EPSkew, 1, MaxEPSkew)
	if o.EP < 0 {
		e.add(0, "--ep: must be positive, got %d", o.EP)
	} else if o.EP > 0 {
		t.EP, line = o.EP, 0
	}
	if o.EPSkew != "" {
		f, err := strconv.ParseFloat(o.EPSkew, 64)
		if err != nil || !(f >= 1 && f <= MaxEPSkew) {
			e.add(0, "--ep-skew: want a number between 1 and %d, got %q", MaxEPSkew, o.EPSkew)
		} else {
			t.EPSkew = f
		}
	}
	return line
}

// checkEP checks ep against the rest of the spec once the data-parallel
// size is final: the experts are split over data-parallel ranks (with
// context and tensor parallelism over the dp·cp·tp ranks, as torchtitan
// borrows them: FSDP with context parallelism, sequence parallelism with
// tensor parallelism, whose sequence shard each rank routes), evenly,
// under DDP or FSDP (ZeRO 2 and 3 shard each block's experts over the
// dp·cp·tp/ep ranks that hold them, in a unit of their own, as torchtitan
// does).
func checkEP(e *errs, t *Training, m *Model, line int) {
	if t.EP <= 1 {
		return
	}
	if err := CheckEP(t, m); err != nil {
		e.add(line, "ep: %v", err)
	}
}

// EPRefusal says why expert parallelism is not simulated for m in any
// layout, or "" when it is for some (CheckEP has the layouts' rules): a
// model without experts, or Llama 4's dense experts, which see every
// token (not measured). The planner enumerates no expert-parallel layout
// for a model it refuses.
func (m *Model) EPRefusal() string {
	switch {
	case len(m.expertCounts()) == 0:
		return fmt.Sprintf("needs a mixture-of-experts model (%s has no experts to split)", m.Type)
	case m.DenseExperts:
		return fmt.Sprintf("expert parallelism of %s is not simulated yet (its experts see every token: not measured)", m.describe())
	}
	return ""
}

// CheckEP says why a training setup cannot split m's experts over
// t.EP ranks, or nil.
func CheckEP(t *Training, m *Model) error {
	if t.EP <= 1 {
		return nil
	}
	if why := m.EPRefusal(); why != "" {
		return errors.New(why)
	}
	experts := m.expertCounts()
	dp := max(t.DP, 1)
	switch region := dp * max(t.CP, 1) * max(t.TP, 1); {
	case t.TP > 1 && region%t.EP != 0:
		return fmt.Errorf("%d must divide dp·cp·tp (%d): the experts are split over the data-, context- and tensor-parallel ranks", t.EP, region)
	case t.CP > 1 && region%t.EP != 0:
		return fmt.Errorf("%d must divide dp·cp (%d): the experts are split over the data- and context-parallel ranks", t.EP, region)
	case region%t.EP != 0:
		return fmt.Errorf("%d must divide dp (%d): the experts are split over data-parallel ranks", t.EP, dp)
	}
	switch {
	case t.Zero == 1:
		return fmt.Errorf("expert parallelism with ZeRO stage 1 is not simulated: ZeroRedundancyOptimizer partitions every rank's parameters as if they were the same, and its broadcast would overwrite the other ranks' experts (use stage 0, 2 or 3)")
	case t.CP > 1 && t.Zero < 2:
		return fmt.Errorf("expert parallelism with context parallelism is simulated under FSDP (ZeRO stage 2 or 3), whose dp·cp ranks torchtitan borrows for it")
	case t.TP > 1 && !t.SP:
		return fmt.Errorf("expert parallelism with tensor parallelism is simulated with sequence parallelism (sp), whose sequence shard each tp rank routes, as torchtitan does")
	case t.TP > 1 && dp > 1 && t.Zero < 2:
		return fmt.Errorf("expert parallelism with tensor parallelism over dp %d is simulated under FSDP (ZeRO stage 2 or 3)", dp)
	case t.Zero >= 2 && t.Offload != "" && t.Offload != OffloadNone:
		return fmt.Errorf("expert parallelism with ZeRO stage %d is simulated without offload", t.Zero)
	}
	for _, n := range experts {
		if n%t.EP != 0 {
			return fmt.Errorf("%d does not divide the %d experts of a block", t.EP, n)
		}
	}
	return nil
}

// expertCounts lists the expert count of every MoE layer of the model.
func (m *Model) expertCounts() []int64 {
	var out []int64
	var walk func(ls []Layer)
	walk = func(ls []Layer) {
		for i := range ls {
			if k, ok := ls[i].Spec.(*MoE); ok {
				out = append(out, k.Experts)
			}
			walk(ls[i].Body)
		}
	}
	walk(m.Lower())
	return out
}

// ShardedExpertRows is the fewest rows (the first dimension) of the fused
// expert parameters one rank holds — a block's experts, or its share under
// expert parallelism (t.EP) — or 0 for a model without experts. FSDP2
// shards a parameter along its first dimension and pads every shard to
// ceil(rows/n) rows, so over more ranks than that the experts' shards stop
// shrinking while the all-gathers of the padded shards grow: memory per GPU
// rises with the GPUs (Mixtral-8x7B's eight experts under ZeRO 3 in bf16 at
// 4,096 tokens, checkpointed: 71.8 GiB at dp 8, 118.7 GiB at dp 64).
func (m *Model) ShardedExpertRows(t *Training) int64 {
	var least int64
	for _, e := range m.expertCounts() {
		if t.EP > 1 {
			e /= t.EP
		}
		if least == 0 || e < least {
			least = e
		}
	}
	return least
}

// ExpertsPadded says whether FSDP2 pads the shards of a block's experts
// (experts of them: ShardedExpertRows without expert parallelism) under t:
// stages 2 and 3 shard a rank's E/ep experts over the dp·cp·tp/ep ranks
// that hold them, padded once those outnumber them, dp·cp·tp > E, whatever
// ep (docs/moe.md §14), unless FSDP2 shards them along their second
// dimension instead (Training.FSDPExperts dim1, or auto, which chooses it
// exactly then). The one rule the estimate's note, tune's sharding search
// and the planner's dominance rule follow.
func ExpertsPadded(experts int64, t *Training) bool {
	return t.Zero >= 2 && experts > 0 && max(t.DP, 1)*max(t.CP, 1)*max(t.TP, 1) > experts &&
		t.FSDPExperts == FSDPExpertsDim0
}

// RankParams is the parameters one rank holds of layers, a rank's lowered
// program (a pipeline stage's, split by tensor parallelism already): under
// expert parallelism over ep ranks, E/ep of each block's routed experts.
func RankParams(layers []Layer, ep int64) int64 {
	n := paramsFloat(layers)
	if ep > 1 {
		n -= routedParams(layers) * f64(ep-1) / f64(ep)
	}
	return int64(n)
}

// RoutedParams is the routed experts' parameters in layers, a lowered
// program (weights and biases; not the routers or the shared experts):
// what expert parallelism splits and top-k routing activates in part.
func RoutedParams(layers []Layer) int64 { return int64(routedParams(layers)) }

// routedParams is RoutedParams, each Repeat's body counted its times.
func routedParams(ls []Layer) float64 {
	var n float64
	for i := range ls {
		switch k := ls[i].Spec.(type) {
		case *MoE:
			d, h := f64(k.Dim), f64(k.Hidden)
			n += f64(k.Experts) * (3*d*h + b64(k.Bias)*(2*h+d))
		case *Repeat:
			n += f64(k.Times) * routedParams(ls[i].Body)
		default:
			n += routedParams(ls[i].Body)
		}
	}
	return n
}
