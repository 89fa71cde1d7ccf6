package estimate

import (
	"testing"

	"github.com/memplan/memplan/model"
)

// DeepSeek-V2's program (modeling_deepseek_v2.py, transformers 5.17):
// what it does differently from DeepSeek-V3's. Each test fails with its
// part of the program undone.

// TestMLAComplexRoPE: DeepseekV2's apply_rotary_emb makes the query's and
// the shared key's rotary dims fp32 (copies over a bf16 stream, none in
// fp32) before multiplying them by the complex table, which the model's
// forward makes once per step as a polar table and its scaled copy.
func TestMLAComplexRoPE(t *testing.T) {
	const b, seq = 1, 256
	q32, k32 := int64(b*seq*16*64*4), int64(b*seq*64*4)
	count := func(p string) (qc, kc, tables int) {
		o := model.Overrides{Batch: b, Seq: seq, Precision: p}
		traced(t, loadHF(t, "deepseek-v2-lite-4layer.json", o), func(s *sim, x *tensor, alloc bool) {
			if s.phase.Stage != StageForward || s.phase.Iteration != 0 {
				return
			}
			switch {
			case x.name == "freqs_cis" && alloc:
				tables++
			case alloc:
			case x.prefix == "cast of " && x.dt == f32 && x.bytes() == q32:
				qc++ // counted as freed: the prefix comes after the allocation
			case x.prefix == "cast of " && x.dt == f32 && x.bytes() == k32:
				kc++
			}
		})
		return qc, kc, tables
	}
	if qc, kc, tables := count(model.BF16); qc != 4 || kc != 4 || tables != 2 {
		t.Errorf("bf16: %d fp32 query copies, %d key copies and %d tables in the first forward, want 4, 4 and 2", qc, kc, tables)
	}
	if qc, kc, _ := count(model.FP32); qc != 0 || kc != 0 {
		t.Errorf("fp32: %d query and %d key copies, want none", qc, kc)
	}
}

// TestSoftmaxGroupRouter: group_limited_greedy masks the scores outside
// the chosen groups (a boolean mask its node keeps until backward, one per
// sparse layer); greedy routing takes the top k of the scores as they are.
func TestSoftmaxGroupRouter(t *testing.T) {
	const b, seq = 1, 256
	masks := func(file string) (n int) {
		o := model.Overrides{Batch: b, Seq: seq, Precision: model.BF16}
		traced(t, loadHF(t, file, o), func(s *sim, x *tensor, alloc bool) {
			if !alloc && s.phase.Stage == StageBackward && s.phase.Iteration == 0 && x.name == "~score_mask" {
				n++ // freed with its node
			}
		})
		return n
	}
	if n := masks("deepseek-v2-2layer.json"); n != 1 {
		t.Errorf("DeepSeek-V2's cut (one sparse layer, group_limited_greedy): %d masks freed in backward, want 1", n)
	}
	if n := masks("deepseek-v2-lite-4layer.json"); n != 0 {
		t.Errorf("DeepSeek-V2-Lite's cut (greedy): %d masks, want none", n)
	}
}

// TestLoRAOverSharedExperts: adapters over DeepSeek's latent attention
// (q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj), its dense first
// layer's MLP and every sparse layer's shared expert, and over
// Qwen2-MoE's shared expert and its one-output gate (all-linear only):
// the simulator allocates exactly the adapters the spec counts, with an
// fp32 gradient each.
func TestLoRAOverSharedExperts(t *testing.T) {
	for _, c := range []struct {
		file, targets string
		want          int64
	}{
		// Per layer at rank 16: q_proj 16·(2048+16·192), kv_a 16·(2048+576),
		// kv_b 16·(512+16·256), o 16·(2048+2048).
		{"deepseek-v2-lite-4layer.json", model.TargetsAttn, 4 * (81920 + 41984 + 73728 + 65536)},
		// The dense layer's 16·(2048+10944)·3, three shared experts' 16·(2048+2816)·3.
		{"deepseek-v2-lite-4layer.json", model.TargetsMLP, 623616 + 3*233472},
		{"deepseek-v2-2layer.json", model.TargetsAll, 0},
		{"qwen1.5-moe-a2.7b.json", model.TargetsAll, 0},
		{"qwen1.5-moe-a2.7b.json", model.TargetsMLP, 0},
	} {
		spec := loadHF(t, c.file, model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, LoRA: 16, LoRATargets: c.targets})
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		n := spec.Trainable()
		if c.want != 0 && n != c.want {
			t.Errorf("%s %s: the spec counts %d adapter parameters, want %d", c.file, c.targets, n, c.want)
		}
		if n == 0 || r.Trainable != n || r.GradBytes != 4*n {
			t.Errorf("%s %s: %d trainable, %d gradient bytes; the spec counts %d", c.file, c.targets, r.Trainable, r.GradBytes, n)
		}
	}
}
