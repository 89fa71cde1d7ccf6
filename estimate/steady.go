package estimate

import "sync/atomic"

// The steady state of Schedule1F1B (docs/parallelism.md §3.2): after the
// warm-up, each iteration of the loop runs one backward and one forward.
// Once the state of the simulation at the start of an iteration is the
// state it was in p iterations before — the same blocks in the same
// places, each allocated block holding a tensor of the same role — every
// later iteration repeats one p before it, the peaks cannot change, and
// the replay jumps ahead by a multiple of p iterations, renaming the
// micro-batches in flight. The number of micro-batches then no longer
// costs time on such a stage. It stops to matter nowhere else: the last
// stage keeps every micro-batch's logits (output_chunks) until the step
// ends, and the interleaved schedule every sent tensor, so their states
// grow and never repeat; they are replayed in full.
//
// A block's role is its tensor's age: allocated before the steady state
// began (the parameters, the optimizer state, the receive buffers, the
// micro-batches of the warm-up), long-lived (a gradient, a workspace, the
// batch; the same tensor in both states), or made k iterations before, as
// the i-th allocation of its iteration. The program of an iteration is
// the same code on the same shapes, and which tensor it frees when does
// not depend on where the allocator put it, so equal states evolve alike.
// TestSteadyStateExact compares the jump with the full replay.

// steadySkip enables the jump; tests turn it off to replay in full.
// steadyJumps counts the jumps made (for tests).
var (
	steadySkip  = true
	steadyJumps atomic.Int64
)

// maxPeriod is the longest period looked for, in iterations.
const maxPeriod = 8

type stamp struct {
	t         *tensor
	iter, nth int32
}

// steady tracks the allocations of a stage's steady state.
type steady struct {
	s       *sim
	blocks  map[block]stamp
	ids     map[*tensor]int64
	iter    int32 // iterations begun
	nth     int32 // allocations in this iteration
	prints  [][]int64
	phaseAt []int
}

// startSteady starts tracking the steady state, or returns nil where the
// jump is not exact or not wanted: under a memory cap (the out-of-memory
// path depends on history), with allocator settings (their statistics
// count every allocation), or while tracing. FSDP's side streams are in
// the state compared: each block's stream, and the frees that wait for
// the other stream (alloc.AppendLayout).
func (s *sim) startSteady() *steady {
	a := s.al.a
	if !steadySkip || s.trace != nil || s.al.limit != 0 || a == nil || !a.Config().IsDefault() {
		return nil
	}
	st := &steady{s: s, blocks: map[block]stamp{}, ids: map[*tensor]int64{}}
	s.trace = func(t *tensor, alloc bool) {
		if alloc {
			st.blocks[t.blk] = stamp{t, st.iter, st.nth}
			st.nth++
		} else {
			delete(st.blocks, t.blk)
		}
	}
	return st
}

// stop ends the tracking.
func (st *steady) stop() {
	if st != nil {
		st.s.trace = nil
	}
}

// longLived says whether t lives to the end of the step wherever it was
// made: a parameter's gradient, optimizer state, a workspace, the batch, a
// pipeline buffer.
func longLived(t *tensor) bool {
	switch t.fixed {
	case catGrad, catOptState, catWorkspace, catData, catPipe, catParam:
		return true
	}
	return t.param
}

// print is the state now, with ages relative to the iteration beginning.
func (st *steady) print() []int64 {
	s := st.s
	out := append(make([]int64, 0, 256), s.live[:]...)
	return s.al.a.AppendLayout(out, func(b block) int64 {
		sp, ok := st.blocks[b]
		switch {
		case !ok:
			return 1 << 40 // made before the steady state: the same tensor
		case longLived(sp.t):
			id, ok := st.ids[sp.t]
			if !ok {
				id = int64(len(st.ids))
				st.ids[sp.t] = id
			}
			return 1<<41 + id
		}
		return int64(st.iter-sp.iter)<<24 | int64(sp.nth)
	})
}

// begin starts iteration b (its backward), f (its forward) of m
// micro-batches. It returns how many iterations the replay may jump: a
// multiple of a period the state repeats with, keeping at least one
// iteration to run.
func (st *steady) begin(f, m int) int {
	if st == nil {
		return 0
	}
	// The bytes alive by category come first in a print: where they
	// differ from every earlier print (the last stage, whose output chunks
	// grow), the allocator's layout is not looked at.
	var now []int64
	if st.mayRepeat() {
		now = st.print()
	} else {
		now = append([]int64(nil), st.s.live[:]...)
	}
	n := 0
	for p := 1; p <= min(maxPeriod, len(st.prints)); p++ {
		if equal(now, st.prints[len(st.prints)-p]) {
			n = (m - f - 1) / p * p
			if n > 0 {
				steadyJumps.Add(1)
				st.replicatePhases(p, n)
				st.prints = nil // at most one jump per step
				return n
			}
			break
		}
	}
	st.prints = append(st.prints, now)
	if len(st.prints) > maxPeriod {
		st.prints = st.prints[1:]
	}
	st.phaseAt = append(st.phaseAt, len(st.s.phases))
	st.iter++
	st.nth = 0
	return 0
}

// mayRepeat says whether the bytes alive by category are those of an
// earlier print.
func (st *steady) mayRepeat() bool {
	for _, p := range st.prints {
		if equal(st.s.live[:], p[:numCats]) {
			return true
		}
	}
	return false
}

// replicatePhases adds the phases of the n iterations jumped: those of the
// last p iterations, again and again, their micro-batches renamed.
func (st *steady) replicatePhases(p, n int) {
	s := st.s
	from := st.phaseAt[len(st.phaseAt)-p]
	tmpl := append([]PhasePeak(nil), s.phases[from:]...)
	for r := 1; r <= n/p; r++ {
		for _, ph := range tmpl {
			ph.Micro += r * p
			s.phases = append(s.phases, ph)
		}
	}
	st.phaseAt = nil
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// jump renames the micro-batches in flight on the stage, b to f − 1, to
// b + n to f + n − 1: their flights, and the receive buffers their forwards
// read (a receive buffer's place in the list is the micro-batch it
// serves; the unused ones are alike).
func (s *sim) jump(b, f, n int) {
	p := s.pp
	fl := make(map[int]*flight, len(p.flights))
	for j, x := range p.flights {
		fl[j+n] = x
	}
	p.flights = fl
	if len(p.recv) == 0 {
		return
	}
	old := append([]*tensor(nil), p.recv...)
	used := make([]bool, len(old))
	for j := b; j < f; j++ {
		p.recv[j+n], used[j] = old[j], true
	}
	k := 0
	for slot := range p.recv {
		if slot >= b+n && slot < f+n {
			continue
		}
		for used[k] {
			k++
		}
		p.recv[slot] = old[k]
		k++
	}
}
