package estimate

import (
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

const mib = 1 << 20

// TestAllocatorSingle checks single requests against the H100 measurements
// in docs/pytorch-memory.md §1 ("Measured", default column).
func TestAllocatorSingle(t *testing.T) {
	tests := []struct {
		name                string
		req                 int64
		allocated, reserved int64
	}{
		{"1 B", 1, 512, 2 * mib},
		{"513 B", 513, 1024, 2 * mib},
		{"1 MiB", mib, mib, 2 * mib},
		{"1 MiB+1", mib + 1, mib + 512, 20 * mib},
		{"5 MiB", 5 * mib, 5 * mib, 20 * mib},
		{"10 MiB-1", 10*mib - 1, 10 * mib, 10 * mib},
		{"10 MiB+1", 10*mib + 1, 10*mib + 512, 12 * mib},
		{"11 MiB+1 (remainder under 1 MiB is not split)", 11*mib + 1, 12 * mib, 12 * mib},
		{"21 MiB+5", 21*mib + 5, 22 * mib, 22 * mib},
		{"100 MiB+1", 100*mib + 1, 100*mib + 512, 102 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a allocator
			a.malloc(tt.req)
			if a.allocated != tt.allocated || a.reserved != tt.reserved {
				t.Errorf("malloc(%d): allocated %d reserved %d, want %d %d", tt.req, a.allocated, a.reserved, tt.allocated, tt.reserved)
			}
		})
	}
}

// TestAllocatorSequences checks reuse, splitting and fragmentation against
// the measured sequences in docs/pytorch-memory.md §1.
func TestAllocatorSequences(t *testing.T) {
	t.Run("4 x 600 KiB", func(t *testing.T) {
		var a allocator
		var got []int64
		for i := 0; i < 4; i++ {
			a.malloc(600 << 10)
			got = append(got, a.reserved/mib)
		}
		if want := []int64{2, 2, 2, 4}; !slices.Equal(got, want) {
			t.Errorf("reserved = %v MiB, want %v", got, want)
		}
	})
	t.Run("4 x 6 MiB", func(t *testing.T) {
		var a allocator
		var got []int64
		for i := 0; i < 4; i++ {
			a.malloc(6 * mib)
			got = append(got, a.reserved/mib)
		}
		if want := []int64{20, 20, 20, 40}; !slices.Equal(got, want) {
			t.Errorf("reserved = %v MiB, want %v", got, want)
		}
	})
	t.Run("100 free, 60 then 50", func(t *testing.T) {
		var a allocator
		a.free(a.malloc(100 * mib))
		a.malloc(60 * mib)
		a.malloc(50 * mib)
		if a.reserved != 150*mib {
			t.Errorf("reserved = %d MiB, want 150", a.reserved/mib)
		}
	})
	t.Run("200 free, 150 free, 190", func(t *testing.T) {
		var a allocator
		a.free(a.malloc(200 * mib))
		a.free(a.malloc(150 * mib))
		a.malloc(190 * mib)
		if a.reserved != 200*mib || a.allocated != 190*mib {
			t.Errorf("reserved %d allocated %d MiB, want 200 190", a.reserved/mib, a.allocated/mib)
		}
	})
}

// TestColumnSumScratch checks the ported reduction config against the
// scratch buffers seen in allocator traces on the H100: 4096 rows, and
// BERT's decoder bias (30,522 columns, output vectorised by 2) over 8192.
func TestColumnSumScratch(t *testing.T) {
	s := &sim{cfg: &config{sms: 132, threadsSM: 2048}}
	tests := []struct{ rows, cols, want int64 }{
		{4096, 768, 24 * mib}, {4096, 2304, 72 * mib}, {4096, 3072, 96 * mib}, {4096, 2048, 64 * mib},
		{8192, 768, 48 * mib}, {8192, 30522, 31254528},
		// ViT-B/16's patch-embedding bias over a channels-last gradient
		// at batch 128 (128 × 14 × 14 rows; traces2/vit-ckpt).
		{25088, 768, 132 * mib},
	}
	for _, tt := range tests {
		if got := s.columnSumScratch(tt.rows, tt.cols, 2); got != tt.want {
			t.Errorf("columnSumScratch(%d, %d) = %d, want %d", tt.rows, tt.cols, got, tt.want)
		}
	}
	if got := s.columnSumScratch(64, 1000, 2); got != 0 {
		t.Errorf("small reduction scratch = %d, want 0", got)
	}
}

