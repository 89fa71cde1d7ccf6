package model

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHFParams imports published transformers configs (testdata/hf) and
// checks the parameter counts published for them (model cards and the HF
// import issue). TestHFParamsMeasured checks the same configs against what
// transformers itself counts.
func TestHFParams(t *testing.T) {
	tests := []struct {
		file string
		want int64
	}{
		{"gpt2.json", 124_439_808},
		{"llama-3-8b.json", 8_030_261_248},
		{"mistral-7b-v0.1.json", 7_241_732_096},
		{"qwen2.5-0.5b.json", 494_032_768},
		{"qwen3-0.6b.json", 596_049_920},
		{"gemma-2b.json", 2_506_172_416},
		{"phi-3-mini-4k.json", 3_821_079_552},
		{"bert-base-uncased.json", 109_514_298},
		{"roberta-base.json", 124_697_433},
		{"mixtral-8x7b.json", 46_702_792_704},
		{"qwen1.5-moe-a2.7b.json", 14_315_784_192},
		{"qwen3-30b-a3b.json", 30_532_122_624},
		{"pythia-160m.json", 162_322_944},
		{"falcon-7b.json", 6_921_720_704},
		{"gemma-2-2b.json", 2_614_341_888},
		{"granite-3.1-2b.json", 2_533_531_648}, // granite-3.1-2b's model card: 2.5B; by hand, 49,155 × 2,048 tied + 40 × (10,485,760 attention + 50,331,648 MLP + 4,096 norms) + 2,048
		{"olmo-1b.json", 1_176_764_416},        // OLMo-1B-hf's model card: 1.18B; by hand, 50,304 × 2,048 tied + 16 × (16,777,216 attention + 50,331,648 MLP)
		{"olmo2-1b.json", 1_484_916_736},
		{"olmo2-7b.json", 7_298_617_344},      // OLMo-2-1124-7B's model card: 7.3B
		{"olmo3-7b.json", 7_298_011_136},      // Olmo-3-1025-7B's model card: 7.3B; OLMo 2's 7B with a vocabulary of 100,278       // OLMo-2-0425-1B's model card: 1.48B; by hand, 2 × 100,352 × 2,048 + 16 × (16,777,216 attention + 4,096 q/k norms + 50,331,648 MLP + 4,096 norms) + 2,048
		{"smollm3-3b.json", 3_075_098_624},    // SmolLM3-3B's model card: 3.08B; by hand, 128,256 × 2,048 tied + 36 × (10,485,760 attention + 67,633,152 MLP + 4,096 norms) + 2,048
		{"starcoder2-3b.json", 3_030_371_328}, // StarCoder2-3B's model card: 3B; by hand, 49,152 × 3,072 tied + 30 × (19,928,064 attention with biases + 75,509,760 MLP with biases + 12,288 norms) + 6,144
		{"phi-2.json", 2_779_683_840},         // phi-2's model card: 2.7B; by hand, 2 × 51,200 × 2,560 + 51,200 head bias + 32 × (26,224,640 attention + 52,441,600 MLP + 5,120 norm) + 5,120
		{"aya-23-8b.json", 8_028_033_024},     // aya-23-8B's model card: 8B; by hand, 256,000 × 4,096 tied + 32 × (41,943,040 attention + 176,160,768 MLP + 4,096 norm) + 4,096
		{"gemma-3-1b.json", 999_885_952},      // by hand: 262,144 × 1,152 + 26 × (2,949,120 attention + 23,887,872 MLP + 5,120 norms) + 1,152; not yet built by transformers on the GPU machine
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s, err := LoadHF(filepath.Join("testdata", "hf", tt.file), Overrides{Batch: 2, Seq: 128})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Params(); got != tt.want {
				t.Errorf("Params() = %d, want %d", got, tt.want)
			}
			if s.Training.Batch != 2 || s.Training.Seq != 128 {
				t.Errorf("overrides not applied: %+v", s.Training)
			}
		})
	}
}

