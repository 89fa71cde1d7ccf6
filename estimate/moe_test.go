package estimate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// moeSpec is a small Qwen3-style MoE (8 layers, h 1024, experts of 512) in
// AMP at batch 2, seq 512, with the given experts, top_k and training
// overrides.
func moeSpec(t *testing.T, experts, topK int64, o model.Overrides) *model.Spec {
	t.Helper()
	cfg := fmt.Sprintf(`{"model_type": "qwen3_moe", "hidden_size": 1024, "intermediate_size": 3072,
 "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000,
 "num_experts": %d, "num_experts_per_tok": %d, "moe_intermediate_size": 512, "decoder_sparse_step": 1,
 "mlp_only_layers": [], "norm_topk_prob": true, "hidden_act": "silu", "tie_word_embeddings": false}`, experts, topK)
	if o.Batch == 0 {
		o.Batch = 2
	}
	if o.Seq == 0 {
		o.Seq = 512
	}
	spec, err := model.ParseHF("moe.json", []byte(cfg), o)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestGroupedExpertsSaved holds the saved activations of the grouped
// experts to docs/moe.md §1's table: per routed pair under autocast, the
// sorted fp32 rows and the down projection's output (h each), gate_up
// (2I), the activation and the product (I each), all fp32, the fp32
// routing weight (bf16, the router's dtype), four int64 indices (perm,
// perm // k, inv_perm, the top-k id), the one-byte sentinel mask and the
// fp32 top-k copy the in-place renormalisation saves.
func TestGroupedExpertsSaved(t *testing.T) {
	const h, inter, layers, rows = 1024, 512, 8, 2 * 512
	perPair := int64(4*(2*h+4*inter) + 2 + 4*8 + 1 + 4)
	for _, k := range []int64{2, 4} {
		t.Run(fmt.Sprintf("top%d-top%d", k, 2*k), func(t *testing.T) {
			a, err := Estimate(moeSpec(t, 32, k, model.Overrides{}))
			if err != nil {
				t.Fatal(err)
			}
			b, err := Estimate(moeSpec(t, 32, 2*k, model.Overrides{}))
			if err != nil {
				t.Fatal(err)
			}
			got, want := b.ActivationBytes-a.ActivationBytes, layers*rows*k*perPair
			if got != want {
				t.Errorf("saved bytes grow by %d from top-%d to top-%d, want %d (%d per routed pair)", got, k, 2*k, want, perPair)
			}
		})
	}
}

// TestExpertParallelism checks --ep: each rank holds E/ep experts' fused
// weights (with their gradients and AdamW state), the receiving rank's
// peak grows with ep_skew (balanced at 1, min(ep, 3) by default),
// and the EP communicator is counted.
func TestExpertParallelism(t *testing.T) {
	const experts, h, inter, layers = 32, 1024, 512, 8
	expertBytes := int64(layers * experts * 3 * h * inter * 4)
	base, err := Estimate(moeSpec(t, experts, 4, model.Overrides{DP: 4}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []int64{2, 4} {
		t.Run(fmt.Sprintf("ep%d", ep), func(t *testing.T) {
			r, err := Estimate(moeSpec(t, experts, 4, model.Overrides{DP: 4, EP: ep, EPSkew: "1"}))
			if err != nil {
				t.Fatal(err)
			}
			want := base.ParamBytes - expertBytes + expertBytes/ep
			if r.ParamBytes != want || r.GradBytes != want || r.OptimizerBytes != 2*want {
				t.Errorf("parameters %d, gradients %d, optimizer %d; want %d, %d, %d", r.ParamBytes, r.GradBytes, r.OptimizerBytes, want, want, 2*want)
			}
			if r.ActivationBytes <= base.ActivationBytes*9/10 || r.ActivationBytes >= base.ActivationBytes*11/10 {
				t.Errorf("activations %d, want close to one GPU's %d (about as many rows received as sent)", r.ActivationBytes, base.ActivationBytes)
			}
			noEP, err := Estimate(moeSpec(t, experts, 4, model.Overrides{DP: 4}))
			if err != nil {
				t.Fatal(err)
			}
			if nccl(r) <= nccl(noEP) {
				t.Errorf("NCCL %d B with ep %d, %d B without: want the expert-parallel communicator added", nccl(r), ep, nccl(noEP))
			}
			// The skew's effect, where the routed rows make the peak (at
			// batch 2 × 512 the optimizer's step does, and a change in
			// which cached block serves a request moves the peak by a
			// rounding's half MiB either way).
			big := func(skew string) *Result {
				x, err := Estimate(moeSpec(t, experts, 4, model.Overrides{DP: 4, EP: ep, EPSkew: skew, Batch: 8, Seq: 2048}))
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			balanced, dflt, skewed := big("1"), big(""), big("2")
			// The receiving rank's peak (another kind may be the busiest by
			// its reserved memory).
			recv := func(x *Result) int64 {
				for _, k := range x.Experts.Kinds {
					if k.Kind == "receiving" {
						return k.PeakAllocated
					}
				}
				t.Fatalf("no receiving rank in %+v", x.Experts)
				return 0
			}
			if recv(skewed) <= balanced.PeakAllocated || recv(dflt) < recv(skewed) {
				t.Errorf("receiving rank's peak allocated %d at ep_skew 2, want more than ep_skew 1's %d and at most the default's %d",
					recv(skewed), balanced.PeakAllocated, recv(dflt))
			}
		})
	}
}

// TestExpertParallelismRejected lists the setups --ep refuses.
func TestExpertParallelismRejected(t *testing.T) {
	for _, c := range []struct {
		name string
		o    model.Overrides
		want string
	}{
		{"ep without dp", model.Overrides{EP: 2}, "2 must divide dp (1)"},
		{"experts not divisible", model.Overrides{DP: 6, EP: 3}, "3 does not divide the 32 experts"},
		{"zero 1", model.Overrides{DP: 2, EP: 2, Zero: "1"}, "ZeRO stage 1 is not simulated: ZeroRedundancyOptimizer"},
		{"zero 3 with offload", model.Overrides{DP: 2, EP: 2, Zero: "3", Offload: "optimizer"}, "simulated without offload"},
		{"tp without sp", model.Overrides{DP: 2, EP: 2, Zero: "3", TP: 2}, "with tensor parallelism is simulated with sequence parallelism"},
		{"tp with dp under ddp", model.Overrides{DP: 2, EP: 2, Zero: "0", TP: 2, SP: true}, "tensor parallelism over dp 2 is simulated under FSDP"},
		{"ep not dividing dp·tp", model.Overrides{DP: 2, EP: 8, Zero: "3", TP: 2, SP: true}, "8 must divide dp·cp·tp (4)"},
		{"cp without fsdp", model.Overrides{CP: 2, EP: 2, Zero: "0"}, "with context parallelism is simulated under FSDP"},
		{"ep not dividing dp·cp", model.Overrides{DP: 2, CP: 2, EP: 8, Zero: "3"}, "8 must divide dp·cp (4)"},
		{"skew below one", model.Overrides{DP: 2, EP: 2, EPSkew: "0.5"}, "--ep-skew: want a number between 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := `{"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
 "vocab_size": 100, "num_experts": 32, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 64}`
			_, err := model.ParseHF("moe.json", []byte(cfg), model.Overrides{Batch: 1, Seq: 8, DP: c.o.DP, EP: c.o.EP, Zero: c.o.Zero, Offload: c.o.Offload, EPSkew: c.o.EPSkew, TP: c.o.TP, SP: c.o.SP, CP: c.o.CP})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// nccl is a result's NCCL overhead.
func nccl(r *Result) int64 {
	for _, it := range r.Overhead {
		if it.Name == OverheadNCCL {
			return it.Bytes
		}
	}
	return 0
}

// TestGroupedMMBackwardOrder holds the grouped GEMMs' backward to
// GroupedMmBackward0's order (docs/moe.md §1): the weight's gradient (mat2)
// is allocated first, and the input's (self) right after it, in every
// layer of both steps.
func TestGroupedMMBackwardOrder(t *testing.T) {
	const h, inter, experts, topK, layers, steps = 1024, 512, 32, 4, 8, 2
	pairs := int64(2 * 512 * topK) // batch 2, seq 512
	type event struct {
		name  string
		bytes int64
	}
	var ev []event
	_, err := estimateWith(moeSpec(t, experts, topK, model.Overrides{}), func(*sim) {}, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if alloc && s.phase.Stage == StageBackward {
				ev = append(ev, event{x.name, x.bytes()})
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The input of the down projection is the gated product ("mul",
	// [S, I]); that of gate_up the masked sorted rows (a "view", [S, h]).
	tests := []struct {
		weight, input string
		bytes         int64
	}{
		{"experts.down_proj", "mul", pairs * inter * f32},
		{"experts.gate_up_proj", "view", pairs * h * f32},
	}
	for _, tt := range tests {
		t.Run(tt.weight, func(t *testing.T) {
			n := 0
			for i, e := range ev {
				if e.name != tt.weight {
					continue
				}
				n++
				if i+1 >= len(ev) || ev[i+1].name != tt.input || ev[i+1].bytes != tt.bytes {
					t.Errorf("weight gradient %d (event %d) not followed by the input's gradient (%s, %d bytes): next %v", n, i, tt.input, tt.bytes, ev[min(i+1, len(ev)-1)])
				}
			}
			if n != layers*steps {
				t.Errorf("%d weight gradients of %s, want %d", n, tt.weight, layers*steps)
			}
		})
	}
}

// TestQwen3QKNormOrder holds Qwen3's attention to its source order
// (docs/moe.md §2.1): q_proj, q_norm, k_proj, k_norm, v_proj, so that in
// the first layer the query's RMSNorm (its pow) comes between the query's
// and the key's projections, and the key's between the key's and the
// value's.
func TestQwen3QKNormOrder(t *testing.T) {
	var names []string
	_, err := estimateWith(moeSpec(t, 32, 4, model.Overrides{}), func(*sim) {}, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			// the projections' bf16 outputs, not the norm's fp32 copies
			if alloc && s.phase.Stage == StageForward && (x.name == "pow" || x.name == "matmul out" && x.dt == half) {
				names = append(names, x.name)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// the input norm, then q_proj, q_norm, k_proj, k_norm, v_proj
	want := []string{"pow", "matmul out", "pow", "matmul out", "pow", "matmul out"}
	if len(names) < len(want) || strings.Join(names[:len(want)], ",") != strings.Join(want, ",") {
		t.Errorf("first layer's projections and norms %v, want %v", names[:min(len(names), len(want))], want)
	}
}

// TestThirdStepUnderMaxSplit checks that a third optimizer step is
// simulated under max_split_size_mb when the second still created
// segments (docs/moe.md §2.2): the tiny MoE in bf16 with
// max_split_size_mb:64 keeps growing (its 62.5 MiB blocks round to 64 MiB
// segments that, once free, no longer serve them), and the estimate says
// so; without the setting the steps go on until one ends as the one
// before it did (three: the second's state differs from the first's, the
// third's does not), with nothing to say.
func TestThirdStepUnderMaxSplit(t *testing.T) {
	tests := []struct {
		conf  string
		steps int
		note  bool
	}{
		{"", 3, false},
		{"max_split_size_mb:64", 3, true},
	}
	for _, tt := range tests {
		t.Run("conf="+tt.conf, func(t *testing.T) {
			o := model.Overrides{Batch: 4, Seq: 1024, Precision: "bf16", Checkpointing: "every-block", AllocConf: tt.conf}
			r, err := Estimate(moeSpec(t, 32, 4, o))
			if err != nil {
				t.Fatal(err)
			}
			steps := 0
			for _, p := range r.Phases {
				steps = max(steps, p.Iteration+1)
			}
			note := false
			for _, n := range r.Notes {
				note = note || strings.Contains(n, "still grows in step 3")
			}
			if steps != tt.steps || note != tt.note {
				t.Errorf("%d steps simulated, growth noted %v; want %d, %v (notes %q)", steps, note, tt.steps, tt.note, r.Notes)
			}
		})
	}
}

// TestExpertsTensorParallelLoad: a tensor-parallel model built on the GPU
// (fsdp_init gpu) is built whole before its ranks keep their shares
// (loadWhole); with expert parallelism
// that whole model holds every expert, and the rank then keeps E/ep of
// them, as ep.py's slices of a model built on the GPU do (measured:
// bench/results/2026-11-27-h200x4-tp-ep-trace/, the whole experts' 128 MiB
// segments stay cached). Without EP every rank keeps every expert, split
// by columns.
func TestExpertsTensorParallelLoad(t *testing.T) {
	for _, tc := range []struct {
		name        string
		o           model.Overrides
		whole, rank int64 // gate_up_proj elements of one block
	}{
		{"tp 2 × ep 2", model.Overrides{TP: 2, SP: true, EP: 2, EPSkew: "1", FSDPInit: "gpu"}, 32 * 1024 * 1024, 16 * 1024 * 1024},
		{"tp 2 × dp 2 × ep 4, FSDP", model.Overrides{TP: 2, SP: true, DP: 2, Zero: "3", EP: 4, EPSkew: "1", FSDPInit: "gpu"}, 32 * 1024 * 1024, 8 * 1024 * 1024},
		{"tp 2 alone", model.Overrides{TP: 2, SP: true, FSDPInit: "gpu"}, 32 * 1024 * 1024, 32 * 512 * 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := moeSpec(t, 32, 4, tc.o)
			sizes := map[int64]int{}
			_, err := estimateWith(spec, func(*sim) {}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					if alloc && s.phase.Stage == "load" && x.name == "experts.gate_up_proj" {
						sizes[x.elems]++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if sizes[tc.whole] != 8 || sizes[tc.rank] < 8 {
				t.Errorf("gate_up_proj tensors made at load, by elements: %v; want 8 whole of %d, then the rank's of %d", sizes, tc.whole, tc.rank)
			}
		})
	}
}

// TestRouterRenorm: Qwen's router renormalises its top k in place only
// with norm_topk_prob (a saved clone and the row sums); Qwen1.5-MoE's
// config has it false, the tiny Qwen3-MoE's true.
func TestRouterRenorm(t *testing.T) {
	sums := func(file string) (n int) {
		o := model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16}
		traced(t, loadHF(t, file, o), func(s *sim, x *tensor, alloc bool) {
			if alloc && s.phase.Stage == StageForward && s.phase.Iteration == 0 && x.name == "top-k sum" {
				n++
			}
		})
		return n
	}
	if n := sums("qwen1.5-moe-a2.7b.json"); n != 0 {
		t.Errorf("Qwen1.5-MoE (norm_topk_prob false): %d renormalisations, want none", n)
	}
	if n := sums("tiny-qwen3-moe.json"); n == 0 {
		t.Errorf("tiny Qwen3-MoE (norm_topk_prob true): no renormalisation")
	}
}

// TestMixtralWeightsFP32: Mixtral's router keeps its renormalised top k in
// fp32 (MixtralTopKRouter), Qwen's casts them back to the logits' dtype;
// so a bf16 Mixtral block's weighted rows are fp32 (the experts' sum cast
// back once per block, as DeepSeek's).
func TestMixtralWeightsFP32(t *testing.T) {
	const rows = 256
	casts := func(file string, k int64) (weights, sums int) {
		o := model.Overrides{Batch: 1, Seq: rows, Precision: model.BF16}
		traced(t, loadHF(t, file, o), func(s *sim, x *tensor, alloc bool) {
			if alloc || s.phase.Stage != StageForward || s.phase.Iteration != 0 || x.prefix != "cast of " {
				return
			}
			switch {
			case x.dt == half && x.bytes() == rows*k*half: // the renormalised weights (a view), cast
				weights++
			case x.name == "moe out":
				sums++
			}
		})
		return weights, sums
	}
	if w, s := casts("mixtral-8x7b-2layer.json", 2); w != 0 || s != 2 {
		t.Errorf("Mixtral's cut: %d weight casts and %d sum casts, want none and two (one per block)", w, s)
	}
	if w, s := casts("tiny-qwen3-moe.json", 4); w == 0 || s != 0 {
		t.Errorf("tiny Qwen3-MoE: %d weight casts and %d sum casts, want some and none", w, s)
	}
}
