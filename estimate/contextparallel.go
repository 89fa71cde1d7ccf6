package estimate

import (
	"fmt"

	"github.com/memplan/memplan/model"
)

// Context parallelism (docs/parallelism.md §3.3). model.LowerRank lowers
// the model to one rank's program: every layer runs on the rank's s/c
// tokens (simulateRank sets the sequence), and each attention layer
// becomes ring attention, simulated here; the projections, rotary
// embeddings and output projection are attention's own.
//
// The ring is torch 2.11's torch/distributed/tensor/experimental/
// _context_parallel/_attention.py with load balancing (rank r holds chunks
// r and 2c − 1 − r of the sequence), the default all-gather rotation and
// the cuDNN or flash kernel. The figures are rank 0's: the ranks' ring
// steps differ (rank r runs its later steps i ≤ r with all its queries
// against half the keys, i > r with half its queries against all of
// them), and simulating the last rank as well gave figures 0–1.2% above
// rank 0's and further from every measured maximum (docs/parallelism.md
// §3.3), at twice the cost.

func init() {
	register(model.KRingAttention, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.RingAttention)
		a := buildAttention(s, &model.Layer{Kind: model.KAttention, Spec: &k.Attention}, names).(*attnOp)
		r := &ringAttnOp{attnOp: a, ranks: k.Ranks}
		if k.HF {
			// transformers' attention module around the ring: its own
			// forward with the ring as its kernel (attnOp.ring).
			a.ring = r.hfKernel
			return a
		}
		return r
	})
}

// hfKernel is the ring under transformers' attention module
// (model.RingAttention.HF): its SDPA call passes enable_gqa, so the ring
// takes the key/value heads unrepeated, and the merged output, head-major,
// is copied by the module's transpose(1, 2).contiguous().
func (r *ringAttnOp) hfKernel(s *sim, st *attnState) *tensor {
	y := r.ringHeads(s, st, false)
	c := s.contiguous(y)
	s.unref(y)
	return c
}

// cpRope is what context_parallel does with the rotary tables of a spec's
// Llama, a buffer it is handed to shard (torchtitan's freqs_cis, common.
// Llama's rope: cp.py passes buffers=[inp, labels, model.rope] with the
// ids and labels not restored): the buffer, whole, from the model's
// construction on; then on entering the context, in each micro-batch, a
// clone of it to restore on leaving (original_buffers), the rank's shard
// (_context_parallel_buffers, a [2, s/c, d] selection) and the shard's
// clone, copied into the buffer's own storage (resize_ and copy_, which
// allocate nothing), which the layers read as views; all three freed on
// leaving, after the loss's backward, the shard first (measured: TinyLlama
// at cp 8 and 131,072 tokens, a 64 MiB clone and two 8 MiB shards per step
// beside the 64 MiB buffer, bench/results/2026-11-29-h200-fake-45/
// c2-rank0.json.gz; torch 2.11's _context_parallel/_attention.py,
// context_parallel).
type cpRope struct {
	buf          *tensor    // the whole buffer, [2, s, d]
	whole, shard int64      // elements of the buffer and of the rank's shard
	copies       [3]*tensor // while the context is entered: the rank's shard, its clone, the buffer's clone
}

// cpRopeBuffer allocates the rotary buffer of a spec's Llama under context
// parallelism (cpRope) as the model's construction does, after its
// parameters, when the rank's program has ring attention with rotary
// embeddings; seq is the whole sequence, c the context-parallel ranks.
func (s *sim) cpRopeBuffer(ins []*inst, seq, c int64) {
	r := firstRing(ins)
	if r == nil || !r.rope {
		return // no rotary tables (a spec with rope_complex is Llama 4's and runs transformers' forward)
	}
	w := r.ropeWidth()
	s.cpRope = &cpRope{whole: 2 * seq * w, shard: 2 * seq / c * w}
	// In the model's dtype: fp32 as it is made, bf16 where the training
	// casts the whole model (model.to(torch.bfloat16) casts its buffers).
	s.cpRope.buf = s.alloc(s.cpRope.whole, s.cfg.master, catParam, "rotary buffer")
	s.cpRope.buf.buffer = true
	s.buffers = append(s.buffers, s.cpRope.buf)
}

