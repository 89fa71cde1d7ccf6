package model

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestKnownFailure: OLMo 2 under FSDP2's bf16 policy fails with
// checkpointing only (bench/results/2026-11-29-h200-fake-47), and the
// spec's notes say so; a model with bf16 rotary tables runs.
func TestKnownFailure(t *testing.T) {
	olmo2 := filepath.Join("testdata", "hf", "olmo2-1b.json")
	llama := filepath.Join("testdata", "hf", "llama-3-8b.json")
	for _, tc := range []struct {
		name, file string
		o          Overrides
		fails      bool
	}{
		{"olmo 2 fsdp-bf16 checkpointed", olmo2, Overrides{Precision: FSDPBF16, DP: 8, Zero: "3", Checkpointing: CkptBlock}, true},
		{"olmo 2 fsdp-bf16 zero 2 sqrt", olmo2, Overrides{Precision: FSDPBF16, DP: 8, Zero: "2", Checkpointing: "sqrt"}, true},
		{"olmo 2 fsdp-bf16", olmo2, Overrides{Precision: FSDPBF16, DP: 8, Zero: "3"}, false},
		{"olmo 2 bf16 checkpointed", olmo2, Overrides{Precision: BF16, DP: 8, Zero: "3", Checkpointing: CkptBlock}, false},
		{"llama fsdp-bf16 checkpointed", llama, Overrides{Precision: FSDPBF16, DP: 8, Zero: "3", Checkpointing: CkptBlock}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Batch, tc.o.Seq = 1, 1024
			s, err := LoadHF(tc.file, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			f := KnownFailure(&s.Training, &s.Model)
			noted := false
			for _, n := range s.Notes {
				noted = noted || n == f && f != ""
			}
			if (f != "") != tc.fails || noted != tc.fails || tc.fails && !strings.Contains(f, "CheckpointError") {
				t.Errorf("KnownFailure %q, in the notes %v; want a failure %v", f, noted, tc.fails)
			}
		})
	}
}
