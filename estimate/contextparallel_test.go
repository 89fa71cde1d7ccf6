package estimate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestContextParallel checks the lowering's effects against one GPU at the
// rank's share of the sequence, on Llama-3.2-1B (h 2048, 32 heads of 64, 8
// key/value heads, 16 layers): the parameters are whole; each layer saves
// the repeated keys and values (all heads, not the key/value heads) and the
// copy of the head-major ring output that the output projection saves,
// and nothing else more; NCCL adds the cp communicator and the
// all-to-all's point-to-point buffers; FSDP shards over dp·cp.
func TestContextParallel(t *testing.T) {
	est := func(o model.Overrides) *Result { return estimateSpec(t, "llama-3.2-1b.yaml", o) }
	const b, s, c, h, kvd, layers = 2, 4096, 2, 2048, 512, 16
	half := est(model.Overrides{Batch: b, Seq: s / c, Precision: "amp-bf16"})
	cp := est(model.Overrides{Batch: b, Seq: s, CP: c, Precision: "amp-bf16"})
	if cp.ParamBytes != half.ParamBytes {
		t.Errorf("cp parameter bytes = %d, want one GPU's %d", cp.ParamBytes, half.ParamBytes)
	}
	rows := int64(b * s / c)
	perLayer := 2*rows*(h-kvd)*2 + rows*h*2 // repeat_kv's extra heads (bf16), the output copy
	// One GPU's forward makes its rotary tables (cos and sin, [s/c, 64] in
	// the hidden states' dtype), saved; under context parallelism the
	// layers read views of the model's rotary buffer (cpRope), the model's
	// bytes, in the same dtype, so that the rotation's products are too.
	for _, p := range []struct {
		precision string
		bytes     int64
	}{{"amp-bf16", 4}, {"bf16", 2}} {
		one := est(model.Overrides{Batch: b, Seq: s / c, Precision: p.precision})
		ring := est(model.Overrides{Batch: b, Seq: s, CP: c, Precision: p.precision})
		tables := 2 * s / c * 64 * p.bytes
		if got, want := ring.ActivationBytes-one.ActivationBytes, layers*perLayer-tables; got != want {
			t.Errorf("%s: cp activations exceed one GPU's at s/c by %d, want %d (repeated k, v and the output copy per layer, less the tables)",
				p.precision, got, want)
		}
	}
	if cp.Training.Seq != s {
		t.Errorf("reported sequence %d, want the run's %d", cp.Training.Seq, s)
	}
	if got, want := cp.NCCLBytes(), int64(840+442)<<20; got != want {
		t.Errorf("cp NCCL = %d, want %d (one communicator, 840 MiB; sends and receives, 442 MiB)", got, want)
	}
	fsdp := est(model.Overrides{Batch: b, Seq: s, CP: c, DP: 2, Zero: "3", Precision: "amp-bf16"})
	if got, want := fsdp.ParamBytes, (cp.ParamBytes+3)/4; got > want+4<<20 || got < want-4<<20 {
		t.Errorf("FSDP over dp·cp = 4 parameter bytes %d, want about %d", got, want)
	}
	for _, o := range []model.Overrides{
		{Batch: b, Seq: s, CP: c, DP: 2, Precision: "amp-bf16"},
		{Batch: b, Seq: s + 2, CP: c, Precision: "amp-bf16"},
	} {
		if _, err := model.Load("../specs/llama-3.2-1b.yaml", o); err == nil {
			t.Errorf("Load(%+v) = nil error, want a refusal", o)
		}
	}
}

