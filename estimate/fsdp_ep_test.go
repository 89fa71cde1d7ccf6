package estimate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestPadShard holds FSDP2's dim-0 sharding: rows padded to a multiple of
// the ranks, whole rows per rank.
func TestPadShard(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		elems, second, last, ranks int64
		want                       int64
	}{
		{"vector", 1000, 0, 0, 3, 334},
		{"matrix, rows divisible", 8 * 16, 8, 16, 4, 2 * 16},
		{"one-row gate over two ranks", 1024, 1, 1024, 2, 1024},
		{"odd vocabulary", 50257 * 768, 50257, 768, 2, 25129 * 768},
		{"experts split by expert", 16 * 1024 * 512, 1024, 512, 2, 8 * 1024 * 512},
		{"experts over one rank", 16 * 1024 * 512, 1024, 512, 1, 16 * 1024 * 512},
	} {
		x := &tensor{elems: tc.elems, second: tc.second, last: tc.last}
		if got := padShard(x, tc.ranks); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestExpertUnitsFSDP checks expert parallelism under FSDP2: each block's
// experts are a unit of their own nested in the block's, placed before it
// and sharded over dp/ep ranks; the experts' parameter shards are that
// much larger; a unit over one rank (dp = ep) all-gathers nothing; and a
// checkpoint's recompute leaves units unsharded (so the experts are
// gathered once a pass either way). With tensor parallelism EP borrows the
// tp ranks too: the experts' unit spans dp·tp/ep ranks.
func TestExpertUnitsFSDP(t *testing.T) {
	for _, tc := range []struct {
		dp, tp, ep int64
		ckpt       string
	}{{2, 1, 2, "none"}, {4, 1, 2, "none"}, {4, 1, 2, "every-block"}, {4, 1, 4, "every-block"},
		{2, 2, 2, "none"}, {2, 2, 4, "every-block"}} {
		t.Run(fmt.Sprintf("dp%d-tp%d-ep%d-%s", tc.dp, tc.tp, tc.ep, tc.ckpt), func(t *testing.T) {
			o := model.Overrides{DP: tc.dp, EP: tc.ep, EPSkew: "1", Zero: "3", Checkpointing: tc.ckpt, Precision: "bf16"}
			if tc.tp > 1 {
				o.TP, o.SP = tc.tp, true
			}
			spec := moeSpec(t, 32, 4, o)
			deg := tc.dp * tc.tp / tc.ep
			var nested, blocks int
			gathers := map[int64]int{} // all-gather outputs in the second step, by bytes
			_, err := estimateWith(spec, func(s *sim) {
				for i, u := range s.units {
					if u.parent == nil {
						if u.idx > 0 {
							blocks++
						}
						continue
					}
					nested++
					if u.deg != deg || s.units[i+1] != u.parent || u.parent.nested != u {
						t.Errorf("experts unit %d: degree %d, followed by unit %d, want degree %d before its block", u.idx, u.deg, s.units[i+1].idx, deg)
					}
					for _, p := range u.params {
						if !p.expert || s.shardOf(p) != padShard(p, deg) {
							t.Errorf("experts unit %d holds %s (expert %v), shard %d", u.idx, p.name, p.expert, s.shardOf(p))
						}
					}
				}
			}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					if alloc && s.phase.Iteration == 1 && x.name == "all-gather output (FSDP)" {
						gathers[x.bytes()]++
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if nested != blocks || nested == 0 {
				t.Fatalf("%d experts units for %d blocks", nested, blocks)
			}
			// The experts' gathers: 32/ep experts of [2·512, 1024] and
			// [1024, 512] in bf16, twice a step (forward, backward).
			experts := int64(32/tc.ep) * 3 * 512 * 1024 * 2
			want := 2 * blocks
			if deg == 1 {
				want = 0
			}
			if got := gathers[experts]; got != want {
				t.Errorf("second step: %d all-gathers of the experts (%d B), want %d (%v)", got, experts, want, gathers)
			}
		})
	}
}

// TestExpertRanks: skewed routing simulates the receiving, a balanced and
// the sending rank and reports the busiest; balanced routing one rank.
func TestExpertRanks(t *testing.T) {
	if got := sendingRows(100, 2, 200); got != 0 {
		t.Errorf("every pair to one rank: the other receives %d, want 0", got)
	}
	if got := sendingRows(100, 4, 160); got != 80 {
		t.Errorf("sending rows %d, want 80", got)
	}
	for _, skew := range []string{"1", "2"} {
		r, err := Estimate(moeSpec(t, 32, 4, model.Overrides{DP: 2, EP: 2, EPSkew: skew, Zero: "3", Precision: "bf16"}))
		if err != nil {
			t.Fatal(err)
		}
		if skew == "1" {
			if r.Experts != nil {
				t.Errorf("balanced routing: %+v, want one kind of rank", r.Experts)
			}
			continue
		}
		if r.Experts == nil || len(r.Experts.Kinds) != 3 {
			t.Fatalf("skew 2: experts %+v, want three kinds", r.Experts)
		}
		k := r.Experts.Kinds
		busiest := k[0]
		for _, x := range k[1:] {
			if x.DeviceTotal > busiest.DeviceTotal {
				busiest = x
			}
		}
		names := k[0].Kind + "," + k[1].Kind + "," + k[2].Kind
		if names != "receiving,balanced,sending" || !(k[0].PeakAllocated > k[1].PeakAllocated && k[1].PeakAllocated > k[2].PeakAllocated) ||
			busiest.Kind != r.Experts.Busiest || r.DeviceTotal != busiest.DeviceTotal {
			t.Errorf("kinds %+v, busiest %q, result device total %d", k, r.Experts.Busiest, r.DeviceTotal)
		}
		if a, rs, d := r.Largest(); a != k[0].PeakAllocated || rs < busiest.PeakReserved || d != busiest.DeviceTotal {
			t.Errorf("largest totals %d, %d, %d over kinds %+v", a, rs, d, k)
		}
	}
}

// TestNestedUnitBeforeRecompute checks ckpt.tailUnit: where a checkpointed
// block's forward ends in ops of its experts unit that save nothing
// (GPT-OSS's expert-parallel forward ends in a sum and a cast), the
// experts' pre-backward runs before the block's recompute, so each
// backward all-gather of the experts is copied out and freed before the
// recompute allocates anything (the "segment tail" gradients first), as
// the run's history shows (bench/results/2026-11-27-h200x4-tp-hf-sp/
// gptoss-tp2dp2ep2-rank0.json.gz).
func TestNestedUnitBeforeRecompute(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/gpt-oss-4layer.json", model.Overrides{Batch: 1, Seq: 512,
		Precision: model.AMPBF16, TP: 2, SP: true, DP: 2, Zero: "3", EP: 2, EPSkew: "2",
		Checkpointing: model.CkptBlock, LossOutsideAutocast: true, FSDPInit: model.FSDPInitMeta})
	if err != nil {
		t.Fatal(err)
	}
	var experts int64 // the experts unit's all-gather output, in bytes
	var open *tensor  // a backward all-gather of the experts, not yet freed
	checked := 0
	_, err = estimateWith(spec, func(s *sim) {
		for _, u := range s.units {
			if u.parent != nil {
				experts = u.gatherShard * u.deg * u.gather
			}
		}
	}, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if s.phase.Stage != StageBackward {
				return
			}
			switch {
			case alloc && x.name == "all-gather output (FSDP)" && x.bytes() == experts:
				open = x
			case !alloc && x == open:
				open = nil
				checked++
			case alloc && x.name == "segment tail" && open != nil:
				t.Errorf("a segment's tail gradient allocated while its experts' all-gather output is live")
				open = nil
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if experts == 0 || checked < 4 {
		t.Errorf("experts' all-gather of %d bytes freed %d times in backward, want a unit and at least 4", experts, checked)
	}
}

// TestTailTempBeforeRecompute checks gradShape.temp: GPT-OSS's experts
// under tensor and sequence parallelism end their checkpointed block in a
// sum over the top k and a reduce-scatter, which save nothing, so the
// engine runs their backward before the recompute: the reduce-scatter's
// all-gather buffer is taken and freed, and the sum's gradient of the
// routed rows made, before the recompute's first request (the run's
// history, bench/results/2026-11-28-h100x4-tp-gaps-traces), and the
// buffer is not taken a second time after it.
func TestTailTempBeforeRecompute(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/gpt-oss-4layer.json", model.Overrides{Batch: 2, Seq: 512,
		Precision: model.AMPBF16, TP: 2, SP: true, Checkpointing: model.CkptBlock, LossOutsideAutocast: true,
		FSDPInit: model.FSDPInitMeta})
	if err != nil {
		t.Fatal(err)
	}
	var temps, tails, stray int
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if !alloc || s.phase.Stage != StageBackward {
				return
			}
			switch {
			case x.name == "segment tail backward temp":
				temps++
			case x.name == "segment tail":
				tails++
			case x.name == "ReduceScatter backward temp":
				stray++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two steps of four blocks: one buffer and at least one gradient
	// before each recompute, none taken again.
	if temps != 8 || tails < 8 || stray != 0 {
		t.Errorf("%d tail temporaries and %d tail gradients before recomputes, %d reduce-scatter buffers after; want 8, at least 8, 0",
			temps, tails, stray)
	}
}

// TestPaddedExpertStorages holds FSDP2's padding where a block's experts
// are fewer than the ranks (2 over 4, sharded along their first
// dimension): each rank's shard, allocated at load on the meta-device path
// and from the host, is one whole expert, and each unsharded storage a
// step makes holds the padded shard of every rank, 4 experts' rows where
// the parameter has 2 (measured: held-out set 88's Mixtral-8x7B over 16
// fake ranks, bench/results/2026-11-29-h200-fake-46/).
func TestPaddedExpertStorages(t *testing.T) {
	for _, init := range []string{model.FSDPInitMeta, model.FSDPInitHost} {
		t.Run("init="+init, func(t *testing.T) {
			o := model.Overrides{DP: 4, Zero: "3", Precision: "fsdp-bf16", FSDPInit: init}
			spec := moeSpec(t, 2, 1, o)
			var experts []*tensor
			shards, storages := map[string]int64{}, map[string]int64{}
			_, err := estimateWith(spec, func(s *sim) {
				for _, p := range s.params {
					if p.expert && p.second > 0 {
						experts = append(experts, p)
					}
				}
			}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					// (A tensor's prefix is set after its allocation is
					// traced: the shards are the load's parameters, the
					// storages a later step's.)
					if !alloc || !strings.HasPrefix(x.name, "experts.") || x.cat != catParam {
						return
					}
					switch {
					case s.phase.Stage == "load":
						shards[x.name] = x.bytes()
					case s.phase.Iteration == 1:
						storages[x.name] = x.bytes()
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) == 0 || len(storages) == 0 {
				t.Fatalf("no expert shards (%v) or unsharded storages (%v) traced", shards, storages)
			}
			for name, b := range shards {
				var p *tensor
				for _, e := range experts {
					if e.name == name {
						p = e
					}
				}
				if p == nil {
					t.Fatalf("no parameter %s", name)
				}
				one := p.elems / 2 * 4 // one expert's rows in fp32 (fsdp-bf16's shards)
				if b != one {
					t.Errorf("%s: shard of %d B, want one whole expert, %d B", name, b, one)
				}
				if s := storages[name]; s != 4*p.elems/2*2 {
					t.Errorf("%s: unsharded storage of %d B, want four experts' rows in bf16, %d B", name, s, 4*p.elems/2*2)
				}
			}
		})
	}
}

// TestDim1CopyOut holds FSDP2's extra copies for experts sharded along
// their second dimension (2 experts over 4 ranks, --fsdp-experts auto):
// each unsharded storage of such a weight is filled through a temporary of
// its size, freed once the unit's storages are all made, and each of their
// gradients is rearranged into a copy of its size before the
// reduce-scatter input (foreach_all_gather_copy_out, foreach_reduce;
// measured: bench/results/2026-11-29-h200-fake-46/trace-91-c1-rank0.json.gz).
// Along the first dimension neither is made.
func TestDim1CopyOut(t *testing.T) {
	for _, tc := range []struct {
		experts string
		want    bool
	}{{model.FSDPExpertsAuto, true}, {model.FSDPExpertsDim0, false}} {
		t.Run("experts="+tc.experts, func(t *testing.T) {
			o := model.Overrides{DP: 4, Zero: "3", Precision: "bf16", FSDPExperts: tc.experts}
			spec := moeSpec(t, 2, 1, o)
			var storages, copies, chunks []int64
			live := map[*tensor]bool{}
			_, err := estimateWith(spec, func(*sim) {}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					if s.phase.Iteration != 1 {
						return
					}
					switch {
					case !alloc:
						if x.name == "all-gather copy-out (FSDP, dim 1)" && !live[x] {
							t.Errorf("a copy-out freed twice")
						}
						delete(live, x)
					case strings.HasPrefix(x.name, "experts.") && x.cat == catParam:
						storages = append(storages, x.bytes())
					case x.name == "all-gather copy-out (FSDP, dim 1)":
						copies = append(copies, x.bytes())
						live[x] = true
						if n := len(storages); n == 0 || storages[n-1] != x.bytes() {
							t.Errorf("copy-out of %d B not after a storage of its size (%v)", x.bytes(), storages)
						}
					case x.name == "gradient chunks (FSDP, dim 1)":
						chunks = append(chunks, x.bytes())
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want {
				if len(copies)+len(chunks) > 0 {
					t.Errorf("along dim 0: %d copy-outs and %d gradient copies, want none", len(copies), len(chunks))
				}
				return
			}
			if len(copies) == 0 || len(copies) != len(storages) {
				t.Errorf("%d copy-outs for %d expert storages in step 1, want one each", len(copies), len(storages))
			}
			if len(live) != 0 {
				t.Errorf("%d copy-outs still live after the step", len(live))
			}
			if len(chunks) == 0 {
				t.Errorf("no gradient copies in step 1's backward")
			}
			for _, c := range chunks {
				// 2 experts over 4 ranks along dim 1: no padding, so a
				// gradient is its storage's size.
				if !slices.Contains(storages, c) {
					t.Errorf("gradient copy of %d B, not an expert weight's size (%v)", c, storages)
				}
			}
		})
	}
}
