package estimate

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestWrapFromHostReserved holds wrapFromHost to what every measured
// FSDP2 run (bench/results, bench/torch/dist/train.py) reserved once its
// model was sharded, before its first step: with the cache emptied, as
// train.py empties it (Training.EmptyCacheAfterWrap), the freed whole
// parameters leave holes in the segments that keep shards, which the
// empty cache does not return; without, the cache as fully_shard left it,
// which train.py records before emptying it (reserved_before_empty_cache,
// in the runs since the thirteenth session). Sharding on the meta device
// reserves up to 14% less there than these runs. Runs made on the meta
// device (train.py --meta-init) are compared with the shards allocated
// directly (Training.FSDPInit meta), and only after emptying. Every figure
// is equal to the byte but those of wrapKnown.
func TestWrapFromHostReserved(t *testing.T) {
	files, _ := filepath.Glob("../bench/results/*.jsonl")
	more, _ := filepath.Glob("../bench/results/*/dist.jsonl")
	type record struct {
		Label, Spec, Mode, Reshard string
		World                      int64
		EP                         any
		MetaInit                   bool `json:"meta_init"`
		KeepCache                  bool `json:"keep_cache"`
		Training                   struct {
			Batch, Seq               int64
			Precision, Checkpointing string
		}
		LoRA *struct {
			Rank         int64
			Targets      string
			AdapterDtype string `json:"adapter_dtype"`
		} `json:"lora"`
		Ranks []struct {
			ReservedAfterWrap int64 `json:"reserved_after_wrap"`
			ReservedBefore    int64 `json:"reserved_before_empty_cache"`
		}
	}
	seen := map[string]bool{}
	n, exact, kept := 0, 0, 0
	for _, f := range append(files, more...) {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.Mode != "fsdp" || r.EP != nil || len(r.Ranks) == 0 ||
				r.Ranks[0].ReservedAfterWrap == 0 || strings.Contains(r.Label, "--alloc-conf") {
				continue
			}
			if strings.Contains(r.Label, "--pp") || strings.Contains(r.Label, "--tp") || strings.Contains(r.Label, "--cp") {
				continue
			}
			key := strings.Split(r.Label, " --snapshot")[0]
			if seen[key] {
				continue
			}
			seen[key] = true
			o := model.Overrides{Batch: r.Training.Batch, Seq: r.Training.Seq, Precision: r.Training.Precision,
				Checkpointing: r.Training.Checkpointing, DP: r.World, Zero: "3"}
			if r.MetaInit {
				o.FSDPInit = model.FSDPInitMeta
			}
			if r.Reshard == "false" {
				o.Zero = "2"
			}
			if r.LoRA != nil {
				o.LoRA, o.LoRATargets, o.LoRAAdapterDtype = r.LoRA.Rank, r.LoRA.Targets, r.LoRA.AdapterDtype
			}
			load := model.Load
			if strings.HasSuffix(r.Spec, ".json") {
				load = model.LoadHF
			}
			// After emptying the cache (as the run did) and, where the run
			// recorded it, before.
			cases := []wrapCase{{true, r.Ranks[0].ReservedAfterWrap, ""}}
			switch b := r.Ranks[0].ReservedBefore; {
			case r.KeepCache: // train.py --keep-cache: never emptied
				cases = []wrapCase{{false, r.Ranks[0].ReservedAfterWrap, " [cache kept]"}}
			case b > 0 && !r.MetaInit:
				cases = append(cases, wrapCase{false, b, " [cache kept]"})
			}
			for _, c := range cases {
				o.EmptyCacheAfterWrap = c.empty
				spec, err := load("../"+r.Spec, o)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				got := reservedAfterWrap(t, spec)
				switch _, known := wrapKnown[key+c.tag]; {
				case known && got == c.want:
					t.Errorf("%s%s: now equal to the measurement: drop it from wrapKnown", key, c.tag)
				case !known && got != c.want:
					t.Errorf("%s%s: reserved after wrapping %d B, measured %d B", key, c.tag, got, c.want)
				case got == c.want:
					exact++
				}
				n++
				if !c.empty {
					kept++
				}
			}
		}
		fh.Close()
	}
	if n-kept < 60 || kept < 40 || exact < n-len(wrapKnown) {
		t.Errorf("compared %d runs after emptying the cache and %d before, %d to the byte; want the 60 or more FSDP2 runs of bench/results, 40 of them before",
			n-kept, kept, exact)
	}
}

