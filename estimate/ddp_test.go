package estimate

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestDDPBucketsMeasured checks the reducer's buckets against DDP's own
// logging data (_get_ddp_logging_data: bucket_sizes at construction,
// rebuilt_bucket_sizes after the first backward) from the real runs in
// bench/results (testdata/ddp-buckets.json names each source): the
// rebuilt sizes follow from the order the simulated backward makes each
// gradient ready, so they test that order parameter by parameter.
// GPT-2's projections are transformers' Conv1D, whose autocast casts the
// bias last, so its gradient is ready before the weight's
// (model.Linear.Conv1D): the two GPT-2 AMP runs check that order.
func TestDDPBucketsMeasured(t *testing.T) {
	raw, err := os.ReadFile("testdata/ddp-buckets.json")
	if err != nil {
		t.Fatal(err)
	}
	var runs []struct {
		Source  string   `json:"source"`
		Args    []string `json:"args"`
		Flat    []int64  `json:"bucket_sizes"`
		Rebuilt []int64  `json:"rebuilt_bucket_sizes"`
	}
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no runs")
	}
	for _, r := range runs {
		t.Run(r.Source+" "+r.Args[0], func(t *testing.T) {
			o, err := argsOverrides(r.Args[1:])
			if err != nil {
				t.Fatal(err)
			}
			o.Dev = "h200-141gb"
			spec, err := model.Load("../"+r.Args[0], *o)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			if _, err := estimateWith(spec, func(s *sim) {
				if s.ddp == nil || !s.ddp.rebuilt {
					t.Fatal("no DDP rebuild simulated")
				}
				got = s.ddp.sizes
			}, nil); err != nil {
				t.Fatal(err)
			}
			want := append(append([]int64(nil), r.Flat...), r.Rebuilt...)
			if !slices.Equal(got, want) {
				t.Errorf("buckets (construction, then rebuilt):\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestDDPBroadcastMeasured checks DDP's initial broadcast against the
// allocator history of a real construction (Llama-3.2-1B, fake process
// group, H200, torch 2.11, transformers 5.17:
// bench/results/2026-11-26-h200x4-ddp-fakepg/trace.json.gz, the requests
// made from _sync_params_and_buffers): the embedding alone is a view, not
// a copy; every other bucket holds whole layers in registration order
// (the norms after the projections); the last holds the final norm and
// the rotary embedding's two inv_freq buffers.
func TestDDPBroadcastMeasured(t *testing.T) {
	want := []int64{264257536, 264257536, 310394880, 310394880, 310394880, 264273920, 264257536,
		310394880, 310394880, 310394880, 264273920, 264257536, 310394880, 134242560}
	spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 2, DP: 8, Zero: "0"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	if _, err := estimateWith(spec, func(s *sim) { got = s.ddp.bcast }, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("broadcast buckets:\n got %v\nwant %v", got, want)
	}
}

// TestDDPBucketViewRebuild: with gradient_as_bucket_view and gradients
// kept between steps (zero_grad without set_to_none), the rebuild copies
// each gradient into its new bucket and points it there
// (initialize_bucket_views), so after the step every gradient is a view
// of a rebuilt bucket and the construction's flat bucket is gone.
func TestDDPBucketViewRebuild(t *testing.T) {
	spec, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{DP: 2, Zero: "0", BucketView: true, ZeroGrad: model.ZeroGradZeros})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := estimateWith(spec, func(s *sim) {
		d := s.ddp
		if !d.rebuilt || d.flat != nil {
			t.Fatalf("rebuilt %v, flat bucket %v", d.rebuilt, d.flat)
		}
		buckets := map[*tensor]bool{}
		for _, b := range d.bucketOf {
			buckets[b] = true
		}
		for _, p := range s.params {
			if p.pgrad == nil || !buckets[p.pgrad.base] {
				t.Fatalf("%s: gradient %v is not a view of a rebuilt bucket", p.name, p.pgrad)
			}
		}
		if len(buckets) != len(d.sizes)-1 {
			t.Errorf("%d buckets hold gradients, %d rebuilt", len(buckets), len(d.sizes)-1)
		}
	}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDDPRebuildRace: with no pause between steps, the construction's flat
// bucket outlives the second step's rebuild (docs/multigpu.md, "DDP's
// bucket rebuild race") and every later peak holds it; --step-pause 0.2
// frees it at the rebuild. In a pipeline every stage but the last races:
// the last stage's rebuild waits for every other stage to finish its step
// and send it a micro-batch (ddpRaces).
func TestDDPRebuildRace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause string
		held  bool
	}{
		{"no pause", "", true},
		{"short pause", "0.1", true},
		{"pause", "0.2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{DP: 2, Zero: "0", StepPause: tc.pause})
			if err != nil {
				t.Fatal(err)
			}
			var flat int64
			r, err := estimateWith(spec, func(s *sim) {
				d := s.ddp
				if !d.rebuilt || (d.held != nil) != tc.held {
					t.Fatalf("rebuilt %v, old bucket held %v; want held %v", d.rebuilt, d.held != nil, tc.held)
				}
				flat = d.sizes[0]
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			freed, err := Estimate(mustLoad(t, "../specs/gpt2-124m.yaml", model.Overrides{DP: 2, Zero: "0", StepPause: "1"}))
			if err != nil {
				t.Fatal(err)
			}
			// Held, the bucket adds to every peak after the rebuild: the
			// peak grows by it, less what the steps after the rebuild
			// hold below the first's peak.
			if want := map[bool]int64{true: flat}[tc.held]; r.DDPRaceBytes != want {
				t.Errorf("DDPRaceBytes %d, want %d", r.DDPRaceBytes, want)
			}
			extra := r.PeakAllocated - freed.PeakAllocated
			switch {
			case !tc.held && extra != 0:
				t.Errorf("peak allocated %d, want %d as with the bucket freed", r.PeakAllocated, freed.PeakAllocated)
			case tc.held && (extra > flat || extra < flat*9/10):
				t.Errorf("peak allocated %d B over the freed bucket's, want nearly the flat bucket's %d B", extra, flat)
			}
		})
	}
	// Accumulating over micro-batches, DDP rebuilds at the first step's
	// second micro-batch, at once after the first micro-batch's last
	// all-reduce: the old bucket is kept through that micro-batch whatever
	// the loop does between steps, and freed by the step's end, so no later
	// step holds it and a pause changes nothing (racesMidStep; held-out set
	// 64: three of four ranks held it in the first step only).
	t.Run("accumulation", func(t *testing.T) {
		var peaks []int64
		for _, pause := range []string{"", "0.2"} {
			spec := mustLoad(t, "../specs/gpt2-124m.yaml", model.Overrides{DP: 2, Zero: "0", GradAccum: 4, StepPause: pause})
			if MayRace(spec.Training) {
				t.Errorf("pause %q: MayRace says a pause would free the bucket", pause)
			}
			var kept bool
			r, err := estimateWith(spec, func(s *sim) {
				kept = s.ddp.held != nil
				if !s.ddp.rebuilt {
					t.Fatal("not rebuilt")
				}
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if kept || r.DDPRaceBytes != 0 {
				t.Errorf("pause %q: old bucket still held at the end (%d B)", pause, r.DDPRaceBytes)
			}
			if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "second micro-batch") }) {
				t.Errorf("pause %q: no note of the race inside the first step: %q", pause, r.Notes)
			}
			peaks = append(peaks, r.PeakAllocated)
		}
		if peaks[0] != peaks[1] {
			t.Errorf("peak allocated %d without a pause, %d with: want equal", peaks[0], peaks[1])
		}
	})
	t.Run("pipeline", func(t *testing.T) {
		for _, pp := range []int64{2, 4} {
			spec := mustLoad(t, "../specs/tinyllama-1.1b.yaml", model.Overrides{DP: 2, Zero: "0", PP: pp, GradAccum: 4, Seq: 512, Checkpointing: model.CkptNone})
			held := map[int64]bool{}
			if _, err := estimateWith(spec, func(s *sim) { held[s.pp.stage] = s.ddp.held != nil }, nil); err != nil {
				t.Fatal(err)
			}
			for st := int64(0); st < pp; st++ {
				if held[st] != (st < pp-1) {
					t.Errorf("pp %d: old bucket held by stage: %v, want by every stage but the last", pp, held)
					break
				}
			}
		}
	})
	// The interleaved schedule: each stage module has its own reducer,
	// whose flat bucket holds that module's gradients; only the first
	// module to rebuild (the rank's first stage, whose backward ends the
	// first step) keeps its old bucket, and a loop that pauses keeps none.
	t.Run("interleaved", func(t *testing.T) {
		o := model.Overrides{DP: 2, Zero: "0", PP: 2, PPSchedule: model.PPInterleaved, PPVirtual: 2, GradAccum: 4, Seq: 512}
		spec := mustLoad(t, "../specs/tinyllama-1.1b.yaml", o)
		held := map[int64]int64{}
		r, err := estimateWith(spec, func(s *sim) {
			if len(s.ddpMods) != 2 {
				t.Fatalf("%d reducers on rank %d, want one per stage module (2)", len(s.ddpMods), s.pp.stage)
			}
			for i, d := range s.ddpMods {
				var n int64
				for _, p := range s.pp.local[i].params {
					n += p.bytes()
				}
				if d.sizes[0] != n || !d.rebuilt || (d.held != nil) != (i == 0) {
					t.Errorf("rank %d module %d: flat bucket %d B (want its parameters' %d), rebuilt %v, old bucket held %v (want %v)",
						s.pp.stage, i, d.sizes[0], n, d.rebuilt, d.held != nil, i == 0)
				}
			}
			held[s.pp.stage] = s.ddpMods[0].sizes[0]
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.DDPRaceBytes != held[r.Pipeline.Busiest] {
			t.Errorf("race bytes %d, want the busiest rank's first module's flat bucket, %d", r.DDPRaceBytes, held[r.Pipeline.Busiest])
		}
		o.StepPause = "1"
		paused, err := Estimate(mustLoad(t, "../specs/tinyllama-1.1b.yaml", o))
		if err != nil {
			t.Fatal(err)
		}
		if paused.DDPRaceBytes != 0 || paused.PeakAllocated >= r.PeakAllocated {
			t.Errorf("paused: race bytes %d, peak allocated %d; want 0 and less than %d", paused.DDPRaceBytes, paused.PeakAllocated, r.PeakAllocated)
		}
	})
}

func mustLoad(t *testing.T, path string, o model.Overrides) *model.Spec {
	t.Helper()
	s, err := model.Load(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDDPBroadcastLoRA checks that LoRA's adapters are broadcast where
// peft registers them, after their linear's weight and bias: the measured
// BERT r8 run (bench/results/2026-11-26-h100x2-bert-ddp-trace, rank 0's
// segments) kept its two broadcast buffers as segments of 256 and 168
// MiB; with the adapters after the whole base they would be 254 and 170.
func TestDDPBroadcastLoRA(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/bert-base-uncased.json", model.Overrides{Batch: 16, Seq: 512,
		Precision: "amp-bf16", DP: 2, Zero: "0", LoRA: 8, LoRATargets: "all"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	if _, err := estimateWith(spec, func(s *sim) { got = s.ddp.bcast }, nil); err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	var segs []int64
	for _, n := range got {
		segs = append(segs, (n+2*mib-1)/(2*mib)*2) // a large request's segment, in MiB
	}
	if want := []int64{256, 168}; !slices.Equal(segs, want) {
		t.Errorf("broadcast buffers %v B take segments of %v MiB, measured %v", got, segs, want)
	}
}
