package estimate

import (
	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/model"
)

// FSDP2's side streams (docs/multigpu.md, "Recipe for the simulator"). The
// caching allocator keeps a pool per stream and a block freed on one stream
// serves only that stream, so what FSDP2 allocates on its all-gather copy-in
// and reduce-scatter streams stays reserved beside the default pool.
const (
	streamAllGather     alloc.Stream = 1 // all-gather copy-in: flat all-gather outputs
	streamReduceScatter alloc.Stream = 2 // reduce-scatter: sharded gradients
)

// fsdpStreams says whether FSDP2's side streams are simulated: sharded
// data parallelism over more than one GPU with the states on the device.
func (s *sim) fsdpStreams() bool {
	return s.cfg.zero >= 2 && s.cfg.dp > 1 && s.cfg.offload == model.OffloadNone
}

// allocOn is alloc on a side stream.
func (s *sim) allocOn(elems, dt int64, cat category, name string, st alloc.Stream) *tensor {
	t := s.slab.tensor()
	*t = tensor{elems: elems, dt: dt, refs: 1, fixed: cat, cat: cat, name: name}
	n := t.bytes()
	t.blk = s.al.mallocOn(n, st)
	s.madeBlock(t, n, st)
	return t
}

// unshardAll replays the forward's all-gathers on the copy-in stream, unit
// by unit in order: with a mixed-precision policy the flat cast of the
// shard (param dtype × shard), freed once gathered; the flat all-gather
// output (param dtype × unit), freed at the next unit's copy-out, so two
// are live at a time (the unit and the one prefetched).
func (s *sim) unshardAll() {
	var prev *tensor
	for _, u := range s.units {
		var cast *tensor
		if s.cfg.master != s.cfg.param {
			cast = s.allocOn(u.shard, s.cfg.param, catTemp, "all-gather input (FSDP)", streamAllGather)
		}
		out := s.allocOn(u.gatherShard*s.cfg.dp, u.gather, catTemp, "all-gather output (FSDP)", streamAllGather)
		s.unref(cast)
		s.unref(prev)
		prev = out
	}
	s.unref(prev)
}

// gradShard gives t its sharded gradient: the first of its unit's
// parameters to reach the reduce-scatter allocates the unit's flat
// sharded gradient on the reduce-scatter stream (reduce dtype × the unit's
// shard), and every parameter of the unit gets its slice, as FSDP2 views
// one reduce-scatter output per parameter.
func (s *sim) gradShard(t *tensor) *tensor {
	u := s.unitOf[t]
	flat := s.allocOn(u.gradShard, u.reduce, catGrad, "gradient shard", streamReduceScatter)
	for _, p := range u.params {
		if p.req && p.pgrad == nil {
			p.pgrad = s.view(flat, padShard(p, u.deg))
		}
	}
	s.unref(flat)
	return t.pgrad
}

// FSDP2's unsharded parameters (docs/multigpu.md, "FSDP2's unsharded
// parameters"): each is a storage of its own on the default stream
// (FSDPParam.alloc_storage), made when its unit is unsharded — the root's
// at the forward's start, a block's before its forward and, when it was
// resharded after the forward (zero 3), again before its backward — and
// freed when the unit is resharded: after its forward (zero 3, blocks only;
// not in a checkpoint's recompute) and after its backward (the root's at
// the end of the backward). Measured: GPT-2 XL without resharding, rank 0's
// allocator history (bench/results/2026-11-26-h200x4-fsdp-noreshard).

