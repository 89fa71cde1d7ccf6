package estimate

import (
	"iter"
	"math"
	"slices"

	"github.com/memplan/memplan/model"
)

// The generic driver: it builds an instance per layer (allocating its
// parameters through the kind's builder, registered in the kind's file),
// runs instances in order with checkpointing segments, and runs the
// container kinds (repeat, block, residual, fork).

// op is one layer kind's simulation: its parameters (in the kind's own
// struct) and its forward pass. The backward is what the forward's
// autograd nodes record.
type op interface {
	// forward runs the layer on x of per-sample shape sh, whose output
	// shape is out; x stays held by the caller, unless the op is an
	// inputTaker whose takesInput says it takes the caller's hold over.
	forward(s *sim, x *tensor, sh, out model.Shape) *tensor
}

// inputTaker is an op whose forward may take over the caller's hold on its
// input, freeing it before it returns.
type inputTaker interface{ takesInput() bool }

// builder allocates a layer's parameters, as the module's constructor and
// model.to("cuda") do, and returns its op. names maps embedding names to
// their weights, for ties.
type builder func(s *sim, l *model.Layer, names map[string]*tensor) op

var builders = map[string]builder{}

// register adds the simulation of a layer kind; each kind's file calls it
// from init.
func register(kind string, b builder) {
	if _, dup := builders[kind]; dup {
		panic("estimate: layer kind registered twice: " + kind)
	}
	builders[kind] = b
}

// inst is a layer instance with its own parameters: a repeat of n blocks
// becomes n instances.
type inst struct {
	l     *model.Layer
	op    op        // nil for containers
	p     []*tensor // the parameters its builder allocated
	fork  [][]*inst // a fork's branches
	body  []*inst
	short []*inst
	unit  bool // one checkpointing unit (a block, or one copy of a repeat)
	// first marks a repeat's first copy (enterRepeat); takesX an op that
	// takes over the caller's hold on its input (inputTaker).
	first, takesX bool
	// fsdp is the FSDP2 unit a block is (fsdp_units.go), or nil.
	fsdp *fsdpUnit
	// inSh and outSh cache the layer's shapes: every pass sees the same.
	inSh, outSh model.Shape
}

// sublists yields the instance's sublayers: its body, its shortcut and its
// fork's branches, each in forward order (without building a list: the
// walks that call it run at every forward).
func (in *inst) sublists() iter.Seq[[]*inst] {
	return func(yield func([]*inst) bool) {
		if !yield(in.body) || !yield(in.short) {
			return
		}
		for _, f := range in.fork {
			if !yield(f) {
				return
			}
		}
	}
}

// param allocates a trainable parameter, as model.to("cuda") does: one
// allocation per tensor.
func (s *sim) param(elems int64, name string) *tensor { return s.shapedParam(elems, 0, 0, name) }

// shapedParam is param with the shape [..., second, last] of a matrix
// (zero for a vector), known before the shard is placed: FSDP2 pads a
// matrix's shard to whole rows (padShard), so a block's 8 experts over 16
// ranks take one expert's rows on every rank, not half (held-out set 88's
// Mixtral over 16 fake ranks, docs/multigpu.md).
func (s *sim) shapedParam(elems, second, last int64, name string) *tensor {
	var t *tensor
	if s.cfg.zero >= 2 {
		// ZeRO-2 and 3 (FSDP): the GPU keeps this rank's shard; whole
		// tensors exist only while gathered (shardSetup).
		t = s.slab.tensor()
		*t = tensor{elems: elems, dt: s.cfg.param, refs: 1, fixed: catParam, cat: catParam, name: name, expert: s.expertBuild,
			second: second, last: last}
		s.markDim1Of(t)
		s.placeShard(t)
	} else {
		t = s.alloc(elems, s.cfg.param, catParam, name)
		t.second, t.last = second, last
	}
	t.param, t.req, t.expert = true, true, s.expertBuild
	if len(s.params) == cap(s.params) {
		// Grow within the slab rather than on the heap.
		s.params = append(s.slab.ptrs(2*cap(s.params)+64), s.params...)
	}
	s.params = append(s.params, t)
	s.replaceWhole() // tensorparallel.go
	return t
}

// optParam allocates a parameter when ok (an optional bias), else nil.
func (s *sim) optParam(ok bool, elems int64, name string) *tensor {
	if !ok {
		return nil
	}
	return s.param(elems, name)
}

// matrix allocates a parameter of shape [..., second, last].
func (s *sim) matrix(second, last, lead int64, name string) *tensor {
	if q := s.quantMatrix(second, last, lead, name); q != nil {
		return q // stored by bitsandbytes (quant.go)
	}
	return s.shapedParam(lead*second*last, second, last, name)
}

// buffer allocates a module buffer held for the whole run.
func (s *sim) buffer(elems, dt int64, name string) {
	s.buffers = append(s.buffers, s.alloc(elems, dt, catParam, name))
}

