package alloc

import (
	"slices"
	"testing"
)

const mib = 1 << 20

func mustParse(t testing.TB, s string) Config {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return c
}

// TestSingle checks single requests after empty_cache against the H100
// measurements of docs/allocator.md §6 (request → allocated / reserved).
func TestSingle(t *testing.T) {
	type ar struct{ allocated, reserved int64 }
	confs := []string{"", "expandable_segments:True", "roundup_power2_divisions:4", "max_split_size_mb:100"}
	tests := []struct {
		name string
		req  int64
		want []ar // per conf; zero: not measured
	}{
		{"1 B", 1, []ar{{512, 2 * mib}, {512, 2 * mib}, {512, 2 * mib}, {512, 2 * mib}}},
		{"513 B", 513, []ar{{1024, 2 * mib}, {1024, 2 * mib}, {}, {}}},
		{"1 MiB", mib, []ar{{mib, 2 * mib}, {mib, 2 * mib}, {}, {}}},
		{"1 MiB+1", mib + 1, []ar{{mib + 512, 20 * mib}, {mib + 512, 20 * mib}, {mib + mib/4, 20 * mib}, {mib + 512, 20 * mib}}},
		{"5 MiB", 5 * mib, []ar{{5 * mib, 20 * mib}, {5 * mib, 20 * mib}, {5 * mib, 20 * mib}, {}}},
		{"10 MiB-1", 10*mib - 1, []ar{{10 * mib, 10 * mib}, {10 * mib, 20 * mib}, {}, {}}},
		{"10 MiB+1", 10*mib + 1, []ar{{10*mib + 512, 12 * mib}, {10*mib + 512, 20 * mib}, {12 * mib, 12 * mib}, {}}},
		{"11 MiB+1", 11*mib + 1, []ar{{12 * mib, 12 * mib}, {11*mib + 512, 20 * mib}, {12 * mib, 12 * mib}, {12 * mib, 12 * mib}}},
		{"21 MiB+5", 21*mib + 5, []ar{{22 * mib, 22 * mib}, {21*mib + 512, 40 * mib}, {24 * mib, 24 * mib}, {}}},
		{"100 MiB+1", 100*mib + 1, []ar{{100*mib + 512, 102 * mib}, {100*mib + 512, 120 * mib}, {112 * mib, 112 * mib}, {102 * mib, 102 * mib}}},
		{"1536 MiB+1", 1536*mib + 1, []ar{{1536*mib + 512, 1538 * mib}, {1536*mib + 512, 1540 * mib}, {1792 * mib, 1792 * mib}, {1538 * mib, 1538 * mib}}},
	}
	for i, conf := range confs {
		for _, tt := range tests {
			w := tt.want[i]
			if w.reserved == 0 {
				continue
			}
			t.Run(conf+"/"+tt.name, func(t *testing.T) {
				a := New(mustParse(t, conf))
				a.Malloc(tt.req, 0)
				if got := (ar{a.Allocated(), a.Reserved()}); got != w {
					t.Errorf("Malloc(%d) = %d / %d, want %d / %d", tt.req, got.allocated, got.reserved, w.allocated, w.reserved)
				}
			})
		}
	}
}

// TestSequences checks reuse, splitting and fragmentation against the
// measured sequences of docs/allocator.md §6.
func TestSequences(t *testing.T) {
	tests := []struct {
		name, conf string
		run        func(a *Allocator) []int64
		want       []int64 // MiB
	}{
		{"4 x 600 KiB", "", func(a *Allocator) []int64 { return each(a, 4, 600<<10) }, []int64{2, 2, 2, 4}},
		{"4 x 6 MiB", "", func(a *Allocator) []int64 { return each(a, 4, 6*mib) }, []int64{20, 20, 20, 40}},
		{"4 x 6 MiB, 40 MiB segments", "large_segment_size_mb:40", func(a *Allocator) []int64 { return each(a, 4, 6*mib) }, []int64{40, 40, 40, 40}},
		{"100 free, 60, 50", "", seq100, []int64{100, 150}},
		{"100 free, 60, 50, expandable", "expandable_segments:True", seq100, []int64{100, 120}},
		{"100 free, 60, 50, max_split 100", "max_split_size_mb:100", seq100, []int64{160, 210}},
		{"200 free, 150 free, 190", "", seq200, []int64{200, 200, 190}},
		{"200 free, 150 free, 190, max_split 100", "max_split_size_mb:100", seq200, []int64{350, 350, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(mustParse(t, tt.conf))
			if got := tt.run(a); !slices.Equal(got, tt.want) {
				t.Errorf("got %v MiB, want %v", got, tt.want)
			}
		})
	}
}