// unshard allocates u's unsharded storages, unless it holds them. Each is
// the parameter's padded shard times the unit's ranks
// (FSDPParam.init_all_gather_outputs sizes it by the all-gather input's
// numel, the padded shard, and alloc_storage keeps it whole; the parameter
// is a view of its first rows): a block's 8 experts over 16 ranks keep 16
// rows, twice the experts (held-out set 88's Mixtral over 16 fake ranks,
// bench/results/2026-11-29-h200-fake-46/).
//
// A parameter sharded along its second dimension (a routed expert's marked
// dim1) is copied out through a temporary of the same size, allocated
// after its storage and chunk-cat into it; the temporaries go when
// foreach_all_gather_copy_out returns, after every storage is filled
// (measured: Llama 4 Scout's experts over 64 fake ranks,
// bench/results/2026-11-29-h200-fake-46/trace-91-c1-rank0.json.gz).
func (s *sim) unshard(u *fsdpUnit) {
	if u.unsharded {
		return
	}
	u.unsharded = true
	u.held = u.held[:0]
	var tmp []*tensor
	for _, p := range u.order {
		n := u.storage(p)
		t := s.alloc(n, p.dt, catParam, p.name)
		t.prefix = "unsharded "
		u.held = append(u.held, t)
		if p.dim1 && u.deg > 1 {
			tmp = append(tmp, s.alloc(n, p.dt, catTemp, "all-gather copy-out (FSDP, dim 1)"))
		}
	}
	for i := len(tmp) - 1; i >= 0; i-- {
		s.unref(tmp[i])
	}
	for _, t := range u.postFwd {
		s.unref(t) // FSDPParam.to_unsharded, after the copy-out
	}
	u.postFwd = u.postFwd[:0]
}

// Resharding to N ranks (docs/multigpu.md): with reshard_after_forward=N
// (model.Training.ReshardAfterForward) FSDPParam.to_sharded_post_forward
// clones, parameter by parameter in registration order, the rank's 1/N of
// each unsharded storage (padded, in its dtype) and frees the storage; the
// backward's all-gather runs over the N ranks from those clones (with a
// mixed-precision policy copied first into one flat input on the copy-in
// stream, as the shards' cast is in the forward), and they are freed after
// the copy-out. Measured over 16 and 32 fake ranks, N = 4 and 8, with and
// without the policy: bench/results/2026-11-29-h200-fake-47 (trace-47).

// resharded is the number of ranks u stays sharded over after its
// forward: the unit's own, unless reshard_after_forward=N splits them
// (torch's _get_post_forward_mesh_info: N dividing the unit's ranks; N =
// the unit's ranks is True).
func (s *sim) resharded(u *fsdpUnit) int64 {
	if n := s.reshardTo; n > 1 && n < u.deg && u.deg%n == 0 {
		return n
	}
	return u.deg
}

// postForward is a unit's reshard after its forward: its storages freed,
// or with reshard_after_forward=N each replaced by the clone of the
// rank's 1/N of it.
func (s *sim) postForward(u *fsdpUnit) {
	n := s.resharded(u)
	if n == u.deg || !u.unsharded {
		s.reshard(u)
		return
	}
	u.unsharded = false
	for i, p := range u.order {
		t := s.alloc(u.storage(p)/n, p.dt, catParam, p.name)
		t.prefix = "post-forward shard of "
		u.postFwd = append(u.postFwd, t)
		s.unref(u.held[i])
	}
	u.held = u.held[:0]
}

// reshard frees u's unsharded storages.
func (s *sim) reshard(u *fsdpUnit) {
	if !u.unsharded {
		return
	}
	u.unsharded = false
	for _, t := range u.held {
		s.unref(t)
	}
	u.held = u.held[:0]
}

// gatherUnit is one unit's all-gather on the copy-in stream: with a
// mixed-precision policy the flat cast of the shard, freed once gathered,
// and the flat output (param dtype × the unit's padded elements), which
// the caller frees after the copy-out. A unit sharded over one rank (a
// block's experts when dp = ep) gathers nothing: its storages are filled
// from the shards with no all-gather buffer (measured: no such buffer on
// the all-gather stream, bench/results/2026-11-26-h200x4-ep-fsdp-snapshots).
func (s *sim) gatherUnit(u *fsdpUnit) *tensor {
	if u.deg == 1 {
		return nil
	}
	var cast *tensor
	if s.cfg.master != s.cfg.param {
		in := u.shard
		if len(u.postFwd) > 0 {
			in = u.shard * u.deg / s.resharded(u) // the clones, copied flat
		}
		cast = s.allocOn(in, s.cfg.param, catTemp, "all-gather input (FSDP)", streamAllGather)
	}
	out := s.allocOn(u.gatherShard*u.deg, u.gather, catTemp, "all-gather output (FSDP)", streamAllGather)
	s.communicatorUp() // the first all-gather brings its communicator up
	s.unref(cast)
	return out
}

