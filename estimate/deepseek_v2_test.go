package estimate

import (
	"maps"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// DeepSeek-V2's program (modeling_deepseek_v2.py, transformers 5.17):
// what it does differently from DeepSeek-V3's. Each test fails with its
// part of the program undone.

// TestMLAComplexRoPE: DeepseekV2's apply_rotary_emb makes the query's and
// the shared key's rotary dims fp32 (copies over a bf16 stream, none in
// fp32) before multiplying them by the complex table, which the model's
// forward makes once per step as a polar table and its scaled copy.
func TestMLAComplexRoPE(t *testing.T) {
	const b, seq = 1, 256
	q32, k32 := int64(b*seq*16*64*4), int64(b*seq*64*4)
	count := func(p string) (qc, kc, tables int) {
		o := model.Overrides{Batch: b, Seq: seq, Precision: p}
		traced(t, loadHF(t, "deepseek-v2-lite-4layer.json", o), func(s *sim, x *tensor, alloc bool) {
			if s.phase.Stage != StageForward || s.phase.Iteration != 0 {
				return
			}
			switch {
			case x.name == "freqs_cis" && alloc:
				tables++
			case alloc:
			case x.prefix == "cast of " && x.dt == f32 && x.bytes() == q32:
				qc++ // counted as freed: the prefix comes after the allocation
			case x.prefix == "cast of " && x.dt == f32 && x.bytes() == k32:
				kc++
			}
		})
		return qc, kc, tables
	}
	if qc, kc, tables := count(model.BF16); qc != 4 || kc != 4 || tables != 2 {
		t.Errorf("bf16: %d fp32 query copies, %d key copies and %d tables in the first forward, want 4, 4 and 2", qc, kc, tables)
	}
	if qc, kc, _ := count(model.FP32); qc != 0 || kc != 0 {
		t.Errorf("fp32: %d query and %d key copies, want none", qc, kc)
	}
}

// TestSoftmaxGroupRouter: group_limited_greedy masks the scores outside
// the chosen groups (a boolean mask its node keeps until backward, one per
// sparse layer); greedy routing takes the top k of the scores as they are.
func TestSoftmaxGroupRouter(t *testing.T) {
	const b, seq = 1, 256
	masks := func(file string) (n int) {
		o := model.Overrides{Batch: b, Seq: seq, Precision: model.BF16}
		traced(t, loadHF(t, file, o), func(s *sim, x *tensor, alloc bool) {
			if !alloc && s.phase.Stage == StageBackward && s.phase.Iteration == 0 && x.name == "~score_mask" {
				n++ // freed with its node
			}
		})
		return n
	}
	if n := masks("deepseek-v2-2layer.json"); n != 1 {
		t.Errorf("DeepSeek-V2's cut (one sparse layer, group_limited_greedy): %d masks freed in backward, want 1", n)
	}
	if n := masks("deepseek-v2-lite-4layer.json"); n != 0 {
		t.Errorf("DeepSeek-V2-Lite's cut (greedy): %d masks, want none", n)
	}
}

// TestLoRAOverMoE: the adapters peft 0.21 makes over mixtures of experts,
// as its records count them (lora.py's peft_trainable_parameters in
// bench/results/2026-11-27-h200-lora-deepseek.jsonl and
// 2026-11-27-h200-heldout42-lora.jsonl): over DeepSeek all-linear adapts
// the latent attention, the router and the fused experts (gate_up_proj at
// twice the rank) but neither the dense nor the shared MLPs; over
// Qwen2-MoE, which peft does not convert, the shared expert and its
// one-output gate. The simulator allocates exactly the adapters the spec
// counts, with an fp32 gradient each.
func TestLoRAOverMoE(t *testing.T) {
	for _, c := range []struct {
		file, targets string
		rank, want    int64
	}{
		{"deepseek-v2-lite-4layer.json", model.TargetsAll, 16, 41_655_296},
		{"deepseek-v2-lite.json", model.TargetsAll, 16, 358_994_944},
		{"qwen1.5-moe-a2.7b.json", model.TargetsAll, 16, 15_925_632},
		{"qwen1.5-moe-a2.7b.json", model.TargetsMLP, 8, 4_423_680},
		{"moonlight-4layer.json", model.TargetsAttn, 8, 526_336},
		{"deepseek-v2-2layer.json", model.TargetsMLP, 16, 0},
	} {
		spec := loadHF(t, c.file, model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, LoRA: c.rank, LoRATargets: c.targets})
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		n := spec.Trainable()
		if c.want != 0 && n != c.want {
			t.Errorf("%s %s: the spec counts %d adapter parameters, peft %d", c.file, c.targets, n, c.want)
		}
		if n == 0 || r.Trainable != n || r.GradBytes != 4*n {
			t.Errorf("%s %s: %d trainable, %d gradient bytes; the spec counts %d", c.file, c.targets, r.Trainable, r.GradBytes, n)
		}
	}
}

