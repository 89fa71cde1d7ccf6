package planner

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

func TestProxy(t *testing.T) {
	spec := load(t, "llama-3-8b.yaml")
	sh := shapeOf(spec, model.Params(spec.Model.Lower()))
	base := Layout{DP: 4, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 8}
	with := func(f func(*Layout)) Layout { l := base; f(&l); return l }
	for _, tc := range []struct {
		name   string
		l      Layout
		bubble float64
		cross  bool
	}{
		{"dp only", base, 0, false},
		{"1f1b", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual = 4, OneFOneB, 1 }), 3.0 / 11, true},
		{"interleaved", with(func(l *Layout) { l.PP, l.Schedule, l.Virtual = 4, Interleaved, 2 }), 3.0 / 19, true},
		{"tp in node", with(func(l *Layout) { l.TP, l.DP = 8, 1 }), 0, false},
		{"dp across nodes", with(func(l *Layout) { l.DP = 16 }), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proxyOf(sh, tc.l, 8)
			if math.Abs(p.Bubble-tc.bubble) > 1e-12 || p.CrossNode != tc.cross {
				t.Errorf("proxyOf(%s) = bubble %g, cross %v; want %g, %v", tc.l, p.Bubble, p.CrossNode, tc.bubble, tc.cross)
			}
		})
	}
	z0, z3 := proxyOf(sh, base, 8), proxyOf(sh, with(func(l *Layout) { l.Zero = 3 }), 8)
	if z3.CommBytes <= z0.CommBytes {
		t.Errorf("ZeRO-3 sends %d B per step, no more than ZeRO-0's %d", z3.CommBytes, z0.CommBytes)
	}
	ck := proxyOf(sh, with(func(l *Layout) { l.Checkpointing = model.Checkpointing{Mode: model.CkptBlock} }), 8)
	if ck.Recompute != 1.0/3 || ck.StepSeconds <= z0.StepSeconds {
		t.Errorf("checkpointing: recompute %g, step %g s; want 1/3 and more than %g s", ck.Recompute, ck.StepSeconds, z0.StepSeconds)
	}
}

// TestProxyTied: a pipeline of a model with tied embeddings sends, once a
// step, the rank's shard of the embedding's gradient to all-reduce it
// between the first and the last stage (vocabulary over tp, and over
// dp·cp under FSDP); without a pipeline, or untied, nothing more.
func TestProxyTied(t *testing.T) {
	tied := load(t, "llama-3.2-1b.yaml")
	untied := *tied
	untied.Model.Tied = false
	params := model.Params(tied.Model.Lower())
	a, b := shapeOf(tied, params), shapeOf(&untied, params)
	vh := tied.Model.Vocab * tied.Model.Hidden
	for _, tc := range []struct {
		l    Layout
		want int64
	}{
		{Layout{DP: 2, TP: 1, PP: 2, CP: 1, EP: 1, Micro: 1, Accum: 4, Schedule: OneFOneB, Virtual: 1}, 4 * vh},
		{Layout{DP: 2, TP: 2, PP: 2, CP: 1, EP: 1, Micro: 1, Accum: 4, Schedule: OneFOneB, Virtual: 1}, 4 * vh / 2},
		{Layout{DP: 2, TP: 2, PP: 2, CP: 1, EP: 1, Zero: 3, Micro: 1, Accum: 4, Schedule: OneFOneB, Virtual: 1}, 4 * vh / 4},
		{Layout{DP: 4, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 4}, 0},
	} {
		if d := proxyOf(a, tc.l, 8).CommBytes - proxyOf(b, tc.l, 8).CommBytes; d != tc.want {
			t.Errorf("%s: tied sends %d B more per step, want %d", tc.l, d, tc.want)
		}
	}
}