// preForward is a unit's pre-forward: all-gather, copy-out into its
// storages, then the previous unit's all-gather output freed (forward's
// implicit prefetch keeps one until the next copy-out, all_gather_state).
// In a checkpoint's recompute a unit the backward has prefetched (a
// block's experts unit, which the block's pre-backward targets) waits on
// that all-gather instead of issuing another (FSDPParamGroup.unshard).
func (s *sim) preForward(u *fsdpUnit) {
	if u.unsharded {
		return
	}
	out := s.agNext
	if out != nil && s.agNextUnit == u.idx {
		s.agNext = nil
	} else {
		out = s.gatherUnit(u)
	}
	s.unshard(u)
	s.unref(s.agState) // a one-rank unit's gather, which makes no buffer, ends it too
	s.agState = out
}

// rootPostForward is the root's post-forward, once the model's forward
// (its loss included) has returned: with zero 3 the root is resharded
// too (fully_shard(model, reshard_after_forward=True)) unless it is kept
// (model.FSDPRootKeep: torch's default for the root), and the last
// all-gather output is freed.
func (s *sim) rootPostForward() {
	if !s.perParam {
		return
	}
	if s.cfg.zero >= 3 && s.pp == nil && !s.rootKept {
		s.postForward(s.units[0])
	}
	s.unref(s.agState)
	s.agState = nil
}

// preBackward is a unit's pre-backward: when resharded (zero 3) its
// all-gather (prefetched by the unit before it in backward, if that
// targeted it), the copy-out and the all-gather output freed; then, as
// FSDPParamGroup.pre_backward calls _backward_prefetch whether or not the
// unit was unsharded already, the prefetch of the next unit's all-gather
// (the unit before it in post-forward order; none after block 0), which
// gathers only a resharded unit. A block's experts unit that a
// checkpoint's recompute has unsharded prefetches its block's predecessor
// so (measured: DeepSeek-V2-Lite's cut under FSDP2 with expert parallelism,
// block 0's all-gather live through block 1's experts' backward,
// bench/results/2026-11-27-h200x2-deepseek-ep-traces).
func (s *sim) preBackward(u *fsdpUnit) {
	u.backward = true
	if !u.unsharded {
		out := s.agNext
		if out == nil || s.agNextUnit != u.idx {
			s.unref(out)
			out = s.gatherUnit(u)
		}
		s.agNext = nil
		s.unshard(u)
		s.unref(out)
	}
	k := u.idx - 1
	if u.idx == 0 {
		k = int16(len(s.units) - 1) // the root prefetches the last block
	}
	if k >= 1 && !s.units[k].unsharded && s.agNext == nil {
		s.agNext, s.agNextUnit = s.gatherUnit(s.units[k]), k
	}
}

// fsdpForward runs a block that is an FSDP2 unit: its pre-forward, and
// with zero 3 its reshard after. A checkpoint's recompute of a unit whose
// pre-backward has run skips both (FSDPState._pre_forward in the
// PRE_BACKWARD state); the other units of a longer segment unshard as in a
// forward and are not resharded (inUnit).
func (s *sim) fsdpForward(in *inst, x *tensor, sh model.Shape) (y *tensor, out model.Shape) {
	s.inUnit(in.fsdp, func() { y, out = s.run(in.body, s.ref(x), sh) })
	return y, out
}