func each(a *Allocator, n int, size int64) []int64 {
	var out []int64
	for i := 0; i < n; i++ {
		a.Malloc(size, 0)
		out = append(out, a.Reserved()/mib)
	}
	return out
}

// seq100: alloc 100 MiB, free; alloc 60 MiB then 50 MiB (reserved after each).
func seq100(a *Allocator) []int64 {
	a.Free(a.Malloc(100*mib, 0))
	a.Malloc(60*mib, 0)
	r := a.Reserved() / mib
	a.Malloc(50*mib, 0)
	return []int64{r, a.Reserved() / mib}
}

// seq200: alloc 200, free; alloc 150, free; alloc 190: reserved after the
// second and third, then allocated.
func seq200(a *Allocator) []int64 {
	a.Free(a.Malloc(200*mib, 0))
	a.Free(a.Malloc(150*mib, 0))
	r := a.Reserved() / mib
	a.Malloc(190*mib, 0)
	return []int64{r, a.Reserved() / mib, a.Allocated() / mib}
}

// TestLimit checks the fraction cap: 0.1 of the H100's 79.18 GiB, two
// 3 GiB blocks freed, then 5 GiB (docs/allocator.md §6).
func TestLimit(t *testing.T) {
	tests := []struct {
		conf    string
		retries int
	}{
		{"", 1},
		{"max_split_size_mb:100", 0},
		{"garbage_collection_threshold:0.6", 0},
		{"expandable_segments:True", 0},
	}
	for _, tt := range tests {
		t.Run(tt.conf, func(t *testing.T) {
			a := New(mustParse(t, tt.conf))
			a.SetLimit(85_017_493_504 / 10)
			x, y := a.Malloc(3<<30, 0), a.Malloc(3<<30, 0)
			a.Free(x)
			a.Free(y)
			a.Malloc(5<<30, 0)
			if a.OOM() || a.Retries() != tt.retries || a.Allocated() != 5<<30 {
				t.Errorf("oom %v retries %d allocated %d, want false %d %d", a.OOM(), a.Retries(), a.Allocated(), tt.retries, int64(5<<30))
			}
			if a.Reserved() > 85_017_493_504/10 {
				t.Errorf("reserved %d above the limit", a.Reserved())
			}
		})
	}
	a := New(Default())
	a.SetLimit(85_017_493_504 / 10)
	a.Malloc(5<<30, 0)
	a.Malloc(4<<30, 0)
	if !a.OOM() {
		t.Error("9 GiB under a 7.9 GiB cap did not fail")
	}
}

// TestStreams checks that cached blocks serve only their own stream and
// that record_stream defers reuse until ProcessEvents.
func TestStreams(t *testing.T) {
	a := New(Default())
	a.Free(a.Malloc(30*mib, 1))
	a.Malloc(30*mib, 0)
	if a.Reserved() != 60*mib {
		t.Errorf("reserved %d MiB, want 60 (a block of stream 1 served stream 0)", a.Reserved()/mib)
	}
	b := a.Malloc(30*mib, 1)
	if a.Reserved() != 60*mib {
		t.Errorf("reserved %d MiB, want 60 (stream 1 did not reuse its block)", a.Reserved()/mib)
	}
	a.RecordStream(b, 2)
	a.Free(b)
	if a.Allocated() != 30*mib || a.Pending() != 30*mib {
		t.Errorf("allocated %d pending %d MiB, want 30 30", a.Allocated()/mib, a.Pending()/mib)
	}
	a.Malloc(30*mib, 1)
	if a.Reserved() != 90*mib {
		t.Errorf("reserved %d MiB, want 90 (a block in use on another stream was reused)", a.Reserved()/mib)
	}
	a.ProcessEvents()
	a.Malloc(30*mib, 1)
	if a.Reserved() != 90*mib {
		t.Errorf("reserved %d MiB, want 90 after ProcessEvents", a.Reserved()/mib)
	}
}