// TestHFParamsMeasured checks every config that transformers built on the
// GPU machine (bench/torch/measure.py --params --hf, on the meta device)
// against memplan's count for the same file.
func TestHFParamsMeasured(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "bench", "results", "2026-11-22-h100-params-hf.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Spec       string `json:"spec"`
			Parameters int64  `json:"parameters"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		n++
		s, err := LoadHF(filepath.Join("..", filepath.FromSlash(rec.Spec)), Overrides{Seq: 128})
		if err != nil {
			t.Errorf("%s: %v", rec.Spec, err)
			continue
		}
		if got := s.Params(); got != rec.Parameters {
			t.Errorf("%s: Params() = %d, transformers counted %d", rec.Spec, got, rec.Parameters)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 16 {
		t.Errorf("only %d measured configs; want every fixture in testdata/hf", n)
	}
}

// TestHFParamsOfRuns checks the families added since against the count
// transformers made in their measured runs' records (measure.py's
// parameters; lora.py's frozen base).
func TestHFParamsOfRuns(t *testing.T) {
	for _, run := range []string{"2026-11-27-h100-olmo.jsonl", "2026-11-27-h100-olmo2.jsonl", "2026-11-27-h100-granite.jsonl",
		"2026-11-27-h200-olmo3.jsonl", "2026-11-27-h200-smollm3.jsonl", "2026-11-27-h200-starcoder2.jsonl",
		"2026-11-27-h200-phi.jsonl", "2026-11-27-h200-cohere.jsonl", "2026-11-27-h200-heldout36.jsonl",
		"2026-11-27-h200-gptoss.jsonl", "2026-11-27-h200-heldout37.jsonl", "2026-11-27-h200-lora-gptoss.jsonl",
		"2026-11-27-h200-deepseek.jsonl", "2026-11-27-h200-heldout39.jsonl", "2026-11-27-h200-heldout40.jsonl",
		"2026-11-27-h200-deepseek-v2.jsonl", "2026-11-27-h200-heldout41.jsonl", "2026-11-27-h200-lora-deepseek.jsonl",
		"2026-11-27-h200-heldout42-lora.jsonl", "2026-11-27-h200-heldout43-lora.jsonl",
		"2026-11-27-h200-glm.jsonl", "2026-11-27-h200-heldout45.jsonl", "2026-11-27-h200-heldout45-lora.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "bench", "results", run))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var rec struct {
				Spec       string          `json:"spec"`
				Parameters json.RawMessage `json:"parameters"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			var n int64
			if json.Unmarshal(rec.Parameters, &n) != nil {
				var lora struct{ Frozen int64 }
				if err := json.Unmarshal(rec.Parameters, &lora); err != nil {
					t.Fatalf("%s: parameters %s: %v", run, rec.Parameters, err)
				}
				n = lora.Frozen
			}
			s, err := LoadHF(filepath.Join("..", filepath.FromSlash(rec.Spec)), Overrides{Seq: 128})
			if err != nil {
				t.Fatalf("%s: %v", rec.Spec, err)
			}
			if got := s.Params(); got != n {
				t.Errorf("%s (%s): Params() = %d, transformers counted %d", rec.Spec, run, got, n)
			}
		}
	}
}