// inUnit runs fn as the forward of unit u (a block, or a block's experts
// unit): the nodes fn records belong to u, and fsdpForward's rules for
// its pre-forward and reshard hold, but a checkpoint's recompute never
// reshards: FSDPParamGroup.post_forward reshards only outside the
// backward (is_bw), so a unit a recompute unshards stays unsharded until
// its post-backward (measured: the experts unit of a checkpointed block,
// bench/results/2026-11-26-h200x4-ep-fsdp-snapshots).
func (s *sim) inUnit(u *fsdpUnit, fn func()) {
	prev := s.curUnit
	s.curUnit = u.idx
	restore := func() {}
	if !u.backward {
		restore = s.castRope()
		s.preForward(u)
	}
	start := len(s.tape)
	fn()
	restore()
	if u.parent != nil {
		for _, n := range s.tape[start:] {
			if n.unit == u.idx {
				n.unitEntry = true
				break
			}
		}
	}
	if s.cfg.zero >= 3 && !u.backward && !s.recomputing && s.pp == nil {
		s.postForward(u)
	}
	s.curUnit = prev
}

// castRope is FSDP2's cast of a unit's floating-point inputs to the bf16
// policy's dtype at its pre-forward (MixedPrecisionPolicy's
// cast_forward_inputs, _cast_fp_tensor), before its all-gather: where the
// blocks take fp32 rotary tables under a half stream (OLMo's), each unit
// forward makes bf16 copies of them, which its rotation uses (in bf16,
// so its products and their casts back are bf16) and saves until the
// unit's backward. Not in a recompute, which runs in the pre-backward
// state (model.KnownFailure: a checkpointed run stops there). It returns
// what puts the model's own tables back once the unit's forward is done.
// Measured: OLMo-2-1B over 8 fake ranks, two 512 KiB casts per block
// (_fsdp_common.py:178), freed in its backward
// (bench/results/2026-11-29-h200-fake-47/trace-47b-c1-rank0.json.gz).
func (s *sim) castRope() func() {
	if !s.ropeInputsFP32 || s.recomputing || !s.perParam || s.cfg.master == s.cfg.param {
		return func() {}
	}
	own := s.ropeT
	for i, t := range own {
		if t != nil && t.dt == f32 {
			c := s.alloc(t.elems, s.cfg.param, catTemp, t.name)
			c.prefix = "FSDP's cast of "
			s.ropeT[i] = c
		}
	}
	return func() {
		for i, t := range s.ropeT {
			if t != own[i] {
				s.unref(t) // the unit's saved nodes keep them to its backward
			}
		}
		s.ropeT = own
	}
}

// inExpertsUnit runs f, a block's experts, in their FSDP2 unit when they
// have one of their own (expertsUnit).
func (s *sim) inExpertsUnit(f func()) {
	if u := s.expertsUnit(); u != nil {
		s.inUnit(u, f)
		return
	}
	f()
}

// expertsUnit is the experts unit nested in the block running its forward,
// or nil (no expert parallelism, or no FSDP2 units).
func (s *sim) expertsUnit() *fsdpUnit {
	if !s.perParam || s.curUnit <= 0 {
		return nil
	}
	return s.units[s.curUnit].nested
}

// outsideUnit is the unit of the nodes of a loss the training loop
// computes outside the model (node.unit, sim.curUnit, sim.bwdUnit).
const outsideUnit = -1

// fsdpBackwardAt is the backward reaching a node of unit k: the block it
// leaves runs its post-backward and the block it enters is unsharded (its
// pre-backward; a no-op unless resharded after forward). A block's experts
// unit nests in it: entering it from the block leaves the block
// unsharded, and leaving it back to the block runs its post-backward only.
func (s *sim) fsdpBackwardAt(k int16) {
	if s.bwdUnit == outsideUnit {
		// Leaving the loop's loss (lossAfterAutocast): the gradient of
		// the model's output is ready, so the root's pre-backward runs,
		// and then the unit's the backward enters.
		s.bwdUnit = 0
		s.preBackward(s.units[0])
		if k == 0 {
			return
		}
	}
	if cur := s.bwdUnit; cur > 0 {
		u, next := s.units[cur], s.units[k]
		switch {
		case next.parent == u: // into the block's experts
			s.bwdUnit = k
			s.preBackward(next)
			return
		case u.parent == next: // back out to the block
			s.postBackward(u)
			s.bwdUnit = k
			return
		}
		s.postBackward(u)
		if u.parent != nil {
			s.postBackward(u.parent)
		}
	}
	s.bwdUnit = k
	if k > 0 {
		s.preBackward(s.units[k])
	}
}

