package estimate

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

// BenchmarkEstimate times one in-process estimate of models of growing
// size: GPT-2 (12 layers), a 32-layer 7B decoder (Mistral-7B), GPT-2 XL
// (48 layers), Llama-3-70B (80 layers) and a 128-expert mixture of
// experts (Qwen3-30B-A3B, 48 layers, at seq 4096). Run with -benchmem to
// see allocations; cpu-ms/op is the steadier figure on a shared machine.
func BenchmarkEstimate(b *testing.B) {
	cases := []struct {
		name, file string
		hf         bool
		o          model.Overrides
	}{
		{"gpt2", "../specs/gpt2-124m.yaml", false, model.Overrides{}},
		{"7b-32layer", "../specs/mistral-7b.yaml", false, model.Overrides{}},
		{"gpt2-xl", "../specs/gpt2-xl.yaml", false, model.Overrides{}},
		{"llama-3-70b", "../specs/llama-3-70b.yaml", false, model.Overrides{}},
		{"moe-128-experts", "../model/testdata/hf/qwen3-30b-a3b.json", true, model.Overrides{Seq: 4096}},
		// The planner's dearest layout of its 70B plan (docs/performance.md,
		// twelfth session): eight stages of 32 micro-batches.
		{"70b-pp8-acc32", "../specs/llama-3-70b.yaml", false, model.Overrides{DP: 16, TP: 8, SP: true, LossParallel: true,
			PP: 8, Zero: "2", Checkpointing: "every-block", Batch: 2, GradAccum: 32}},
	}
	for _, c := range cases {
		load := model.Load
		if c.hf {
			load = model.LoadHF
		}
		spec, err := load(c.file, c.o)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := Estimate(spec); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu, 1)
		})
	}
}

// BenchmarkLayers times a Llama-style decoder (hidden 2048) at 12 to 384
// layers: the cost per layer should stay flat.
func BenchmarkLayers(b *testing.B) {
	for _, n := range []int{12, 48, 96, 192, 384} {
		y := fmt.Sprintf(`name: layers
model: {type: llama, layers: %d, hidden: 2048, heads: 32, kv_heads: 8, intermediate: 8192, vocab: 128256}
training: {batch: 1, seq: 2048, precision: amp-bf16}
`, n)
		spec, err := model.Parse(filepath.Join("bench", "layers.yaml"), []byte(y), model.Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("layers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := Estimate(spec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e3, "µs/layer")
			reportCPU(b, cpu, n)
		})
	}
}

// BenchmarkExperts times an 8-layer mixture of experts (hidden 1024, top 8)
// at 8 to 256 experts: the cost per expert should stay flat.
func BenchmarkExperts(b *testing.B) {
	for _, e := range []int{8, 16, 64, 256} {
		y := fmt.Sprintf(`name: experts
model: {type: llama, layers: 8, hidden: 1024, heads: 16, intermediate: 512, vocab: 32000, experts: %d, top_k: 8}
training: {batch: 1, seq: 1024, precision: amp-bf16}
`, e)
		spec, err := model.Parse(filepath.Join("bench", "experts.yaml"), []byte(y), model.Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("experts=%d", e), func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := Estimate(spec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(8*e)/1e3, "µs/expert")
			reportCPU(b, cpu, 8*e)
		})
	}
}

// reportCPU reports the CPU time per operation (cpu-ms/op) and, when per
// is above 1, per unit (cpu-µs/unit): on a shared machine, CPU time is the
// steadier figure (cpuTime).
func reportCPU(b *testing.B, start int64, per int) {
	ns := float64(cpuTime()-start) / float64(b.N)
	b.ReportMetric(ns/1e6, "cpu-ms/op")
	if per > 1 {
		b.ReportMetric(ns/float64(per)/1e3, "cpu-µs/unit")
	}
}