// TestProxyMoE: a mixture of experts computes with its active parameters
// (top-k of E routed experts), and splitting its experts over EP ranks
// costs each MoE layer's dispatch and combine all-to-alls per pass, over
// the rank's routed rows (its sequence shard beside TP, whose own
// collectives in the MoE block then go); the routed experts' gradients
// are reduced over the ranks that hold the same ones.
func TestProxyMoE(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/mixtral-8x7b.json", model.Overrides{Seq: 4096})
	if err != nil {
		t.Fatal(err)
	}
	sh := shapeOf(spec, model.Params(spec.Model.Lower()))
	m := &spec.Model
	routed := m.NumLayers * m.Experts * 3 * m.Hidden * m.Intermediate
	if want := sh.params - routed + routed*m.TopK/m.Experts; sh.active() != want || sh.active() >= sh.params/2 {
		t.Errorf("active parameters %d of %d, want %d", sh.active(), sh.params, want)
	}
	base := Layout{DP: 8, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 4}
	ep := base
	ep.EP = 8
	a, b := proxyOf(sh, base, 8), proxyOf(sh, ep, 8)
	// Per MoE layer and pass (two: no checkpointing), two all-to-alls of
	// 4096 · 2 rows of the hidden size in bf16, 7/8 of them sent.
	a2a := int64(2 * 2 * m.NumLayers * 4 * 4096 * m.TopK * m.Hidden * 2 * 7 / 8)
	// ZeRO 0: the routed experts are not reduced any more (dp·tp/ep = 1
	// rank holds each), 2 · 7/8 of their gradients in fp32.
	saved := int64(2 * float64(routed) * 7 / 8 * 4)
	if got := b.CommBytes - a.CommBytes; got < a2a-saved-1<<20 || got > a2a-saved+1<<20 {
		t.Errorf("ep 8 sends %d B more than ep 1, want the all-to-alls' %d less the experts' reduction %d", got, a2a, saved)
	}
	tp := Layout{DP: 1, TP: 8, PP: 1, CP: 1, EP: 1, SP: true, Micro: 1, Accum: 32}
	tpEP := tp
	tpEP.EP = 8
	if x, y := proxyOf(sh, tp, 8), proxyOf(sh, tpEP, 8); y.CommBytes >= x.CommBytes {
		t.Errorf("tp 8 with ep 8 sends %d B, no less than tp 8 alone's %d (its MoE blocks drop two of four TP collectives for smaller all-to-alls)", y.CommBytes, x.CommBytes)
	}
}

// TestBoundBeforeNotSimulated: a layout whose lower bound is over the
// limit is over, whether or not the simulator could estimate it (Llama-3-70B
// on two GPUs: its model state alone is 560 GB a GPU).
func TestBoundBeforeNotSimulated(t *testing.T) {
	spec := load(t, "llama-3-70b.yaml")
	r, err := Plan(spec, Request{GlobalBatch: 2048, GPUs: 2}, Simulator{MaxMicrobatches: 4})
	if !errors.Is(err, ErrNoLayout) {
		t.Fatalf("Plan: %v, want ErrNoLayout", err)
	}
	if r.Stats.NotSimulated != 0 || r.Stats.OracleCalls != 0 || r.Stats.Pruned == 0 {
		t.Errorf("stats %+v: want every layout pruned by bounds, none not simulated, no estimate", r.Stats)
	}
	for _, c := range r.NearMisses {
		if c.Verdict != Over || !c.Bound {
			t.Errorf("%s: %s (%s), want over by its bound", c.Layout, c.Verdict, c.Reason)
		}
	}
}

