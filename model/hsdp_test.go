package model

import (
	"fmt"
	"testing"
)

// TestHSDP checks dp_replicate: replicas dividing dp into FSDP groups of
// two or more under ZeRO 2 or 3, from the spec or the flag, refused with
// its line where memplan does not simulate it; reshard_after_forward then
// counts within a group.
func TestHSDP(t *testing.T) {
	spec := func(zero, dp int64, extra string) string {
		return fmt.Sprintf("model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: %d\n  zero: %d\n%s", dp, zero, extra)
	}
	for _, tc := range []struct {
		name   string
		yaml   string
		flag   int64
		shards int64
		err    string
	}{
		{"fsdp", spec(3, 32, ""), 0, 32, ""},
		{"spec", spec(3, 32, "  dp_replicate: 4\n"), 0, 8, ""},
		{"flag over spec", spec(2, 32, "  dp_replicate: 4\n"), 2, 16, ""},
		{"one replica", spec(3, 32, "  dp_replicate: 1\n"), 0, 32, ""},
		{"zero 1", spec(1, 32, "  dp_replicate: 4\n"), 0, 0, "x.yaml:13: dp_replicate: 4 replicas of an FSDP group need ZeRO stage 2 or 3"},
		{"not dividing", spec(3, 32, "  dp_replicate: 5\n"), 0, 0, "x.yaml:13: dp_replicate: 5 replicas must divide the data-parallel size 32"},
		{"groups of one", spec(3, 4, "  dp_replicate: 4\n"), 0, 0, "groups of two GPUs or more"},
		{"offload", spec(3, 32, "  dp_replicate: 4\n  offload: optimizer\n"), 0, 0, "not simulated with offload"},
		{"negative flag", spec(3, 32, ""), -2, 0, "--dp-replicate: must be positive, got -2"},
		{"negative", spec(3, 32, "  dp_replicate: -4\n"), 0, 0, "x.yaml:13: dp_replicate: must be positive, got -4"},
		{"reshard within a group", spec(3, 32, "  dp_replicate: 4\n  reshard_after_forward: 16\n"), 0, 0, "16 must divide the 8 GPUs of an HSDP group"},
		{"reshard to 4 of 8", spec(3, 32, "  dp_replicate: 4\n  reshard_after_forward: 4\n"), 0, 8, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{DPReplicate: tc.flag}, tc.err)
			if s != nil && s.Training.FSDPShards() != tc.shards {
				t.Errorf("FSDPShards %d, want %d", s.Training.FSDPShards(), tc.shards)
			}
		})
	}
}
