package diagnose

import "testing"

// TestCarried checks the rule for memory carried over from steps before a
// snapshot's trace began: copies of what code that runs every step made,
// still held.
func TestCarried(t *testing.T) {
	tabs := newTraceTables()
	fwd := tabs.stack([]int32{tabs.frame(pframe{"step", "/home/u/train.py", 43})})
	opt := tabs.stack([]int32{tabs.frame(pframe{"_init_group", "/venv/lib/python3.12/site-packages/torch/optim/adam.py", 178})})
	// The trace: the forward allocates (and frees) one block, and allocates
	// one more that is still held at the end.
	evs := []event{
		{act: actAlloc, stack: fwd, addr: 100, size: 1 << 30},
		{act: actFreeCompleted, stack: fwd, addr: 100, size: 1 << 30},
		{act: actAlloc, stack: fwd, addr: 200, size: 1 << 30},
	}
	live := map[int64]int{200: 2}
	copies := func(stack int32, n int, size int64) []liveBlock {
		var bs []liveBlock
		for i := 0; i < n; i++ {
			bs = append(bs, liveBlock{addr: int64(1000 + i), size: size, stack: stack})
		}
		return bs
	}
	inTrace := liveBlock{addr: 200, size: 1 << 30, stack: fwd}
	cases := []struct {
		name      string
		blocks    []liveBlock
		allocated int64
		want      int // copies found, 0 for none
	}{
		{"three forward copies from before the trace", copies(fwd, 3, 1<<30), 10 << 30, 3},
		{"the block allocated in the trace is not carried", append(copies(fwd, 2, 1<<30), inTrace), 10 << 30, 0},
		{"two copies are too few", copies(fwd, 2, 1<<30), 10 << 30, 0},
		{"optimizer state: its code did not allocate again", copies(opt, 40, 1<<30), 50 << 30, 0},
		{"under a tenth of allocated", copies(fwd, 3, 1<<30), 40 << 30, 0},
		{"no stack recorded", copies(-1, 5, 1<<30), 10 << 30, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := carried(evs, tabs, live, c.blocks, c.allocated)
			got := 0
			if s != nil {
				got = s.Allocs
				if s.Frame != "u/train.py:43 in step" {
					t.Errorf("carried site %q, want u/train.py:43 in step", s.Frame)
				}
			}
			if got != c.want {
				t.Errorf("carried = %+v, want %d copies", s, c.want)
			}
		})
	}
}

// TestSeriesGrowthKeptAll: growth over steps that freed nothing is told
// apart from a loop's residue, and only when the series counts frees.
func TestSeriesGrowthKeptAll(t *testing.T) {
	series := func(frees ...int64) []Stats {
		var ss []Stats
		for i, f := range frees {
			ss = append(ss, Stats{Allocated: int64(i+1) << 30, Allocs: 100 + int64(i)*10, Frees: f})
		}
		return ss
	}
	cases := []struct {
		name     string
		ss       []Stats
		keptAll  bool
		isGrowth bool
	}{
		{"steps free their temporaries", series(50, 59, 68, 77), false, true},
		{"steps free nothing", series(50, 50, 50, 50), true, true},
		{"no counts in the series", []Stats{{Allocated: 1 << 30}, {Allocated: 2 << 30}, {Allocated: 3 << 30}}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, kept := seriesGrowth(c.ss)
			if (g != nil) != c.isGrowth || kept != c.keptAll {
				t.Errorf("seriesGrowth = %+v, kept all %v; want growth %v, kept all %v", g, kept, c.isGrowth, c.keptAll)
			}
		})
	}
}
