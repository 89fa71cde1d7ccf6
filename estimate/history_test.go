package estimate

import (
	"testing"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

// TestHistoryReplaysToEstimate holds the debugging traces to their promise
// (TestTraceDebug; alloc's TestReplayDebug; bench/torch/bisect.py): the
// history a simulated rank writes, its allocations and frees with their
// streams and the address model's and empty_cache's events, replayed
// through a fresh allocator of the spec's settings, reserves what that
// rank's simulation reserved: data, tensor, context, pipeline and expert
// parallelism, FSDP2 wrapping on the GPU and on the meta device, LoRA,
// and two allocator settings. A simulation that changes the allocator's
// state without a trace event fails it: FSDP2's wrap of a model on the GPU
// ends with torch.cuda.empty_cache, which the traces left out until the
// forty-first session (a cp × ep line's history replayed 428 MiB above its
// estimate).
func TestHistoryReplaysToEstimate(t *testing.T) {
	specs := []*model.Spec{
		load(t, "../bench/torch/dist/moe-llama.yaml", model.Overrides{Batch: 2, Seq: 16384, Precision: model.AMPBF16, CP: 2,
			Checkpointing: "every-block", LossOutsideAutocast: true, DP: 2, Zero: "3", FSDPInit: "gpu", EP: 2, EPSkew: "2"}),
		loadHF(t, "smollm3-3b.json", model.Overrides{Batch: 1, Seq: 4096, Precision: model.AMPBF16, TP: 2,
			Checkpointing: "every-block", LossOutsideAutocast: true, FSDPInit: "meta"}),
		load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 2, Seq: 2048, Precision: model.AMPBF16, DP: 2, Zero: "0"}),
		load(t, "tinyllama-1.1b.yaml", model.Overrides{Batch: 1, Seq: 2048, Precision: model.AMPBF16, PP: 2,
			PPSchedule: "1f1b", GradAccum: 4}),
		load(t, "gpt2-124m.yaml", model.Overrides{Batch: 8, Precision: model.AMPBF16}),
		load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 1, Seq: 8192, Precision: model.AMPBF16, CP: 2, DP: 2, Zero: "3",
			Checkpointing: "every-block"}),
		load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 2, Seq: 2048, Precision: model.AMPBF16, TP: 2, SP: true,
			LossParallel: true, DP: 2, Zero: "1"}),
		load(t, "tinyllama-1.1b.yaml", model.Overrides{Batch: 1, Seq: 2048, Precision: model.AMPBF16, PP: 2, TP: 2,
			PPSchedule: "interleaved", PPVirtual: 2, GradAccum: 4, DP: 2, Zero: "3", FSDPInit: "meta"}),
		load(t, "llama-3.2-1b.yaml", model.Overrides{Batch: 2, Seq: 1024, Precision: model.BF16, LoRA: 16, DP: 2, Zero: "3"}),
		loadHF(t, "qwen3-30b-a3b.json", model.Overrides{Batch: 1, Seq: 2048, Precision: model.AMPBF16, DP: 4, EP: 4,
			Zero: "3", Checkpointing: "every-block"}),
		load(t, "gpt2-124m.yaml", model.Overrides{Batch: 8, Precision: model.AMPBF16, AllocConf: "expandable_segments:True"}),
		load(t, "vit-b-16.yaml", model.Overrides{Batch: 64, Precision: model.BF16, AllocConf: "max_split_size_mb:64"}),
	}
	for i, spec := range specs {
		type event struct {
			addr   bool // an event of addressEvent's or emptyCache's: kind, n
			kind   evKind
			alloc  bool // else t's allocation (of n bytes on stream), or its free
			t      *tensor
			n      int64
			stream alloc.Stream
		}
		var hist [][]event
		var sims []int64
		_, err := estimateWith(spec, func(sm *sim) {
			sims = append(sims, sm.peak.reserved)
		}, func(sm *sim) {
			hist = append(hist, nil)
			h := &hist[len(hist)-1]
			sm.traceSteps = true
			sm.traceAddr = func(kind evKind, n int64) { *h = append(*h, event{addr: true, kind: kind, n: n}) }
			sm.trace = func(x *tensor, made bool) {
				e := event{alloc: made, t: x, n: x.bytes()}
				if made && x.blk.Valid() {
					e.stream = sm.al.a.StreamOf(x.blk)
				}
				*h = append(*h, e)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != len(sims) || len(sims) == 0 {
			t.Fatalf("case %d, %s: %d histories for %d simulations", i, spec.File, len(hist), len(sims))
		}
		for r, h := range hist {
			conf := alloc.Default()
			if ac := spec.Training.AllocConf; ac != "" {
				if conf, err = alloc.Parse(ac); err != nil {
					t.Fatal(err)
				}
			}
			a := alloc.New(conf)
			live := map[*tensor]alloc.Block{}
			var peak int64
			for _, e := range h {
				switch {
				case e.addr && e.kind == evLibrary:
					a.LibraryLoaded(alloc.Library(e.n))
				case e.addr && e.kind == evCommUp:
					a.CommunicatorUp()
				case e.addr && e.kind == evPeer:
					a.PeerConnected()
				case e.addr && e.kind == evEmptyCache:
					a.ReleaseCached()
				case e.addr:
					t.Fatalf("event %d unknown to the replay", e.kind)
				case e.alloc:
					live[e.t] = a.Malloc(e.n, e.stream)
					peak = max(peak, a.Reserved())
				default:
					if b, ok := live[e.t]; ok {
						a.Free(b)
						delete(live, e.t)
					}
				}
			}
			if peak != sims[r] {
				t.Errorf("case %d, %s, simulated rank %d: its history replays to %d MiB reserved, the simulation reserved %d MiB",
					i, spec.File, r+1, peak>>20, sims[r]>>20)
			}
		}
	}
}