// TestParamWrapperLifetimes: peft's ParamWrapper over each sparse layer's
// two expert stacks runs the parametrization twice in forward (the
// registration's check, dropped, and the cached weight the experts read,
// which their grouped GEMM keeps until backward only when its input
// requires grad: with adapters on the experts alone, the first sparse
// layer's rows do not, so its gate_up_proj goes as the wrapper exits), and
// casts the factors to a bf16 base's dtype (none over fp32 weights, under
// autocast), which the baddbmm keeps until backward.
func TestParamWrapperLifetimes(t *testing.T) {
	const b, seq = 1, 256
	count := func(p string) (made, kept, casts int) {
		o := model.Overrides{Batch: b, Seq: seq, Precision: p, LoRA: 16, LoRATargets: model.TargetsMLP}
		traced(t, loadHF(t, "deepseek-v2-lite-4layer.json", o), func(s *sim, x *tensor, alloc bool) {
			if s.phase.Iteration != 0 {
				return
			}
			stack := strings.HasPrefix(x.name, "experts.") && strings.HasSuffix(x.name, " (parametrized)")
			switch {
			case alloc && s.phase.Stage == StageForward && stack:
				made++
			case !alloc && s.phase.Stage == StageBackward && x.prefix == "" && stack:
				kept++ // not its gradient, which takes its name
			case !alloc && s.phase.Stage == StageBackward && x.prefix == "cast of " && strings.HasPrefix(x.name, "lora_"):
				casts++
			}
		})
		return made, kept, casts
	}
	if made, kept, casts := count(model.BF16); made != 12 || kept != 5 || casts != 12 {
		t.Errorf("bf16: %d parametrized stacks made, %d kept until backward, %d factor casts; want 12, 5 and 12", made, kept, casts)
	}
	if made, kept, casts := count(model.AMPBF16); made != 12 || kept != 5 || casts != 0 {
		t.Errorf("amp-bf16: %d made, %d kept, %d factor casts; want 12, 5 and none", made, kept, casts)
	}
}

// TestQuantLinearsOfFusedExperts: bitsandbytes replaces Linear modules
// (model.Model.Linears). Under QLoRA with attention adapters over
// DeepSeek-V2-Lite's cut it quantizes the latent attention's four
// projections in every layer, the dense layer's MLP and each sparse
// layer's shared expert, but not the fused experts nor the routers, which
// are parameters of custom modules: in int8, one byte per quantized weight.
func TestQuantLinearsOfFusedExperts(t *testing.T) {
	o := model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, LoRA: 8, LoRATargets: model.TargetsAttn}
	base, err := Estimate(loadHF(t, "deepseek-v2-lite-4layer.json", o))
	if err != nil {
		t.Fatal(err)
	}
	o.Quant = model.QuantInt8
	q, err := Estimate(loadHF(t, "deepseek-v2-lite-4layer.json", o))
	if err != nil {
		t.Fatal(err)
	}
	// Per layer q_proj 2048·3072, kv_a 2048·576, kv_b 512·4096, o 2048·2048;
	// the dense MLP 3·2048·10944; three shared experts of 3·2048·2816.
	const attn = 4 * (2048*3072 + 2048*576 + 512*4096 + 2048*2048)
	const linears = attn + 3*2048*10944 + 3*3*2048*2816
	// int8: each weight one byte instead of two, plus an fp32 scale per
	// output row (Int8Params' SCB).
	const rowsOut = 4*(3072+576+4096+2048) + (10944 + 10944 + 2048) + 3*(2816+2816+2048)
	if want := base.ParamBytes - linears + 4*rowsOut; q.ParamBytes != want {
		t.Errorf("int8: parameter bytes %d, want %d (the Linears quantized, %d bytes fewer)", q.ParamBytes, want, base.ParamBytes-want)
	}
}