// tables are the layers' cos and sin tables of seq·w elements each inside
// the context: views of the buffer, whose storage holds the rank's shard,
// in the dtype the rotation takes them (attnOp.ropeDt: the hidden states').
func (c *cpRope) tables(s *sim, elems, dt int64) (cos, sin *tensor) {
	cos, sin = s.view(c.buf, elems), s.view(c.buf, elems)
	cos.dt, sin.dt = dt, dt
	return cos, sin
}

// cpEnter is entering context_parallel before a micro-batch's forward: the
// buffer's clone, the rank's shard and its clone (cpRope); the layers'
// tables are views of the buffer (tables).
func (s *sim) cpEnter() {
	c := s.cpRope
	dt := c.buf.dt
	clone := s.alloc(c.whole, dt, catTemp, "rotary buffer's copy (context_parallel)")
	c.copies = [3]*tensor{
		s.alloc(c.shard, dt, catTemp, "rotary buffer's shard (context_parallel)"),
		s.alloc(c.shard, dt, catTemp, "rotary buffer's shard, cloned (context_parallel)"),
		clone,
	}
}

// cpExit is leaving context_parallel after the micro-batch's backward: the
// buffer is restored in place and the context's copies go.
func (s *sim) cpExit() {
	s.unrefAll(s.cpRope.copies[:])
	s.cpRope.copies = [3]*tensor{}
}

// firstRing is the first ring attention of a spec's program in ins, or nil.
func firstRing(ins []*inst) *ringAttnOp {
	for _, in := range ins {
		if r, ok := in.op.(*ringAttnOp); ok {
			return r
		}
		for list := range in.sublists() {
			if r := firstRing(list); r != nil {
				return r
			}
		}
	}
	return nil
}

type ringAttnOp struct {
	*attnOp
	ranks int64
}

// forward is common.Llama's attention under context_parallel: q, k, v and
// their rotary embeddings on the rank's tokens, repeat_kv's copies of the
// key/value heads (the ring's kernels take no enable_gqa), the ring, and
// the output projection.
func (r *ringAttnOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	a, k := r.attnOp, r.k
	st := s.attnState(sh[0])
	st.rows = st.b * st.seq
	a.project(s, x, st)
	if a.rope {
		a.rotary(s, x, st)
	}
	y := r.ring(s, st)
	// The merged output has the queries' head-major layout ([b, heads,
	// s, d]), so the caller's transpose(1, 2) and reshape copy it; the
	// copy is what the output projection saves (measured: 32 MiB per
	// layer for TinyLlama at s/c = 8192, common.py's o.transpose(1, 2)
	// .reshape).
	c := s.contiguous(y)
	s.unref(y)
	y = c
	s.unref(st.q)
	s.unref(st.k)
	s.unref(st.v)
	o := a.linear(s, y, a.o, a.oB, st.rows, k.Dim)
	s.unref(y)
	for i := len(st.held) - 1; i >= 0; i-- {
		s.unref(st.held[i])
	}
	return o
}

// ring is _templated_ring_attention's forward on context-parallel rank 0.
// The local keys and values are concatenated (torch.cat of their
// flattened copies) and all-gathered once into a buffer of the whole
// sequence's; NCCL holds the concatenation until the next step waits, and
// every later step that sends makes another, which goes at once. With load
// balancing, step 0 runs all the rank's queries against its own keys and
// each later step the second half of its queries against all the keys it
// received. _SDPAMerger keeps the first step's output as an fp32 copy
// (step's out.to(float32)) and merges each later one in fp32 over the
// second half, out − sigmoid(lse_b − lse)·(out − block_out) and lse −
// logsigmoid(lse − lse_b), which _partial_update then concatenates with
// the first half into a new whole (torch.cat). The merged output is cast
// back to the queries' dtype at the end. The autograd node saves the
// local q, the repeated local k and v, the output and the log-sum-exp:
// the backward gathers the keys and values again.
func (r *ringAttnOp) ring(s *sim, st *attnState) *tensor { return r.ringHeads(s, st, true) }

