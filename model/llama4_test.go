package model

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHFLlama4 checks the import of Llama4TextConfig: Scout's whole
// language model (107,769,861,120 parameters, as transformers 5.17 counts
// Llama4ForCausalLM's) and the fields each config option sets.
func TestHFLlama4(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "llama4-scout.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if !m.DenseExperts || m.Router != RouterTopKSigmoid || m.Experts != 16 || m.TopK != 1 || m.Intermediate != 8192 ||
		m.SharedExpert != 8192 || !m.SharedAfter || m.SharedGate || !m.RoPEComplex || !m.QKL2Norm || !m.AttnTemperature ||
		m.NoRoPEPattern != 4 || m.SlidingWindow != 8192 || m.SlidingPattern != 4 || m.Tied || m.NoCache || m.LoRAFusedExperts {
		t.Errorf("Scout: model %+v", m)
	}
	// By hand: 2 × 202,048 × 5,120 (untied) + 48 × (62,914,560 attention +
	// 16 × 3 × 5,120 × 8,192 experts + 81,920 router + 125,829,120 shared
	// expert + 10,240 norms) + 5,120.
	if got, want := s.Params(), int64(107_769_861_120); got != want {
		t.Errorf("Scout: %d parameters, want %d", got, want)
	}
	// Maverick: 24 dense layers (Llama4TextMLP of 16,384) between 24 of
	// 128 experts, by hand 2 × 202,048 × 5,120 + 24 × (62,914,560 +
	// 10,240 + 251,658,240) + 24 × (62,914,560 + 10,240 + 128 × 3 × 5,120
	// × 8,192 + 655,360 + 125,829,120) + 5,120.
	mav, err := LoadHF(filepath.Join("testdata", "hf", "llama4-maverick.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mav.Params(), int64(400_711_848_960); got != want || mav.Model.MoEInterleave != 2 || mav.Model.QKL2Norm {
		t.Errorf("Maverick: %d parameters, want %d; model %+v", got, want, mav.Model)
	}
	test, err := LoadHF(filepath.Join("testdata", "hf", "llama4-test-4layer.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if m := test.Model; m.NoRoPEPattern != 2 || m.SlidingWindow != 2048 || m.SlidingPattern != 2 || m.TopK != 2 || m.Experts != 8 {
		t.Errorf("test shape: model %+v", m)
	}
	// The layers carry the options: every attention rotates as complex
	// pairs with the weightless norm, takes the temperature on NoPE
	// layers and the softmax in the scores' dtype under eager attention;
	// every MoE runs its experts densely.
	var attn, moe int
	walk(test.Model.Lower(), func(l *Layer) {
		switch k := l.Spec.(type) {
		case *Attention:
			attn++
			if !k.RoPEComplex || !k.QKL2Norm || !k.Temperature || k.Softmax != SoftmaxInput || k.Window != 2048 || k.NoRoPEPattern != 2 {
				t.Errorf("attention %+v", k)
			}
		case *MoE:
			moe++
			if !k.Dense || k.Router != RouterTopKSigmoid || !k.SharedAfter || k.Shared != 2048 {
				t.Errorf("moe %+v", k)
			}
		}
	})
	if attn == 0 || moe == 0 {
		t.Errorf("%d attention and %d MoE layers in the lowering", attn, moe)
	}
}

// TestHFLlama4Errors checks the Llama 4 configs memplan refuses, with the
// reason: Maverick's dense layers between sparse ones, chunked layers other
// than the rotating ones, Llama 4 without NoPE layers, and the multimodal
// config, whose text_config imports.
func TestHFLlama4Errors(t *testing.T) {
	const base = `{"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "intermediate_size": 32, "num_local_experts": 4%s}`
	for _, tt := range []struct{ name, extra, want string }{
		{"scout shape", ``, ""},
		{"maverick", `, "interleave_moe_layer_step": 2, "intermediate_size_mlp": 96`, ""},
		{"maverick's moe layers", `, "interleave_moe_layer_step": 2, "moe_layers": [1, 3]`, ""},
		{"moe layers", `, "moe_layers": [1, 3]`, "moe_layers: experts on layers other than every interleave_moe_layer_step-th are not modelled"},
		{"chunked elsewhere", `, "layer_types": ["full_attention", "chunked_attention", "chunked_attention", "chunked_attention"]`, "layer_types: chunked attention on layers other than the rotating ones is not modelled"},
		{"no chunks", `, "attention_chunk_size": null, "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"]`, "layer_types: chunked attention on layers other than the rotating ones"},
		{"no chunks, no types", `, "attention_chunk_size": null`, ""},
		{"temperature as a number", `, "attn_temperature_tuning": 4`, ""},
		{"temperature off", `, "attn_temperature_tuning": false, "use_qk_norm": false`, ""},
		{"bad temperature", `, "attn_temperature_tuning": "yes"`, `field "attn_temperature_tuning": want a boolean or a number`},
		{"every layer rotates", `, "no_rope_layers": [1, 1, 1, 1]`, ""},
		{"NoPE layers out of pattern", `, "no_rope_layers": [0, 1, 1, 1]`, "no_rope_layers: layers without rotary embeddings in an order memplan does not model"},
		{"multimodal", `, "model_type": "llama4"`, `model_type "llama4" needs a vision tower beside the language model (its text_config, model_type llama4_text, imports the language model alone)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			js := strings.Replace(base, "%s", tt.extra, 1)
			if tt.name == "multimodal" {
				js = `{"model_type": "llama4"}`
			}
			s, err := ParseHF("c.json", []byte(js), Overrides{Batch: 1, Seq: 64})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ParseHF: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ParseHF error %v, want one containing %q", err, tt.want)
			}
			if err != nil {
				return
			}
			m := s.Model
			switch tt.name {
			case "temperature as a number":
				if !m.AttnTemperature {
					t.Error("attn_temperature_tuning 4 (Scout's released config) is on")
				}
			case "temperature off":
				if m.AttnTemperature || m.QKL2Norm {
					t.Errorf("options off: %+v", m)
				}
			case "maverick":
				// Layers 0 and 2 dense (Llama4TextMLP of 96), 1 and 3 sparse.
				if m.MoEInterleave != 2 || m.DenseIntermediate != 96 || m.denseCount() != 2 {
					t.Errorf("Maverick's interleaving: %+v", m)
				}
				var dense, sparse int
				walk(m.Lower(), func(l *Layer) {
					switch k := l.Spec.(type) {
					case *GatedMLP:
						if k.Hidden == 96 {
							dense++
						}
					case *MoE:
						sparse++
					}
				})
				if dense != 2 || sparse != 2 {
					t.Errorf("Maverick's lowering: %d dense MLPs and %d MoE blocks, want 2 and 2", dense, sparse)
				}
			case "every layer rotates":
				if m.NoRoPEPattern != 0 || m.AttnTemperature || m.SlidingWindow != 8192 || m.SlidingPattern > 1 {
					t.Errorf("every layer rotating and chunked, no temperature: %+v", m)
				}
			case "no chunks, no types":
				if m.SlidingWindow != 0 {
					t.Errorf("attention_chunk_size null: window %d, want none", m.SlidingWindow)
				}
			}
		})
	}
}

// TestLlama4Spec checks the llama shorthand's Llama 4 keys: the options
// that contradict each other, and the layouts refused for the block.
func TestLlama4Spec(t *testing.T) {
	const model = "name: x\nmodel:\n  type: llama\n  layers: 4\n  hidden: 64\n  heads: 4\n  kv_heads: 2\n  vocab: 100\n  intermediate: 32\n" +
		"  experts: 4\n  top_k: 1\n  shared_expert: 32\n  shared_expert_after: true\n  no_rope_pattern: 2\n"
	l4 := model + "  router: topk_sigmoid\n  dense_experts: true\n  rope_complex: true\n  qk_l2_norm: true\n  attn_temperature: true\n"
	train := "training: {batch: 1, seq: 8}\n"
	for _, tt := range []specCase{
		{"llama 4", l4 + train, Overrides{}, ""},
		{"dense experts need the router", model + "  dense_experts: true\n" + train, Overrides{}, "dense_experts: Llama 4's experts and its topk_sigmoid router come together"},
		{"the router needs dense experts", model + "  router: topk_sigmoid\n" + train, Overrides{}, "dense_experts: Llama 4's experts and its topk_sigmoid router come together"},
		{"two q/k norms", l4 + "  qk_norm: true\n" + train, Overrides{}, "qk_l2_norm: Llama 4's weightless query and key norm, not with qk_norm"},
		{"temperature needs NoPE layers", strings.Replace(l4, "  no_rope_pattern: 2\n", "", 1) + train, Overrides{}, "attn_temperature: scales the queries of the layers without rotary embeddings: it needs no_rope_pattern"},
		{"two rotations", l4 + "  rope_halves: true\n" + train, Overrides{}, "rope_complex: whole heads rotated as complex numbers, not with rope_halves"},
		{"tensor parallelism", l4 + train, Overrides{TP: 2}, ""},
		{"sequence parallelism", l4 + train, Overrides{TP: 2, SP: true, LossParallel: true}, ""},
		{"context parallelism", l4 + train, Overrides{CP: 2}, "context parallelism is not simulated for Llama 4's block run through transformers' forward with its experts"},
		{"pipeline", l4 + train, Overrides{PP: 2, GradAccum: 2}, ""},
		{"expert parallelism", l4 + "training: {batch: 1, seq: 8, dp: 2, zero: 3, ep: 2}\n", Overrides{}, "expert parallelism of Llama 4's block is not simulated yet"},
		{"fsdp", l4 + "training: {batch: 1, seq: 8, dp: 2, zero: 3}\n", Overrides{}, ""},
		{"lora all", l4 + train, Overrides{LoRA: 8}, "lora: peft's all-linear (targets all, the default) wraps Llama 4's router"},
		{"lora attn", l4 + train, Overrides{LoRA: 8, LoRATargets: TargetsAttn}, ""},
		{"lora mlp", l4 + train, Overrides{LoRA: 8, LoRATargets: TargetsMLP}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) { parseCase(t, tt.spec, tt.o, tt.want) })
	}
}

// specCase is a spec, its overrides and the error substring parsing
// them gives ("" for none).
type specCase struct {
	name, spec string
	o          Overrides
	want       string
}

// TestShardedExpertRows: the rows of a rank's fused experts, which FSDP2
// pads past as many ranks (tune's sharding search, estimate's note).
func TestShardedExpertRows(t *testing.T) {
	for _, c := range []struct {
		file string
		ep   int64
		want int64
	}{{"llama4-scout.json", 0, 16}, {"mixtral-8x7b.json", 0, 8}, {"qwen3-30b-a3b.json", 4, 32}, {"llama-3-8b.json", 0, 0}} {
		s, err := LoadHF(filepath.Join("testdata", "hf", c.file), Overrides{Batch: 1, Seq: 128})
		if err != nil {
			t.Fatal(err)
		}
		tr := s.Training
		tr.EP = c.ep
		if got := s.Model.ShardedExpertRows(&tr); got != c.want {
			t.Errorf("%s at ep %d: %d rows, want %d", c.file, c.ep, got, c.want)
		}
	}
}

// TestLlama4LoRATargets holds memplan's adapters to what peft 0.21 made
// of a tiny Llama 4 at rank 16 (bench/torch/peft_targets.py,
// bench/results/2026-11-28-peft-targets-llama4.jsonl): attn adapts q, k, v
// and o, mlp the shared expert's three projections, and the experts stay
// frozen (peft converts nothing for llama4_text).
func TestLlama4LoRATargets(t *testing.T) {
	const tiny = `{"model_type": "llama4_text", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
		"num_local_experts": 8, "num_experts_per_tok": 1, "intermediate_size_mlp": 128}`
	for targets, want := range map[string]int64{TargetsAttn: 16384, TargetsMLP: 15360} {
		s, err := ParseHF("tiny.json", []byte(tiny), Overrides{Batch: 1, Seq: 64, LoRA: 16, LoRATargets: targets})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Trainable(); got != want {
			t.Errorf("%s: %d adapter parameters, peft's %d", targets, got, want)
		}
	}
}
