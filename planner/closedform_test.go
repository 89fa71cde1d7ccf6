package planner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// Closed forms of activation memory (docs/parallelism.md §1), in bytes,
// for s tokens, micro-batch b, hidden h, a heads, t-way tensor
// parallelism.

// korthikanti is Table 2 of Korthikanti et al. 2022 per layer: no
// parallelism sbh(34 + 5as/h); with TP sbh(10 + 24/t + 5as/(ht)); with
// TP+SP sbh/t·(34 + 5as/h); selective recomputation drops the 5as/h term.
func korthikanti(s, b, h, a, t float64, sp, selective bool) float64 {
	attn := 5 * a * s / h
	if selective {
		attn = 0
	}
	if sp || t == 1 {
		return s * b * h / t * (34 + attn)
	}
	return s * b * h * (10 + 24/t + attn/t)
}

// megatron is Megatron-LM's theoretical_memory_usage.py activation term
// for the SP + selective path at pp = 1: per layer sbh(18 + 4·ffn/h)
// times the layers, plus the embedding's input (8sb) and dropout (sbh),
// plus the output layer 4sbh(1 + V/h), all over t.
func megatron(s, b, h, ffn, layers, vocab, t float64) float64 {
	per := s * b * h * (18 + 4*ffn/h)
	return (per*layers + 8*s*b + s*b*h + 4*s*b*h*(1+vocab/h)) / t
}

// TestClosedForms sets the closed forms next to memplan's single-GPU
// figure (ActivationBytes: what autograd holds at the end of the forward)
// for the same models at tp = 1, so that docs/parallelism.md §2 can
// explain each difference. Run with -v to see the table. It checks only
// that the closed forms are ordered as the paper says (SP and selective
// never need more) and that memplan's figure is positive.
func TestClosedForms(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-34s %12s %12s %12s %12s\n", "model (tp=1, b=1)", "Korthikanti", "selective", "Megatron", "memplan")
	for _, tc := range []struct {
		file string
		seq  int64
		attn string
	}{
		{"gpt2-xl.yaml", 1024, model.AttnEager},
		{"gpt2-xl.yaml", 1024, model.AttnSDPA},
		{"llama-3.2-1b.yaml", 4096, model.AttnSDPA},
		{"llama-3-8b.yaml", 4096, model.AttnSDPA},
		{"llama-3-8b.yaml", 4096, model.AttnEager},
	} {
		spec := load(t, tc.file)
		m := &spec.Model
		spec.Training.Seq, spec.Training.Batch, spec.Training.GradAccum = tc.seq, 1, 1
		spec.Training.Attention = tc.attn
		spec.Training.Checkpointing = model.Checkpointing{Mode: model.CkptNone}
		spec.Training.DP, spec.Training.Zero, spec.Training.Offload = 1, 0, model.OffloadNone
		r, err := estimate.Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		s, h, a, L := float64(tc.seq), float64(m.Hidden), float64(m.Heads), float64(m.NumLayers)
		full := L * korthikanti(s, 1, h, a, 1, false, false)
		sel := L * korthikanti(s, 1, h, a, 1, false, true)
		mega := megatron(s, 1, h, float64(m.Intermediate), L, float64(m.Vocab), 1)
		for _, tp := range []float64{2, 4, 8} {
			if korthikanti(s, 1, h, a, tp, true, false) > korthikanti(s, 1, h, a, tp, false, false) {
				t.Errorf("%s: SP needs more than TP alone at t=%g", tc.file, tp)
			}
		}
		if sel > full || r.ActivationBytes <= 0 {
			t.Errorf("%s: selective %g > full %g, or memplan %d", tc.file, sel, full, r.ActivationBytes)
		}
		fmt.Fprintf(&b, "%-34s %12s %12s %12s %12s\n", fmt.Sprintf("%s s=%d %s", spec.Name, tc.seq, tc.attn),
			units.Format(int64(full)), units.Format(int64(sel)), units.Format(int64(mega)), units.Format(r.ActivationBytes))
	}
	t.Log(b.String())
}

// TestClosedFormsTP sets the closed forms with tensor (and sequence)
// parallelism next to memplan's figure for one rank of the same layout
// (docs/parallelism.md §2, the second table). It checks what the
// simulation must show whatever the numbers: sequence parallelism saves
// less than tensor parallelism alone, and both less than one GPU.
func TestClosedFormsTP(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-30s %12s %12s %12s %12s\n", "model (b=1, SDPA)", "Korthikanti", "selective", "Megatron", "memplan")
	for _, tc := range []struct {
		file string
		seq  int64
	}{{"llama-3.2-1b.yaml", 4096}, {"llama-3-8b.yaml", 4096}} {
		spec := load(t, tc.file)
		m := &spec.Model
		tr := &spec.Training
		tr.Seq, tr.Batch, tr.GradAccum, tr.Attention = tc.seq, 1, 1, model.AttnSDPA
		tr.Checkpointing = model.Checkpointing{Mode: model.CkptNone}
		tr.DP, tr.Zero, tr.Offload = 1, 0, model.OffloadNone
		s, h, a, L := float64(tc.seq), float64(m.Hidden), float64(m.Heads), float64(m.NumLayers)
		prev := map[bool]int64{}
		for _, tp := range []int64{1, 2, 4} {
			for _, sp := range []bool{false, true} {
				if tp == 1 && sp {
					continue
				}
				tr.TP, tr.SP = tp, sp
				r, err := estimate.Estimate(spec)
				if err != nil {
					t.Fatal(err)
				}
				ft := float64(tp)
				full := L * korthikanti(s, 1, h, a, ft, sp, false)
				sel := L * korthikanti(s, 1, h, a, ft, sp, true)
				mega := megatron(s, 1, h, float64(m.Intermediate), L, float64(m.Vocab), ft)
				name := fmt.Sprintf("%s t=%d", spec.Name, tp)
				if sp {
					name += " +sp"
				}
				fmt.Fprintf(&b, "%-30s %12s %12s %12s %12s\n", name, units.Format(int64(full)), units.Format(int64(sel)),
					units.Format(int64(mega)), units.Format(r.ActivationBytes))
				if tp > 1 && sp && r.ActivationBytes >= prev[false] {
					t.Errorf("%s: sp saves %d B, tp alone %d B", name, r.ActivationBytes, prev[false])
				}
				if tp > 1 && !sp && r.ActivationBytes >= prev[true] {
					t.Errorf("%s: %d B, not less than with fewer ranks (%d B)", name, r.ActivationBytes, prev[true])
				}
				prev[sp] = r.ActivationBytes
				if tp == 1 {
					prev[true] = r.ActivationBytes
				}
			}
		}
	}
	t.Log(b.String())
}
