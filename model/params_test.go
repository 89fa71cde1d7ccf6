package model

import (
	"path/filepath"
	"testing"
)

// TestSpecParams checks each bundled spec's parameter count against what
// PyTorch reports for the same model: transformers' model classes and
// torchvision's builders on the meta device, run on the GPU machine by
// bench/torch/measure.py --params (bench/results/2026-11-22-h100-params.jsonl).
func TestSpecParams(t *testing.T) {
	tests := []struct {
		file string
		want int64
	}{
		{"gpt2-124m.yaml", 124_439_808},
		{"gpt2-xl.yaml", 1_557_611_200},
		{"llama-3.2-1b.yaml", 1_235_814_400},
		{"llama-3-8b.yaml", 8_030_261_248},
		{"mistral-7b.yaml", 7_241_732_096},
		{"qwen2.5-7b.yaml", 7_615_616_512},
		{"bert-base.yaml", 109_514_298},
		{"resnet-50.yaml", 25_557_032},
		{"vit-b-16.yaml", 86_567_656},
		{"mlp.yaml", 6_316_042},
		{"residual-mlp.yaml", 5_258_250},
		{"tinyllama-1.1b.yaml", 1_100_048_384},
		{"resnet-101.yaml", 44_549_160},
		// conv1d, groupnorm: counted by PyTorch in the measurement runs
		// (bench/results/2026-11-23-h100-newkinds.jsonl).
		{"whisper-base-encoder.yaml", 20_598_794},
		{"cnn-groupnorm.yaml", 4_701_604},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s, err := Load(filepath.Join("..", "specs", tt.file), Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Params(); got != tt.want {
				t.Errorf("Params() = %d, want %d", got, tt.want)
			}
		})
	}
}
