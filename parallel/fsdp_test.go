package parallel

import "testing"

// Units (padded element counts, root first) of the measured models on 2
// GPUs: GPT-2's root is wte (50257 rows padded to 50258) + wpe + ln_f.
func gpt2Units(h, layers, positions int64) []int64 {
	root := PaddedNumel(50257, h, 2) + positions*h + 2*h
	block := 12*h*h + 13*h
	u := []int64{root}
	for range layers {
		u = append(u, block)
	}
	return u
}

func llama1BUnits() []int64 {
	h, ffn, kv := int64(2048), int64(8192), int64(512)
	block := 2*h*h + 2*kv*h + 3*ffn*h + 2*h
	u := []int64{128256*h + h}
	for range 16 {
		u = append(u, block)
	}
	return u
}

func TestFSDPStreamPoolsMeasured(t *testing.T) {
	const mib = 1 << 20
	// Reserved per stream after step 1 on 2xH200 (bench/results/
	// 2026-11-23-h200x2-dist.jsonl, "per_stream"), MiB.
	tests := []struct {
		name           string
		units          []int64
		gather, shard  int64
		grad           int64
		wantAG, wantRS int64
	}{
		{"gpt2-124m amp-bf16", gpt2Units(768, 12, 1024), 4, 4, 4, 180, 244},
		{"gpt2-124m fsdp-bf16", gpt2Units(768, 12, 1024), 2, 4, 4, 114, 244},
		{"gpt2-124m bf16", gpt2Units(768, 12, 1024), 2, 2, 2, 90, 158},
		{"gpt2-xl amp-bf16", gpt2Units(1600, 48, 1024), 4, 4, 4, 432, 3038},
		{"gpt2-xl bf16", gpt2Units(1600, 48, 1024), 2, 2, 2, 218, 1520},
		{"llama-3.2-1b amp-bf16", llama1BUnits(), 4, 4, 4, 1238, 2390},
		{"llama-3.2-1b fsdp-bf16", llama1BUnits(), 2, 4, 4, 754, 2390},
		{"llama-3.2-1b bf16", llama1BUnits(), 2, 2, 2, 620, 1212},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ag, rs, err := FSDPStreamPools(FSDPPools{Units: tc.units, World: 2, GatherBytes: tc.gather,
				ShardBytes: tc.shard, GradBytes: tc.grad})
			if err != nil {
				t.Fatal(err)
			}
			if ag != tc.wantAG*mib || rs != tc.wantRS*mib {
				t.Errorf("all-gather %d MiB, reduce-scatter %d MiB; measured %d and %d", ag/mib, rs/mib, tc.wantAG, tc.wantRS)
			}
		})
	}
}

func TestSegmentsFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		reqs []int64
		want int64
	}{
		{"none", nil, 0},
		{"small ones share 2 MiB", []int64{512 << 10, 512 << 10, 1}, 2 * mib},
		{"a third 1 MiB request opens a segment", []int64{mib, mib, mib}, 4 * mib},
		{"mid ones share 20 MiB", []int64{7 * mib, 7 * mib, 7 * mib}, 40 * mib},
		{"large rounds to 2 MiB", []int64{10*mib + 1}, 12 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SegmentsFor(tc.reqs); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFSDPStreamPoolsErrors(t *testing.T) {
	for _, p := range []FSDPPools{{}, {Units: []int64{-1}, World: 2, GatherBytes: 2, ShardBytes: 2, GradBytes: 2}} {
		if _, _, err := FSDPStreamPools(p); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if PaddedNumel(5, 3, 2) != 18 || PaddedNumel(4, 3, 0) != 12 {
		t.Error("padding")
	}
}
