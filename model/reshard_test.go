package model

import (
	"fmt"
	"testing"
)

// TestReshardAfterForward checks reshard_after_forward: an int dividing dp
// under ZeRO 3, from the spec or the flag (which wins), refused with its
// line (or the flag's 0) where FSDP2 would not take it as such or memplan
// does not simulate it.
func TestReshardAfterForward(t *testing.T) {
	spec := func(zero, dp int64, extra string, n string) string {
		s := fmt.Sprintf("model:\n  type: gpt2\n  vocab: 64\n  hidden: 8\n  layers: 1\n  heads: 2\n  positions: 8\ntraining:\n  batch: 1\n  seq: 8\n  dp: %d\n  zero: %d\n%s", dp, zero, extra)
		if n != "" {
			s += "  reshard_after_forward: " + n + "\n"
		}
		return s
	}
	for _, tc := range []struct {
		name string
		yaml string
		flag int64
		want int64
		err  string
	}{
		{"unset", spec(3, 16, "", ""), 0, 0, ""},
		{"spec", spec(3, 16, "", "4"), 0, 4, ""},
		{"flag over spec", spec(3, 16, "", "4"), 8, 8, ""},
		{"the world: zero 3's own", spec(3, 16, "", "16"), 0, 16, ""},
		{"zero 2", spec(2, 16, "", "4"), 0, 0, "x.yaml:13: reshard_after_forward: 4 keeps FSDP2's parameters sharded over 4 ranks between the forward and the backward, which needs ZeRO stage 3"},
		{"one", spec(3, 16, "", "1"), 0, 0, "x.yaml:13: reshard_after_forward: 1 keeps the parameters unsharded"},
		{"not dividing", spec(3, 16, "", "6"), 0, 0, "x.yaml:13: reshard_after_forward: 6 must divide the data-parallel size 16"},
		{"flag not dividing", spec(3, 16, "", ""), 3, 0, "reshard_after_forward: 3 must divide the data-parallel size 16"},
		{"negative flag", spec(3, 16, "", ""), -2, 0, "--reshard-after-forward: must be positive, got -2"},
		{"negative", spec(3, 16, "", "-4"), 0, 0, "x.yaml:13: reshard_after_forward: must be positive, got -4"},
		{"pipeline", spec(3, 8, "  pp: 2\n", "4"), 0, 0, "reshard_after_forward: not simulated with a pipeline (pp 2)"},
		{"tensor parallelism", "model:\n  type: llama\n  vocab: 64\n  hidden: 16\n  layers: 1\n  heads: 2\n  intermediate: 32\ntraining:\n  batch: 1\n  seq: 8\n  dp: 8\n  zero: 3\n  tp: 2\n  reshard_after_forward: 4\n",
			0, 0, "x.yaml:14: reshard_after_forward: torch 2.11's FSDP2 does not reshard to fewer ranks beside tensor parallelism (tp 2)"},
		{"offloaded", spec(3, 16, "  offload: params\n", "4"), 0, 0, "reshard_after_forward: not simulated with the parameters offloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseCase(t, tc.yaml, Overrides{ReshardAfterForward: tc.flag}, tc.err)
			if s != nil && s.Training.ReshardAfterForward != tc.want {
				t.Errorf("reshard_after_forward %d, want %d", s.Training.ReshardAfterForward, tc.want)
			}
		})
	}
}
