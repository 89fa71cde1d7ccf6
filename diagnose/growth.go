package diagnose

import (
	"sort"
)

// growth finds allocated memory that rises from step to step in a trace.
// The live bytes rise in each forward pass and fall in backward; the low
// points between steps (valleys, found with a hysteresis of a quarter,
// an eighth or a sixteenth of the curve's range, coarsest first) are where a step's temporaries are gone. When the last
// three or more valleys each stand higher than the one before (by a tenth
// of the range in all, or a twentieth over four or more), what was
// allocated between the first and the last of them and never freed is the
// leak: it outlived the step that made it.
//
// It also returns how many step boundaries (valleys at the coarsest
// hysteresis) the trace holds — a history of several steps without growth
// rules a leak out — and the blocks allocated in the trace and live at
// its end (address → index of the alloc event).
func growth(evs []event, t *traceTables) (*Growth, int, map[int64]int) {
	live := map[int64]int{} // addr → index of its alloc event
	curve := make([]int64, len(evs))
	var l, lo, hi int64
	for i, e := range evs {
		switch e.act {
		case actAlloc:
			live[e.addr] = i
			l += e.size
		case actFreeCompleted:
			delete(live, e.addr)
			l -= e.size
		}
		curve[i] = l
		lo, hi = min(lo, l), max(hi, l)
	}
	// Try coarse hysteresis first: bumps inside a backward pass must not
	// count as steps.
	var vs []int
	n, seen := 0, -1
	for _, div := range []int64{4, 8, 16} {
		vs = valleys(curve, max((hi-lo)/div, 16<<20))
		if seen < 0 {
			seen = len(vs)
		}
		if n = rising(vs, curve); n >= 3 {
			break
		}
	}
	if n < 3 {
		return nil, seen, live
	}
	first := vs[len(vs)-n]
	rise := curve[vs[len(vs)-1]] - curve[first]
	if rise < (hi-lo)/10 && (n < 4 || rise < (hi-lo)/20) {
		return nil, seen, live
	}
	g := &Growth{PerStep: rise / int64(n-1), Steps: n - 1}
	g.Sites = sites(evs, t, live, first, vs[len(vs)-1])
	return g, seen, live
}

// valleys returns the indexes of the curve's low points, with hysteresis h.
func valleys(c []int64, h int64) []int {
	var out []int
	falling := false
	peak, low, lowAt := int64(0), int64(0), 0
	for i, v := range c {
		if !falling {
			if v > peak {
				peak = v
			}
			if v < peak-h {
				falling, low, lowAt = true, v, i
			}
			continue
		}
		if v < low {
			low, lowAt = v, i
		}
		if v > low+h {
			out = append(out, lowAt)
			falling, peak = false, v
		}
	}
	return out
}

// rising counts the valleys at the end that each stand higher than the
// one before (by more than 1 MiB).
func rising(vs []int, c []int64) int {
	n := 0
	if len(vs) > 0 {
		n = 1
	}
	for i := len(vs) - 1; i > 0; i-- {
		if c[vs[i]] <= c[vs[i-1]]+1<<20 {
			break
		}
		n++
	}
	return n
}

// sites groups what is still live and was allocated between events from
// and to by the first frame in the user's code.
func sites(evs []event, t *traceTables, live map[int64]int, from, to int) []Site {
	by := map[string]*Site{}
	for _, i := range live {
		if i <= from || i > to {
			continue
		}
		f := t.userFrame(evs[i].stack)
		s := by[f]
		if s == nil {
			s = &Site{Frame: f}
			by[f] = s
		}
		s.Allocs++
		s.Bytes += evs[i].size
	}
	out := make([]Site, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Frame < out[j].Frame
	})
	return out[:min(len(out), 3)]
}