func TestSimulatorNotSimulated(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	for _, l := range []Layout{
		{DP: 2, TP: 1, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1},
		{DP: 1, TP: 1, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1, Zero: 1},
	} {
		t.Run(l.String(), func(t *testing.T) {
			_, err := Simulator{}.Estimate(spec, l)
			var ns *NotSimulatedError
			if !errors.As(err, &ns) {
				t.Errorf("Simulator.Estimate(%s) = %v, want a *NotSimulatedError", l, err)
			}
		})
	}
	// A pipeline over Llama-3.2-1B's tied embeddings is simulated
	// (Megatron-LM's split, docs/parallelism.md §3.2).
	piped := Layout{DP: 1, TP: 1, PP: 2, CP: 1, EP: 1, Schedule: OneFOneB, Virtual: 1, Micro: 1, Accum: 2}
	if b, err := (Simulator{}).Estimate(spec, piped); err != nil || b.DeviceTotal <= 0 {
		t.Errorf("Simulator.Estimate(%s) = %+v, %v; want an estimate", piped, b, err)
	}
	// Context parallelism with tensor parallelism inside each cp rank is
	// simulated (docs/parallelism.md §3.3).
	cptp := Layout{DP: 1, TP: 2, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1, SP: true}
	if b, err := (Simulator{}).Estimate(spec, cptp); err != nil || b.DeviceTotal <= 0 {
		t.Errorf("Simulator.Estimate(%s) = %+v, %v; want an estimate", cptp, b, err)
	}
	pp := Layout{DP: 1, TP: 1, PP: 2, CP: 1, EP: 1, Schedule: OneFOneB, Virtual: 1, Micro: 1, Accum: 2}
	b, err := Simulator{}.Estimate(load(t, "tinyllama-1.1b.yaml"), pp)
	if err != nil || len(b.Kinds) != 2 || b.Kinds[0].Kind != First || b.Kinds[1].Kind != Last ||
		(b.DeviceTotal != b.Kinds[0].DeviceTotal && b.DeviceTotal != b.Kinds[1].DeviceTotal) {
		t.Errorf("Simulator.Estimate(%s) = %+v, %v; want the first and last stage, the busiest reported", pp, b, err)
	}
	// The cap on a pipeline's micro-batches: MaxPipelineMicrobatches, or
	// the Simulator's own.
	long := Layout{DP: 1, TP: 1, PP: 2, CP: 1, EP: 1, Schedule: OneFOneB, Virtual: 1, Micro: 1, Accum: MaxPipelineMicrobatches}
	tiny := load(t, "tinyllama-1.1b.yaml")
	for _, tc := range []struct {
		sim   Simulator
		accum int64
		ok    bool
	}{
		{Simulator{}, MaxPipelineMicrobatches, true},
		{Simulator{}, MaxPipelineMicrobatches + 1, false},
		{Simulator{MaxMicrobatches: 8}, 8, true},
		{Simulator{MaxMicrobatches: 8}, 16, false},
		{Simulator{MaxMicrobatches: 1024}, 1024, true},
	} {
		l := long
		l.Accum = tc.accum
		if err := tc.sim.Simulates(tiny, l); (err == nil) != tc.ok {
			t.Errorf("Simulator{%d}.Simulates(%s) = %v, want ok %v", tc.sim.MaxMicrobatches, l, err, tc.ok)
		}
	}
	moe, err := model.Load("../bench/torch/dist/moe-llama.yaml", model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	// Tensor parallelism splits every expert's columns, or, with expert
	// parallelism and sequence parallelism, leaves each rank its shard's
	// tokens to route; without sequence parallelism EP beside TP is not
	// simulated.
	for _, l := range []Layout{
		{DP: 1, TP: 2, PP: 1, CP: 1, EP: 1, SP: true, Micro: 1, Accum: 1},
		{DP: 2, TP: 2, PP: 1, CP: 1, EP: 4, SP: true, Zero: 3, Micro: 1, Accum: 1},
	} {
		if b, err := (Simulator{}).Estimate(moe, l); err != nil || b.DeviceTotal <= 0 {
			t.Errorf("Simulator.Estimate(moe, %s) = %+v, %v; want an estimate", l, b, err)
		}
	}
	cpEP := Layout{DP: 1, TP: 1, PP: 1, CP: 2, EP: 2, Zero: 0, Micro: 1, Accum: 1}
	if err := (Simulator{}).Simulates(moe, cpEP); err == nil || !strings.Contains(err.Error(), "context parallelism without FSDP") {
		t.Errorf("Simulates(moe, %s) = %v, want expert parallelism with context parallelism without FSDP not simulated (model.CheckEP refuses it)", cpEP, err)
	}
	tpEP := Layout{DP: 2, TP: 2, PP: 1, CP: 1, EP: 2, Zero: 3, Micro: 1, Accum: 1}
	if err := (Simulator{}).Simulates(moe, tpEP); err == nil || !strings.Contains(err.Error(), "without sequence parallelism") {
		t.Errorf("Simulates(moe, %s) = %v, want expert parallelism with tensor parallelism without sp not simulated", tpEP, err)
	}
	cpMoE := Layout{DP: 1, TP: 1, PP: 1, CP: 2, EP: 2, Zero: 3, Micro: 1, Accum: 1}
	if b, err := (Simulator{}).Estimate(moe, cpMoE); err != nil || b.DeviceTotal <= 0 {
		t.Errorf("Simulator.Estimate(moe, %s) = %+v, %v; want an estimate (EP × CP under FSDP)", cpMoE, b, err)
	}
	gpt2 := load(t, "gpt2-124m.yaml")
	var ns *NotSimulatedError
	if _, err := (Simulator{}).Estimate(gpt2, Layout{DP: 1, TP: 2, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1}); !errors.As(err, &ns) {
		t.Errorf("Simulator.Estimate(gpt2 tp2) = %v, want a *NotSimulatedError", err)
	}
	for _, l := range []Layout{
		{DP: 1, TP: 2, PP: 1, CP: 1, EP: 1, SP: true, Micro: 1, Accum: 1},
		{DP: 2, TP: 2, PP: 1, CP: 1, EP: 1, SP: true, LossParallel: true, Zero: 3, Micro: 1, Accum: 1},
	} {
		want, err := estimate.Estimate(Apply(spec, l))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Simulator{}.Estimate(spec, l)
		if err != nil || b.DeviceTotal != want.DeviceTotal || b.DeviceTotal <= 0 {
			t.Errorf("Simulator.Estimate(%s) = %+v, %v; want the estimate's %d B", l, b, err, want.DeviceTotal)
		}
	}
	b, err = Simulator{}.Estimate(spec, Layout{DP: 2, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 2, Micro: 1, Accum: 1})
	if err != nil || b.DeviceTotal <= 0 || len(b.Kinds) != 1 || b.Kinds[0].Kind != All {
		t.Errorf("Simulator.Estimate(dp2 zero2) = %+v, %v; want one kind of rank", b, err)
	}
}

// TestSimulatorCP checks that context-parallel layouts are simulated and
// that splitting the sequence lowers the busiest rank's peak, alone and
// with FSDP over dp·cp.
func TestSimulatorCP(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	spec.Training.Seq = 8192
	peak := func(l Layout) int64 {
		t.Helper()
		b, err := Simulator{}.Estimate(spec, l)
		if err != nil {
			t.Fatalf("Simulator.Estimate(%s): %v", l, err)
		}
		return b.PeakAllocated
	}
	one := Layout{DP: 1, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1}
	for _, tc := range []struct {
		name     string
		base, cp Layout
	}{
		{"cp alone", one, Layout{DP: 1, TP: 1, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1}},
		{"fsdp over dp·cp", Layout{DP: 2, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1, Zero: 3},
			Layout{DP: 2, TP: 1, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1, Zero: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, c := peak(tc.base), peak(tc.cp); c >= b {
				t.Errorf("%s peaks at %d B, not below %s's %d B", tc.cp, c, tc.base, b)
			}
		})
	}
}

// TestProxyLoRA: under LoRA the data-parallel ranks reduce only the
// adapters' fp32 gradients (2·(d−1)/d of them, a ring all-reduce), while
// FSDP still gathers the whole frozen base; the step's compute has no
// weight gradients for the base (4 FLOPs per parameter and token, not 6).
func TestProxyLoRA(t *testing.T) {
	spec := load(t, "llama-3-8b.yaml")
	params := model.Params(spec.Model.Lower())
	full := shapeOf(spec, params)
	spec.Training.LoRA = &model.LoRA{Rank: 16, Alpha: 16, Targets: model.TargetsAll}
	lora := shapeOf(spec, params)
	l := Layout{DP: 4, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 8}
	want := int64(2 * float64(spec.Trainable()) * 3 / 4 * 4)
	if got := proxyOf(lora, l, 8).CommBytes; got != want {
		t.Errorf("DDP over LoRA sends %d B per step, want %d (the adapters' gradients)", got, want)
	}
	l.Zero = 3
	lz, fz := proxyOf(lora, l, 8), proxyOf(full, l, 8)
	if gather := int64(8 * 2 * float64(params) * 3 / 4 * 2); lz.CommBytes <= gather || lz.CommBytes >= fz.CommBytes {
		t.Errorf("FSDP over LoRA sends %d B per step; want more than its gathers (%d) and less than full training's %d",
			lz.CommBytes, gather, fz.CommBytes)
	}
	if lz.StepSeconds >= fz.StepSeconds {
		t.Errorf("LoRA's step proxy %g s, not under full training's %g s", lz.StepSeconds, fz.StepSeconds)
	}
}

// TestSimulatorLoRASharding: LoRA under FSDP is simulated over the
// data-parallel ranks alone; with context parallelism it is a
// *NotSimulatedError, not a failure.
func TestSimulatorLoRASharding(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	spec.Training.LoRA = &model.LoRA{Rank: 8, Alpha: 8, Targets: model.TargetsAll}
	spec.Training.Seq = 256
	var ns *NotSimulatedError
	if err := (Simulator{}).Simulates(spec, Layout{DP: 1, TP: 1, PP: 1, CP: 2, EP: 1, Micro: 1, Accum: 1, Zero: 2}); !errors.As(err, &ns) {
		t.Errorf("LoRA over dp1·cp2 zero2: %v, want a *NotSimulatedError", err)
	}
	if _, err := (Simulator{}).Estimate(spec, Layout{DP: 2, TP: 1, PP: 1, CP: 1, EP: 1, Micro: 1, Accum: 1, Zero: 3}); err != nil {
		t.Errorf("LoRA over dp2 zero3: %v", err)
	}
}

// TestReshardTo: where the data-parallel group spans nodes the planner
// also offers ZeRO 3 resharded to the data-parallel ranks of one node
// (Request.reshardTo), whose backward all-gather stays inside the node:
// the proxy sends no more per step and less of it across nodes, so its
// step is shorter than ZeRO 3's, and the simulator puts its memory
// between ZeRO 3's and ZeRO 2's.
func TestReshardTo(t *testing.T) {
	spec := load(t, "llama-3.2-1b.yaml")
	r := &Request{NodeSize: 8}
	for _, tc := range []struct {
		l    Layout
		want int64
	}{
		{Layout{DP: 32, TP: 1, PP: 1, CP: 1, EP: 1}, 8},
		{Layout{DP: 16, TP: 2, PP: 1, CP: 1, EP: 1}, 0}, // torch 2.11 refuses it beside tp
		{Layout{DP: 8, TP: 1, PP: 1, CP: 1, EP: 1}, 0},  // one node
		{Layout{DP: 16, TP: 1, PP: 2, CP: 1, EP: 1}, 0}, // a pipeline
		{Layout{DP: 16, TP: 1, PP: 1, CP: 2, EP: 1}, 0}, // context parallelism
	} {
		if got := r.reshardTo(tc.l); got != tc.want {
			t.Errorf("reshardTo(%s) = %d, want %d", tc.l, got, tc.want)
		}
	}
	sh := shapeOf(spec, model.Params(spec.Model.Lower()))
	none := model.Checkpointing{Mode: model.CkptNone}
	z3 := Layout{DP: 32, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 3, Checkpointing: none, Micro: 1, Accum: 1}
	to := z3
	to.ReshardTo = 8
	p3, pt := proxyOf(sh, z3, 8), proxyOf(sh, to, 8)
	if pt.StepSeconds >= p3.StepSeconds || pt.CommBytes > p3.CommBytes {
		t.Errorf("proxy: resharded to 8 %g s, %d B; ZeRO 3 %g s, %d B; want a shorter step, no more bytes",
			pt.StepSeconds, pt.CommBytes, p3.StepSeconds, p3.CommBytes)
	}
	var mem [3]int64
	for i, l := range []Layout{z3, to, {DP: 32, TP: 1, PP: 1, CP: 1, EP: 1, Zero: 2, Checkpointing: none, Micro: 1, Accum: 1}} {
		b, err := Simulator{}.Estimate(spec, l)
		if err != nil {
			t.Fatal(err)
		}
		mem[i] = b.PeakAllocated
	}
	if !(mem[0] < mem[1] && mem[1] < mem[2]) {
		t.Errorf("peak allocated: ZeRO 3 %d, resharded to 8 %d, ZeRO 2 %d; want increasing", mem[0], mem[1], mem[2])
	}
}
