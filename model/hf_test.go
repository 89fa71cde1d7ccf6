package model

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
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

func TestHFErrors(t *testing.T) {
	tests := []struct{ name, json, want string }{
		{"unknown type", `{"model_type": "t5"}`, `unknown model_type "t5" (supported: bert, falcon, gemma, gemma2, gpt2, gpt_neox, llama, mistral, mixtral, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, roberta)`},
		{"moe without top-k", `{"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128, "num_local_experts": 4}`, `missing field "num_experts_per_tok"`},
		{"missing field", `{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 128}`, `missing field "num_hidden_layers"`},
		{"wrong type", `{"model_type": "gpt2", "n_layer": "twelve", "n_embd": 768, "n_head": 12, "vocab_size": 50257}`, `field "n_layer": want a positive whole number`},
		{"inconsistent", `{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 128}`, `kv_heads (3) must divide heads (8)`},
		{"bad json", "{\n\"model_type\": \"gpt2\",,\n}", "c.json:2: JSON"},
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
