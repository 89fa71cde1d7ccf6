package diagnose

import "sort"

// liveBlock is a block allocated at the dump: its address, size and the
// stack that allocated it (-1 when not recorded).
type liveBlock struct {
	addr, size int64
	stack      int32
}

// Thresholds of carried (docs/diagnose.md, "Leaks in a snapshot").
const (
	// minCarriedCopies: copies from at least this many earlier runs of the
	// same code, as growth needs three rising step boundaries.
	minCarriedCopies = 3
	// carriedShare: and at least this share of what is allocated, as a
	// stats series' growth over four or more steps.
	carriedShare = 0.10
)

// carried finds memory that outlived the steps that made it when the
// trace is too short to show growth. A block still allocated at the dump
// whose allocation is not in the trace was made before the trace began;
// when the trace holds a step boundary (the caller checks), such a block
// survived at least one whole step. If the code (the same stack) that
// made it allocated again within the trace, it runs every step; copies of
// its output from several earlier steps still held are what an
// accumulating list or cache leaves — or a buffer that keeps the last few
// on purpose, which one dump cannot tell apart. It returns the stack with
// the most such bytes, when it holds at least minCarriedCopies blocks and
// carriedShare of allocated.
func carried(evs []event, t *traceTables, live map[int64]int, blocks []liveBlock, allocated int64) *Site {
	again := make([]bool, len(t.stackAt))
	for _, e := range evs {
		if e.act == actAlloc && e.stack >= 0 && int(e.stack) < len(again) {
			again[e.stack] = true
		}
	}
	by := map[int32]*Site{}
	for _, b := range blocks {
		if _, inTrace := live[b.addr]; inTrace || b.stack < 0 || int(b.stack) >= len(again) || !again[b.stack] {
			continue
		}
		s := by[b.stack]
		if s == nil {
			s = &Site{Frame: t.userFrame(b.stack)}
			by[b.stack] = s
		}
		s.Allocs++
		s.Bytes += b.size
	}
	var out []*Site
	for _, s := range by {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Frame < out[j].Frame
	})
	if len(out) == 0 || out[0].Allocs < minCarriedCopies || float64(out[0].Bytes) < carriedShare*float64(allocated) {
		return nil
	}
	return out[0]
}