// TestRingMerges checks rank 0's ring on Llama-3.2-1B at cp 2 as
// _SDPAMerger runs it: the later step merges half its queries' output
// (b·s/c·heads·d/2 fp32 elements, after the step's fp32 copy of that
// size) and _partial_update puts it back into a new whole of the output's
// size, once per layer in the first forward.
func TestRingMerges(t *testing.T) {
	const b, s, c, heads, d, layers = 2, 4096, 2, 32, 64, 16
	spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: b, Seq: s, CP: c, Precision: "amp-bf16"})
	qn := int64(b * s / c * heads * d)
	count := map[string]map[int64]int{}
	_, err := estimateWith(spec, nil, func(sm *sim) {
		sm.trace = func(x *tensor, alloc bool) {
			if !alloc || sm.phase.Iteration != 0 || sm.phase.Stage != StageForward {
				return
			}
			if count[x.label()] == nil {
				count[x.label()] = map[int64]int{}
			}
			count[x.label()][x.elems]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		label string
		elems int64
		n     int
	}{
		{"ring step output fp32 (CP)", qn, layers},
		{"ring step output fp32 (CP)", qn / 2, layers},
		{"merged output (CP)", qn / 2, layers},
		{"output, partial update (CP)", qn, layers},
	} {
		if got := count[w.label][w.elems]; got != w.n {
			t.Errorf("%q of %d elements: %d in the first forward, want %d (all: %v)", w.label, w.elems, got, w.n, count[w.label])
		}
	}
}

// TestRingConcatenations holds the ring's concatenations of the local keys
// and values to _templated_ring_attention's: at cp 4 each layer's forward
// makes three (every step that sends), the first held as the all-gather's
// input until the next step's wait, after the first step's merge output,
// each later one freed as soon as it is made (exchange_buffers sends only
// the first; measured: the forty-fourth session's fake-group history at cp
// 8 and 2026-11-27's NCCL cp × ep history).
func TestRingConcatenations(t *testing.T) {
	const layers = 16
	spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 8192, CP: 4, Precision: "amp-bf16"})
	var made, atOnce, held int
	var open *tensor
	between := 0
	traced(t, spec, func(sm *sim, x *tensor, alloc bool) {
		if sm.phase.Iteration != 0 || sm.phase.Stage != StageForward {
			return
		}
		switch {
		case alloc && x.label() == "k, v concatenation (CP)":
			made++
			open, between = x, 0
		case !alloc && x == open:
			if between == 0 {
				atOnce++
			} else if between >= 3 {
				held++ // the all-gather, step 0's output, its log-sum-exp and merge copy came between
			}
			open = nil
		case alloc && open != nil:
			between++
		}
	})
	if made != 3*layers || atOnce != 2*layers || held != layers {
		t.Errorf("concatenations in the first forward: %d made, %d freed at once, %d held past step 0; want %d, %d, %d",
			made, atOnce, held, 3*layers, 2*layers, layers)
	}
}

// TestContextParallelRopeBuffer checks context_parallel's handling of a
// spec's rotary buffer (cpRope): the whole [2, s, d] fp32 buffer made with
// the model, and in each micro-batch its clone, the rank's shard and the
// shard's clone, made before the forward's first allocation and freed
// after the backward, before the optimizer; the layers' tables are views
// of the buffer. A transformers config hands context_parallel no rotary
// buffer (cp.py's main_hf: its ids and labels only).
func TestContextParallelRopeBuffer(t *testing.T) {
	const seq, cp, d = 8192, 4, 64 // Llama-3.2-1B's head dimension
	for _, tc := range []struct {
		name   string
		spec   func() *model.Spec
		buffer bool
		bytes  int64 // the buffer's element size
	}{
		{"spec", func() *model.Spec {
			return load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: seq, CP: cp, GradAccum: 2, Precision: "amp-bf16"})
		}, true, 4},
		{"spec in bf16", func() *model.Spec {
			return load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: seq, CP: cp, GradAccum: 2, Precision: "bf16"})
		}, true, 2},
		{"transformers config", func() *model.Spec {
			return loadHF(t, "qwen3-0.6b.json", model.Overrides{Batch: 1, Seq: seq, CP: cp, Precision: "amp-bf16"})
		}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var loads, tables int
			var events []string // the first step's: its copies made and freed, each forward's first allocation
			var phase Phase
			traced(t, tc.spec(), func(s *sim, x *tensor, alloc bool) {
				name := x.label()
				first := alloc && s.phase != phase
				phase = s.phase
				switch {
				case alloc && name == "rotary buffer":
					loads++
					if s.phase.Stage != "load" || x.bytes() != 2*seq*d*tc.bytes {
						t.Errorf("rotary buffer of %d bytes in %s; want %d at load", x.bytes(), s.phase.Stage, 2*seq*d*tc.bytes)
					}
				case alloc && strings.HasPrefix(name, "rope "):
					tables++
				case s.phase.Iteration != 0:
				case strings.Contains(name, "(context_parallel)"):
					want := 2 * seq / cp * d * tc.bytes
					if strings.Contains(name, "copy") {
						want = 2 * seq * d * tc.bytes
					}
					if x.bytes() != want {
						t.Errorf("%s: %d bytes, want %d", name, x.bytes(), want)
					}
					if alloc {
						events = append(events, fmt.Sprintf("%s %d made", s.phase.Stage, s.phase.Micro))
					} else {
						events = append(events, fmt.Sprintf("%s %d freed", s.phase.Stage, s.phase.Micro))
					}
				case first && s.phase.Stage == StageForward:
					events = append(events, fmt.Sprintf("forward %d starts", s.phase.Micro))
				}
			})
			if !tc.buffer {
				if loads != 0 || len(events) != 1 || tables == 0 {
					t.Errorf("%d rotary buffers, %d tables made in forward, first step %q; want none, some and no copies", loads, tables, events)
				}
				return
			}
			if loads != 1 || tables != 0 {
				t.Errorf("%d rotary buffers, %d tables made in forward; want 1 and none (views of the buffer)", loads, tables)
			}
			var want []string
			for m := range 2 {
				for range 3 {
					want = append(want, fmt.Sprintf("forward %d made", m))
				}
				for range 3 {
					want = append(want, fmt.Sprintf("backward %d freed", m))
				}
			}
			if got := strings.Join(events, ", "); got != strings.Join(want, ", ") {
				t.Errorf("the first step's copies:\n%s\nwant\n%s", got, strings.Join(want, ", "))
			}
		})
	}
}