// ringHeads is ring, the key/value heads repeated to the query's first
// when repeat is set (torchtitan's repeat_kv).
func (r *ringAttnOp) ringHeads(s *sim, st *attnState, repeat bool) *tensor {
	k, c := r.k, r.ranks
	qc, kc, vc := s.castLow(st.q), s.castLow(st.k), s.castLow(st.v)
	qn := st.rows * k.Heads * k.HeadDim
	if repeat && k.KVHeads != k.Heads {
		kr := s.alloc(qn, kc.dt, catTemp, "repeat_kv k (CP)")
		s.record("RepeatKV", []*tensor{kc}, kr)
		vr := s.alloc(qn, vc.dt, catTemp, "repeat_kv v (CP)")
		s.record("RepeatKV", []*tensor{vc}, vr)
		s.unref(kc)
		s.unref(vc)
		kc, vc = kr, vr
	}
	kvn := kc.elems + vc.elems
	lsen := st.rows * k.Heads
	var cat, all, out, lse, stepOut, stepLSE *tensor
	for i := int64(0); i < c; i++ {
		if i == 1 {
			// next_buffer's wait releases the all-gather's input, which
			// ProcessGroupNCCL held until then (measured: 2026-11-27's cp
			// × ep history frees it there, after step 0's merge).
			s.unref(cat)
			cat = nil
		}
		if i < c-1 {
			next := s.alloc(kvn, kc.dt, catTemp, "k, v concatenation (CP)")
			if all == nil {
				all = s.alloc(kvn*c, kc.dt, catTemp, "k, v all-gather (CP)")
				cat = next
			} else {
				// exchange_buffers sends only the first (the all-gather
				// ran once) and returns None: each later concatenation
				// goes as it is made (measured at cp 8: a fake process
				// group's history, bench/results/2026-11-29-h200-fake-traces).
				s.unref(next)
			}
		}
		n, ln := qn, lsen
		if i > 0 {
			n, ln = qn/2, lsen/2 // the second half of the queries
		}
		o := s.alloc(n, qc.dt, catTemp, "ring step output (CP)")
		l := s.alloc(ln, f32, catTemp, "ring step log-sum-exp (CP)")
		// The loop's out and logsumexp keep the last step's until the
		// next one returns.
		s.unref(stepOut)
		s.unref(stepLSE)
		stepOut, stepLSE = o, l
		bo := s.alloc(n, f32, catTemp, "ring step output fp32 (CP)")
		if i == 0 {
			out, lse = bo, s.ref(l)
			continue
		}
		out, lse = r.merge(s, out, lse, n, ln)
		s.unref(bo)
	}
	y := s.alloc(qn, qc.dt, catTemp, "attention out (CP)")
	s.unref(out)
	s.unref(stepOut)
	s.unref(stepLSE)
	s.unref(all)
	s.unref(cat)
	if n := s.record("RingSDPA", []*tensor{qc, kc, vc}, y); n != nil {
		s.save(n, qc, kc, vc, y, lse)
		n.ring = &ringBwd{q: qc.elems, kvn: kvn, lsen: lsen, ranks: c, dt: qc.dt}
	}
	s.unref(qc)
	s.unref(kc)
	s.unref(vc)
	s.unref(lse)
	return y
}

// merge is _SDPAMerger._merge_one of a half step's fp32 output block (n
// elements, ln log-sum-exps) into the merged out and lse, in the order
// Python evaluates it, the results put back into wholes by
// _partial_update's torch.cat. It returns the new out and lse.
func (r *ringAttnOp) merge(s *sim, out, lse *tensor, n, ln int64) (*tensor, *tensor) {
	d := s.alloc(ln, f32, catTemp, "lse difference (CP)")
	sg := s.alloc(ln, f32, catTemp, "sigmoid (CP)")
	s.unref(d)
	diff := s.alloc(n, f32, catTemp, "merge difference (CP)")
	prod := s.alloc(n, f32, catTemp, "merge product (CP)")
	s.unref(diff)
	s.unref(sg)
	o := s.alloc(n, f32, catTemp, "merged output (CP)")
	s.unref(prod)
	d = s.alloc(ln, f32, catTemp, "lse difference (CP)")
	ls := s.alloc(ln, f32, catTemp, "logsigmoid (CP)")
	s.unref(d)
	l := s.alloc(ln, f32, catTemp, "merged log-sum-exp (CP)")
	s.unref(ls)
	wl := s.alloc(lse.elems, f32, catTemp, "log-sum-exp, partial update (CP)")
	s.unref(l)
	wo := s.alloc(out.elems, f32, catTemp, "output, partial update (CP)")
	s.unref(o)
	s.unref(lse)
	s.unref(out)
	return wo, wl
}

// ringBwd is what ring attention's backward allocates from: the local
// queries' and keys' and values' elements (kvn counts both), the
// log-sum-exp's, the ranks and the half dtype.
type ringBwd struct {
	q, kvn, lsen, ranks, dt int64
}