func TestHFErrors(t *testing.T) {
	tests := []struct{ name, json, want string }{
		{"pending type", `{"model_type": "qwen3_next"}`, `model_type "qwen3_next" needs gated DeltaNet layers beside attention, which memplan does not model yet (supported: `},
		{"gemma3 multimodal", `{"model_type": "gemma3"}`, `its text_config, model_type gemma3_text, imports the language model alone`},
		{"unknown type", `{"model_type": "xlnet"}`, `unknown model_type "xlnet" (supported: bert, cohere, deepseek_v2, deepseek_v3, falcon, gemma, gemma2, gemma3_text, glm4_moe, gpt2, gpt_neox, gpt_oss, granite, llama, llama4_text, mistral, mixtral, olmo, olmo2, olmo3, phi, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, roberta, smollm3, starcoder2)`},
		{"moe without top-k", `{"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128, "num_local_experts": 4}`, `missing field "num_experts_per_tok"`},
		{"missing field", `{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128}`, `missing field "num_hidden_layers"`},
		{"wrong type", `{"model_type": "gpt2", "n_layer": "twelve", "n_embd": 768, "n_head": 12, "vocab_size": 50257}`, `field "n_layer": want a positive whole number`},
		{"inconsistent", `{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 128}`, `kv_heads (3) must divide heads (8)`},
		{"bad json", "{\n\"model_type\": \"gpt2\",,\n}", "c.json:2: JSON"},
		{"qwen sliding", `{"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128, "use_sliding_window": true}`, "use_sliding_window: Qwen's sliding-window layers"},
		{"olmo clip_qkv", `{"model_type": "olmo", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "clip_qkv": 8.0}`, "clip_qkv"},
		{"phi qk_layernorm", `{"model_type": "phi", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "qk_layernorm": true}`, "qk_layernorm: Phi's LayerNorms on the queries and keys"},
		{"gpt_oss router logits", `{"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": true}`, "output_router_logits: the router's auxiliary load-balancing loss"},
		{"cohere use_qk_norm", `{"model_type": "cohere", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, "use_qk_norm": true}`, "use_qk_norm: Cohere's per-head query and key LayerNorms"},
		{"layer types", `{"model_type": "llama", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128, "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]}`, "layer_types: sliding and full attention layers in an order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHF("c.json", []byte(tt.json), Overrides{Batch: 1, Seq: 16})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !IsSpecError(err) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	_, err := ParseHF("c.json", []byte(`{"model_type": "t5"}`), Overrides{Batch: 1, Seq: 16})
	if err == nil || !strings.Contains(err.Error(), "gemma2") {
		t.Errorf("t5: err = %v, want the supported list", err)
	}
}

// TestHFSliding reads transformers' sliding-window attention: Gemma 2's
// on every other layer (the first sliding), Mistral v0.1's on every layer,
// none where sliding_window is null, and layer_types lists; the imported
// spec keeps it (SpecYAML).
func TestHFSliding(t *testing.T) {
	const llama = `"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128`
	tests := []struct {
		name, json      string
		window, pattern int64
		sliding         []bool
	}{
		{"gemma2", `{"model_type": "gemma2", ` + llama + `, "sliding_window": 512}`, 512, 2, []bool{true, false, true, false, true, false}},
		{"gemma2 default", `{"model_type": "gemma2", ` + llama + `}`, 4096, 2, []bool{true, false, true, false, true, false}},
		{"mistral v0.1", `{"model_type": "mistral", ` + llama + `, "sliding_window": 4096}`, 4096, 0, []bool{true, true, true, true, true, true}},
		{"mistral v0.3", `{"model_type": "mistral", ` + llama + `, "sliding_window": null}`, 0, 0, []bool{false, false, false, false, false, false}},
		{"layer types", `{"model_type": "llama", ` + llama + `, "sliding_window": 1024, "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"]}`, 1024, 3, []bool{true, true, false, true, true, false}},
		{"all full", `{"model_type": "gemma2", ` + llama + `, "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"]}`, 0, 0, []bool{false, false, false, false, false, false}},
		{"gemma3", `{"model_type": "gemma3_text", ` + llama + `, "sliding_window": 512, "sliding_window_pattern": 3}`, 512, 3, []bool{true, true, false, true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseHF("c.json", []byte(tt.json), Overrides{Batch: 1, Seq: 16})
			if err != nil {
				t.Fatal(err)
			}
			m := &s.Model
			if m.SlidingWindow != tt.window || m.SlidingPattern != tt.pattern {
				t.Errorf("window %d, pattern %d; want %d, %d", m.SlidingWindow, m.SlidingPattern, tt.window, tt.pattern)
			}
			for i, want := range tt.sliding {
				if n, ok := m.Sliding(int64(i)); ok != want || (ok && n != tt.window) {
					t.Errorf("layer %d: sliding %v (%d), want %v", i, ok, n, want)
				}
			}
			y, err := m.SpecYAML("c", "x", map[string]any{"batch": 1, "seq": 16})
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("c.yaml", y, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			// A pattern of 0 and of 1 both mean every layer; the spec
			// writes a pattern only above 1.
			pattern := m.SlidingPattern
			if pattern <= 1 {
				pattern = 0
			}
			if back.Model.SlidingWindow != m.SlidingWindow || back.Model.SlidingPattern != pattern {
				t.Errorf("the imported spec reads back window %d pattern %d", back.Model.SlidingWindow, back.Model.SlidingPattern)
			}
		})
	}
}

// TestHFGemma3 reads a Gemma 3 text config: Gemma 2's block (sandwich
// norms, Gemma's conventions, tied) with norms on the queries and keys, no
// softcapping unless the config sets it, five sliding layers in six and a
// second rotary embedding for them. Gemma 2's attention softcapping
// defaults to 50.
func TestHFGemma3(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "gemma-3-1b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if !m.Gemma || !m.SandwichNorm || !m.QKNorm || !m.LocalRoPE || !m.Tied || m.LogitSoftcap != 0 || m.AttnSoftcap != 0 ||
		m.SlidingWindow != 512 || m.SlidingPattern != 6 || m.Activation != KGELU {
		t.Errorf("model %+v", m)
	}
	n := 0
	for _, l := range m.Lower() {
		walkAttention(l, func(a *Attention) {
			n++
			if !a.QKNormOffset || !a.LocalRoPE {
				t.Errorf("attention %+v: want Gemma's q/k norms and the local rotary tables", a)
			}
		})
	}
	if n != 1 {
		t.Errorf("%d attention layers in the lowered model, want the repeat's one", n)
	}
	g2, err := LoadHF(filepath.Join("testdata", "hf", "gemma-2-2b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil || g2.Model.AttnSoftcap != 50 || g2.Model.LogitSoftcap != 30 {
		t.Errorf("Gemma 2: attention softcap %v, logits %v (%v); want 50 and 30", g2.Model.AttnSoftcap, g2.Model.LogitSoftcap, err)
	}
}

// TestHFOlmo2 checks OLMo 2's block as modeling_olmo2.py builds it: no norm
// before either branch, one after each, q_norm and k_norm over the whole
// projections, and every RMSNorm's product in fp32.
func TestHFOlmo2(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "olmo2-1b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if !m.PostNorm || m.SandwichNorm || !m.QKNorm || !m.QKNormWhole || !m.NormProductFP32 || m.Tied || m.Gemma {
		t.Fatalf("model %+v", m)
	}
	var rep *Layer
	for i, l := range m.Lower() {
		if _, ok := l.Spec.(*Repeat); ok {
			rep = &m.Lower()[i]
		}
	}
	if rep == nil || len(rep.Body) != 2 {
		t.Fatalf("no repeated block of two residual branches: %+v", rep)
	}
	for i, want := range []string{KAttention, KGatedMLP} {
		body := rep.Body[i].Body
		if len(body) != 2 || body[0].Spec.Kind() != want || body[1].Spec.Kind() != KRMSNorm {
			t.Fatalf("branch %d: %d layers, want %s then an RMSNorm", i, len(body), want)
		}
		if !body[1].Spec.(*RMSNorm).FP32Product {
			t.Errorf("branch %d: the norm's product is not fp32", i)
		}
		if a, ok := body[0].Spec.(*Attention); ok && (!a.QKNormWhole || !a.QKNormFP32 || a.QKNormOffset) {
			t.Errorf("attention %+v: want OLMo 2's whole-projection q/k norms", a)
		}
	}
}

// TestHFGranite checks Granite's three constants as modular_granite.py
// applies them: the embeddings scaled, each branch scaled before its
// residual add, and the logits divided, each a new tensor.
func TestHFGranite(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "granite-3.1-2b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m := s.Model
	if m.EmbeddingMultiplier != 12 || m.ResidualMultiplier != 0.22 || m.LogitsScaling != 8 || !m.Tied || m.AttnDropout != 0.1 {
		t.Fatalf("model %+v", m)
	}
	var scaled, branches int
	for _, l := range m.Lower() {
		switch k := l.Spec.(type) {
		case *Embedding:
			if !k.Scale {
				t.Error("embeddings not scaled")
			}
		case *LMHead:
			if !k.Scale {
				t.Error("logits not divided")
			}
		case *Repeat:
			for _, b := range l.Body {
				branches++
				if r, ok := b.Spec.(*Residual); ok && r.ScaleBranch {
					scaled++
				}
			}
		}
	}
	if branches != 2 || scaled != 2 {
		t.Errorf("%d of %d residual branches scaled, want 2 of 2", scaled, branches)
	}
}

// TestHFOlmo3 checks OLMo 3 as transformers 5.17 builds it: OLMo 2's block
// and rotary tables (fp32, the rotated query and key cast back), a second
// pair of tables for the sliding layers, and sliding windows on all but
// every fourth layer, from layer_types or Olmo3Config's default without
// them.
func TestHFOlmo3(t *testing.T) {
	for _, f := range []string{"olmo3-7b.json", "olmo3-1b-shape.json"} {
		s, err := LoadHF(filepath.Join("testdata", "hf", f), Overrides{Batch: 1, Seq: 8192})
		if err != nil {
			t.Fatal(err)
		}
		m := s.Model
		if !m.PostNorm || !m.QKNormWhole || !m.NormProductFP32 || !m.RoPECast || !m.RoPEFP32 ||
			!m.LocalRoPE || m.SlidingWindow != 4096 || m.SlidingPattern != 4 {
			t.Errorf("%s: model %+v", f, m)
		}
	}
}

// TestHFOlmo checks OLMo (1) as modeling_olmo.py builds it: Llama with
// LayerNorms without weight or bias in fp32 (no norm parameters), the
// rotary embedding OLMo 2 inherits and all three projections made before
// any is viewed as heads (a config that clamps q, k and v is refused:
// TestHFErrors).
func TestHFOlmo(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "olmo-1b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Model.PlainNorm || !s.Model.RoPEFP32 || !s.Model.RoPECast || !s.Model.ProjectFirst || s.Model.PostNorm || s.Model.QKNorm {
		t.Errorf("model %+v", s.Model)
	}
}

// walkAttention calls f on every attention layer in l.
func walkAttention(l Layer, f func(*Attention)) {
	if a, ok := l.Spec.(*Attention); ok {
		f(a)
	}
	for _, b := range l.Body {
		walkAttention(b, f)
	}
}

// TestForkSpec parses the explicit form of a parallel residual block.
func TestForkSpec(t *testing.T) {
	s, err := Load("testdata/fork.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	// emb 64000 (tied head) + 2·(ln 128 + attn 64·(64+32) + 64·64 (no
	// biases: attention defaults to none) + mlp 64·256+256 + 256·64+64) + ln 128
	want := int64(64000 + 2*(128+64*96+64*64+64*256+256+256*64+64) + 128)
	if got := s.Params(); got != want {
		t.Errorf("Params() = %d, want %d", got, want)
	}
	if _, err := Parse("f.yaml", []byte("model: {type: sequential, input: tokens, layers: [{fork: []}]}\ntraining: {batch: 1, seq: 4}\n"), Overrides{}); err == nil || !strings.Contains(err.Error(), "fork: want a list of branches") {
		t.Errorf("empty fork: err = %v", err)
	}
}

// TestHFSmolLM3 checks SmolLM3's NoPE layers: no_rope_layers [1, 1, 1, 0,
// …] is every fourth layer without rotary embeddings, an irregular list
// and use_sliding_window are refused, and without the list
// no_rope_layer_interval (default 4) gives the pattern.
func TestHFSmolLM3(t *testing.T) {
	s, err := LoadHF(filepath.Join("testdata", "hf", "smollm3-3b.json"), Overrides{Batch: 1, Seq: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if s.Model.NoRoPEPattern != 4 || !s.Model.Tied || s.Model.KVHeads != 4 {
		t.Errorf("model %+v", s.Model)
	}
	var rope []bool
	for _, l := range s.Model.Lower() {
		walkAttention(l, func(a *Attention) {
			for i := int64(0); i < 8; i++ {
				rope = append(rope, a.RoPEAt(i))
			}
		})
	}
	if want := []bool{true, true, true, false, true, true, true, false}; len(rope) < 8 || !slices.Equal(rope[:8], want) {
		t.Errorf("RoPEAt(0..7) = %v, want %v", rope, want)
	}
	const base = `"model_type": "smollm3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128`
	for _, tt := range []struct {
		name, extra, want string
		pattern           int64
	}{
		{"interval", `"no_rope_layer_interval": 2`, "", 2},
		{"default interval", ``, "", 4},
		{"all rotate", `"no_rope_layers": [1, 1, 1, 1]`, "", 0},
		{"irregular", `"no_rope_layers": [1, 0, 0, 1]`, "no_rope_layers: layers without rotary embeddings in an order", 0},
		{"sliding", `"use_sliding_window": true, "sliding_window": 16`, "use_sliding_window", 0},
		{"booleans", `"no_rope_layers": [true, false, true, false]`, "", 2},
		{"interval 1", `"no_rope_layer_interval": 1`, "no_rope_layer_interval 1", 0},
		{"not a number", `"no_rope_layers": [1, "no", 1, 0]`, "no_rope_layers: entry 1", 0},
	} {
		extra := ""
		if tt.extra != "" {
			extra = ", " + tt.extra
		}
		s, err := ParseHF("x.json", []byte("{"+base+extra+"}"), Overrides{Batch: 1, Seq: 16})
		switch {
		case tt.want != "":
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case s.Model.NoRoPEPattern != tt.pattern:
			t.Errorf("%s: pattern %d, want %d", tt.name, s.Model.NoRoPEPattern, tt.pattern)
		}
	}
}

// TestHFFamilies checks the blocks of the twenty-second session's
// families as their modeling files build them: StarCoder2's nn.LayerNorms,
// biases everywhere, two-layer MLP, tied head, three dropouts and window on
// every layer; Phi's GPT-NeoX block over one LayerNorm with separate q, k
// and v projections, biases on every projection and the head, 40% of each
// head rotated and resid_pdrop on both branches; Cohere's one
// CohereLayerNorm under both branches, fp32 rotation, logit_scale and tied
// head. (Their refusals are TestHFErrors's.)
func TestHFFamilies(t *testing.T) {
	for _, c := range []struct {
		file string
		ok   func(m Model) bool
	}{
		{"starcoder2-3b.json", func(m Model) bool {
			return m.AffineNorm && m.PlainMLP && m.OutBias && m.AttentionBias && m.MLPBias && m.Tied &&
				m.Dropout == 0.1 && m.EmbeddingDropout == 0.1 && m.AttnDropout == 0.1 && m.SlidingWindow == 4096 && m.SlidingPattern <= 1
		}},
		{"phi-2.json", func(m Model) bool {
			return m.Type == NeoX && m.SharedNorm && m.SplitQKV && m.HeadBias && !m.Tied && m.Rotary == 0.4 &&
				m.Dropout == 0.1 && m.Activation == KGELUNew
		}},
		{"aya-23-8b.json", func(m Model) bool {
			return m.ParallelBlock && m.CenteredNorm && m.RoPEUpcast && m.LogitScale == 0.125 && m.Tied && !m.OutBias
		}},
		{"gpt-oss-20b.json", func(m Model) bool {
			return m.AttnSinks && m.RoPEHalves && m.NormProductFP32 && m.AttentionBias && m.OutBias && m.MLPBias && !m.Tied &&
				m.Experts == 32 && m.TopK == 4 && m.Router == RouterTopKSoftmax && m.ExpertGate == GateClamped &&
				m.SlidingWindow == 128 && m.SlidingPattern == 2 && m.HeadDim == 64
		}},
		{"moonlight-16b-a3b.json", func(m Model) bool {
			return m.KVLoRARank == 512 && m.QLoRARank == 0 && m.QKNopeDim == 128 && m.QKRopeDim == 64 && m.VHeadDim == 128 &&
				m.RoPEInterleave && m.DenseLayers == 1 && m.DenseIntermediate == 11264 && m.Intermediate == 1408 &&
				m.Experts == 64 && m.TopK == 6 && m.SharedExpert == 2*1408 && m.SharedAfter && !m.SharedGate &&
				m.Router == RouterSigmoidGroup && m.RouterGroups == 1 && m.RouterTopGroups == 1
		}},
		{"deepseek-v2-lite.json", func(m Model) bool {
			return m.KVLoRARank == 512 && m.QLoRARank == 0 && m.RoPEComplex && !m.RoPEInterleave && m.DenseLayers == 1 &&
				m.DenseIntermediate == 10944 && m.Intermediate == 1408 && m.Experts == 64 && m.TopK == 6 && m.SharedExpert == 2*1408 &&
				m.SharedAfter && m.Router == RouterSoftmaxGreedy
		}},
		{"deepseek-v2.json", func(m Model) bool {
			return m.QLoRARank == 1536 && m.Experts == 160 && m.Router == RouterSoftmaxGroup && m.RouterGroups == 8 && m.RouterTopGroups == 3
		}},
		{"deepseek-v3.json", func(m Model) bool {
			return m.QLoRARank == 1536 && m.DenseLayers == 3 && m.Experts == 256 && m.RouterGroups == 8 && m.RouterTopGroups == 4
		}},
		{"glm-4.5-air.json", func(m Model) bool {
			return m.KVLoRARank == 0 && m.HeadDim == 128 && m.KVHeads == 8 && m.AttentionBias && !m.OutBias && m.Rotary == 0.5 &&
				!m.QKNorm && !m.QKNormLate && m.DenseLayers == 1 && m.DenseIntermediate == 10944 && m.Intermediate == 1408 &&
				m.Experts == 128 && m.TopK == 8 && m.SharedExpert == 1408 && m.SharedAfter && m.Router == RouterSigmoidGroup &&
				m.RouterGroups == 1 && m.RouterTopGroups == 1 && !m.RouterNoRenorm && m.LoRAFusedExperts
		}},
		{"glm4-moe-test-4layer.json", func(m Model) bool {
			return m.QKNorm && m.QKNormLate && m.RouterNoRenorm && m.DenseLayers == 2 && m.RouterGroups == 4 && m.RouterTopGroups == 2 &&
				m.SharedExpert == 2*768
		}},
	} {
		s, err := LoadHF(filepath.Join("testdata", "hf", c.file), Overrides{Batch: 1, Seq: 1024})
		if err != nil {
			t.Fatal(err)
		}
		if !c.ok(s.Model) {
			t.Errorf("%s: model %+v", c.file, s.Model)
		}
	}
}

// TestGemmaTensorParallel checks Gemma 2's and 3's tensor-parallel
// programs: their split runs through transformers' forward
// (RunsTransformersForward: the sliding windows kept), with or without
// sp; their embeddings scale inside the vocabulary-parallel embedding
// (transformers 5.4 on gives Gemma 2 Gemma 3's scaled embedding module:
// Gemma 2's tensor-parallel lines moved from +0.16% reserved to exact with
// it, bench/results/2026-11-29-h200-fake-47/README.md), and Gemma 2's head
// caps its logits;
// context parallelism stays refused with its reason (pipelines:
// TestStagesRunTransformersForward).
func TestGemmaTensorParallel(t *testing.T) {
	g3 := filepath.Join("testdata", "hf", "gemma-3-27b-6layer.json")
	g2 := filepath.Join("testdata", "hf", "gemma-2-2b.json")
	for _, tc := range []struct {
		name, file string
		o          Overrides
		want       string // error substring, or "" for success
		inside     bool   // the scale inside the embedding
	}{
		{"gemma 3 tp", g3, Overrides{TP: 2}, "", true},
		{"gemma 3 tp and sp", g3, Overrides{TP: 2, SP: true}, "", true},
		{"gemma 3 cp", g3, Overrides{CP: 2}, "cp: context parallelism is not simulated for Gemma 3's block", false},
		{"gemma 2 tp and sp", g2, Overrides{TP: 2, SP: true}, "", true},
		{"gemma 2 cp", g2, Overrides{CP: 2}, "cp: context parallelism is not simulated for Gemma 2's block", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Batch, o.Seq = 1, 1024
			s, err := LoadHF(tc.file, o)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Model.RunsTransformersForward() {
				t.Errorf("the tensor-parallel program should be transformers' forward")
			}
			ls, err := s.Model.LowerRank(&s.Training)
			if err != nil {
				t.Fatal(err)
			}
			windows, inside, after := 0, false, false
			var softcap float64
			for _, l := range ls {
				switch k := l.Spec.(type) {
				case *VocabEmbedding:
					inside = k.Scale
				case *Rescale:
					after = true
				case *VocabHead:
					softcap = k.Softcap
				}
				walkAttention(l, func(a *Attention) {
					if a.Window > 0 {
						windows++
					}
				})
			}
			if windows == 0 || inside != tc.inside || after == tc.inside || softcap != s.Model.LogitSoftcap {
				t.Errorf("%d windowed attention layers, scaled inside %v, after %v, head softcap %v; want windows, the scale inside %v, softcap %v",
					windows, inside, after, softcap, tc.inside, s.Model.LogitSoftcap)
			}
		})
	}
}
