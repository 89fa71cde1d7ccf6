package model

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLoRATrainable checks the adapter parameter counts of docs/lora.md §10,
// worked out by hand from r·Σ(in+out) and, for three of them, published by
// peft users (GPT-2 c_attn r 8, Llama-3.2-1B q_proj,v_proj r 8, Mistral-7B
// all r 16).
func TestLoRATrainable(t *testing.T) {
	tests := []struct {
		file    string
		rank    int64
		targets string
		want    int64
	}{
		{"specs/gpt2-124m.yaml", 8, "c_attn", 294_912},
		{"specs/gpt2-124m.yaml", 8, "attn", 442_368},
		{"specs/gpt2-124m.yaml", 64, "all", 9_437_184},
		{"specs/gpt2-124m.yaml", 8, "all", 1_179_648},
		{"specs/gpt2-124m.yaml", 16, "mlp", 1_474_560},
		{"model/testdata/hf/qwen2.5-0.5b.json", 8, "attn", 1_081_344},
		{"model/testdata/hf/qwen2.5-0.5b.json", 64, "all", 35_192_832},
		{"model/testdata/hf/qwen2.5-0.5b.json", 8, "all", 4_399_104},
		{"specs/llama-3.2-1b.yaml", 8, "q_proj,v_proj", 851_968},
		{"specs/llama-3.2-1b.yaml", 8, "attn", 1_703_936},
		{"specs/llama-3.2-1b.yaml", 64, "all", 45_088_768},
		{"specs/llama-3.2-1b.yaml", 8, "mlp", 3_932_160},
		{"specs/llama-3.2-1b.yaml", 16, "all", 11_272_192},
		{"bench/torch/hf/qwen2.5-1.5b.json", 16, "q_proj,v_proj", 2_179_072},
		{"bench/torch/hf/qwen2.5-1.5b.json", 64, "all", 73_859_072},
		{"specs/mistral-7b.yaml", 16, "all", 41_943_040},
		{"specs/mistral-7b.yaml", 64, "attn", 54_525_952},
		{"model/testdata/hf/bert-base-uncased.json", 8, "attn", 589_824},
		{"model/testdata/hf/bert-base-uncased.json", 8, "all", 1_339_392},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file)+"/"+tt.targets, func(t *testing.T) {
			o := Overrides{LoRA: tt.rank, LoRATargets: tt.targets}
			path := filepath.Join("..", tt.file)
			var s *Spec
			var err error
			if strings.HasSuffix(path, ".json") {
				o.Seq, o.Batch = 512, 1
				s, err = LoadHF(path, o)
			} else {
				s, err = Load(path, o)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Trainable(); got != tt.want {
				t.Errorf("Trainable() = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLoRAParse checks the spec fields, the flags and their errors.
func TestLoRAParse(t *testing.T) {
	const head = "name: x\nmodel: {type: llama, layers: 2, hidden: 64, heads: 4, intermediate: 128, vocab: 100}\ndevice: h100-80gb\ntraining:\n  batch: 1\n  seq: 8\n"
	tests := []struct {
		name, extra string
		o           Overrides
		want        string // error substring, or "" for success
		check       func(t *testing.T, s *Spec)
	}{
		{"none", "", Overrides{}, "", func(t *testing.T, s *Spec) {
			if s.Training.LoRA != nil || s.Training.Quant != "" {
				t.Errorf("LoRA = %+v, Quant = %q, want none", s.Training.LoRA, s.Training.Quant)
			}
		}},
		{"spec", "  lora: {rank: 16, alpha: 32, dropout: 0.05, targets: [q_proj, v_proj]}\n", Overrides{}, "", func(t *testing.T, s *Spec) {
			l := s.Training.LoRA
			if l.Rank != 16 || l.Alpha != 32 || l.Dropout != 0.05 || l.String() != "q_proj,v_proj" {
				t.Errorf("LoRA = %+v", l)
			}
		}},
		{"flags", "", Overrides{LoRA: 8, LoRATargets: "mlp", LoRADropout: "0.1", Quant: "nf4", DoubleQuant: "true"}, "", func(t *testing.T, s *Spec) {
			l := s.Training.LoRA
			if l.Rank != 8 || l.Targets != TargetsMLP || l.Dropout != 0.1 || s.Training.Quant != QuantNF4 || !s.Training.DoubleQuant {
				t.Errorf("LoRA = %+v, quant %q %v", l, s.Training.Quant, s.Training.DoubleQuant)
			}
		}},
		{"flag overrides spec", "  lora: {rank: 16, targets: attn}\n", Overrides{LoRA: 4}, "", func(t *testing.T, s *Spec) {
			if l := s.Training.LoRA; l.Rank != 4 || l.Targets != TargetsAttn {
				t.Errorf("LoRA = %+v", l)
			}
		}},
		{"unknown name", "  lora: {rank: 8, targets: c_attn}\n", Overrides{}, "x.yaml:7: targets: no linear named \"c_attn\" in a llama model", nil},
		{"rank missing", "  lora: {alpha: 8}\n", Overrides{}, "missing required field \"rank\"", nil},
		{"dropout range", "  lora: {rank: 8, dropout: 1.5}\n", Overrides{}, "x.yaml:7: dropout: must be between", nil},
		{"unknown field", "  lora: {rank: 8, ranq: 2}\n", Overrides{}, "ranq", nil},
		{"zero 2", "  zero: 2\n  dp: 2\n  lora: {rank: 8}\n", Overrides{}, "", func(t *testing.T, s *Spec) {
			if s.Training.Zero != 2 || !s.Training.LoRA.Enabled() {
				t.Errorf("zero %d, LoRA %+v", s.Training.Zero, s.Training.LoRA)
			}
		}},
		{"zero 3 one GPU", "  zero: 3\n  lora: {rank: 8}\n", Overrides{}, "x.yaml:8: lora: LoRA at ZeRO stage 3 on one GPU is not simulated (FSDP2 shards over the data-parallel ranks: give dp > 1); use zero: 0 or 1", nil},
		{"zero 3 offload", "  zero: 3\n  dp: 2\n  offload: params\n  lora: {rank: 8}\n", Overrides{}, "x.yaml:10: lora: LoRA at ZeRO stage 3 with offload is not simulated", nil},
		{"zero 3 quant", "  zero: 3\n  dp: 2\n  quant: nf4\n  lora: {rank: 8}\n", Overrides{}, "lora: LoRA at ZeRO stage 3 over a quantized base is not simulated", nil},
		{"zero 3 cp", "  zero: 3\n  dp: 2\n  lora: {rank: 8}\n", Overrides{CP: 2}, "lora: LoRA at ZeRO stage 3 with context parallelism is not simulated", nil},
		{"tp", "  lora: {rank: 8}\n", Overrides{TP: 2}, "lora: LoRA with tensor parallelism is not simulated", nil},
		{"quant without lora", "  quant: nf4\n", Overrides{}, "x.yaml:7: quant: a nf4 base is frozen and needs LoRA", nil},
		{"bad quant", "", Overrides{LoRA: 8, Quant: "fp8"}, "--quant: unknown quant \"fp8\"", nil},
		{"double quant int8", "  quant: int8\n  double_quant: true\n  lora: {rank: 8}\n", Overrides{}, "double_quant: applies to nf4 only", nil},
		{"targets without rank", "", Overrides{LoRATargets: "attn"}, "need a rank", nil},
		{"bad alpha flag", "", Overrides{LoRA: 8, LoRAAlpha: "x"}, "--lora-alpha: want a number", nil},
		{"bad rank flag", "", Overrides{LoRA: -1}, "--lora: rank must be positive", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(head+tt.extra), tt.o)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}
}

// TestParseBnbOptimizers checks bitsandbytes' optimizer names, in
// memplan's and transformers' spellings (docs/lora.md §7).
func TestParseBnbOptimizers(t *testing.T) {
	tests := []struct {
		in, want string
		paged    bool
	}{
		{"adam8bit", Adam8bit, false},
		{"adamw8bit", Adam8bit, false},
		{"adamw_8bit", Adam8bit, false},
		{"paged-adamw8bit", PagedAdamW8bit, true},
		{"paged_adamw_8bit", PagedAdamW8bit, true},
		{"paged_adamw_32bit", PagedAdamW32bit, true},
		{"Paged-AdamW32bit", PagedAdamW32bit, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var o Optimizer
			if err := parseOptimizer(tt.in, &o); err != nil {
				t.Fatal(err)
			}
			if o.Name != tt.want || o.Paged() != tt.paged || o.String() != tt.want {
				t.Errorf("parseOptimizer(%q) = %+v (paged %v), want %s (paged %v)", tt.in, o, o.Paged(), tt.want, tt.paged)
			}
		})
	}
	var o Optimizer
	if err := parseOptimizer("paged-adamw8bit-fused", &o); err == nil {
		t.Errorf("paged-adamw8bit-fused accepted as %+v", o)
	}
}

// TestAdapterDtype checks training.lora.adapter_dtype and its flag: fp32
// (the default, stored as "") or base.
func TestAdapterDtype(t *testing.T) {
	tests := []struct {
		name, yaml, flag, want, err string
	}{
		{"default", "  lora: {rank: 8}\n", "", "", ""},
		{"yaml base", "  lora: {rank: 8, adapter_dtype: base}\n", "", AdapterBase, ""},
		{"flag over yaml", "  lora: {rank: 8, adapter_dtype: base}\n", "fp32", "", ""},
		{"bad yaml", "  lora: {rank: 8, adapter_dtype: int8}\n", "", "", `x.yaml:7: adapter_dtype: want fp32 or base, got "int8"`},
		{"flag without rank", "", "base", "", "--lora-adapter-dtype need a rank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "name: x\nmodel: {type: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 100}\ntraining:\n  batch: 1\n  seq: 8\n" +
				"  precision: bf16\n" + tt.yaml + "device: h100-80gb\n"
			s, err := Parse("x.yaml", []byte(src), Overrides{LoRAAdapterDtype: tt.flag})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Training.LoRA.AdapterDtype; got != tt.want {
				t.Errorf("adapter dtype = %q, want %q", got, tt.want)
			}
		})
	}
}