// ringBackward is _templated_ring_attention_backward on context-parallel
// rank 0, allocation by allocation (measured: Mistral-7B at cp 8, the
// forty-fourth session's fake-group history c3, 2,369 MiB at most at
// once, which memplan had taken as one block): fp32 accumulators of dq, dk
// and dv (zeros_like); the keys and values concatenated and all-gathered
// again; step 0's kernel gradients and their workspace. Each later step
// sends the fp32 key and value gradients on (their concatenation) and
// receives the next (all-to-all), from the third on merges the second
// half of dq into a new accumulator (_partial_update), concatenates the
// keys and values again (freed at once: only the first is sent), runs
// the kernel on half the queries, then frees the step before's kernel
// gradients, its sent concatenation and what it received (at step 1 the
// key and value accumulators). After the last step the gradients rotate
// once more and dq is merged again. It returns what the backward frees
// after its gradients are cast and returned (nodeGrads allocates those):
// the dq accumulator, the last two rotations' buffers, the first
// concatenation, the last step's kernel gradients and the all-gather; nil
// for a node that is not ring attention's.
func (s *sim) ringBackward(n *node) []*tensor {
	r := n.ring
	if r == nil {
		return nil
	}
	tmp := func(elems, dt int64, what string) *tensor { return s.alloc(elems, dt, catTemp, what+" (CP)") }
	accQ := tmp(r.q, f32, "ring backward dq accumulator")
	accK := tmp(r.kvn/2, f32, "ring backward dk accumulator")
	accV := tmp(r.kvn/2, f32, "ring backward dv accumulator")
	cat0 := tmp(r.kvn, r.dt, "ring backward k, v concatenation")
	all := tmp(r.kvn*r.ranks, r.dt, "ring backward k, v all-gather")
	kernel := func(q int64) [3]*tensor {
		g := [3]*tensor{tmp(q, r.dt, "ring step dq"), tmp(r.kvn/2, r.dt, "ring step dk"), tmp(r.kvn/2, r.dt, "ring step dv")}
		s.unref(tmp(q*f32/r.dt+r.lsen, r.dt, "ring step workspace"))
		return g
	}
	prev := kernel(r.q)
	var sent, recv *tensor
	rotate := func(i int64) {
		ns := tmp(r.kvn, f32, "ring backward dk, dv sent")
		nr := tmp(r.kvn, f32, "ring backward dk, dv received")
		if i >= 2 {
			q := tmp(r.q, f32, "ring backward dq merged")
			s.unref(accQ)
			accQ = q
		}
		sent, recv = ns, nr
	}
	for i := int64(1); i < r.ranks; i++ {
		oldSent, oldRecv := sent, recv
		rotate(i)
		if i < r.ranks-1 {
			s.unref(tmp(r.kvn, r.dt, "ring backward k, v concatenation"))
		}
		g := kernel(r.q / 2)
		s.unrefAll(prev[:])
		prev = g
		s.unref(oldSent)
		if i == 1 {
			s.unref(accK)
			s.unref(accV)
		} else {
			s.unref(oldRecv)
		}
	}
	lastSent, lastRecv := sent, recv
	rotate(r.ranks)
	return []*tensor{accQ, recv, sent, lastSent, cat0, prev[0], prev[1], prev[2], lastRecv, all}
}

// cpRank is the spec one context-parallel rank runs: its share of the
// sequence (the model's checks make sure it splits into 2·cp chunks) and,
// with FSDP (ZeRO 2 or 3), the parameters sharded over dp·cp ranks as
// torchtitan's dp_shard_cp mesh does. Without FSDP, data parallelism with
// context parallelism is refused: torchtitan does not replicate over dp
// with DDP under context parallelism, and no run of it is measured.
func cpRank(spec *model.Spec) (*model.Spec, error) {
	r := *spec
	t := &r.Training
	if t.Zero == 1 || (t.DP > 1 && t.Zero == 0) {
		return nil, fmt.Errorf("context parallelism with dp %d at ZeRO stage %d is not simulated (torchtitan shards over dp·cp with FSDP: use zero 3)", t.DP, t.Zero)
	}
	if t.Seq%(2*t.CP) != 0 {
		return nil, fmt.Errorf("context parallelism: the sequence %d does not split into 2·cp = %d load-balanced chunks", t.Seq, 2*t.CP)
	}
	if t.Zero >= 2 {
		t.DP = max(t.DP, 1) * t.CP
	}
	t.Seq /= t.CP
	return &r, nil
}