func TestRoundSize(t *testing.T) {
	c := mustParse(t, "roundup_power2_divisions:[1:4,256:2,>:8]")
	tests := []struct{ n, want int64 }{
		{1, 512}, {600 << 10, 640 << 10}, {mib + 1, mib + mib/4}, {300 * mib, 384 * mib},
		{512 * mib, 512 * mib}, {513 * mib, 576 * mib}, {3 * mib, 3 * mib},
	}
	for _, tt := range tests {
		if got := c.RoundSize(tt.n); got != tt.want {
			t.Errorf("RoundSize(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// TestFragmentation checks the figures taken at the peak of reserved.
func TestFragmentation(t *testing.T) {
	a := New(Default())
	a.Free(a.Malloc(100*mib, 0))
	a.Malloc(60*mib, 0)
	a.Malloc(50*mib, 0) // 40 MiB of the first segment stay cached
	f := a.Fragmentation()
	want := Fragmentation{Reserved: 150 * mib, Allocated: 110 * mib, Unallocated: 40 * mib, LargestFree: 40 * mib, InactiveSplit: 40 * mib}
	if f != want {
		t.Errorf("Fragmentation() = %+v, want %+v", f, want)
	}
}

func TestSegmentsSumToReserved(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True", "max_split_size_mb:40"} {
		a := New(mustParse(t, conf))
		for _, n := range []int64{600 << 10, 6 * mib, 30 * mib, 1, 50 * mib} {
			a.Free(a.Malloc(n, 0))
			a.Malloc(n, 0)
		}
		a.ReleaseCached()
		var sum int64
		for _, s := range a.Segments() {
			sum += s
		}
		if sum != a.Reserved() {
			t.Errorf("%s: segments sum to %d, reserved %d", conf, sum, a.Reserved())
		}
	}
}

// TestOversize checks the oversize counters of memory_stats under
// max_split_size_mb:100.
func TestOversize(t *testing.T) {
	a := New(mustParse(t, "max_split_size_mb:100"))
	x := a.Malloc(150*mib, 0)
	a.Malloc(50*mib, 0)
	if al, sg := a.Oversize(); al != 1 || sg != 1 {
		t.Errorf("Oversize() = %d, %d, want 1, 1", al, sg)
	}
	a.Free(x)
	a.ReleaseCached()
	if al, sg := a.Oversize(); al != 0 || sg != 0 {
		t.Errorf("after free and empty_cache: Oversize() = %d, %d, want 0, 0", al, sg)
	}
}

// TestExpandableTailLast checks get_free_block's ranking for expandable
// segments: the free block at a segment's end could grow into the
// unmapped rest, so another fitting block of the stream is taken first.
func TestExpandableTailLast(t *testing.T) {
	a := New(mustParse(t, "expandable_segments:True"))
	x := a.Malloc(8*mib, 0)  // maps 20: x 8 | free 12
	y := a.Malloc(12*mib, 0) // takes the 12
	a.Malloc(10*mib, 0)      // maps 20 more: x 8 | y 12 | z 10 | free 10
	a.Free(x)
	a.Free(y) // free 20 | z 10 | free 10 (the tail)
	a.Malloc(6*mib, 0)
	if a.Reserved() != 40*mib {
		t.Fatalf("reserved %d MiB, want 40", a.Reserved()/mib)
	}
	// By size alone the 6 MiB would have split the 10 MiB tail, leaving
	// the 20 MiB block for this one; ranked last, the tail had to grow.
	a.Malloc(15*mib, 0)
	if a.Reserved() != 60*mib {
		t.Errorf("reserved %d MiB, want 60", a.Reserved()/mib)
	}
}

func TestIsDefault(t *testing.T) {
	for in, want := range map[string]bool{"": true, "release_lock_on_cudamalloc:True,pinned_use_background_threads:True": true,
		"expandable_segments:True": false, "max_split_size_mb:100": false, "roundup_power2_divisions:[>:1]": true, "roundup_power2_divisions:[1:1,>:2]": false, "expandable_segments:False": true} {
		if got := mustParse(t, in).IsDefault(); got != want {
			t.Errorf("Parse(%q).IsDefault() = %v, want %v", in, got, want)
		}
	}
}
