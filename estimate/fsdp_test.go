package estimate

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// TestFSDPStreamPools checks the simulated pools of FSDP2's all-gather
// copy-in and reduce-scatter streams against the pools measured on 2 x H200
// (docs/multigpu.md; MiB, step 1, rank 0) and against
// parallel.FSDPStreamPools, which reproduces those measurements.
func TestFSDPStreamPools(t *testing.T) {
	for _, tc := range []struct {
		spec, prec string
		ag, rs     int64 // measured, MiB
	}{
		{"gpt2-124m", "amp-bf16", 180, 244},
		{"gpt2-124m", "fsdp-bf16", 114, 244},
		{"gpt2-124m", "bf16", 90, 158},
		{"gpt2-xl", "amp-bf16", 432, 3038},
		{"gpt2-xl", "bf16", 218, 1520},
		{"llama-3.2-1b", "amp-bf16", 1238, 2390},
		{"llama-3.2-1b", "fsdp-bf16", 754, 2390},
		{"llama-3.2-1b", "bf16", 620, 1212},
	} {
		t.Run(tc.spec+" "+tc.prec, func(t *testing.T) {
			s, err := model.Load(filepath.Join("..", "specs", tc.spec+".yaml"),
				model.Overrides{Batch: 1, Seq: 64, DP: 2, Zero: "3", Precision: tc.prec, Checkpointing: "every-block"})
			if err != nil {
				t.Fatal(err)
			}
			var ag, rs int64
			var pools parallel.FSDPPools
			_, err = estimateWith(s, func(sm *sim) {
				ag, rs = sm.al.a.ReservedOn(streamAllGather), sm.al.a.ReservedOn(streamReduceScatter)
				pools = parallel.FSDPPools{World: 2, GatherBytes: sm.cfg.param, ShardBytes: sm.cfg.master, GradBytes: sm.cfg.master}
				for _, u := range sm.units {
					pools.Units = append(pools.Units, u.shard*2)
				}
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ag>>20 != tc.ag || rs>>20 != tc.rs {
				t.Errorf("simulated pools all-gather %d MiB, reduce-scatter %d MiB; measured %d, %d", ag>>20, rs>>20, tc.ag, tc.rs)
			}
			wag, wrs, err := parallel.FSDPStreamPools(pools)
			if err != nil {
				t.Fatal(err)
			}
			if ag != wag || rs != wrs {
				t.Errorf("simulated pools %d, %d B; parallel.FSDPStreamPools %d, %d B", ag, rs, wag, wrs)
			}
		})
	}
}

// TestFSDPUnshardCounts counts FSDP2's per-parameter unsharded storages
// and per-unit all-gathers over one simulated step, against what
// _fsdp_param_group.py does (docs/multigpu.md, "FSDP2's unsharded
// parameters"): every unit is gathered once per forward; with
// reshard_after_forward=True (zero 3) every unit, the root included, is
// gathered again for its backward, but for a root kept unsharded
// (fsdp_root: keep, torch's default for the root), which is gathered once;
// checkpointing's recompute gathers nothing more.
func TestFSDPUnshardCounts(t *testing.T) {
	for _, tc := range []struct {
		zero, ckpt, root string
		passes           int // gathers of each unit per step
	}{
		{"2", "none", "", 1},
		{"3", "none", "", 2},
		{"2", "every-block", "", 1},
		{"3", "every-block", "", 2},
		{"3", "none", model.FSDPRootKeep, 2},
		{"3", "every-block", model.FSDPRootKeep, 2},
	} {
		t.Run("zero"+tc.zero+"-"+tc.ckpt+"-"+tc.root, func(t *testing.T) {
			spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256, DP: 2,
				Zero: tc.zero, Checkpointing: tc.ckpt, Precision: "bf16", FSDPRoot: tc.root})
			if err != nil {
				t.Fatal(err)
			}
			var storages, gathers, params, units, rootParams int
			_, err = estimateWith(spec, func(s *sim) {
				units, rootParams = len(s.units), len(s.units[0].params)
				for _, u := range s.units {
					params += len(u.params)
					if u.unsharded || len(u.grads) > 0 {
						t.Errorf("unit %d still unsharded or holding gradients after the step", u.idx)
					}
				}
			}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					if !alloc || s.phase.Iteration != 1 {
						return
					}
					switch {
					case x.fixed == catParam: // the shards were made at load
						storages++
					case x.name == "all-gather output (FSDP)":
						gathers++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			wantStorages, wantGathers := tc.passes*params, tc.passes*units
			if tc.root == model.FSDPRootKeep {
				wantStorages, wantGathers = wantStorages-rootParams, wantGathers-1
			}
			if storages != wantStorages || gathers != wantGathers {
				t.Errorf("second step: %d storages and %d all-gathers, want %d and %d (%d × %d parameters, %d × %d units, root %q)",
					storages, gathers, wantStorages, wantGathers, tc.passes, params, tc.passes, units, tc.root)
			}
		})
	}
}

// TestRootPreBackwardAfterLoss: with the loss outside the model
// (loss_outside_autocast), FSDP2's root pre-backward (its all-gather under
// ZeRO 3) runs once the loss's backward has made the logits' gradient, so
// the backward's first allocation is the loss's, and the root's all-gather
// follows it; with the loss inside the model it comes first.
func TestRootPreBackwardAfterLoss(t *testing.T) {
	for _, outside := range []bool{false, true} {
		spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256, DP: 2, Zero: "3",
			Precision: model.AMPBF16, LossOutsideAutocast: outside})
		if err != nil {
			t.Fatal(err)
		}
		first, gather, i := -1, -1, 0
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				i++
				if !alloc || s.phase.Stage != StageBackward || s.phase.Iteration != 1 {
					return
				}
				if first < 0 && x.name != "loss grad" {
					first = i
				}
				if gather < 0 && x.name == "all-gather output (FSDP)" {
					gather = i
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := gather > first; got != outside || gather < 0 {
			t.Errorf("loss outside the model %v: the root's all-gather at event %d, the backward's first allocation at %d", outside, gather, first)
		}
	}
}

// TestFSDPPipelineUnits: a pipeline stage under FSDP2 (as torchtitan and
// pp.py shard it: no resharding within the step) makes each parameter's
// unsharded storage and each unit's all-gather once per step, at the
// first micro-batch's forward, and one reduce-scatter input per unit at
// the step's end, not per micro-batch (fsdpPostStep); after the step no
// unit is unsharded or holds gradients, and no stage-wide gathered block
// is made. ZeRO 3 runs the same program.
func TestFSDPPipelineUnits(t *testing.T) {
	for _, zero := range []string{"2", "3"} {
		t.Run("zero"+zero, func(t *testing.T) {
			spec := mustLoad(t, "../specs/tinyllama-1.1b.yaml", model.Overrides{Batch: 1, Seq: 256, DP: 2, Zero: zero,
				PP: 2, GradAccum: 4, Checkpointing: model.CkptBlock})
			type counts struct{ storages, gathers, rsInputs, params, units, blocks int }
			per := map[int64]*counts{}
			var c *counts
			_, err := estimateWith(spec, func(s *sim) {
				for _, u := range s.units {
					c.params += len(u.params)
					if u.unsharded || len(u.grads) > 0 {
						t.Errorf("stage %d unit %d still unsharded or holding gradients after the step", s.pp.stage, u.idx)
					}
				}
				c.units = len(s.units)
			}, func(s *sim) {
				c = &counts{}
				s.trace = func(x *tensor, alloc bool) {
					per[s.pp.stage] = c
					if !alloc || s.phase.Iteration != 1 {
						return
					}
					switch {
					case x.fixed == catParam: // the shards were made at load
						c.storages++
					case x.name == "all-gather output (FSDP)":
						c.gathers++
					case x.name == "reduce-scatter input (FSDP)":
						c.rsInputs++
					case x.name == "gathered parameters (FSDP)":
						c.blocks++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			for stage, c := range per {
				if c.storages != c.params || c.gathers != c.units || c.rsInputs != c.units || c.blocks != 0 {
					t.Errorf("stage %d, second step: %d storages, %d all-gathers, %d reduce-scatter inputs, %d gathered blocks; want %d, %d, %d, 0",
						stage, c.storages, c.gathers, c.rsInputs, c.blocks, c.params, c.units, c.units)
				}
			}
		})
	}
}

// TestOptimizerGroupsUnderTP: a tensor-parallel rank without FSDP steps
// its DTensors and its plain parameters (markPlain: GPT-OSS's experts,
// router, sinks and norms) as two parameter groups, so foreach Adam's
// square roots of one group are gone before the other's are made: the most
// square-root bytes alive at once is the larger group's, not their sum.
// Under FSDP every parameter is a DTensor and one call steps all the
// rank's shards.
func TestOptimizerGroupsUnderTP(t *testing.T) {
	for _, fsdp := range []bool{false, true} {
		o := model.Overrides{Batch: 1, Seq: 256, Precision: model.AMPBF16, TP: 2, FSDPInit: model.FSDPInitMeta,
			LossOutsideAutocast: true}
		if fsdp {
			o.DP, o.Zero = 2, "3"
		}
		var live, most, dtensor, plain, shards int64
		_, err := estimateWith(loadHF(t, "gpt-oss-4layer.json", o), func(s *sim) {
			for _, p := range s.params {
				if p.plain {
					plain += p.elems * p.dt
				} else {
					dtensor += p.elems * p.dt
				}
			}
			if fsdp {
				for _, p := range s.shards() {
					shards += p.bytes()
				}
			}
		}, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if x.name != "foreach sqrt" || s.phase.Iteration != 1 {
					return
				}
				if alloc {
					live += x.bytes()
					most = max(most, live)
				} else {
					live -= x.bytes()
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !fsdp && (plain == 0 || most != max(dtensor, plain)):
			t.Errorf("tp 2: %d square-root bytes at once, want the larger group's (DTensors %d, plain %d)", most, dtensor, plain)
		case fsdp && most != shards:
			t.Errorf("tp 2 × FSDP 2: %d square-root bytes at once, want every shard's, %d", most, shards)
		}
	}
}

// TestFSDPUnderContextParallel: FSDP2 over dp·cp gathers unit by unit, as
// over data parallelism (sim.perParam; docs/parallelism.md §3.3.2): each
// unit's all-gather in the forward and again in the backward of a step
// (ZeRO 3 reshards after the forward), one reduce-scatter input per unit,
// and no gathered block of the root and two blocks for the whole pass (the
// coarse model memplan used under context parallelism until the thirtieth
// session, +1 to +9% allocated on the measured runs).
func TestFSDPUnderContextParallel(t *testing.T) {
	spec := mustLoad(t, "../specs/tinyllama-1.1b.yaml", model.Overrides{Batch: 1, Seq: 4096, CP: 2, Zero: "3"})
	var gathers, rsInputs, blocks, units int
	_, err := estimateWith(spec, func(s *sim) { units = len(s.units) }, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if !alloc || s.phase.Iteration != 1 {
				return
			}
			switch x.name {
			case "all-gather output (FSDP)":
				gathers++
			case "reduce-scatter input (FSDP)":
				rsInputs++
			case "gathered parameters (FSDP)":
				blocks++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if units < 2 || blocks != 0 || rsInputs != units || gathers < 2*units-2 {
		t.Errorf("second step: %d units, %d all-gathers, %d reduce-scatter inputs, %d gathered blocks; want at least 2 units, about two all-gathers and one reduce-scatter input per unit, no block",
			units, gathers, rsInputs, blocks)
	}
}

// TestWholeExpertsAtGPUInit: a model moved whole to the GPU before
// fully_shard (--fsdp-init gpu) holds every expert there; expert
// parallelism then keeps a copy of the rank's slice and frees the whole
// ones before the shards are cut (bench/torch/dist/ep.py's apply; the
// allocator history of cp.py's MoE runs, docs/parallelism.md §3.3.2).
func TestWholeExpertsAtGPUInit(t *testing.T) {
	spec := mustLoad(t, "../bench/torch/dist/moe-llama.yaml", model.Overrides{Batch: 1, Seq: 2048, DP: 2, Zero: "3", EP: 2,
		FSDPInit: model.FSDPInitGPU})
	var whole, copies int64
	freedBeforeShard, shards := true, map[*sim]bool{} // per simulated rank (EP's kinds)
	traced(t, spec, func(s *sim, x *tensor, alloc bool) {
		if s.phase.Stage != "load" {
			return
		}
		// The prefixes are set once each tensor is made: read them as it
		// goes.
		switch {
		case alloc && x.fixed == catParam:
			shards[s] = true
		case !alloc && x.prefix == "every rank's ":
			whole += x.bytes()
			freedBeforeShard = freedBeforeShard && !shards[s]
		case !alloc && x.prefix == "whole " && strings.Contains(x.name, "experts"):
			copies += x.bytes()
		}
	})
	if whole == 0 || copies*2 != whole || !freedBeforeShard {
		t.Errorf("load: %d bytes of every rank's experts, %d of the rank's copies (want half), freed before the shards: %v", whole, copies, freedBeforeShard)
	}
}

// TestRootPostForwardBeforeLoss: with the loss outside the model
// (loss_outside_autocast), FSDP2's root post-forward has run when the loss
// begins, so every all-gather output (FSDP) of the forward, the last
// block's included, is freed before the loss's log-softmax is allocated;
// with the loss inside the model the last lives until the loss is made
// (measured: the last block's output freed among autocast's casts, before
// the loss, held-out set 54's tp × FSDP2 line,
// bench/results/2026-11-28-h200x4-heldout54-traces c6).
func TestRootPostForwardBeforeLoss(t *testing.T) {
	for _, tc := range []struct {
		zero    string
		outside bool
	}{{"3", false}, {"3", true}, {"2", false}, {"2", true}} {
		spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 256, DP: 2, Zero: tc.zero,
			Precision: model.AMPBF16, LossOutsideAutocast: tc.outside})
		if err != nil {
			t.Fatal(err)
		}
		before, all, loss := 0, 0, false
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if s.phase.Stage != StageForward || s.phase.Iteration != 1 {
					return
				}
				if alloc && x.label() == "LogSoftmax" {
					loss = true
				}
				if !alloc && x.name == "all-gather output (FSDP)" {
					all++
					if !loss {
						before++
					}
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := all - 1
		if tc.outside {
			want = all
		}
		if !loss || all < 2 || before != want {
			t.Errorf("zero %s, loss outside %v: %d of the second forward's %d all-gather outputs freed before the loss (loss seen: %v), want %d",
				tc.zero, tc.outside, before, all, loss, want)
		}
	}
}

// TestOutFirstParamOrder: Phi-3's Phi3Attention registers o_proj before
// qkv_proj, so its parameters are listed (and FSDP2 unshards them) output
// projection first, where Llama's q, k, v come before o (measured: each
// block's unshard, bench/results/2026-11-29-h200-fake-47, trace-47-c1).
func TestOutFirstParamOrder(t *testing.T) {
	for _, tc := range []struct {
		file  string
		first []string
	}{
		{"phi-3-mini-4k.json", []string{"o.weight", "qkv.weight"}},
		{"llama-3-8b.json", []string{"q.weight", "k.weight", "v.weight", "o.weight"}},
	} {
		o := model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16}
		var attn []string
		_, err := estimateWith(loadHF(t, tc.file, o), func(s *sim) {
			for _, p := range s.params {
				switch p.name {
				case "o.weight", "qkv.weight", "q.weight", "k.weight", "v.weight":
					attn = append(attn, p.name)
				}
			}
		}, func(*sim) {})
		if err != nil {
			t.Fatal(err)
		}
		if len(attn) < len(tc.first) || !slices.Equal(attn[:len(tc.first)], tc.first) {
			t.Errorf("%s: first block's attention parameters %v, want %v first", tc.file, attn, tc.first)
		}
	}
}

// TestReshardAfterForward: with reshard_after_forward=N every unit (the
// root too) replaces each unsharded storage after its forward by a clone
// of the rank's 1/N of it, kept until its backward's copy-out; under a
// mixed-precision policy the backward's flat all-gather input is those
// clones, N/dp of the unit, where the forward's is the shard's cast
// (measured over 16 fake ranks, N = 4: bench/results/2026-11-29-h200-fake-47,
// trace-47-c2 and -c3). The peak lies between ZeRO 3's and ZeRO 2's.
func TestReshardAfterForward(t *testing.T) {
	const dp, n = 16, 4
	for _, prec := range []string{model.BF16, model.FSDPBF16} {
		t.Run(prec, func(t *testing.T) {
			o := model.Overrides{Batch: 1, Seq: 256, DP: dp, Zero: "3", Precision: prec, FSDPInit: model.FSDPInitMeta,
				ReshardAfterForward: n}
			var params int
			var clones, cloneBytes, wantBytes int64
			var fwdIn, bwdIn []int64
			r := traced(t, loadHF(t, "qwen3-0.6b.json", o), func(s *sim, x *tensor, alloc bool) {
				if s.phase.Iteration > 0 {
					return
				}
				switch {
				case x.prefix == "post-forward shard of ": // named once made: counted as freed
					if params == 0 {
						params = len(s.params)
						for _, u := range s.units {
							for _, p := range u.order {
								wantBytes += u.storage(p) / n * p.dt
							}
						}
					}
					clones++
					cloneBytes += x.bytes()
				case x.name == "all-gather input (FSDP)" && alloc && s.phase.Stage == StageForward:
					fwdIn = append(fwdIn, x.bytes())
				case x.name == "all-gather input (FSDP)" && alloc:
					bwdIn = append(bwdIn, x.bytes())
				}
			})
			if clones == 0 || clones != int64(params) || cloneBytes != wantBytes {
				t.Errorf("%d clones of %d bytes freed in the first step; want one per parameter (%d) of %d bytes",
					clones, cloneBytes, params, wantBytes)
			}
			if prec == model.FSDPBF16 {
				if len(fwdIn) == 0 || len(bwdIn) == 0 || bwdIn[0] != fwdIn[0]*dp/n {
					t.Errorf("flat all-gather inputs: forward %v, backward %v; want the root's backward one %d/%d of the forward's", fwdIn, bwdIn, dp, n)
				}
			} else if len(fwdIn)+len(bwdIn) != 0 {
				t.Errorf("without a policy the all-gathers made flat inputs: %v %v", fwdIn, bwdIn)
			}
			var bounds [2]int64
			for i, z := range []string{"3", "2"} {
				o.Zero, o.ReshardAfterForward = z, 0
				b, err := Estimate(loadHF(t, "qwen3-0.6b.json", o))
				if err != nil {
					t.Fatal(err)
				}
				bounds[i] = b.PeakAllocated
			}
			if !(bounds[0] < r.PeakAllocated && r.PeakAllocated < bounds[1]) {
				t.Errorf("peak allocated %d, want between ZeRO 3's %d and ZeRO 2's %d", r.PeakAllocated, bounds[0], bounds[1])
			}
		})
	}
}

// TestFSDPCastsRopeTables: under FSDP2's bf16 policy each block's
// pre-forward casts the fp32 rotary tables OLMo 2 hands its blocks to
// bf16 (cast_forward_inputs), two copies a block, which its rotation saves
// until the block's backward (measured: OLMo-2-1B over 8 fake ranks,
// bench/results/2026-11-29-h200-fake-47/trace-47b-c1-rank0.json.gz).
// Without the policy, or with bf16 tables (Llama), nothing is cast.
func TestFSDPCastsRopeTables(t *testing.T) {
	for _, tc := range []struct {
		file, prec string
		casts      bool
	}{
		{"olmo2-1b.json", model.FSDPBF16, true},
		{"olmo2-1b.json", model.BF16, false},
		{"llama-3-8b.json", model.FSDPBF16, false},
	} {
		t.Run(tc.file+" "+tc.prec, func(t *testing.T) {
			spec := loadHF(t, tc.file, model.Overrides{Batch: 1, Seq: 256, DP: 8, Zero: "3", Precision: tc.prec, FSDPInit: model.FSDPInitMeta})
			var inBackward, elsewhere int
			traced(t, spec, func(s *sim, x *tensor, alloc bool) {
				if alloc || x.prefix != "FSDP's cast of " || s.phase.Iteration > 0 {
					return
				}
				if s.phase.Stage == StageBackward && x.dt == half {
					inBackward++
				} else {
					elsewhere++
				}
			})
			want := 0
			if tc.casts {
				want = 2 * int(spec.Model.NumLayers)
			}
			if inBackward != want || elsewhere != 0 {
				t.Errorf("%d bf16 casts freed in the first backward, %d elsewhere; want %d and none", inBackward, elsewhere, want)
			}
		})
	}
}

// TestHSDP: HSDP's replicas of an FSDP group of dp/R GPUs hold what FSDP
// over dp/R GPUs holds (each gradient shard's all-reduce across the
// replicas is in place, foreach_reduce), with one more NCCL communicator
// (the replicas' group; read from torch's source, not measured).
func TestHSDP(t *testing.T) {
	for _, zero := range []string{"2", "3"} {
		o := model.Overrides{Batch: 1, Seq: 512, Precision: model.FSDPBF16, Zero: zero, FSDPInit: model.FSDPInitMeta}
		est := func(dp, r int64) *Result {
			t.Helper()
			o := o
			o.DP, o.DPReplicate = dp, r
			res, err := Estimate(loadHF(t, "qwen3-0.6b.json", o))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		hsdp, fsdp := est(32, 4), est(8, 0)
		if hsdp.PeakAllocated != fsdp.PeakAllocated || hsdp.PeakReserved != fsdp.PeakReserved {
			t.Errorf("zero %s: HSDP 4 × 8 peaks %d/%d, FSDP over 8 %d/%d; want equal", zero,
				hsdp.PeakAllocated, hsdp.PeakReserved, fsdp.PeakAllocated, fsdp.PeakReserved)
		}
		if hsdp.NCCLBytes() <= fsdp.NCCLBytes() {
			t.Errorf("zero %s: HSDP's NCCL %d B, FSDP's %d B; want more (the replicas' communicator)", zero, hsdp.NCCLBytes(), fsdp.NCCLBytes())
		}
	}
}