// BenchmarkEstimateCold times an estimate as the first one of a process
// (memplan estimate): no allocator or slab chunks kept from an earlier
// simulation, and the heap returned to the operating system.
func BenchmarkEstimateCold(b *testing.B) {
	for _, c := range []struct{ name, file string }{
		{"gpt2", "../specs/gpt2-124m.yaml"},
		{"7b-32layer", "../specs/mistral-7b.yaml"},
		{"llama-3-70b", "../specs/llama-3-70b.yaml"},
	} {
		spec, err := model.Load(c.file, model.Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			var cpu int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dropPools()
				debug.FreeOSMemory()
				b.StartTimer()
				start := cpuTime()
				if _, err := Estimate(spec); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
			}
			b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// dropPools forgets the allocators and slab chunks kept between
// simulations.
func dropPools() {
	allocators.Lock()
	allocators.free = nil
	allocators.Unlock()
	tensorPool.free, nodePool.free, listPool.free, instPool.free, castPool.free, wsPool.free = nil, nil, nil, nil, nil, nil
}

// BenchmarkAllocatorReplay replays the caching-allocator operations of one
// estimate (every malloc and free, in order) on alloc.Allocator alone: the
// allocator's share of an estimate, without the simulator's bookkeeping.
func BenchmarkAllocatorReplay(b *testing.B) {
	for _, c := range []struct{ name, file string }{
		{"7b-32layer", "../specs/mistral-7b.yaml"},
		{"gpt2-xl", "../specs/gpt2-xl.yaml"},
	} {
		spec, err := model.Load(c.file, model.Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		ops := recordOps(b, spec)
		b.Run(c.name, func(b *testing.B) {
			a := alloc.New(alloc.Default())
			held := make([]alloc.Block, len(ops))
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				a.Reset(alloc.Default())
				for j, op := range ops {
					if op > 0 {
						held[j] = a.Malloc(op, 0)
					} else {
						a.Free(held[-op-1])
					}
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/float64(len(ops))*2, "cpu-ns/pair")
		})
	}
}

// recordOps lists the allocator operations of an estimate of spec: a
// positive entry mallocs that many bytes, -i-1 frees the block of entry i.
func recordOps(b *testing.B, spec *model.Spec) []int64 {
	var ops []int64
	at := map[*tensor]int{}
	_, err := estimateWith(spec, nil, func(s *sim) {
		s.trace = func(t *tensor, alloc bool) {
			if alloc {
				at[t] = len(ops)
				ops = append(ops, t.bytes())
				return
			}
			ops = append(ops, int64(-at[t]-1))
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return ops
}

// BenchmarkEstimateMix times one estimate each of nine models of every
// kind, as a report or a plan asks for them: decoders with and without
// checkpointing, GPT-2 XL, ResNet-101 in bf16, ViT, BERT, a GroupNorm
// CNN, Gemma 2 at 4,096 tokens and a ZeRO-3 Llama-3-8B. Unlike one model
// estimated again and again, the simulations' heap objects differ from one
// to the next, so the garbage collector's share (and its write barriers')
// shows here: run it at the default GOGC.
func BenchmarkEstimateMix(b *testing.B) {
	var specs []*model.Spec
	for _, c := range []struct {
		file string
		o    model.Overrides
	}{
		{"../specs/mistral-7b.yaml", model.Overrides{}},
		{"../specs/gpt2-xl.yaml", model.Overrides{Batch: 3}},
		{"../specs/resnet-101.yaml", model.Overrides{Precision: "bf16"}},
		{"../specs/vit-b-16.yaml", model.Overrides{}},
		{"../specs/bert-base.yaml", model.Overrides{Batch: 24}},
		{"../specs/tinyllama-1.1b.yaml", model.Overrides{Batch: 5}},
		{"../model/testdata/hf/gemma-2-2b.json", model.Overrides{Seq: 4096}},
		{"../specs/cnn-groupnorm.yaml", model.Overrides{}},
		{"../specs/llama-3-8b-zero3.yaml", model.Overrides{}},
	} {
		load := model.Load
		if filepath.Ext(c.file) == ".json" {
			load = model.LoadHF
		}
		s, err := load(c.file, c.o)
		if err != nil {
			b.Fatal(err)
		}
		specs = append(specs, s)
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		for _, s := range specs {
			if _, err := Estimate(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportCPU(b, cpu, 1)
}