// TestAllocatorCap checks the fraction cap: the measured sequence of
// docs/pytorch-memory.md §1 (fraction 0.1 of 79.18 GiB: two 3 GiB blocks freed,
// then 5 GiB succeeds after one retry).
func TestAllocatorCap(t *testing.T) {
	a := allocator{limit: 85_017_493_504 / 10}
	x, y := a.malloc(3<<30), a.malloc(3<<30)
	a.free(x)
	a.free(y)
	a.malloc(5 << 30)
	if a.oom || a.retries != 1 || a.reserved != 5<<30 {
		t.Errorf("oom %v retries %d reserved %d, want false 1 %d", a.oom, a.retries, a.reserved, 5<<30)
	}
	a.malloc(4 << 30)
	if !a.oom {
		t.Error("9 GiB under a 7.9 GiB cap did not fail")
	}
}

func TestSegmentsSumToReserved(t *testing.T) {
	var a allocator
	for _, n := range []int64{600 << 10, 6 * mib, 30 * mib, 1} {
		a.free(a.malloc(n))
		a.malloc(n)
	}
	var sum int64
	for _, s := range a.Segments() {
		sum += s
	}
	if sum != a.reserved {
		t.Errorf("segments sum to %d, reserved %d", sum, a.reserved)
	}
}

// TestAllocConf checks that a spec's allocator settings reach the
// simulation: expandable segments lower reserved memory, power-of-two
// rounding raises allocated memory (docs/allocator.md §2).
func TestAllocConf(t *testing.T) {
	est := func(conf string) *Result {
		t.Helper()
		return estimateSpec(t, "gpt2-124m.yaml", model.Overrides{AllocConf: conf})
	}
	def := est("")
	if exp := est("expandable_segments:True"); exp.PeakReserved >= def.PeakReserved {
		t.Errorf("expandable segments: reserved %d, default %d: want lower", exp.PeakReserved, def.PeakReserved)
	}
	if r := est("roundup_power2_divisions:4"); r.PeakAllocated <= def.PeakAllocated {
		t.Errorf("roundup_power2_divisions:4: allocated %d, default %d: want higher", r.PeakAllocated, def.PeakAllocated)
	}
	if f := def.Fragmentation; f == nil || f.Reserved != def.PeakReserved || f.Unallocated != f.Reserved-f.Allocated {
		t.Errorf("fragmentation %+v at peak reserved %d", f, def.PeakReserved)
	}
	if _, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{AllocConf: "x:1"}); err == nil || !strings.Contains(err.Error(), `alloc-conf: unknown key "x"`) {
		t.Errorf("bad alloc conf: error %v", err)
	}
}

// TestAllocConfSpecError checks that a bad alloc_conf in a spec names the
// file, the line and the key.
func TestAllocConfSpecError(t *testing.T) {
	src := "name: t\nmodel:\n  type: sequential\n  input: {features: 8}\n  layers:\n    - linear: {out: 8}\ntraining:\n  batch: 2\n  alloc_conf: \"expandable_segments:True,x:1\"\n"
	_, err := model.Parse("t.yaml", []byte(src), model.Overrides{})
	if err == nil || !strings.Contains(err.Error(), `t.yaml:9: alloc_conf: unknown key "x"`) {
		t.Errorf("Parse = %v, want t.yaml:9: alloc_conf: unknown key \"x\"", err)
	}
}

// TestAllocatorStreams checks the adapter's stream calls: an all-gather
// buffer freed on its stream while the compute stream used it is reused
// only after processEvents.
func TestAllocatorStreams(t *testing.T) {
	var a allocator
	const ag = 1 // the all-gather stream
	b := a.mallocOn(64*mib, ag)
	a.recordStream(b, 0)
	a.free(b)
	a.mallocOn(64*mib, ag)
	if a.reserved != 128*mib {
		t.Errorf("reserved %d MiB, want 128 (the buffer was reused before its use on stream 0 ended)", a.reserved/mib)
	}
	a.processEvents()
	a.mallocOn(64*mib, ag)
	a.malloc(64 * mib)
	if a.reserved != 192*mib {
		t.Errorf("reserved %d MiB, want 192", a.reserved/mib)
	}
}