// wrapCase is one comparison of TestWrapFromHostReserved: the run's
// reserved memory want with the cache emptied after wrapping or not, its
// wrapKnown key's suffix tag.
type wrapCase struct {
	empty bool
	want  int64
	tag   string
}

// reservedAfterWrap returns what spec's simulation has reserved when its
// first step starts: after the load and, under FSDP2, the wrapping.
func reservedAfterWrap(t *testing.T, spec *model.Spec) int64 {
	t.Helper()
	var got, last int64 = -1, 0
	if _, err := estimateWith(spec, nil, func(s *sim) {
		s.trace = func(*tensor, bool) {
			if got < 0 && s.phase.Stage != "load" {
				got = last // the first allocation of the first step
			}
			last = s.al.a.Reserved()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// wrapKnown are the runs whose reserved memory after wrapping memplan does
// not give to the byte, with what is known (neither traced: peak reserved
// is within 1% for both).
var wrapKnown = map[string]string{
	// Fused qkv_proj and gate_up_proj adapters: memplan 4 MiB (0.1%) over,
	// and 6 MiB over before the cache was emptied.
	"model/testdata/hf/phi-3-mini-4k.json --mode fsdp --reshard true --batch 2 --seq 2048 --precision bf16 --lora 8 --targets attn --checkpointing every-block":              "",
	"model/testdata/hf/phi-3-mini-4k.json --mode fsdp --reshard true --batch 2 --seq 2048 --precision bf16 --lora 8 --targets attn --checkpointing every-block [cache kept]": "",
	// to_empty on the meta device: the run kept 58 MiB cached beyond what it
	// allocated, memplan nothing (46 MiB under); GPT-2, Qwen2.5, Llama and
	// TinyLlama made the same way are exact.
	"model/testdata/hf/bert-base-uncased.json --mode fsdp --reshard true --batch 16 --seq 512 --precision amp-bf16 --meta-init": "",
	// Llama 4 Scout's cut: memplan 10 MiB (0.09%) over. Its history
	// (bench/results/2026-11-28-h200x2-llama4-wrap-trace, recorded from
	// before fully_shard) replayed through memplan's allocator
	// (MEMPLAN_REPLAY) ends at memplan's 10,698 MiB, not the run's 10,688:
	// the requests are the same, and the last layer's 10 MiB key and value
	// and their 5 MiB shards take other blocks among free ones of equal
	// size (placement by address, docs/allocator.md §8), which leaves a
	// 10 MiB segment holding shards in memplan where the run emptied it.
	"model/testdata/hf/llama4-scout-4layer.json --mode fsdp --reshard true --batch 1 --seq 2048 --precision bf16": "",
}

// TestWrapGPUFakePG holds model.FSDPInitGPU to the one history of a model
// moved whole to the GPU before fully_shard (bench/torch/measure.py's
// shard(), one rank of a fake process group of eight, Llama-3.2-1B ZeRO-3
// checkpointed on an H200): the reserved memory once the cache was emptied
// after wrapping (Training.EmptyCacheAfterWrap, as shard() does), and
// before, as the wrapping left it, read from the history's segment events.
func TestWrapGPUFakePG(t *testing.T) {
	f, err := os.Open("../bench/results/2026-11-26-h200x4-zero3-fakepg/trace.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var ev [][]any
	if err := json.NewDecoder(z).Decode(&ev); err != nil {
		t.Fatal(err)
	}
	var res, before, after int64
	for _, e := range ev {
		switch size := int64(e[2].(float64)); e[0] {
		case "segment_alloc":
			res += size
		case "segment_free":
			if before == 0 {
				before = res // empty_cache returns segments only after wrapping
			}
			res -= size
			after = res
		}
	}
	for _, c := range []struct {
		empty bool
		want  int64
	}{{true, after}, {false, before}} {
		spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{Batch: 2, DP: 8, Zero: "3",
			Checkpointing: "every-block", Dev: "h200-141gb", FSDPInit: model.FSDPInitGPU, StepPause: "1",
			EmptyCacheAfterWrap: c.empty})
		if err != nil {
			t.Fatal(err)
		}
		if got := reservedAfterWrap(t, spec); c.want == 0 || got != c.want {
			t.Errorf("cache emptied %v: reserved after wrapping %d B, the history %d B", c.empty, got, c.want)
		}
	}
}
