package estimate

import (
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// TestTensorParallel checks the lowering's effects one at a time on
// Llama-3.2-1B (h 2048, ffn 8192, 32 heads, 8 key/value heads, V 128256,
// tied): the rank's parameters are its shares of the split matrices plus
// the whole norms; sequence parallelism saves less; loss parallelism keeps
// no gathered logits; FSDP over dp shards the rank's parameters again.
// The model is built on the GPU first, as the measured runs of
// bench/torch/dist/tp.py build it (fsdp_init gpu: the whole load and its
// scatter); built on the meta device (the default under tensor
// parallelism) each shard is allocated directly and nothing is scattered.
func TestTensorParallel(t *testing.T) {
	base := model.Overrides{Batch: 2, Seq: 1024, Precision: "amp-bf16", FSDPInit: "gpu"}
	est := func(o model.Overrides) *Result { return estimateSpec(t, "llama-3.2-1b.yaml", o) }
	with := func(f func(*model.Overrides)) model.Overrides {
		o := base
		f(&o)
		return o
	}
	one := est(base)
	tp1 := est(with(func(o *model.Overrides) { o.TP = 1 }))
	tp := est(with(func(o *model.Overrides) { o.TP = 2 }))
	sp := est(with(func(o *model.Overrides) { o.TP, o.SP = 2, true }))
	lp := est(with(func(o *model.Overrides) { o.TP, o.SP, o.LossParallel = 2, true, true }))
	fsdp := est(with(func(o *model.Overrides) { o.TP, o.SP, o.DP, o.Zero = 2, true, 2, "3" }))

	const h, ffn, q, kv, v, layers = 2048, 8192, 2048, 512, 128256, 16
	norms := int64(2*layers+1) * h
	split := int64(layers)*(h*(q+2*kv)+q*h+3*h*ffn) + v*h
	if got, want := tp.ParamBytes, 4*(split/2+norms); got != want {
		t.Errorf("tp 2 parameter bytes = %d, want %d (the split matrices halved, the norms whole)", got, want)
	}
	if tp1.PeakAllocated != one.PeakAllocated || tp1.DeviceTotal != one.DeviceTotal {
		t.Errorf("tp 1 = %d / %d, want the single-GPU %d / %d", tp1.PeakAllocated, tp1.DeviceTotal, one.PeakAllocated, one.DeviceTotal)
	}
	if tp.Params != one.Params {
		t.Errorf("tp 2 reports %d parameters, want the model's %d", tp.Params, one.Params)
	}
	for _, c := range []struct {
		name       string
		less, more int64
	}{
		{"tp saves less than one GPU", tp.ActivationBytes, one.ActivationBytes},
		{"sp saves less than tp alone", sp.ActivationBytes, tp.ActivationBytes},
		{"loss parallel peaks lower", lp.PeakAllocated, sp.PeakAllocated},
		{"fsdp over dp holds less", fsdp.PeakAllocated, sp.PeakAllocated},
	} {
		if c.less >= c.more {
			t.Errorf("%s: %d >= %d", c.name, c.less, c.more)
		}
	}
	if got, want := fsdp.ParamBytes, sp.ParamBytes/2; got < want || got > want+4*1024 {
		t.Errorf("tp 2 × fsdp 2 parameter bytes = %d, want about %d", got, want)
	}
	nccl := func(r *Result) int64 {
		for _, o := range r.Overhead {
			if o.Name == OverheadNCCL {
				return o.Bytes
			}
		}
		return 0
	}
	// One communicator (840 MiB) and the receive side of the load's
	// scatter (378 MiB); measured on rank 1 of 2 x H200: 1993 MiB outside
	// the allocator, of which 767 MiB are the context and kernel modules.
	if nccl(sp) != 1218<<20 || nccl(fsdp) <= nccl(sp) {
		t.Errorf("NCCL: tp %d MiB, tp × dp %d MiB; want 1218 and more", nccl(sp)>>20, nccl(fsdp)>>20)
	}
	meta := est(with(func(o *model.Overrides) { o.TP, o.SP, o.FSDPInit = 2, true, "" }))
	if nccl(meta) != 840<<20 || meta.PeakAllocated > sp.PeakAllocated || meta.ParamBytes != sp.ParamBytes {
		t.Errorf("tp 2 built on meta: NCCL %d MiB, peak %d B, parameters %d B; want one communicator's 840, at most the whole load's %d, %d",
			nccl(meta)>>20, meta.PeakAllocated, meta.ParamBytes, sp.PeakAllocated, sp.ParamBytes)
	}
	big := estimateSpec(t, "llama-3-70b.yaml", model.Overrides{Batch: 1, Seq: 4096, Precision: "bf16", TP: 8, SP: true, DP: 8, Zero: "3"})
	if big.PeakPhase.Stage == "load" {
		t.Errorf("Llama-3-70B tp 8 × FSDP 8 built on meta peaks at its load (%d B), which allocates only shards", big.PeakAllocated)
	}
}

// TestCommunicators holds the NCCL communicators a rank connects, as NCCL's
// INIT log showed them on 4 × H200 (bench/results/2026-11-26-h200x4-nccl-init.txt):
// one per mesh dimension larger than one, and the default group's when
// DTensor parameters are drawn on a mesh none of whose dimensions spans
// the world.
func TestCommunicators(t *testing.T) {
	for _, tc := range []struct {
		name        string
		t           model.Training
		dtensorInit bool
		want        int
	}{
		{"one gpu", model.Training{}, false, 0},
		{"dp 4", model.Training{DP: 4}, false, 1},
		{"tp 2, whole load", model.Training{TP: 2}, false, 1},
		{"pp 2", model.Training{PP: 2}, true, 1},
		{"dp 2 x tp 2, whole load (tp.py)", model.Training{DP: 2, TP: 2}, false, 2},
		{"pp 2 x tp 2, meta build (pp.py)", model.Training{PP: 2, TP: 2}, true, 3},
		{"pp 2 x tp 1, meta build", model.Training{PP: 2, DP: 2}, true, 2},
		{"tp 2 x cp 2 x dp 2, meta build", model.Training{TP: 2, CP: 2, DP: 2}, true, 4},
		// An EP group that spans the world runs only all-to-alls: the
		// default group still connects a ring for the broadcast (tp.py
		// --meta, 2026-11-27), unless a dense dimension is the world.
		{"dp 2 x tp 2 x ep 4, meta build", model.Training{DP: 2, TP: 2, EP: 4}, true, 4},
		{"tp 4 x ep 4, meta build", model.Training{TP: 4, EP: 4}, true, 2},
	} {
		if got := communicators(tc.t, tc.dtensorInit); got != tc.want {
			t.Errorf("%s: %d communicators, want %d", tc.name, got, tc.want)
		}
	}
}

// TestScatterShared: a whole load's scatter over the tp ranks (a model built
// on the GPU first, fsdp_init gpu) adds receive
// buffers unless the expert-parallel all-to-all has connected every rank
// already on the same communicator (tp = ep = the world, both the default
// group: measured 311 MiB less on 2 and 4 × H200,
// bench/results/2026-11-27-tp-ep-h200x4.jsonl).
func TestScatterShared(t *testing.T) {
	for _, tc := range []struct {
		name   string
		t      model.Training
		shared bool
	}{
		{"tp 2 × ep 2", model.Training{TP: 2, SP: true, EP: 2, FSDPInit: model.FSDPInitGPU}, true},
		{"tp 4 × ep 4", model.Training{TP: 4, SP: true, EP: 4, FSDPInit: model.FSDPInitGPU}, true},
		{"tp 4 × ep 2: EP groups of their own", model.Training{TP: 4, SP: true, EP: 2, FSDPInit: model.FSDPInitGPU}, false},
		{"dp 2 × tp 2 × ep 4: tp groups of their own", model.Training{DP: 2, TP: 2, SP: true, EP: 4, Zero: 3, FSDPInit: model.FSDPInitGPU}, false},
		{"tp 2 alone", model.Training{TP: 2, FSDPInit: model.FSDPInitGPU}, false},
	} {
		if got := scatterShared(tc.t); got != tc.shared {
			t.Errorf("%s: shared %v, want %v", tc.name, got, tc.shared)
		}
		c := layoutNCCL(tc.t, false, false)
		alone := mustNCCL(parallel.NCCLBytes(c))
		got := ncclFor(tc.t, false)
		if tc.shared && got != alone || !tc.shared && tc.t.TP > 1 && got <= alone {
			t.Errorf("%s: NCCL %d B, the layout's connections alone %d B", tc.name, got, alone)
		}
	}
}

// TestSequenceGatherView: a sequence all-gather of a batch of one is a
// view of the collective's [t, s/t, h] output (torch._utils.
// _maybe_view_chunk_cat), so no concatenation is made; a batch of two
// concatenates each gather's chunks anew. The head's gather of the
// vocabulary shards always concatenates.
func TestSequenceGatherView(t *testing.T) {
	for _, tc := range []struct {
		batch int64
		want  func(seq, vocab int) bool
	}{
		{1, func(seq, vocab int) bool { return seq == 0 && vocab > 0 }},
		{2, func(seq, vocab int) bool { return seq > 0 && vocab > 0 }},
	} {
		spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: tc.batch, Seq: 256,
			Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
		if err != nil {
			t.Fatal(err)
		}
		var seq, vocab int
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if !alloc || x.name != "all-gather concatenation (TP)" || s.phase.Stage != StageForward {
					return
				}
				if x.elems == tc.batch*256*2048 { // [b, s, h]: the sequence's
					seq++
				} else {
					vocab++
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if !tc.want(seq, vocab) {
			t.Errorf("batch %d: %d sequence and %d vocabulary concatenations in forward", tc.batch, seq, vocab)
		}
	}
}

// TestModuleHoldsGatheredInput checks that under sequence parallelism a
// module's gathered input, and the shard it was gathered from, are still
// allocated when the module's output collective allocates (closeModule),
// as the module's call holds them (the DeepSeek-V2-Lite and
// moe-llama-wide histories), and freed after: every reduce-scatter output
// of the forward but the embedding's is allocated while its module's
// gathered input is live, and with the module's locals (atReturn): the
// attention's query, key and value, the MLP's product (down_proj's input,
// which its call holds through its output hook).
func TestModuleHoldsGatheredInput(t *testing.T) {
	spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256,
		Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
	if err != nil {
		t.Fatal(err)
	}
	var gathered *tensor // the last sequence all-gather's output
	held, bare, locals := 0, 0, 0
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if s.phase.Iteration != 0 || s.phase.Stage != StageForward {
				return
			}
			switch {
			case alloc && x.name == "all-gather output (TP)" && x.bytes() == 256*2048*4: // fp32 residual
				gathered = x
			case !alloc && x == gathered:
				gathered = nil
			case alloc && x.name == "reduce-scatter output (TP)":
				if gathered != nil && len(s.moduleHold) >= 2 && s.moduleHold[0] == gathered {
					held++
					if len(s.moduleHold) > 2 {
						locals++ // the attention's query, key and value, or the MLP's product (atReturn)
					}
				} else {
					bare++
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if held != 2*16 || bare != 1 || locals != 2*16 { // attention and MLP of 16 blocks; the embedding
		t.Errorf("%d reduce-scatters while their module's gathered input is held (%d with its locals), %d without; want 32 (32) and 1", held, locals, bare)
	}
}

// TestHeadDropsInputBeforeLoss checks that under sequence parallelism the
// head's gathered input and the final norm's output it was gathered from
// are freed after the head's logits exist and before the loss casts them to
// fp32, the gathered input first: the head module's call returns, then the
// model's (measured: the tiny Qwen3 MoE at tp 2 through transformers'
// forward, and TinyLlama at cp 2 × tp 2 with the loss parallel through
// torchtitan's, bench/results/2026-11-28-h200x2-tp-moe-52-trace,
// 2026-11-26-h200x4-cp-tp-trace). Both programs, with and without the loss
// parallel; the model's output goes after what the causal LM's forward
// does to the logits (Gemma 2's cap).
func TestHeadDropsInputBeforeLoss(t *testing.T) {
	const seq = 256
	for _, tc := range []struct {
		name string
		load func() *model.Spec
		lp   bool
	}{
		{"spec", func() *model.Spec {
			return load(t, "../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
		}, false},
		{"spec, loss parallel", func() *model.Spec {
			return load(t, "../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16, TP: 2, SP: true, LossParallel: true, LossOutsideAutocast: true})
		}, true},
		{"transformers config", func() *model.Spec {
			return loadHF(t, "qwen3-0.6b.json", model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
		}, false},
		// Gemma 2's causal LM caps its logits before it returns: the
		// model's output goes after the cap's first tensor.
		{"transformers config, softcap", func() *model.Spec {
			return loadHF(t, "gemma-2-2b.json", model.Overrides{Batch: 1, Seq: seq, Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.load()
			v := spec.Model.Vocab
			h := spec.Model.Hidden
			cast := int64(seq) * v * 4 // the loss's fp32 logits
			if tc.lp {
				cast /= 2
			}
			var last, gathered, normOut *tensor
			var events []string
			traced(t, spec, func(s *sim, x *tensor, alloc bool) {
				if s.phase.Iteration != 0 || s.phase.Stage != StageForward {
					return
				}
				switch {
				case alloc && x.name == "all-gather output (TP)" && x.bytes() == seq*h*4:
					gathered, normOut = x, last // the fp32 residual stream gathered
					events = events[:0]
				case alloc && x.name == "matmul out" && x.bytes() == seq*v/2*2:
					events = append(events, "logits")
				case alloc && x.bytes() == cast && len(events) > 0:
					events = append(events, "loss")
				case alloc && x.name == "Tanh" && len(events) > 0:
					events = append(events, "softcap")
				case !alloc && x == gathered:
					events = append(events, "gathered freed")
				case !alloc && x == normOut:
					events = append(events, "norm output freed")
				}
				if alloc {
					last = x
				}
			})
			want := "logits, gathered freed, norm output freed, loss"
			if spec.Model.LogitSoftcap > 0 {
				want = "logits, gathered freed, softcap, norm output freed, loss"
			}
			if got := strings.Join(events, ", "); !strings.HasPrefix(got, want) {
				t.Errorf("the head's events: %s; want %s", got, want)
			}
		})
	}
}

// TestMLPHoldsProduct checks that under tensor parallelism without
// sequence parallelism a gated MLP's product, down_proj's input, is still
// allocated when the MLP's output all-reduce allocates its output, and
// freed after (the call holds its argument through RowwiseParallel's
// output hook; measured on Maverick's checkpointed dense layers at tp 2,
// bench/results/2026-11-28-h200x2-heldout-71). Checkpointed, so that the
// forward saves nothing and frees each product.
func TestMLPHoldsProduct(t *testing.T) {
	const tp = 2
	spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256,
		Precision: model.AMPBF16, TP: tp, LossOutsideAutocast: true, Checkpointing: "every-block"})
	if err != nil {
		t.Fatal(err)
	}
	var product *tensor // the MLP's product, while allocated
	held, freed := 0, 0
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if s.phase.Iteration != 0 || s.phase.Stage != StageForward {
				return
			}
			switch {
			case alloc && x.name == "mul" && x.elems == 256*8192/tp && x.dt == 2: // bf16 [256, 8192/tp]
				product = x
			case !alloc && x == product:
				product, freed = nil, freed+1
			case alloc && product != nil && x.name == "all-reduce output (TP)":
				held++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if held != 16 || freed != 16 { // 16 blocks
		t.Errorf("%d of 16 MLP all-reduces allocate while the MLP's product is held; %d products freed in the forward, want 16", held, freed)
	}
}

// TestTransformersForwardWholeSequence checks that under sequence
// parallelism a model run through transformers' forward makes its mask
// for the whole sequence (its residual stream is a DTensor with the whole
// shape: sim.wholeSeq), as without it, in a pipeline's stages too:
// GPT-OSS's eager causal mask.
func TestTransformersForwardWholeSequence(t *testing.T) {
	for _, tc := range []struct {
		sp bool
		pp int64
	}{{false, 0}, {true, 0}, {true, 2}} {
		spec, err := model.LoadHF("../model/testdata/hf/gpt-oss-4layer.json", model.Overrides{Batch: 1, Seq: 512,
			Precision: model.AMPBF16, TP: 2, SP: tc.sp, PP: tc.pp, GradAccum: max(tc.pp, 1), LossOutsideAutocast: true})
		if err != nil {
			t.Fatal(err)
		}
		var mask int64
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if alloc && x.name == "causal mask (bool)" && mask == 0 {
					mask = x.elems
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if mask != 512*512 {
			t.Errorf("sp %v, pp %d: causal mask of %d elements, want %d", tc.sp, tc.pp, mask, 512*512)
		}
	}
}

// TestTiedToEmpty checks sim.reallocate under tensor parallelism: a tied
// embedding built on the meta device gets a second storage when to_empty
// reaches the head, the first freed (the gemma-3-27b-6layer history);
// built whole on the GPU first (fsdp_init gpu), it does not.
func TestTiedToEmpty(t *testing.T) {
	for _, tc := range []struct {
		init         string
		allocs, free int
	}{{model.FSDPInitMeta, 2, 1}, {model.FSDPInitGPU, 1, 0}} {
		spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256,
			Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true, FSDPInit: tc.init})
		if err != nil {
			t.Fatal(err)
		}
		allocs, frees := 0, 0
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if x.name != "embedding.weight (vocabulary shard)" || s.phase.Stage != "load" {
					return
				}
				if alloc {
					allocs++
				} else {
					frees++
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if allocs != tc.allocs || frees != tc.free {
			t.Errorf("%s: the tied weight allocated %d times and freed %d at load, want %d and %d", tc.init, allocs, frees, tc.allocs, tc.free)
		}
	}
}

// TestUnwaitedCollectiveLeak checks leakUnwaited: a checkpointed Cohere
// block's recompute stops before the sum that reads the attention's
// reduce-scattered output, which stays for good (one [b·s/t, h] bf16
// tensor per block and step: 16 × 2 × 2048 × 2048 × 2 B for
// cohere-1b-shape at 2 × 4,096 tokens, tp 2), and the estimate says so;
// without checkpointing, or for a block that reads the output before its
// MLP (Llama's), nothing leaks.
func TestUnwaitedCollectiveLeak(t *testing.T) {
	for _, tc := range []struct {
		path string
		ckpt string
		leak int64
	}{
		{"../model/testdata/hf/cohere-1b-shape.json", model.CkptBlock, 16 * 2 * 2048 * 2048 * 2},
		{"../model/testdata/hf/cohere-1b-shape.json", model.CkptNone, 0},
		{"../model/testdata/hf/llama-3-8b.json", model.CkptBlock, 0},
	} {
		spec, err := model.LoadHF(tc.path, model.Overrides{Batch: 2, Seq: 4096, Precision: model.AMPBF16, TP: 2, SP: true,
			Checkpointing: tc.ckpt, LossOutsideAutocast: true})
		if err != nil {
			t.Fatal(err)
		}
		var leaked int64
		r, err := estimateWith(spec, nil, func(s *sim) {
			s.trace = func(*tensor, bool) { leaked = s.leaked }
		})
		if err != nil {
			t.Fatal(err)
		}
		noted := false
		for _, n := range r.Notes {
			noted = noted || strings.Contains(n, "c10d keeps unwaited collectives")
		}
		if leaked != tc.leak || noted != (tc.leak > 0) {
			t.Errorf("%s %s: %d bytes leaked in the first step (noted %v), want %d", tc.path, tc.ckpt, leaked, noted, tc.leak)
		}
	}
}

// TestLeakOverTheRun checks foldLeak: a run that leaks is judged at its
// last step, its allocated peak the second step's plus (steps − 2)
// leaks, its reserved peak growing only once that passes the second
// step's reserve, over the training's steps or, when it gives none, a
// long run (model.LongRunSteps), which a 141 GB device cannot hold.
func TestLeakOverTheRun(t *testing.T) {
	load := func(steps int64) *Result {
		t.Helper()
		spec, err := model.LoadHF("../model/testdata/hf/cohere-1b-shape.json", model.Overrides{Batch: 2, Seq: 4096,
			Precision: model.AMPBF16, TP: 2, SP: true, Checkpointing: model.CkptBlock, LossOutsideAutocast: true,
			Steps: steps, Dev: "h200-141gb"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Estimate(spec)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	two := load(2) // the simulated figures, no step after the second
	leak := two.LeakPerStep
	if leak != 16*2*2048*2048*2 || two.LeakSteps != 2 {
		t.Fatalf("%d bytes a step over %d steps, want %d over 2", leak, two.LeakSteps, 16*2*2048*2048*2)
	}
	for _, steps := range []int64{3, 6, 100, 0} {
		r := load(steps)
		n := steps
		if n == 0 {
			n = model.LongRunSteps
		}
		alloc := two.PeakAllocated + (n-2)*leak
		reserved := max(two.PeakReserved, alloc)
		if r.PeakAllocated != alloc || r.PeakReserved != reserved || r.DeviceTotal-r.PeakReserved != two.DeviceTotal-two.PeakReserved {
			t.Errorf("%d steps: allocated %d, reserved %d, device %d; want %d, %d and the same %d outside",
				steps, r.PeakAllocated, r.PeakReserved, r.DeviceTotal, alloc, reserved, two.DeviceTotal-two.PeakReserved)
		}
		if r.LeakSteps != n || r.Fits != (steps != 0) {
			t.Errorf("%d steps: counted over %d, fits %v", steps, r.LeakSteps, r.Fits)
		}
	}
}

// TestRingUnderTransformersModule checks model.RingAttention.HF: under
// context parallelism transformers' attention module keeps its own
// forward and its SDPA call's enable_gqa, so the ring all-gathers the
// key/value heads unrepeated (Granite's 8 of 32; Qwen3-0.6B's 8 of 16, a
// Llama-shaped config, since the forty-fourth session), where torchtitan's
// Llama (the same config written as a spec, as memplan import writes it)
// repeats them first; the estimate's note says which.
func TestRingUnderTransformersModule(t *testing.T) {
	for _, tc := range []struct {
		config  string
		spec    bool // the config as a spec (model.Model.Transformers false)
		repeats bool
		note    string
	}{
		{"granite-3.1-2b.json", false, false, "passes enable_gqa"},
		{"qwen3-0.6b.json", false, false, "passes enable_gqa"},
		{"qwen3-0.6b.json", true, true, "repeated before context parallelism's ring"},
	} {
		spec, err := model.LoadHF("../model/testdata/hf/"+tc.config, model.Overrides{Batch: 1, Seq: 2048, CP: 2,
			Precision: model.AMPBF16, LossOutsideAutocast: true})
		if err != nil {
			t.Fatal(err)
		}
		spec.Model.Transformers = !tc.spec
		m := spec.Model
		var repeats, gathers int
		var gathered int64
		r, err := estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				switch {
				case !alloc:
				case x.name == "repeat_kv k (CP)":
					repeats++
				case x.name == "k, v all-gather (CP)":
					gathers++
					gathered = x.bytes()
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		// The rank's 1,024 tokens' keys and values, bf16, from both
		// ranks: the key/value heads', or the queries' when repeated.
		heads := m.KVHeads
		if tc.repeats {
			heads = m.Heads
		}
		want := 2 * 1024 * heads * m.HeadDim * 2 * 2
		if m.HeadDim == 0 {
			want = 2 * 1024 * heads * (m.Hidden / m.Heads) * 2 * 2
		}
		if (repeats > 0) != tc.repeats || gathers == 0 || gathered != want {
			t.Errorf("%s (spec %v): %d repeated key tensors, %d all-gathers of %d bytes; want repeats %v, gathers of %d",
				tc.config, tc.spec, repeats, gathers, gathered, tc.repeats, want)
		}
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
			t.Errorf("%s (spec %v): no note saying %q in %q", tc.config, tc.spec, tc.note, r.Notes)
		}
	}
}

// TestUnevenVocabularyPads: a vocabulary that does not divide over the
// tensor-parallel ranks (Granite's 49,155 rows over two) leaves the last
// rank a smaller shard, which DTensor pads to the others' rows (a copy of
// its logits) before the logits' all-gather; that rank is simulated, the
// busiest (model.VocabHead.Uneven; Granite's history at cp 2 × tp 2,
// bench/results/2026-11-28-h200x4-cp-tp-families-trace). An even
// vocabulary (OLMo 2's 100,352) pads nothing.
func TestUnevenVocabularyPads(t *testing.T) {
	for _, c := range []struct {
		file  string
		vocab int64 // the config's vocab_size
		pads  int
	}{{"granite-3.1-2b.json", 49155, 1}, {"olmo2-1b.json", 100352, 0}} {
		spec := loadHF(t, c.file, model.Overrides{Seq: 2048, Precision: "amp-bf16", TP: 2, SP: true})
		var padded []int64
		r := traced(t, spec, func(s *sim, x *tensor, alloc bool) {
			if alloc && s.phase.Iteration == 1 && s.phase.Stage == "forward" && x.name == "padded vocabulary shard (TP)" {
				padded = append(padded, x.bytes())
			}
		})
		if len(padded) != c.pads {
			t.Fatalf("%s: %d padded shards in the second step's forward, want %d", c.file, len(padded), c.pads)
		}
		noted := strings.Contains(strings.Join(r.Notes, "\n"), "the vocabulary does not divide")
		if noted != (c.pads == 1) {
			t.Errorf("%s: noted the padded rank %v, want %v: %q", c.file, noted, c.pads == 1, r.Notes)
		}
		// The logits of the rank's shard, ceil(V/2) columns for the
		// 2,048 tokens, in bf16.
		if want := 2048 * (c.vocab + 1) / 2 * 2; c.pads == 1 && padded[0] != want {
			t.Errorf("%s: padded shard %d bytes, want %d", c.file, padded[0], want)
		}
	}
}

// TestTitanNote: a Llama-shaped spec under tensor parallelism says which
// program it is simulated as; a model that runs transformers' forward under
// tensor parallelism (Gemma 2's config, a Llama-shaped config) and a spec
// without a layout do not.
func TestTitanNote(t *testing.T) {
	for _, tc := range []struct {
		spec *model.Spec
		want bool
	}{
		{load(t, "tinyllama-1.1b.yaml", model.Overrides{TP: 2, SP: true, Seq: 512, Batch: 1}), true},
		{loadHF(t, "gemma-2-2b.json", model.Overrides{TP: 2, SP: true, Seq: 512, Batch: 1}), false},
		{loadHF(t, "qwen3-0.6b.json", model.Overrides{TP: 2, SP: true, Seq: 512, Batch: 1}), false},
		{load(t, "tinyllama-1.1b.yaml", model.Overrides{Seq: 512, Batch: 1}), false},
	} {
		r, err := Estimate(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(r.Notes, titanNote); got != tc.want {
			t.Errorf("%s tp %d: the note %v, want %v", tc.spec.Name, tc.spec.Training.TP, got, tc.want)
		}
	}
}

// TestWrapEachProduct checks tensor parallelism without sequence
// parallelism (model.Collective.Each): each column-parallel product wraps
// the module's input itself, so the first forward's tape holds five wraps
// per block (and the head's one) that all-reduce their share of the
// input's gradient in backward (q, k and v; gate and up), where one wrap
// per module made two, and the module's own wrap passes the sum through;
// and the module's input is still allocated when its output all-reduce
// allocates (docs/parallelism.md §3.1.8).
func TestWrapEachProduct(t *testing.T) {
	const seq, dim, blocks = 256, 2048, 16
	spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: seq,
		Precision: model.AMPBF16, TP: 2, LossOutsideAutocast: true, Checkpointing: "none"})
	if err != nil {
		t.Fatal(err)
	}
	wraps, passes, held, bare, seen := 0, 0, 0, 0, 0
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if !alloc || s.phase.Iteration != 0 || s.phase.Stage != StageForward {
				return
			}
			for _, n := range s.tape[min(seen, len(s.tape)):] {
				switch {
				case n.name != "FromLocal":
				case n.pass:
					passes++
				default:
					wraps++
				}
			}
			seen = len(s.tape)
			if x.name == "all-reduce output (TP)" && x.elems == seq*dim {
				if len(s.moduleHold) >= 2 && s.moduleHold[1].bytes() == seq*dim*4 {
					held++
				} else {
					bare++
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if wraps != 5*blocks+1 || passes != 2*blocks { // and the head's input, wrapped once
		t.Errorf("first forward: %d wraps that all-reduce, %d that pass; want %d and %d", wraps, passes, 5*blocks+1, 2*blocks)
	}
	if held != 2*blocks || bare != 1 { // attention and MLP of every block; the embedding's reduction
		t.Errorf("%d output all-reduces while their module's input is held, %d without; want %d and 1", held, bare, 2*blocks)
	}
}

// TestDTensorGradSums counts the gradient sums the autograd engine makes
// out of place in the first backward because their tensor is a DTensor
// (tensor.dtAct; docs/parallelism.md §3.1.9). Under torchtitan's plan
// (Llama-3.2-1B, 16 blocks) the gathered input of each attention takes
// three shares (two sums) and of each MLP two (one), and each of the 33
// SequenceParallel norms' rows two (the product's and the power's: one).
// Through transformers' forward (SmolLM3-3B, 36 layers) the residual
// stream is a DTensor: each norm's input takes the residual's share and
// the norm's two (two sums), but the last norm's, which no residual add
// follows (one). Without sequence parallelism nothing is a DTensor
// activation.
func TestDTensorGradSums(t *testing.T) {
	for _, c := range []struct {
		file   string
		hf, sp bool
		sums   int
	}{
		{"../specs/llama-3.2-1b.yaml", false, true, 16*3 + 33},
		{"../specs/llama-3.2-1b.yaml", false, false, 0},
		{"../model/testdata/hf/smollm3-3b.json", true, true, 72*2 + 1},
		{"../model/testdata/hf/smollm3-3b.json", true, false, 0},
	} {
		sums := freedInFirstBackward(t, c.file, c.hf, c.sp, "grad sum of ")
		if sums != c.sums {
			t.Errorf("%s, sp %v: %d gradient sums out of place, want %d", c.file, c.sp, sums, c.sums)
		}
	}
}

// freedInFirstBackward counts the tensors labelled with prefix that the
// first backward frees, for the model in file (a transformers config when
// hf) at tp 2, with sequence parallelism when sp, at 256 tokens. Counted as
// they are freed: a label is set after the allocation.
func freedInFirstBackward(t *testing.T, file string, hf, sp bool, prefix string) int {
	t.Helper()
	load := model.Load
	if hf {
		load = model.LoadHF
	}
	spec, err := load(file, model.Overrides{Batch: 1, Seq: 256, Precision: model.AMPBF16, TP: 2, SP: sp,
		LossOutsideAutocast: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if !alloc && x.prefix == prefix && s.phase.Iteration == 0 && s.phase.Stage == StageBackward {
				n++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGatheredInputBackward counts the reduce-scatters' concatenations
// (the sequence all-gathers' backward temporaries) in the first backward
// under sequence parallelism. Under torchtitan's plan the attention's and
// the MLP's gathered inputs are DTensors whose summed gradient is
// reduce-scattered, two a block (Llama-3.2-1B, 16 blocks), and so is the
// head's input (ColwiseParallel(input_layouts=Shard(1))). Through
// transformers' forward the modules take the gathered input's local part,
// which each projection wraps: the shares are all-reduced and the gather's
// backward takes the rank's shard of the replicated sum, no concatenation
// (SmolLM3-3B, docs/parallelism.md §3.1.9): only the head's is left.
func TestGatheredInputBackward(t *testing.T) {
	for _, c := range []struct {
		file string
		hf   bool
		cats int
	}{
		{"../specs/llama-3.2-1b.yaml", false, 16*2 + 1},
		{"../model/testdata/hf/smollm3-3b.json", true, 1},
	} {
		cats := freedInFirstBackward(t, c.file, c.hf, true, "AllGather")
		if cats != c.cats {
			t.Errorf("%s: %d reduce-scatter concatenations in backward, want %d", c.file, cats, c.cats)
		}
	}
}

// TestVocabEmbeddingPartials checks that the backward of a vocabulary-
// parallel embedding over more than embeddingDirectRows rows, untied (its
// whole gradient kept as .grad), sums the rows through
// embedding_backward_cuda_kernel's partial segments as any embedding does:
// (rows + rows/10) rows of its width in fp32, after the whole gradient
// (measured: Llama 4's test shape at tp 2 with sp,
// bench/results/2026-11-28-h200x2-trace-74, trace74b).
func TestVocabEmbeddingPartials(t *testing.T) {
	for _, seq := range []int64{2048, 4096} {
		spec, err := model.Load("../specs/tinyllama-1.1b.yaml", model.Overrides{Batch: 1, Seq: seq,
			Precision: model.AMPBF16, TP: 2, SP: true, LossOutsideAutocast: true})
		if err != nil {
			t.Fatal(err)
		}
		parts := (seq + seq/10) * 2048 * f32
		whole, after := false, 0
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if s.phase.Iteration != 0 || s.phase.Stage != StageBackward || !alloc {
					return
				}
				switch {
				case x.name == "embedding.weight (whole gradient)":
					whole = true
				case whole && x.bytes() == parts:
					after++
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if seq > embeddingDirectRows {
			want = 1
		}
		if after != want {
			t.Errorf("seq %d: %d partial-segment scratches after the whole gradient, want %d", seq, after, want)
		}
	}
}
