package model

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLowerStage checks each stage's layers: torchtitan's split of the
// blocks, the embedding on the first stage, the final norm and the head
// (a linear whose logits the schedule's loss reads) on the last, and no
// parameter lost or counted twice.
func TestLowerStage(t *testing.T) {
	s, err := Load(filepath.Join("..", "specs", "tinyllama-1.1b.yaml"), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	m := &s.Model
	for _, tc := range []struct {
		stages int64
		kinds  [][]string
		blocks []int64
	}{
		{2, [][]string{{KEmbedding, KRepeat}, {KRepeat, KRMSNorm, KLinear}}, []int64{11, 11}},
		{3, [][]string{{KEmbedding, KRepeat}, {KRepeat}, {KRepeat, KRMSNorm, KLinear}}, []int64{7, 8, 7}},
	} {
		t.Run(fmt.Sprint(tc.stages), func(t *testing.T) {
			var params float64
			for st := int64(0); st < tc.stages; st++ {
				ls, err := m.LowerStage(st, tc.stages)
				if err != nil {
					t.Fatal(err)
				}
				var kinds []string
				for _, l := range ls {
					kinds = append(kinds, l.Kind)
					if r, ok := l.Spec.(*Repeat); ok && r.Times != tc.blocks[st] {
						t.Errorf("stage %d has %d blocks, want %d", st, r.Times, tc.blocks[st])
					}
				}
				if got, want := strings.Join(kinds, " "), strings.Join(tc.kinds[st], " "); got != want {
					t.Errorf("stage %d layers %s, want %s", st, got, want)
				}
				params += float64(Params(ls))
			}
			if int64(params) != s.Params() {
				t.Errorf("stages hold %d parameters, the model %d", int64(params), s.Params())
			}
		})
	}
}

// TestLowerStageTied: a tied model split over stages holds the embedding
// on the first stage and, on the last, a head with a weight of its own
// (Megatron-LM's split), so the stages hold the vocabulary matrix twice;
// under tensor parallelism the first stage's embedding is an untied one
// (its whole gradient kept), and no stage refers to a tie. The model
// itself is not changed.
func TestLowerStageTied(t *testing.T) {
	s, err := Load(filepath.Join("..", "specs", "llama-3.2-1b.yaml"), Overrides{Seq: 256})
	if err != nil {
		t.Fatal(err)
	}
	m := &s.Model
	if !m.Tied {
		t.Fatal("llama-3.2-1b.yaml is not tied")
	}
	vh := m.Vocab * m.Hidden
	for _, tr := range []Training{{PP: 2}, {PP: 2, TP: 2, SP: true, Seq: 256}, {PP: 3, TP: 2, Seq: 256}} {
		var params int64
		for st := int64(0); st < tr.PP; st++ {
			ls, err := m.LowerStageRank(st, tr.PP, &tr)
			if err != nil {
				t.Fatal(err)
			}
			params += Params(ls)
			walk(ls, func(l *Layer) {
				switch k := l.Spec.(type) {
				case *LMHead:
					t.Errorf("%+v stage %d: a head with the loss %+v", tr, st, k)
				case *VocabHead:
					if k.Tie != "" {
						t.Errorf("%+v stage %d: head tied to %q", tr, st, k.Tie)
					}
				case *VocabEmbedding:
					if k.Tied {
						t.Errorf("%+v stage %d: embedding tied", tr, st)
					}
				}
			})
		}
		want := s.Params() + vh
		if tr.TP > 1 {
			// The rank's shards: the vocabulary matrices and the blocks'
			// projections halved, the norms (under 0.1%) whole.
			if d := params - want/2; d < 0 || d > want/1000 {
				t.Errorf("%+v: a rank's stages hold %d parameters, want half of %d and its norms", tr, params, want)
			}
			continue
		}
		if params != want {
			t.Errorf("%+v: the stages hold %d parameters, want the model's %d and the head's own %d", tr, params, s.Params(), vh)
		}
	}
	if _, err := m.LowerStage(1, 2); err != nil || !m.Tied {
		t.Fatalf("LowerStage changed the model or failed: %v", err)
	}
	for _, l := range m.Lower() {
		if h, ok := l.Spec.(*LMHead); ok && h.Tie == "" {
			t.Errorf("the model's head lost its tie")
		}
	}
}

// walk calls f on every layer of ls and their children.
func walk(ls []Layer, f func(*Layer)) {
	for i := range ls {
		f(&ls[i])
		walk(ls[i].Body, f)
		walk(ls[i].Shortcut, f)
		for _, b := range ls[i].Branches {
			walk(b, f)
		}
	}
}

// TestPipelineSpec checks training.pp and pp_schedule and the setups a
// pipeline cannot run, each reported at its line.
func TestPipelineSpec(t *testing.T) {
	const llama = "model: {type: llama, layers: 4, hidden: 64, heads: 4, intermediate: 128, vocab: 100%s}\n"
	for _, tc := range []struct {
		name, tied, training, want string
	}{
		{"default schedule", "", "{batch: 1, seq: 8, pp: 2, grad_accum: 2}", ""},
		{"gpipe one micro-batch", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: gpipe}", ""},
		{"1f1b too few", "", "{batch: 1, seq: 8, pp: 2, grad_accum: 1}", "f.yaml:2: pp 2: 1f1b needs at least as many micro-batches (1) as stages (2)"},
		{"tied", ", tied: true", "{batch: 1, seq: 8, pp: 2, grad_accum: 2}", ""},
		{"too deep", "", "{batch: 1, seq: 8, pp: 7, pp_schedule: gpipe}", "7 stages is more than the 4 layers"},
		{"unknown", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: zb}", `unknown pipeline schedule "zb"`},
		{"interleaved", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, grad_accum: 4}", ""},
		{"interleaved rounds", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, grad_accum: 5}", "f.yaml:2: pp 2: the interleaved schedule needs the micro-batches (5) to be a multiple of the rounds"},
		{"interleaved deep", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, pp_virtual: 4, grad_accum: 4}", "8 stages is more than the 4 layers"},
		{"virtual 1f1b", "", "{batch: 1, seq: 8, pp: 2, pp_virtual: 2, grad_accum: 4}", "2 stages per rank needs the interleaved schedule"},
		{"interleaved ddp", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, grad_accum: 4, dp: 2}", ""},
		{"interleaved zero 1", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, grad_accum: 4, dp: 2, zero: 1}", ""},
		{"interleaved fsdp", "", "{batch: 1, seq: 8, pp: 2, pp_schedule: interleaved, grad_accum: 4, dp: 2, zero: 3}", ""},
		{"fsdp", "", "{batch: 1, seq: 8, pp: 2, grad_accum: 2, dp: 2, zero: 3}", ""},
		{"offload", "", "{batch: 1, seq: 8, pp: 2, grad_accum: 2, dp: 2, zero: 3, offload: optimizer}", "offload with pipeline parallelism is not simulated"},
		{"negative", "", "{batch: 1, seq: 8, pp: -1}", "pp: must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := fmt.Sprintf(llama, tc.tied) + "training: " + tc.training + "\n"
			s, err := Parse("f.yaml", []byte(y), Overrides{})
			if tc.want == "" {
				if err != nil || s.Training.PP != 2 || s.Training.PPSchedule == "" {
					t.Errorf("Parse = %+v, %v; want pp 2 with a schedule", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestStageSliceHoldInput: a pipeline's first stage keeps the repeat's
// hold on its input (BertModel's embedding_output), later stages, whose
// input is a received activation, do not; the stage's copies are its own.
func TestStageSliceHoldInput(t *testing.T) {
	s, err := Load("../specs/bert-base.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for stage, want := range []bool{true, false} {
		ls, err := s.Model.stageSlice(int64(stage), 2)
		if err != nil {
			t.Fatal(err)
		}
		var reps []*Repeat
		for _, l := range ls {
			if r, ok := l.Spec.(*Repeat); ok {
				reps = append(reps, r)
			}
		}
		if len(reps) != 1 || reps[0].HoldInput != want || reps[0].Times != 6 {
			t.Errorf("stage %d: repeats %+v, want one of 6 copies, hold_input %v", stage, reps, want)
		}
	}
}

// TestParallelLayoutsDropWindow: a spec's Llama-shaped model runs
// torchtitan's Llama under the parallel layouts, causal SDPA without
// transformers' sliding-window masks or a key/value cache, so their
// lowerings drop a model's sliding window and cache (titanAttention,
// counted together here); the model's own layers keep them, and a stage's
// repeat knows its first layer's index. The same model read from its
// transformers config runs transformers' forward (Model.Transformers):
// tensor parallelism and pipeline stages keep the window and the cache,
// and context parallelism, whose ring takes no mask, refuses it with the
// way out (memplan import).
func TestParallelLayoutsDropWindow(t *testing.T) {
	hf, err := LoadHF(filepath.Join("testdata", "hf", "mistral-7b-v0.1.json"), Overrides{Batch: 1, Seq: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []Training{{TP: 2, Seq: 256}, {PP: 2}} {
		var ls []Layer
		if tr.PP > 1 {
			ls, err = hf.Model.LowerStageRank(0, tr.PP, &tr)
		} else {
			ls, err = hf.Model.LowerRank(&tr)
		}
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		walk(ls, func(l *Layer) {
			if a, ok := l.Spec.(*Attention); ok && a.Window > 0 && a.KVCache {
				kept++
			}
		})
		if kept == 0 {
			t.Errorf("the transformers config under %+v: no attention keeps its window and cache", tr)
		}
	}
	if _, err := hf.Model.LowerRank(&Training{CP: 2, Seq: 256}); err == nil || !strings.Contains(err.Error(), "memplan import") {
		t.Errorf("the transformers config under context parallelism: %v, want a refusal naming memplan import", err)
	}
	spec := hf.Model
	spec.Transformers = false // as memplan import writes it
	m := &spec
	windows := func(ls []Layer) (n int) {
		walk(ls, func(l *Layer) {
			switch a := l.Spec.(type) {
			case *Attention:
				if a.Window > 0 || a.KVCache {
					n++
				}
			case *RingAttention:
				if a.Window > 0 {
					n++
				}
			}
		})
		return n
	}
	if n := windows(m.Lower()); n != 1 {
		t.Fatalf("the model's repeat has %d windowed attention layers, want 1 (its body's)", n)
	}
	for _, tr := range []Training{{TP: 2, Seq: 256}, {CP: 2, Seq: 256}, {PP: 2}, {PP: 2, TP: 2, Seq: 256}} {
		if tr.PP > 1 {
			for st := int64(0); st < tr.PP; st++ {
				ls, err := m.LowerStageRank(st, tr.PP, &tr)
				if err != nil {
					t.Fatal(err)
				}
				if n := windows(ls); n != 0 {
					t.Errorf("%+v stage %d: %d windowed attention layers", tr, st, n)
				}
				for _, l := range ls {
					if r, ok := l.Spec.(*Repeat); ok && r.First != 16*st {
						t.Errorf("stage %d's repeat starts at layer %d, want %d", st, r.First, 16*st)
					}
				}
			}
			continue
		}
		ls, err := m.LowerRank(&tr)
		if err != nil {
			t.Fatal(err)
		}
		if n := windows(ls); n != 0 {
			t.Errorf("%+v: %d windowed attention layers", tr, n)
		}
	}
	if n := windows(m.Lower()); n != 1 {
		t.Errorf("the lowerings changed the model's window")
	}
}

// TestStagesRunTransformersForward checks the pipeline stages of the
// families whose layouts run transformers' own forward
// (RunsTransformersForward), alone and with tensor parallelism inside:
// a later stage does to the activation it receives what that forward does
// to inputs_embeds (stageInput: Granite's scale again, StarCoder2's
// dropout; Gemma's scale comes with the looked-up rows only), its
// attention keeps the model's sliding windows, and the last stage's head
// runs after the forward returns (Linear.Head), followed by what the
// causal LM does to the logits (Gemma 2's softcap, Granite's and Cohere's
// scale).
func TestStagesRunTransformersForward(t *testing.T) {
	for _, tc := range []struct {
		file      string
		input     string // the later stage's first layer's kind
		afterHead []string
		windows   bool
	}{
		{"gemma-2-2b.json", KRepeat, []string{KSoftcap}, true},
		{"gemma-3-27b-6layer.json", KRepeat, nil, true},
		{"granite-3.1-2b.json", KRescale, []string{KRescale}, false},
		{"cohere-1b-shape.json", KRepeat, []string{KRescale}, false},
		{"starcoder2-3b.json", KDropout, nil, true},
		{"phi-3-mini-4k.json", KRepeat, nil, false},
		{"olmo2-1b.json", KRepeat, nil, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s, err := LoadHF(filepath.Join("testdata", "hf", tc.file), Overrides{Batch: 1, Seq: 256})
			if err != nil {
				t.Fatal(err)
			}
			m := &s.Model
			if !m.RunsTransformersForward() {
				t.Fatal("runs torchtitan's program, want transformers' forward")
			}
			for _, tr := range []Training{{PP: 2, PPSchedule: PP1F1B, GradAccum: 2, Seq: 256},
				{PP: 2, PPSchedule: PP1F1B, GradAccum: 2, TP: 2, SP: true, Seq: 256}} {
				if err := tr.PipelineOK(m); err != nil {
					t.Fatalf("tp %d: %v", tr.TP, err)
				}
				last, err := m.LowerStageRank(1, 2, &tr)
				if err != nil {
					t.Fatalf("tp %d: %v", tr.TP, err)
				}
				if k := last[0].Kind; k != tc.input {
					t.Errorf("tp %d: the later stage starts with %s, want %s", tr.TP, k, tc.input)
				}
				windows := 0
				walk(last, func(l *Layer) {
					if a, ok := l.Spec.(*Attention); ok && a.Window > 0 {
						windows++
					}
				})
				if (windows > 0) != tc.windows {
					t.Errorf("tp %d: %d windowed attention layers, want some: %v", tr.TP, windows, tc.windows)
				}
				if tr.TP > 1 {
					h := last[len(last)-1].Spec.(*VocabHead)
					if !h.Output || h.Softcap != m.LogitSoftcap || h.Scale != m.scalesLogits() {
						t.Errorf("tp %d: head %+v, want the stage's output with the model's softcap %v and scale %v",
							tr.TP, h, m.LogitSoftcap, m.scalesLogits())
					}
					continue
				}
				var after []string
				head := false
				for _, l := range last {
					if lin, ok := l.Spec.(*Linear); ok && lin.Head {
						head = true
						continue
					}
					if head {
						after = append(after, l.Kind)
					}
				}
				if !head || strings.Join(after, " ") != strings.Join(tc.afterHead, " ") {
					t.Errorf("head found %v, then %v; want %v", head, after, tc.afterHead)
				}
			}
		})
	}
}