// TestEPBiasedExperts: under expert parallelism GPT-OSS's experts keep
// their biases beside them (E/ep of each, once the whole model's have
// been sliced), and each simulated rank gathers its received rows' two
// biases (bench/torch/dist/ep.py, as grouped_mm_experts_forward does on one
// GPU): rows of 2I, then of h, for the receiving rank's 2n rows at skew 2,
// the balanced rank's n and the sending rank's none (n = tokens·k).
func TestEPBiasedExperts(t *testing.T) {
	const b, seq, k = 1, 256, 4
	o := model.Overrides{Batch: b, Seq: seq, Precision: model.BF16, DP: 2, EP: 2, EPSkew: "2", Attention: model.AttnEager}
	spec := loadHF(t, "gpt-oss-4layer.json", o)
	e, h, inter := int64(32), int64(2880), int64(2880)
	var biasLive int64
	gathers := map[int64]int{}
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
		bias := x.name == "experts.gate_up_proj_bias" || x.name == "experts.down_proj_bias"
		switch {
		case bias && s.phase.Stage == "load" && alloc:
			biasLive += x.elems
		case bias && s.phase.Stage == "load":
			biasLive -= x.elems
		case alloc && s.phase.Stage == StageForward && s.phase.Iteration == 0 && x.name == "bias[expert_ids_g]":
			gathers[x.elems]++
		}
	})
	// Three ranks simulated (receiving, balanced, sending), each its own load.
	if want := 3 * 4 * (e / 2) * (2*inter + h); biasLive != want {
		t.Errorf("bias parameters kept: %d elements, want %d (half the experts' on each of three ranks)", biasLive, want)
	}
	n := int64(b * seq * k)
	// 2I = 2h here, so the receiving rank's down gathers and the balanced
	// rank's gate_up ones share a size.
	want := map[int64]int{2 * n * 2 * inter: 4, 2 * n * h: 8, n * h: 4, 0: 8}
	if !maps.Equal(gathers, want) {
		t.Errorf("bias gathers in the first forward by elements %v, want %v", gathers, want)
	}
}

// TestPrefetchAfterRecompute: FSDPParamGroup.pre_backward prefetches the
// next unit even when its own unit is unsharded already, as a checkpoint's
// recompute leaves a block's experts unit: block 0's all-gather (its fp32
// parameters, 324,028,416 B) is made in block 1's experts' backward, before
// their reduce-scatter (measured: DeepSeek-V2-Lite's cut under FSDP2 with
// expert parallelism, bench/results/2026-11-27-h200x2-deepseek-ep-traces).
func TestPrefetchAfterRecompute(t *testing.T) {
	o := model.Overrides{Batch: 2, Seq: 2048, Precision: model.AMPBF16, DP: 2, EP: 2, EPSkew: "2", Zero: "3",
		Checkpointing: model.CkptBlock}
	const block0 = 324_028_416
	const experts = 32 * 3 * 2048 * 1408 * 4 // one rank's experts of a block, their fp32 gradients
	i, gather, reduce := 0, -1, -1
	ranks := 0
	estimateWith(loadHF(t, "deepseek-v2-lite-4layer.json", o), func(*sim) {}, func(s *sim) {
		if ranks++; ranks > 1 {
			return // the receiving rank's
		}
		s.trace = func(x *tensor, alloc bool) {
			i++
			if !alloc || s.phase.Stage != StageBackward || s.phase.Iteration != 0 {
				return
			}
			switch {
			case x.name == "all-gather output (FSDP)" && x.bytes() == block0 && gather < 0:
				gather = i
			case x.name == "reduce-scatter input (FSDP)" && x.bytes() == experts:
				reduce = i // the last: block 1's
			}
		}
	})
	if gather < 0 || reduce < 0 || gather > reduce {
		t.Errorf("block 0's all-gather at event %d, block 1's experts' reduce-scatter input at %d: want the gather first", gather, reduce)
	}
}
