package planner

import (
	"errors"
	"fmt"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// transformer reports whether the model is a transformer shorthand whose
// blocks TP, PP and CP can split.
func transformer(m *model.Model) bool {
	switch m.Type {
	case model.GPT2, model.Llama, model.NeoX, model.BERT:
		return true
	}
	return false
}

// Validate checks a layout against a model's shape and returns an
// *InvalidError with the reason when the frameworks would refuse it. The
// rules, and where each comes from, are in docs/planner.md §1:
//
//   - TP splits attention heads and key/value heads (grouped-query
//     attention's groups) evenly, as Megatron-LM's divide() asserts; key/
//     value heads are not replicated (vLLM does so for inference only).
//     The MLP's intermediate size must divide too; the vocabulary need not,
//     as it is padded to a multiple of 128·TP as Megatron does.
//   - PP splits layers as torchtitan's generate_llm_fqn_per_model_part
//     does: the embedding and the head each count as one layer and the
//     layers are spread as evenly as possible, so uneven splits are
//     allowed (StageLayers).
//   - CP with load balancing needs the sequence divisible by 2·CP·TP
//     (torchtitan); SP alone needs it divisible by TP.
//   - EP needs the experts divisible by EP, and EP dividing DP·CP·TP
//     (torchtitan's EP region).
func Validate(spec *model.Spec, l Layout) error {
	bad := func(rule, format string, args ...any) error {
		return &InvalidError{Layout: l, Rule: rule, Reason: fmt.Sprintf(format, args...)}
	}
	if l.DP < 1 || l.TP < 1 || l.PP < 1 || l.CP < 1 || l.EP < 1 || l.Micro < 1 || l.Accum < 1 {
		return bad("positive degrees", "every degree, the micro-batch and the accumulation must be at least 1")
	}
	if l.Zero < 0 || l.Zero > 3 {
		return bad("ZeRO stage 0-3", "ZeRO stage %d: want 0 to 3", l.Zero)
	}
	if l.Zero > 0 && l.DP*l.CP == 1 {
		return bad("ZeRO needs dp·cp > 1", "ZeRO stage %d shards over the data-parallel ranks; with dp 1 there is nothing to shard", l.Zero)
	}
	if l.ReshardTo != 0 {
		t := model.Training{DP: l.DP, Zero: l.Zero, TP: l.TP, PP: l.PP, CP: l.CP, EP: l.EP, ReshardAfterForward: l.ReshardTo}
		if err := model.ReshardError(&t); err != nil {
			return bad("reshard_after_forward=N with ZeRO 3, N dividing dp", "reshard_after_forward: %v", err)
		}
	}
	m := &spec.Model
	if !l.Simple() && !transformer(m) {
		return bad("only data parallelism for this model type", "%s models can only be split by data parallelism", m.Type)
	}
	if err := validateTP(spec, l, bad); err != nil {
		return err
	}
	if l.PP > 1 {
		if _, err := StageLayers(m.NumLayers, l.PP*max(l.Virtual, 1)); err != nil {
			return bad("stages at most layers+2 (torchtitan)", "%v", err)
		}
		switch l.Schedule {
		case GPipe, OneFOneB:
			if l.Virtual > 1 {
				return bad("one stage per rank for gpipe and 1f1b", "%s runs one stage per rank, not %d", l.Schedule, l.Virtual)
			}
			if l.Schedule == OneFOneB && l.Accum < l.PP {
				return bad("1f1b needs micro-batches ≥ pp", "1f1b needs at least as many micro-batches (%d) as stages (%d), as Schedule1F1B requires", l.Accum, l.PP)
			}
		case Interleaved:
			if l.Virtual < 2 {
				return bad("interleaved needs 2+ stages per rank", "interleaved needs at least 2 stages per rank")
			}
			if l.Accum%l.PP != 0 {
				return bad("interleaved needs micro-batches a multiple of pp (Megatron-LM)", "interleaved needs the micro-batches (%d) to be a multiple of pp %d, as Megatron-LM requires", l.Accum, l.PP)
			}
		default:
			return bad("known pipeline schedule", "pipeline schedule %q: want gpipe, 1f1b or interleaved", l.Schedule)
		}
	}
	if m.RoPEFP32 {
		if f := model.KnownFailure(&Apply(spec, l).Training, m); f != "" {
			return bad("OLMo's fp32 rotary tables with FSDP2's bf16 policy and checkpointing (fail in torch 2.11)", "%s", f)
		}
	}
	if l.EP > 1 {
		if m.Experts == 0 {
			return bad("ep needs a mixture of experts", "ep %d needs a mixture-of-experts model", l.EP)
		}
		if m.Experts%l.EP != 0 {
			return bad("experts divisible by ep", "%d experts are not divisible by ep %d", m.Experts, l.EP)
		}
		if (l.DP*l.CP*l.TP)%l.EP != 0 {
			return bad("ep divides dp·cp·tp", "ep %d must divide dp·cp·tp = %d (expert parallelism borrows those ranks)", l.EP, l.DP*l.CP*l.TP)
		}
	}
	return nil
}

func validateTP(spec *model.Spec, l Layout, bad func(string, string, ...any) error) error {
	m := &spec.Model
	if l.LossParallel && l.TP < 2 {
		return bad("sp and loss parallel need tp > 1", "sequence parallelism and loss parallelism need tp > 1")
	}
	err := parallel.CheckSplit(parallel.Split{Heads: m.Heads, KVHeads: m.KVHeads, Intermediate: m.Intermediate,
		Seq: spec.Training.Seq, TP: l.TP, CP: l.CP, SP: l.SP})
	var se *parallel.SplitError
	if errors.As(err, &se) {
		return bad(se.Rule, "%s", se.Reason)
	}
	return err
}

// StageLayers splits layers transformer blocks over stages as torchtitan
// does; the split's one home is model.StageLayers, which the simulator
// uses for each stage's layers.
func StageLayers(layers, stages int64) ([]int64, error) { return model.StageLayers(layers, stages) }
