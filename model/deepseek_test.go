package model

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDeepSeekSpec checks the llama shorthand's DeepSeek-V3 fields: what
// they need, the refusals, and that they reach the layers with the
// parameters transformers counts.
func TestDeepSeekSpec(t *testing.T) {
	const base = "name: x\nmodel:\n  type: llama\n  layers: 3\n  hidden: 64\n  heads: 4\n  vocab: 100\n  intermediate: 32\n"
	const ds = base + "  experts: 8\n  top_k: 2\n  shared_expert: 64\n  shared_expert_after: true\n  router: sigmoid_group\n" +
		"  router_groups: 4\n  router_top_groups: 2\n  dense_layers: 1\n  dense_intermediate: 128\n" +
		"  kv_lora_rank: 32\n  qk_nope_head_dim: 16\n  qk_rope_head_dim: 8\n  v_head_dim: 16\n  rope_interleave: true\n"
	const train = "training: {batch: 1, seq: 8}\n"
	tests := []struct {
		name, spec string
		o          Overrides
		want       string
	}{
		{"deepseek", ds + train, Overrides{}, ""},
		{"query rank", ds + "  q_lora_rank: 24\n" + train, Overrides{}, ""},
		{"latent widths without rank", base + "  qk_rope_head_dim: 8\n" + train, Overrides{}, "x.yaml:9: qk_rope_head_dim: needs kv_lora_rank"},
		{"odd rotary dims", strings.Replace(ds, "qk_rope_head_dim: 8", "qk_rope_head_dim: 7", 1) + train, Overrides{}, "qk_rope_head_dim: 7 must be even"},
		{"missing widths", base + "  kv_lora_rank: 32\n" + train, Overrides{}, "missing required field \"qk_nope_head_dim\""},
		{"dense without experts", base + "  dense_layers: 1\n  dense_intermediate: 64\n" + train, Overrides{}, "dense_layers: the first 1 of 3 layers dense needs experts"},
		{"groups", strings.Replace(ds, "router_groups: 4", "router_groups: 3", 1) + train, Overrides{}, "sigmoid_group router: groups (3) must divide experts (8)"},
		{"groups needed", strings.Replace(ds, "  router_groups: 4\n", "", 1) + train, Overrides{}, "missing required field \"router_groups\""},
		{"eager", ds + "training: {batch: 1, seq: 8, attention: eager}\n", Overrides{}, "multi-head latent attention is simulated under SDPA"},
		{"tensor parallel", ds + train, Overrides{TP: 2}, ""},
		{"sequence parallelism", ds + train, Overrides{TP: 2, SP: true}, ""},
		{"no context parallelism", ds + train, Overrides{CP: 2}, "cp: context parallelism is not simulated for DeepSeek's block run through transformers' forward with its experts, sinks or latent attention"},
		{"pipeline", ds + train, Overrides{PP: 2, GradAccum: 2}, ""},
		{"lora", ds + train, Overrides{LoRA: 8, LoRATargets: TargetsAll}, ""},
		{"partial rotary with latent attention", ds + "  rotary: 0.5\n" + train, Overrides{}, "rotary: a fraction of each head rotated, not with latent attention's"},
		{"late norms without norms", ds + "  qk_norm_late: true\n" + train, Overrides{}, "qk_norm_late: orders per-head query and key norms: it needs qk_norm"},
		{"unrenormalised sigmoid router", ds + "  router_no_renorm: true\n" + train, Overrides{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseCase(t, tt.spec, tt.o, tt.want)
			if s == nil {
				return
			}
			// Two repeats: the dense layer, then the sparse ones from
			// index 1.
			var reps []*Repeat
			for _, l := range s.Model.Lower() {
				if r, ok := l.Spec.(*Repeat); ok {
					reps = append(reps, r)
				}
			}
			if len(reps) != 2 || reps[0].Times != 1 || reps[1].Times != 2 || reps[1].First != 1 {
				t.Fatalf("repeats %+v, want one dense layer then two sparse from index 1", reps)
			}
		})
	}
}