// TestRingBackward holds ring attention's backward to
// _templated_ring_attention_backward's allocations at cp 8 (ringBackward;
// Mistral-7B's fake-group history, bench/results/2026-11-29-h200-fake-traces
// c3): per layer, three fp32 accumulators, one all-gather of the whole
// sequence's keys and values, a kernel's three gradients per step, and one
// rotation of the key and value gradients (sent and received) per step but
// the first and once after the last, dq merged anew from the third step on
// and after the last, the keys and values concatenated at the first step
// and again (freed at once) at every later one but the last; and no single
// lump, the largest block the all-gather.
func TestRingBackward(t *testing.T) {
	const c, layers = 8, 16
	spec := load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 16384, CP: c, Precision: "amp-bf16"})
	count := map[string]int{}
	var largest, gather int64
	traced(t, spec, func(sm *sim, x *tensor, alloc bool) {
		if !alloc || sm.phase.Iteration != 0 || sm.phase.Stage != StageBackward || !strings.HasPrefix(x.label(), "ring ") {
			return
		}
		what := strings.TrimSuffix(x.label(), " (CP)")
		count[what]++
		largest = max(largest, x.bytes())
		if what == "ring backward k, v all-gather" {
			gather = x.bytes()
		}
	})
	for what, want := range map[string]int{
		"ring backward dq accumulator": layers, "ring backward dk accumulator": layers, "ring backward dv accumulator": layers,
		"ring backward k, v all-gather": layers, "ring step dq": c * layers, "ring step workspace": c * layers,
		"ring backward dk, dv sent": c * layers, "ring backward dk, dv received": c * layers,
		"ring backward dq merged": (c - 1) * layers, "ring backward k, v concatenation": (c - 1) * layers,
	} {
		if count[what] != want {
			t.Errorf("%s: %d in the first backward, want %d", what, count[what], want)
		}
	}
	if largest != gather || gather == 0 {
		t.Errorf("the backward's largest block %d B, want the all-gather's %d B", largest, gather)
	}
}

// TestContextNCCLGroups checks that NCCL is counted from the run's process
// groups: FSDP over dp·cp at dp 1 shards over the cp group itself, so it
// adds no communicator; at dp 2 the dp·cp group is a second one.
func TestContextNCCLGroups(t *testing.T) {
	est := func(o model.Overrides) int64 {
		o.Batch, o.Seq, o.CP, o.Precision = 1, 4096, 2, "amp-bf16"
		return estimateSpec(t, "llama-3.2-1b.yaml", o).NCCLBytes()
	}
	alone, fsdp := est(model.Overrides{}), est(model.Overrides{Zero: "3"})
	if fsdp != alone {
		t.Errorf("FSDP over cp at dp 1: NCCL %d, want cp alone's %d (one group)", fsdp, alone)
	}
	if dp := est(model.Overrides{DP: 2, Zero: "3"}); dp <= alone {
		t.Errorf("FSDP over dp·cp at dp 2: NCCL %d, want more than one group's %d", dp, alone)
	}
}
