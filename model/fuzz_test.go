package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the spec parser: it must never panic,
// and a spec it accepts must have positive sizes and a parameter count that
// did not wrap around. The seed corpus is the bundled specs and the bad
// inputs in testdata/bad.
func FuzzParse(f *testing.F) {
	seed(f, "../specs/*.yaml", "testdata/bad/*.yaml")
	f.Add([]byte("name: x\nmodel: {type: gpt2, layers: 2, hidden: 64, heads: 4, vocab: 100}\ndevice: h100-80gb\n" +
		"training:\n  batch: 1\n  seq: 8\n  quant: nf4\n  double_quant: true\n  lora: {rank: 4, alpha: 8, dropout: 0.1, targets: [c_attn, c_proj]}\n"))
	f.Add([]byte("name: x\nmodel: {type: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, intermediate: 128, vocab: 101}\ndevice: h100-80gb\n" +
		"training:\n  batch: 1\n  seq: 8\n  tp: 2\n  sp: true\n  loss_parallel: true\n  dp: 2\n  zero: 3\n"))
	f.Add([]byte("name: x\nmodel: {type: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 100}\ndevice: h100-80gb\n" +
		"training:\n  batch: 1\n  seq: 8\n  optimizer: paged_adamw_8bit\n  quant: int8\n  lora: {rank: 4, adapter_dtype: base}\n"))
	f.Add([]byte("name: x\nmodel: {type: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, intermediate: 128, vocab: 101}\ndevice: h100-80gb\n" +
		"training:\n  batch: 1\n  seq: 8\n  tp: 2\n  sp: true\n  pp: 2\n  pp_schedule: interleaved\n  pp_virtual: 2\n  grad_accum: 4\n"))
	f.Add([]byte("name: x\nmodel: {type: llama, layers: 2, hidden: 64, heads: 4, intermediate: 128, vocab: 100}\ndevice: h100-80gb\n" +
		"training:\n  batch: 1\n  seq: 8\n  dp: 32\n  zero: 3\n  dp_replicate: 4\n  reshard_after_forward: 4\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data, Overrides{})
		if err != nil {
			if !IsSpecError(err) {
				t.Fatalf("error is not a spec error: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if s.Training.Batch <= 0 || s.Device.Memory <= 0 {
			t.Fatalf("accepted non-positive sizes: %+v", s.Training)
		}
		if p := s.Params(); p < 0 {
			t.Fatalf("negative parameter count %d", p)
		}
		if p := s.Trainable(); p < 0 || (p > 0) != s.Training.LoRA.Enabled() {
			t.Fatalf("trainable %d with LoRA %+v", p, s.Training.LoRA)
		}
		if _, err := s.Model.LowerRank(&s.Training); err != nil {
			t.Fatalf("accepted a layout it cannot lower: %v", err)
		}
		for st := int64(0); s.Training.PP > 1 && st < min(s.Training.PipelineStages(), 64); st++ {
			if _, err := s.Model.LowerStageRank(st, s.Training.PipelineStages(), &s.Training); err != nil {
				t.Fatalf("accepted a pipeline it cannot lower: stage %d: %v", st, err)
			}
		}
		if s.InputShape().Elems() <= 0 {
			t.Fatalf("empty input shape %v", s.InputShape())
		}
	})
}

// FuzzParseHF feeds arbitrary bytes to the transformers config importer:
// never a panic, and an accepted config has a positive parameter count.
func FuzzParseHF(f *testing.F) {
	seed(f, "testdata/hf/*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseHF("fuzz.json", data, Overrides{Batch: 1, Seq: 8})
		if err != nil {
			if !IsSpecError(err) {
				t.Fatalf("error is not a spec error: %v", err)
			}
			return
		}
		if p := s.Params(); p <= 0 {
			t.Fatalf("accepted a config with %d parameters", p)
		}
	})
}

// seed adds every file the globs match to the fuzz corpus.
func seed(f *testing.F, globs ...string) {
	for _, glob := range globs {
		files, _ := filepath.Glob(glob)
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}