func (s *sim) build(ls []model.Layer, names map[string]*tensor) []*inst {
	var out []*inst
	for i := range ls {
		l := &ls[i]
		in := s.slab.inst()
		in.l = l
		switch k := l.Spec.(type) {
		case *model.Repeat:
			for j := int64(0); j < k.Times; j++ {
				s.layerAt = k.First + j
				r := s.slab.inst()
				r.l, r.unit, r.body, r.first = l, true, s.build(l.Body, names), j == 0
				out = append(out, r)
			}
			s.layerAt = 0
			continue
		case *model.Block:
			in.unit = true
			in.body = s.build(l.Body, names)
		case *model.Residual:
			in.body = s.build(l.Body, names)
			in.short = s.build(l.Shortcut, names)
		case *model.Fork:
			for _, b := range l.Branches {
				in.fork = append(in.fork, s.build(b, names))
			}
		default:
			b := builders[l.Kind]
			if b == nil {
				panic("estimate: unhandled layer " + l.Kind)
			}
			start := len(s.params)
			in.op = b(s, l, names)
			if t, ok := in.op.(inputTaker); ok {
				in.takesX = t.takesInput()
			}
			in.p = s.params[start:len(s.params):len(s.params)]
			if s.dtensor {
				s.markPlain(l, in.op, in.p) // tensorparallel.go
			}
		}
		out = append(out, in)
	}
	return out
}

// run executes instances in order. It takes over the caller's hold on x
// and returns a tensor the caller holds.
func (s *sim) run(ins []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	for i := 0; i < len(ins); {
		if ins[i].first {
			s.enterRepeat(ins[i], x)
		}
		if ins[i].unit && s.cfg.modelRope && s.ropeT[0] == nil && !s.recomputing {
			s.prologue(ins[i:], x, sh)
		}
		if !ins[i].unit || s.ckptMode == model.CkptNone {
			x, sh = s.step1(ins[i], x, sh)
			i++
			continue
		}
		j := i + 1
		for j < len(ins) && ins[j].unit && !s.entersRepeat(ins[j]) {
			j++
		}
		for _, seg := range s.segments(j - i) {
			units := ins[i+seg.start : i+seg.end]
			if seg.ckpt {
				x, sh = s.checkpointed(units, x, sh)
			} else {
				x, sh = s.plain(units, x, sh)
			}
		}
		i = j
	}
	return x, sh
}

// plain runs instances one after the other with no checkpointing.
func (s *sim) plain(ins []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	for _, in := range ins {
		x, sh = s.step1(in, x, sh)
	}
	return x, sh
}

func (s *sim) step1(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	held := s.held // what a holding residual keeps, freed after this layer
	s.held = [3]*tensor{}
	mark := len(s.unitHold)
	y, out := s.layer(in, x, sh)
	if in.unit {
		for _, t := range s.unitHold[mark:] {
			s.unref(t)
		}
		s.unitHold = s.unitHold[:mark]
	}
	if !in.takesX {
		s.unref(x)
	}
	for _, t := range held {
		s.unref(t)
	}
	if c, ok := in.op.(collectiveOp); ok && c.k.Closes {
		s.closeModule()
	}
	return y, out
}

type span struct {
	start, end int
	ckpt       bool
}

// segments splits n consecutive units per the checkpointing mode: each unit
// (every-block), groups of k (every-k), or checkpoint_sequential's
// round(√n) segments, whose last segment is not checkpointed.
func (s *sim) segments(n int) []span {
	var out []span
	switch s.ckptMode {
	case model.CkptBlock, model.CkptEveryK:
		k := int(s.ckptK)
		if s.ckptMode == model.CkptBlock {
			k = 1
		}
		for a := 0; a < n; a += k {
			out = append(out, span{a, min(a+k, n), true})
		}
	case model.CkptSqrt:
		segs := max(1, int(math.Round(math.Sqrt(float64(n)))))
		size := n / segs
		a := 0
		for ; a < size*(segs-1); a += size {
			out = append(out, span{a, a + size, true})
		}
		out = append(out, span{a, n, false})
	}
	return out
}

// checkpointed runs units under torch.utils.checkpoint (non-reentrant):
// nothing inside is saved, but the saves are counted for the recompute's
// early stop (earlyStop); the segment keeps its input and recomputes in
// backward.
func (s *sim) checkpointed(units []*inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	var outSh model.Shape
	run := func(in *tensor) *tensor {
		y, o := s.plain(units, s.ref(in), sh)
		outSh = o
		return y
	}
	start, saving, counted := len(s.tape), s.saving, s.stop.counted
	s.saving, s.stop.counted = false, 0
	s.stop.tape = start
	y := run(x)
	saves := s.stop.counted
	var tail []gradShape
	var tailUnit int16
	if saves > 0 {
		tail = tailGrads(s.tape[s.stop.tape:])
		tailUnit = s.tailUnit(s.tape[start:], s.stop.tape-start)
	}
	s.saving, s.stop.counted = saving, counted
	s.tape = s.tape[:start]
	y.req = true
	n := s.slab.node()
	n.name, n.outs = "Checkpoint", append(s.slab.ptrs(1), y)
	n.ckpt = &ckpt{run: run, saves: saves, tail: tail, tailUnit: tailUnit}
	if u := units[len(units)-1].fsdp; u != nil {
		n.unit = u.idx // the first of the segment's units in backward
	}
	if x.req {
		n.ins = append(s.slab.ptrs(1), x)
	}
	s.save(n, x)
	n.ckpt.masks = s.segmentMasks(units, sh)
	for _, m := range n.ckpt.masks {
		if m != nil {
			s.save(n, m)
		}
	}
	if s.cfg.modelRope {
		n.ckpt.rope = s.ropeT
		for _, t := range n.ckpt.rope {
			if t != nil {
				s.save(n, t)
			}
		}
	}
	s.tape = append(s.tape, n)
	s.unref(x)
	return y, outSh
}

