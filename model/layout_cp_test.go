package model

import (
	"strings"
	"testing"
)

// TestLowerCP checks the program one context-parallel rank runs: every
// attention layer becomes ring attention over cp ranks with the heads
// whole, and nothing else changes.
func TestLowerCP(t *testing.T) {
	m := &Model{Type: Llama, NumLayers: 2, Hidden: 64, Heads: 8, KVHeads: 4, Intermediate: 256, Vocab: 1001}
	ls, err := m.LowerRank(&Training{CP: 4, Seq: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := "embedding [[rmsnorm ring_attention] [rmsnorm gated_mlp]] rmsnorm lm_head"
	if got := strings.Join(kinds(ls), " "); got != want {
		t.Errorf("LowerRank = %s\nwant %s", got, want)
	}
	a := ls[1].Body[0].Body[1].Spec.(*RingAttention)
	if a.Ranks != 4 || a.Heads != 8 || a.KVHeads != 4 || a.HeadDim != 8 {
		t.Errorf("ring attention ranks %d heads %d kv %d head_dim %d; want 4, 8, 4, 8", a.Ranks, a.Heads, a.KVHeads, a.HeadDim)
	}
	// With tensor parallelism the ring runs on the rank's heads, between
	// DTensor's collectives (torchtitan's apply_tp under context_parallel).
	ls, err = m.LowerRank(&Training{CP: 2, TP: 2, SP: true, Seq: 64})
	if err != nil {
		t.Fatal(err)
	}
	want = "vocab_parallel_embedding reduce_scatter_seq [[rmsnorm all_gather_seq ring_attention reduce_scatter_seq] [rmsnorm all_gather_seq gated_mlp reduce_scatter_seq]] rmsnorm all_gather_seq vocab_parallel_head"
	if got := strings.Join(kinds(ls), " "); got != want {
		t.Errorf("LowerRank(cp 2, tp 2) = %s\nwant %s", got, want)
	}
	a = ls[2].Body[0].Body[2].Spec.(*RingAttention)
	if a.Ranks != 2 || a.Heads != 4 || a.KVHeads != 2 || a.HeadDim != 8 {
		t.Errorf("ring attention under tp 2: ranks %d heads %d kv %d head_dim %d; want 2, 4, 2, 8", a.Ranks, a.Heads, a.KVHeads, a.HeadDim)
	}
	// A mixture of experts stays as it is: each rank routes its own
	// tokens (with expert parallelism, over its group); with tensor
	// parallelism too, the experts' columns split (TestLowerRank).
	moe := *m
	moe.Experts, moe.TopK = 4, 2
	ls, err = moe.LowerRank(&Training{CP: 2})
	if err != nil {
		t.Fatal(err)
	}
	want = "embedding [[rmsnorm ring_attention] [rmsnorm " + KMoE + "]] rmsnorm lm_head"
	if got := strings.Join(kinds(ls), " "); got != want {
		t.Errorf("LowerRank(moe, cp 2) = %s\nwant %s", got, want)
	}
	ls, err = moe.LowerRank(&Training{CP: 2, TP: 2, SP: true})
	if err != nil {
		t.Fatal(err)
	}
	want = "[rmsnorm all_gather_seq " + KMoE + " reduce_scatter_seq]"
	if got := kinds(ls[2].Body)[1]; got != want {
		t.Errorf("LowerRank(moe, cp 2 × tp 2) block = %s, want %s", got, want)
	}
}

// TestCheckCP checks which data-parallel setups context parallelism is
// refused with, and that the errors name the line of cp: for a
// transformers-run family (OLMo 2's block) pipeline parallelism beside it.
func TestCheckCP(t *testing.T) {
	llama := &Model{Type: Llama}
	olmo2 := &Model{Type: Llama, PostNorm: true}
	for _, tc := range []struct {
		name string
		m    *Model
		tr   Training
		o    Overrides
		want string
	}{
		{"alone", llama, Training{CP: 2}, Overrides{}, ""},
		{"fsdp", llama, Training{CP: 2, DP: 2, Zero: 3}, Overrides{}, ""},
		{"ddp", llama, Training{CP: 2, DP: 2}, Overrides{}, "x.yaml:7: cp: context parallelism with dp 2 at ZeRO stage 0"},
		{"zero 1 from the flag", llama, Training{CP: 2, Zero: 1}, Overrides{CP: 2}, "x.yaml: cp: context parallelism with dp 1 at ZeRO stage 1"},
		{"transformers' forward alone", olmo2, Training{CP: 2}, Overrides{}, ""},
		{"transformers' forward under fsdp", olmo2, Training{CP: 2, DP: 2, Zero: 3}, Overrides{}, ""},
		{"transformers' forward under ddp", olmo2, Training{CP: 2, DP: 2}, Overrides{}, "x.yaml:7: cp: context parallelism with dp 2 at ZeRO stage 0"},
		{"transformers' forward beside tp", olmo2, Training{CP: 2, TP: 2}, Overrides{}, ""},
		{"transformers' forward beside pp", olmo2, Training{CP: 2, PP: 2}, Overrides{}, "x.yaml:7: cp: context parallelism is not simulated for OLMo 2's block run through transformers' forward with pipeline parallelism beside it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &errs{file: "x.yaml"}
			checkCP(e, &tc.tr, tc.m, &mapping{line: 7}, tc.o)
			got := ""
			if len(e.list) > 0 {
				got = e.err().Error()
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("checkCP = %q, want %q", got, tc.want)
			}
		})
	}
}