// fsdpLeaveNested is the backward leaving a nested unit (a block's
// experts) through its first node: FSDP2 wraps a unit's inputs in
// RegisterPostBackwardFunction, whose backward runs the unit's
// post-backward when their gradients are ready and only then hands them
// on, so they are summed into the gradients of the tensors outside (the
// block's normalised hidden states, which the shared expert and the
// routers also read) after it (measured: Qwen2-MoE's experts under EP,
// bench/results/2026-11-26-h200x4-ep-fsdp-snapshots). A block's own
// inputs are summed inside the block, before its post-backward, as the
// transitions between blocks already order.
func (s *sim) fsdpLeaveNested(k int16) {
	u := s.units[k]
	if u.parent == nil || s.bwdUnit != k {
		return
	}
	s.postBackward(u)
	s.bwdUnit = u.parent.idx
}

// postBackward is FSDPParamGroup.post_backward: the unit is resharded,
// then foreach_reduce copies its gradients into one reduce-scatter input
// (the reduce dtype × the unit's padded elements, on the default stream),
// after freeing the previous unit's, and drops them; the input is kept
// until the next unit's post-backward (reduce_scatter_state); the output
// is allocated on the reduce-scatter stream.
func (s *sim) postBackward(u *fsdpUnit) {
	u.backward = false
	if s.noSync {
		// A pipeline's micro-batches (stage.py: set_reshard_after_backward
		// and set_requires_gradient_sync False) keep the unit unsharded
		// and its gradients whole until fsdpPostStep.
		return
	}
	s.reshard(u)
	if len(u.grads) == 0 {
		return
	}
	s.unref(s.rsInput)
	if u.deg > 1 {
		// A gradient sharded along its second dimension is first
		// rearranged, its chunks concatenated along the first into a copy
		// that replaces it (foreach_reduce's torch.cat).
		for _, p := range u.grads {
			if p.dim1 && p.grad != nil {
				c := s.alloc(p.grad.elems, p.grad.dt, catTemp, "gradient chunks (FSDP, dim 1)")
				s.unref(p.grad)
				p.grad = c
			}
		}
	}
	s.rsInput = s.alloc(u.gradShard*u.deg, u.reduce, catTemp, "reduce-scatter input (FSDP)")
	for i, p := range u.grads {
		s.unref(p.grad)
		p.grad = nil
		u.grads[i] = nil
	}
	u.grads = u.grads[:0]
	// The reduce-scatter's output, on its own stream, becomes the
	// sharded gradients (the first backward of a step makes it).
	if u.trainable != nil && u.trainable.pgrad == nil {
		s.gradShard(u.trainable)
	}
}

// fsdpEndBackward runs the post-backward of every unit still unsharded
// after a backward, the root's last (its final callback), and frees the
// last reduce-scatter input.
func (s *sim) fsdpEndBackward() {
	for i := len(s.units) - 1; i >= 0; i-- {
		s.postBackward(s.units[i])
	}
	s.unref(s.rsInput)
	s.rsInput = nil
	s.unref(s.agNext)
	s.unref(s.agState) // a recompute's forward all-gather, if any
	s.agNext, s.agState = nil, nil
	s.bwdUnit = 0
}

// fsdpPostStep is a pipeline stage's _post_backward after the step's last
// backward (stage.py): gradient sync and resharding back on, every unit's
// post-backward in FSDP's state order (the root, then the blocks), each
// resharding and reducing the whole gradients the micro-batches
// accumulated, then the root's final callback.
func (s *sim) fsdpPostStep() {
	s.noSync = false
	for _, u := range s.units {
		for _, p := range u.params {
			if p.pgrad != nil {
				p.grad, p.pgrad = p.pgrad, nil
				u.grads = append(u.grads, p)
			}
		}
		s.postBackward(u)
	}
	s.fsdpEndBackward()
	s.noSync = true
}