func (s *sim) rows(sh model.Shape) int64 { return s.cfg.batch * sh.Elems() / sh[len(sh)-1] }

// layer runs one instance; x stays held by the caller but for an
// inputTaker's (step1 reads inst.takesX).
func (s *sim) layer(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	switch in.l.Spec.(type) {
	case *model.Repeat, *model.Block:
		if in.fsdp != nil {
			return s.fsdpForward(in, x, sh) // fsdp.go
		}
		return s.run(in.body, s.ref(x), sh) // a block, or one copy of a repeat
	case *model.Fork:
		return s.fork(in, x, sh)
	case *model.Residual:
		return s.residual(in, x, sh)
	}
	if in.outSh == nil || !slices.Equal(in.inSh, sh) {
		in.inSh = sh
		in.outSh, _ = in.l.Infer(sh, nil)
	}
	out := in.outSh
	if in.l.Kind == model.KLMHead {
		out = scalarShape
	}
	s.rank = len(sh)
	return in.op.forward(s, x, sh, in.outSh), out
}

// scalarShape marks a scalar loss.
var scalarShape = model.Shape{1}

// fork runs the branches on x and sums their outputs; a holding fork
// (model.Fork.Hold) keeps each branch's output for the enclosing residual
// to free after its add (sim.forkHeld).
func (s *sim) fork(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	var sum *tensor
	var o model.Shape
	hold := in.l.Spec.(*model.Fork).Hold
	for _, b := range in.fork {
		y, so := s.run(b, s.ref(x), sh)
		o = so
		if hold {
			s.forkHeld = append(s.forkHeld, s.ref(y))
		}
		if sum == nil {
			sum = y
			continue
		}
		z := s.add(sum, y)
		z.dtAct = s.dtStream()
		s.unref(sum)
		s.unref(y)
		sum = z
	}
	return sum, o
}

// residual is shortcut(x) + body(x), in place into body's output when the
// kind says so.
func (s *sim) residual(in *inst, x *tensor, sh model.Shape) (*tensor, model.Shape) {
	r := in.l.Spec.(*model.Residual)
	var first *tensor // HoldFirst(Body): the first layer's output, kept until the add (the body's end)
	body := in.body
	h, hsh := s.ref(x), sh
	if (r.HoldFirst || r.HoldFirstBody) && len(body) > 0 {
		h, hsh = s.step1(body[0], h, sh)
		first, body = s.ref(h), body[1:]
	}
	var act *tensor // HoldChunk: the activation's output, kept with the branch
	if r.HoldChunk && len(body) >= 2 {
		h, hsh = s.step1(body[0], h, hsh)
		h, hsh = s.step1(body[1], h, hsh)
		act, body = s.ref(h), body[2:]
	}
	br, o := s.run(body, h, hsh)
	forkHeld := s.forkHeld // a holding fork's branch outputs (fork), freed after the add
	s.forkHeld = nil
	if r.HoldFirstBody {
		s.unref(first)
		first = nil
	}
	sk := s.ref(x)
	if len(in.short) > 0 {
		s.unref(sk)
		sk, _ = s.run(in.short, s.ref(x), sh)
	}
	var y *tensor
	if r.Inplace && br.elems == sk.elems {
		y = s.view(br, br.elems)
		if n := s.record("AddInplace", []*tensor{br, sk}, y); n != nil {
			n.pass = true
		}
	} else if r.ScaleBranch {
		// residual + h · m: the product, then the sum, then the product
		// goes (Granite's residual_multiplier).
		m := s.scalarOp(br)
		y = s.add(sk, m)
		s.unref(m)
	} else {
		y = s.add(sk, br)
	}
	y.dtAct = s.dtStream()
	s.unref(first)
	for _, t := range forkHeld {
		s.unref(t)
	}
	if r.Hold {
		for _, t := range s.held { // nested holds: the inner one is done
			s.unref(t)
		}
		s.held = [3]*tensor{br}
		if r.HoldChunk {
			s.held[1], s.held[2] = act, s.ref(x)
		}
	} else {
		s.unref(br)
		s.unref(act)
	}
	s.unref(sk)
	return y, o
}