// TestDeepSeekStages checks how a pipeline splits DeepSeek's two repeats
// (the dense first layers, then the sparse ones): torchtitan's split counts
// them as one list of blocks, so a stage may hold part of each, every part
// keeping its layers' model indexes.
func TestDeepSeekStages(t *testing.T) {
	const spec = "name: x\nmodel:\n  type: llama\n  layers: 5\n  hidden: 64\n  heads: 4\n  vocab: 100\n  intermediate: 32\n" +
		"  experts: 8\n  top_k: 2\n  dense_layers: 2\n  dense_intermediate: 128\n" +
		"  kv_lora_rank: 32\n  qk_nope_head_dim: 16\n  qk_rope_head_dim: 8\n  v_head_dim: 16\n" +
		"training: {batch: 1, seq: 8, grad_accum: 4}\n"
	s := parseCase(t, spec, Overrides{}, "")
	type part struct{ times, first int64 }
	for _, c := range []struct {
		stages int64
		want   [][]part // per stage, its repeats' (times, first)
	}{
		// StageLayers(5, 2): 3 and 2 blocks; the first stage holds both
		// dense layers and the first sparse one.
		{2, [][]part{{{2, 0}, {1, 2}}, {{2, 3}}}},
		// StageLayers(5, 3): 2, 2 and 1.
		{3, [][]part{{{2, 0}}, {{2, 2}}, {{1, 4}}}},
	} {
		for stage, w := range c.want {
			ls, err := s.Model.LowerStage(int64(stage), c.stages)
			if err != nil {
				t.Fatal(err)
			}
			var got []part
			for _, l := range ls {
				if r, ok := l.Spec.(*Repeat); ok {
					got = append(got, part{r.Times, r.First})
				}
			}
			if !slices.Equal(got, w) {
				t.Errorf("%d stages, stage %d: repeats (times, first) %v, want %v", c.stages, stage, got, w)
			}
		}
	}
}

// TestMLAParams checks multi-head latent attention's parameter count by
// hand, with and without a query rank and biases.
func TestMLAParams(t *testing.T) {
	for _, c := range []struct {
		a    Attention
		want int64
	}{
		// q_proj 64·(4·24) + kv_a 64·40 + norm 32 + kv_b 32·(4·32) + o (4·16)·64.
		{Attention{Dim: 64, Heads: 4, MLA: &MLA{KVRank: 32, Nope: 16, Rope: 8, V: 16}}, 64*96 + 64*40 + 32 + 32*128 + 64*64},
		// q_a 64·24 + bias 24 + norm 24 + q_b 24·96, kv_a with bias 40, o with bias 64.
		{Attention{Dim: 64, Heads: 4, Bias: true, OutBias: true, MLA: &MLA{QRank: 24, KVRank: 32, Nope: 16, Rope: 8, V: 16}},
			64*24 + 24 + 24 + 24*96 + 64*40 + 40 + 32 + 32*128 + 64*64 + 64},
	} {
		if got := int64(c.a.params(nil)); got != c.want {
			t.Errorf("MLA %+v: %d parameters, want %d", *c.a.MLA, got, c.want)
		}
	}
}

// TestHFDeepSeekV3 checks the import's readings: first_k_dense_replace 0
// (every layer sparse), q_lora_rank null (one query projection), and
// DeepseekV3Config's defaults where a field is absent.
func TestHFDeepSeekV3(t *testing.T) {
	const head = `{"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "intermediate_size": 128`
	for _, c := range []struct {
		name, cfg string
		ok        func(m Model) bool
	}{
		{"every layer sparse", head + `, "first_k_dense_replace": 0, "q_lora_rank": null, "n_routed_experts": 8, "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}`,
			func(m Model) bool {
				return m.DenseLayers == 0 && m.QLoRARank == 0 && m.Experts == 8 && m.RouterGroups == 2
			}},
		{"defaults", head + `, "n_routed_experts": 16, "num_experts_per_tok": 2}`,
			func(m Model) bool {
				return m.DenseLayers == 3 && m.QLoRARank == 1536 && m.KVLoRARank == 512 && m.QKNopeDim == 128 && m.QKRopeDim == 64 &&
					m.VHeadDim == 128 && m.RoPEInterleave && m.Intermediate == 2048 && m.SharedExpert == 2048 && m.RouterGroups == 8 && m.RouterTopGroups == 4
			}},
	} {
		s, err := ParseHF("c.json", []byte(c.cfg), Overrides{Batch: 1, Seq: 8})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !c.ok(s.Model) {
			t.Errorf("%s: model %+v", c.name, s.Model)
		}
	}
	_, err := ParseHF("c.json", []byte(head+`, "num_key_value_heads": 2}`), Overrides{Batch: 1, Seq: 8})
	if err == nil || !strings.Contains(err.Error(), "num_key_value_heads 2") {
		t.Errorf("grouped key/value heads: error %v, want a refusal", err)
	}
}

