package model

import (
	"fmt"
	"strings"
	"testing"
)

// TestGPTOSSSpec checks the llama shorthand's GPT-OSS fields: the choices'
// values and errors, the eager attention sinks need, the layouts GPT-OSS's
// block is refused under, and LoRA over its experts.
func TestGPTOSSSpec(t *testing.T) {
	const model = "name: x\nmodel:\n  type: llama\n  layers: 2\n  hidden: 64\n  heads: 4\n  vocab: 100\n  intermediate: 64\n" +
		"  experts: 4\n  top_k: 2\n  attention_bias: true\n  mlp_bias: true\n"
	oss := model + "  attention_sinks: true\n  rope_halves: true\n  router: topk_softmax\n  expert_gate: clamped\n"
	eager := "training: {batch: 1, seq: 8, attention: eager}\n"
	tests := []struct {
		name, spec string
		o          Overrides
		want       string // error substring, or "" for success
	}{
		{"gpt-oss", oss + eager, Overrides{}, ""},
		{"aliases", model + "  router: softmax_topk\n  expert_gate: act\n" + eager, Overrides{}, ""},
		{"sinks need eager", oss + "training: {batch: 1, seq: 8}\n", Overrides{}, "attention: the model's attention sinks run in eager attention only, as transformers runs GPT-OSS (no SDPA path): use attention: eager"},
		{"sinks need eager (flag)", oss + eager, Overrides{Attention: AttnSDPA}, "x.yaml: attention: the model's attention sinks run in eager attention only, as transformers runs GPT-OSS (no SDPA path): use --attention eager"},
		{"unknown router", model + "  router: sigmoid\n" + eager, Overrides{}, "x.yaml:13: router: unknown choice \"sigmoid\" (valid: softmax_topk, softmax_topk_fp32, topk_softmax, sigmoid_group, softmax_greedy, softmax_group, topk_sigmoid)"},
		{"unknown gate", model + "  expert_gate: relu\n" + eager, Overrides{}, "x.yaml:13: expert_gate: unknown choice \"relu\""},
		{"router needs experts", strings.Replace(model, "  experts: 4\n  top_k: 2\n", "", 1) + "  router: topk_softmax\n" + eager, Overrides{}, "router: needs experts"},
		{"tensor parallelism", oss + eager, Overrides{TP: 2}, ""},
		{"sequence parallelism", oss + eager, Overrides{TP: 2, SP: true}, ""},
		{"sequence parallelism in a pipeline", oss + eager, Overrides{TP: 2, SP: true, PP: 2, GradAccum: 2}, ""},
		{"no context parallelism", oss + eager, Overrides{CP: 2}, "x.yaml: cp: context parallelism is not simulated for GPT-OSS's block run through transformers' forward with its experts, sinks or latent attention"},
		{"pipeline", oss + eager, Overrides{PP: 2, GradAccum: 2}, ""},
		{"expert parallelism", oss + "training: {batch: 1, seq: 8, attention: eager, dp: 2, zero: 3, ep: 2}\n", Overrides{}, ""},
		{"expert parallelism beside tensor parallelism", oss + "training: {batch: 1, seq: 8, attention: eager, dp: 2, zero: 3, ep: 2}\n", Overrides{TP: 2, SP: true}, ""},
		{"expert parallelism beside tensor parallelism needs sp", oss + "training: {batch: 1, seq: 8, attention: eager, dp: 2, zero: 3, ep: 2}\n", Overrides{TP: 2},
			"ep: expert parallelism with tensor parallelism is simulated with sequence parallelism (sp), whose sequence shard each tp rank routes, as torchtitan does"},
		{"lora attn", oss + eager, Overrides{LoRA: 8, LoRATargets: TargetsAttn}, ""},
		{"lora mlp", oss + eager, Overrides{LoRA: 8, LoRATargets: TargetsMLP}, "a mixture of experts without a shared expert or dense layers has no MLP linears to adapt"},
		{"lora shared expert", model + "  shared_expert: 32\n" + eager, Overrides{LoRA: 8, LoRATargets: TargetsMLP}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseCase(t, tt.spec, tt.o, tt.want)
			if s == nil {
				return
			}
			if tt.name == "aliases" && (s.Model.Router != RouterSoftmaxTopK || s.Model.ExpertGate != GateAct) {
				t.Errorf("aliases: router %q, gate %q, want the defaults", s.Model.Router, s.Model.ExpertGate)
			}
			if tt.name == "lora attn" {
				// Adapters on q, k, v and o only: 8·((64+64)·4) per layer.
				if got, want := s.Trainable(), int64(2*8*(4*128)); got != want {
					t.Errorf("lora attn: %d trainable, want %d", got, want)
				}
			}
		})
	}
}

// TestGPTOSSLowering checks that the shorthand's fields reach the layers:
// the attention's sinks and halves, the experts' router and gate, and the
// parameters they add (sinks per head, the router's bias).
func TestGPTOSSLowering(t *testing.T) {
	m := &Model{Type: Llama, NumLayers: 1, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Intermediate: 64, Vocab: 10,
		Experts: 4, TopK: 2, Activation: KSiLU, AttnSinks: true, RoPEHalves: true, Router: RouterTopKSoftmax, ExpertGate: GateClamped}
	plain := *m
	plain.AttnSinks, plain.RoPEHalves, plain.Router, plain.ExpertGate = false, false, "", ""
	var attn *Attention
	var moe *MoE
	var find func([]Layer)
	find = func(ls []Layer) {
		for _, l := range ls {
			switch k := l.Spec.(type) {
			case *Attention:
				attn = k
			case *MoE:
				moe = k
			}
			find(l.Body)
		}
	}
	find(m.Lower())
	if attn == nil || !attn.Sinks || !attn.RoPEHalves || moe == nil || moe.Router != RouterTopKSoftmax || moe.Gate != GateClamped {
		t.Fatalf("lowered attention %+v, experts %+v", attn, moe)
	}
	if got, want := Params(m.Lower())-Params(plain.Lower()), int64(4+4); got != want {
		t.Errorf("GPT-OSS adds %d parameters over the plain block, want %d (4 sinks, 4 router biases)", got, want)
	}
}

// TestHFQuantNote: a config's quantization_config is not read, and the
// import says how the weights are simulated instead.
func TestHFQuantNote(t *testing.T) {
	const cfg = `{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128%s}`
	for _, c := range []struct{ extra, want string }{
		{"", ""},
		{`, "quantization_config": {"quant_method": "mxfp4"}`, "the experts are simulated dequantized"},
		{`, "quantization_config": {"quant_method": "fp8"}`, "quantization_config (fp8) is not read"},
	} {
		s, err := ParseHF("c.json", []byte(fmt.Sprintf(cfg, c.extra)), Overrides{Batch: 1, Seq: 8})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(s.Notes, "; ")
		if c.want == "" && strings.Contains(got, "quantization_config") || !strings.Contains(got, c.want) {
			t.Errorf("%s: notes %q, want %q", c.extra, got, c.want)
		}
	}
}
