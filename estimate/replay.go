package estimate

import (
	"sync"

	"github.com/memplan/memplan/alloc"
)

// Later steps replayed from a recorded one.
//
// From the second optimizer step on (the third under DDP, which rebuilds
// its buckets in the second) every step runs the same program: the same
// requests, in the same order, freed at the same points. Where it ends in
// a state the step before it did not (a cache laid out otherwise, and so
// perhaps more segments in the next step: ViT-B/16's checkpointed bf16
// line maps 73 MiB more in PyTorch's third step, docs/allocator.md §8),
// train simulates another; what decides the next step's requests is the
// program, not the allocator, so that step need not be simulated op by op:
// the allocator's calls of the step recorded (stepLog) are made again, in
// order, with the simulation's bookkeeping (the bytes alive by category,
// the peaks, the phases) kept as the ops keep it. TestReplayExact checks
// it against simulating every step.

// replaySkip enables the replay; tests turn it off to simulate every step.
var replaySkip = true

// evKind is what a recorded event does.
type evKind uint8

const (
	evMalloc     evKind = iota // an allocation of n bytes on stream x, category cat
	evFree                     // the free of allocation x (its category cat, n bytes)
	evRecat                    // n bytes alive moved from category cat to category to
	evEnter                    // a phase begins: micro-batch x, stage stages[n]
	evSaved                    // the forward's end: the bytes saved for backward are read (sim.saved)
	evLibrary                  // library n's first kernels ran (alloc.Allocator.LibraryLoaded)
	evCommUp                   // the first communicator came up (alloc.Allocator.CommunicatorUp)
	evPeer                     // the first point-to-point connection (alloc.Allocator.PeerConnected)
	evEmptyCache               // torch.cuda.empty_cache (alloc.Allocator.ReleaseCached)
)

// stepEvent is one recorded event in 16 bytes: x is the stream of an
// evMalloc and the ref of an evFree or evEnter, which no event needs both
// of (a 7B step records about 18,000 events, a fresh process's memory).
type stepEvent struct {
	n       int64
	x       int32
	kind    evKind
	cat, to category
}

// stepLog is one step's allocator calls, in order. at maps a block the
// step allocated to its evMalloc (1-based; 0: allocated before the step);
// a step that frees a block it did not allocate (one that lives across
// the step's start) cannot be replayed alone, and says so in crosses.
type stepLog struct {
	ev        []stepEvent
	at        []int32
	stages    []string
	crosses   bool
	blocks    []block // the replay's blocks, by event
	prev, now []int64 // train's prints of the states at steps' ends
}

// stepLogs keeps logs, and their buffers, between simulations.
var stepLogs = sync.Pool{New: func() any { return new(stepLog) }}

// startLog begins recording the step about to run into l.
func (s *sim) startLog(l *stepLog) {
	l.ev, l.stages, l.crosses = l.ev[:0], l.stages[:0], false
	if cap(l.ev) < s.calls {
		// The step about to run makes about as many calls as the steps
		// before it together: one buffer of that size, not a doubling
		// series of fresh ones (a fresh process's first estimate pays
		// for every page it touches).
		l.ev = make([]stepEvent, 0, s.calls+s.calls/8)
	}
	clear(l.at)
	s.rec = l
}

// stopLog ends the recording and says whether the step can be replayed
// alone.
func (s *sim) stopLog() bool {
	l := s.rec
	s.rec = nil
	return !l.crosses
}

// logMalloc records t's allocation.
func (l *stepLog) logMalloc(t *tensor, n int64, st alloc.Stream) {
	l.ev = append(l.ev, stepEvent{kind: evMalloc, n: n, x: int32(st), cat: t.cat})
	b := int(t.blk)
	if b >= len(l.at) {
		l.at = append(l.at, make([]int32, b+1-len(l.at)+len(l.at)/2)...)
	}
	l.at[b] = int32(len(l.ev))
}

// logFree records the free of t's block.
func (l *stepLog) logFree(t *tensor) {
	b := int(t.blk)
	if b >= len(l.at) || l.at[b] == 0 {
		l.crosses = true
		return
	}
	l.ev = append(l.ev, stepEvent{kind: evFree, x: l.at[b] - 1, n: t.bytes(), cat: t.cat})
	l.at[b] = 0
}

func (l *stepLog) log(kind evKind, n int64) {
	l.ev = append(l.ev, stepEvent{kind: kind, n: n})
}

// logEnter records the start of a phase.
func (l *stepLog) logEnter(micro int, stage string) {
	i := 0
	for i < len(l.stages) && l.stages[i] != stage {
		i++
	}
	if i == len(l.stages) {
		l.stages = append(l.stages, stage)
	}
	l.ev = append(l.ev, stepEvent{kind: evEnter, x: int32(micro), n: int64(i)})
}

// replayStep makes step it's allocator calls those of the recorded step.
func (s *sim) replayStep(l *stepLog, it int) {
	if cap(l.blocks) < len(l.ev) {
		l.blocks = make([]block, len(l.ev))
	}
	blk := l.blocks[:len(l.ev)]
	for i := range l.ev {
		e := &l.ev[i]
		switch e.kind {
		case evMalloc:
			blk[i] = s.al.mallocOn(e.n, alloc.Stream(e.x))
			s.live[e.cat] += e.n
			s.observe()
		case evFree:
			s.al.free(blk[e.x])
			s.live[e.cat] -= e.n
		case evRecat:
			s.live[e.cat] -= e.n
			s.live[e.to] += e.n
		case evEnter:
			s.enter(it, int(e.x), l.stages[e.n])
		case evSaved:
			s.saved = s.live[catSaved]
		case evLibrary, evCommUp, evPeer, evEmptyCache:
			s.addressEvent(e.kind, e.n)
		}
	}
}