// TestHFDeepSeekV2 checks the import of DeepseekV2Config: the released
// configs' routers (DeepSeek-V2-Lite's greedy one, DeepSeek-V2's
// group-limited one), complex rotary dims, DeepseekV2Config's defaults
// where a field is absent, and the refusals.
func TestHFDeepSeekV2(t *testing.T) {
	const head = `{"model_type": "deepseek_v2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "num_experts_per_tok": 2`
	for _, c := range []struct {
		name, cfg string
		ok        func(m Model) bool
	}{
		{"defaults", head + `}`, func(m Model) bool {
			return m.Router == RouterSoftmaxGreedy && m.RoPEComplex && !m.RoPEInterleave && m.DenseLayers == 0 && m.QLoRARank == 1536 &&
				m.KVLoRARank == 512 && m.Intermediate == 1407 && m.Experts == 64 && m.SharedExpert == 2*1407 && m.SharedAfter && m.TopK == 2
		}},
		{"group limited", head + `, "topk_method": "group_limited_greedy", "n_routed_experts": 8, "n_group": 4, "topk_group": 2}`, func(m Model) bool {
			return m.Router == RouterSoftmaxGroup && m.RouterGroups == 4 && m.RouterTopGroups == 2
		}},
	} {
		s, err := ParseHF("c.json", []byte(c.cfg), Overrides{Batch: 1, Seq: 8})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !c.ok(s.Model) {
			t.Errorf("%s: model %+v", c.name, s.Model)
		}
	}
	for _, c := range []struct{ name, cfg, want string }{
		{"unknown method", head + `, "topk_method": "noaux_tc"}`, `topk_method "noaux_tc": DeepseekV2TopkRouter knows greedy and group_limited_greedy`},
		{"groups missing", head + `, "topk_method": "group_limited_greedy"}`, `missing field "n_group"`},
		{"mlp bias", head + `, "mlp_bias": true}`, "mlp_bias: biases on DeepSeek-V2's dense and shared MLPs are not modelled yet"},
		{"no top k", strings.Replace(head, `, "num_experts_per_tok": 2`, "", 1) + `}`, `missing field "num_experts_per_tok"`},
		{"groups uneven", head + `, "topk_method": "group_limited_greedy", "n_routed_experts": 8, "n_group": 3, "topk_group": 2}`, "n_group 3 must divide n_routed_experts (8), and topk_group 2 be 1 to n_group"},
	} {
		_, err := ParseHF("c.json", []byte(c.cfg), Overrides{Batch: 1, Seq: 8})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestLoRAFusedExperts checks which imports peft converts (their MLP
// targets become the fused experts' parameters, measured:
// bench/results/2026-11-27-peft-targets.jsonl), the names that target
// them, and the layouts the conversion is refused under.
func TestLoRAFusedExperts(t *testing.T) {
	for file, want := range map[string]bool{"deepseek-v2-lite.json": true, "moonlight-4layer.json": true, "qwen3-30b-a3b.json": true,
		"mixtral-8x7b.json": true, "qwen1.5-moe-a2.7b.json": false, "gpt-oss-20b.json": false} {
		s, err := LoadHF(filepath.Join("testdata", "hf", file), Overrides{Batch: 1, Seq: 64})
		if err != nil {
			t.Fatal(err)
		}
		if s.Model.LoRAFusedExperts != want {
			t.Errorf("%s: lora_fused_experts %v, want %v", file, s.Model.LoRAFusedExperts, want)
		}
	}
	path := filepath.Join("testdata", "hf", "deepseek-v2-lite-4layer.json")
	for _, c := range []struct {
		name string
		o    Overrides
		want string
	}{
		{"pair", Overrides{LoRA: 8, LoRATargets: "gate_proj,up_proj"}, ""},
		{"half a pair", Overrides{LoRA: 8, LoRATargets: "gate_proj,down_proj"}, "gate_proj without up_proj: peft fuses them into gate_up_proj"},
		{"fsdp", Overrides{LoRA: 8, LoRATargets: "all", DP: 2, Zero: "3"}, "LoRA on fused experts under FSDP, expert parallelism or a quantized base is not simulated"},
		{"fsdp attention", Overrides{LoRA: 8, LoRATargets: "attn", DP: 2, Zero: "3"}, ""},
	} {
		c.o.Batch, c.o.Seq = 1, 64
		s, err := LoadHF(path, c.o)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		case c.name == "pair" && s.Trainable() != 16*64*(2048+2816)*3:
			t.Errorf("gate_proj and up_proj: %d adapter parameters, want gate_up_proj's at twice rank 8 over 64 experts in 3 layers", s.Trainable())
		}
	}
}
