package estimate

// Primitive operations. Each follows autocast's dtype policy (ops in the
// lower-precision list cast fp32 inputs to half; ops in the fp32 list cast
// half inputs to fp32; the rest run in the promoted input dtype) and saves
// what its autograd node saves (torch/csrc/autograd/generated/Functions.h).
// docs/formulas.md §B lists them with their measurements.

const cublasLtWorkspace = 1 << 20

func promote(a, b int64) int64 { return max(a, b) }

// castLow is autocast's cast for lower-precision ops: fp32 → half. Casts of
// parameters that require grad are cached for the rest of the autocast
// region (cached_cast); a frozen weight is cast anew at every use.
func (s *sim) castLow(x *tensor) *tensor {
	if !s.cfg.amp || x.dt != f32 {
		return s.ref(x)
	}
	if x.param && x.req {
		if c, ok := s.cache[x]; ok {
			return s.ref(c)
		}
	}
	c := s.alloc(x.elems, half, catTemp, x.name)
	c.prefix = "half copy of "
	c.perm = x.perm // .to() preserves strides
	s.record("ToCopy", []*tensor{x}, c)
	if x.param && x.req {
		s.cache[x] = s.ref(c)
	}
	return c
}

// castF32 is autocast's cast for fp32-list ops: half → fp32.
func (s *sim) castF32(x *tensor) *tensor {
	if !s.cfg.amp || x.dt == f32 {
		return s.ref(x)
	}
	return s.to(x, f32)
}

// view returns a tensor that shares x's storage and keeps it alive.
func (s *sim) view(x *tensor, elems int64) *tensor {
	b := x
	if x.base != nil {
		b = x.base
	}
	b.refs++
	t := s.slab.tensor()
	t.elems, t.dt, t.base, t.refs, t.req, t.fixed, t.name = elems, x.dt, b, 1, x.req, catTemp, "view"
	return t
}

// to is an explicit dtype conversion (x.float(), x.to(dtype)).
func (s *sim) to(x *tensor, dt int64) *tensor {
	if x.dt == dt {
		return s.ref(x)
	}
	c := s.alloc(x.elems, dt, catTemp, x.name)
	c.prefix = "cast of "
	c.perm, c.rowVec = x.perm, x.isRowVec()
	s.record("ToCopy", []*tensor{x}, c)
	return c
}

// unary is an elementwise op in the input's dtype; saveIn/saveOut say what
// its node keeps.
func (s *sim) unary(name string, x *tensor, saveIn, saveOut bool) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, name)
	if n := s.record(name, []*tensor{x}, y); n != nil {
		if saveIn {
			s.save(n, x)
		}
		if saveOut {
			s.save(n, y)
		}
	}
	return y
}

// softmax is torch.softmax over the last dimension: it saves its output,
// and softmax_backward_cuda_out (aten/src/ATen/native/cuda/SoftMax.cu)
// computes grad * output into a temporary after the gradient is allocated
// and frees it on return (measured: Llama-3.2-1B eager,
// 2026-11-23-h100-traces/llama1b-eager, a 128 MiB fp32 temporary after
// the probabilities' gradient).
func (s *sim) softmax(x *tensor) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "Softmax")
	if n := s.record("Softmax", []*tensor{x}, y); n != nil {
		s.save(n, y)
		n.reduceTemp, n.fnTemp = y.bytes(), true
	}
	return y
}

// contiguous is a copy to row-major order (x.contiguous(), or a reshape
// of a transposed view) whose backward is a view: nothing is saved and the
// gradient passes through.
func (s *sim) contiguous(x *tensor) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "contiguous copy")
	if n := s.record("Contiguous", []*tensor{x}, y); n != nil {
		n.pass = true
	}
	return y
}

// scalarOp is x·c: nothing saved; its backward allocates grad·c.
func (s *sim) scalarOp(x *tensor) *tensor { return s.unary("scalar op", x, false, false) }

// rescale is x = x·c (or x / c) in Python: the product, then x dropped by
// the rebinding. It consumes the caller's reference to x.
func (s *sim) rescale(x *tensor) *tensor {
	y := s.scalarOp(x)
	s.unref(x)
	return y
}

// softcap is cap·tanh(x/cap) as transformers writes it (Gemma 2's logits
// and eager attention scores): x / cap, tanh, · cap, each a new tensor of
// x's size and dtype, tanh keeping its output for backward. It consumes
// the caller's reference to x, which Python's rebinding drops once the
// division is made (x = x / cap).
func (s *sim) softcap(x *tensor) *tensor {
	d := s.rescale(x)
	t := s.unary("Tanh", d, false, true)
	s.unref(d)
	return s.rescale(t)
}

// repeatKV is transformers' repeat_kv of the keys and values to every
// query head: a copy of each (expandCopy) under grouped-query attention;
// with a single key/value head (multi-query attention) expand then
// reshape merges a dimension of size one, so it is a view that repeats
// the head with stride 0 (expandView); else k and v themselves,
// referenced. The caller unrefs what it gets.
func (s *sim) repeatKV(k, v *tensor, heads, kvHeads int64) (*tensor, *tensor) {
	switch {
	case kvHeads == heads:
		return s.ref(k), s.ref(v)
	case kvHeads == 1:
		return s.expandView(k, heads), s.expandView(v, heads)
	}
	return s.expandCopy(k, heads/kvHeads), s.expandCopy(v, heads/kvHeads)
}

// expandView is repeat_kv of a single key/value head: a view of x, rep
// times its elements, that takes no memory of its own (tensor.expanded);
// an autocast cast of it, or a matmul that folds it, makes it dense
// (measured: Gemma-3-1B in AMP, whose casts at SDPA's call are the only
// allocations of the repeated keys and values, held-out set 20's history).
func (s *sim) expandView(x *tensor, rep int64) *tensor {
	y := s.view(x, x.elems*rep)
	y.expanded, y.name = true, "repeat_kv"
	if n := s.record("Expand", []*tensor{x}, y); n != nil {
		n.sumsTo = true
	}
	return y
}

// addScalar is x + c: nothing saved, and its backward passes the gradient
// through (AddBackward0: handle_r_to_c(self, grad), no new tensor).
func (s *sim) addScalar(x *tensor) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "add scalar")
	y.rowVec = x.isRowVec()
	if n := s.record("AddScalar", []*tensor{x}, y); n != nil {
		n.pass = true
	}
	return y
}

// add is a + b with broadcasting: nothing saved, the gradient passes
// through to inputs of the output's size and is reduced for the others.
func (s *sim) add(a, b *tensor) *tensor {
	el := max(a.elems, b.elems)
	y := s.alloc(el, promote(a.dt, b.dt), catTemp, "add")
	// TensorIterator gives the result the operands' memory layout.
	y.perm = (a.perm && a.elems == el) || (b.perm && b.elems == el)
	if n := s.record("Add", []*tensor{a, b}, y); n != nil {
		n.pass = true
	}
	return y
}

// sub is a − b with broadcasting: nothing saved; in backward the
// subtrahend's gradient is −grad (SubBackward0 computes other's before
// self's, in sorted name order), computed at the output's size and summed
// down when b is broadcast; a's passes through as add's.
func (s *sim) sub(a, b *tensor) *tensor {
	el := max(a.elems, b.elems)
	y := s.alloc(el, promote(a.dt, b.dt), catTemp, "sub")
	y.perm = (a.perm && a.elems == el) || (b.perm && b.elems == el)
	if n := s.record("Sub", []*tensor{b, a}, y); n != nil {
		// record keeps only the inputs that require grad.
		n.pass, n.negFirst, n.bcast = true, b.req, true
	}
	return y
}

// mul is a * b: each operand is saved when the other requires grad.
// Autograd saves inputs before the kernel runs, so a checkpoint's
// recompute that stops at those saves never makes the output (measured:
// Qwen2-MoE's gated shared expert, the last save of its block,
// bench/results/2026-11-26-h200x4-ep-fsdp-snapshots).
func (s *sim) mul(a, b *tensor) *tensor {
	el := max(a.elems, b.elems)
	y := s.unmade(el, promote(a.dt, b.dt), catTemp, "mul")
	y.perm = (a.perm && a.elems == el) || (b.perm && b.elems == el) // as add's
	// MulBackward0 names a self and b other and, like every generated
	// node, computes the gradients in sorted name order: b's first
	// (docs/pytorch-memory.md §4; measured: GPT-2's GELU, whose tanh
	// branch gets its gradient before the 0.5·x branch).
	if n := s.record("Mul", []*tensor{b, a}, y); n != nil {
		n.bcast = true
		if b.req {
			s.save(n, a)
		}
		if a.req {
			s.save(n, b)
		}
	}
	s.make(y)
	return y
}

// activation applies a named activation function.
func (s *sim) activation(kind string, x *tensor, inplace bool) *tensor {
	switch kind {
	case "relu":
		if inplace {
			// relu_ rebases x's history: the result is a new version of
			// the same storage whose gradient flows back into x's.
			y := s.view(x, x.elems)
			if n := s.record("Relu", []*tensor{x}, y); n != nil {
				s.save(n, y)
			}
			return y
		}
		return s.unary("Relu", x, false, true)
	case "tanh":
		y := s.unary("Tanh", x, false, true)
		y.from = x
		return y
	case "gelu", "silu":
		y := s.unary(kind, x, true, false)
		y.from = x
		return y
	case "gelu_new":
		return s.geluNew(x)
	}
	panic("estimate: unknown activation " + kind)
}

// geluNew is transformers' NewGELUActivation, written out in Python:
// 0.5 * input * (1.0 + tanh(√(2/π)·(input + 0.044715·input³))). Python
// evaluates 0.5 * input first and holds it while the bracket is computed.
// pow is in autocast's fp32 list, so under autocast everything after it
// runs in fp32.
func (s *sim) geluNew(x *tensor) *tensor {
	h := s.scalarOp(x)
	xc := s.castF32(x)
	p := s.alloc(x.elems, xc.dt, catTemp, "pow")
	if n := s.record("Pow", []*tensor{xc}, p); n != nil {
		s.save(n, xc)
		n.pairTemps = xc.bytes()
	}
	s.unref(xc)
	a := s.rescale(p)
	b := s.add(x, a)
	s.unref(a)
	c := s.rescale(b)
	t := s.unary("Tanh", c, false, true)
	s.unref(c)
	u := s.addScalar(t)
	s.unref(t)
	y := s.mul(h, u)
	s.unref(h)
	s.unref(u)
	return y
}

// dropout saves a one-byte mask; the output is a new tensor.
func (s *sim) dropout(x *tensor) *tensor {
	// dropout_cuda (aten/src/ATen/native/cuda/Dropout.cu) allocates the
	// mask first, then the output.
	mask := s.alloc(x.elems, u8, catTemp, "dropout mask")
	y := s.alloc(x.elems, x.dt, catTemp, "dropout")
	if n := s.record("Dropout", []*tensor{x}, y); n != nil {
		s.save(n, mask)
	}
	s.unref(mask)
	return y
}

// layerNorm is in autocast's fp32 list: half inputs are copied to fp32 and
// the output is fp32. It saves the (cast) input and fp32 mean and rstd per
// row.
//
// A non-contiguous input is copied to a contiguous one first, in forward
// and again in backward (input.expect_contiguous() in layer_norm_cuda and
// layer_norm_backward_cuda); the copies are transient.
func (s *sim) layerNorm(x, w, b *tensor, rows int64) *tensor {
	xc := s.castF32(x)
	var tmp *tensor
	if xc.perm {
		tmp = s.alloc(xc.elems, xc.dt, catTemp, "layernorm contiguous input")
	}
	y := s.alloc(x.elems, xc.dt, catTemp, "layernorm")
	mean := s.alloc(rows, f32, catTemp, "mean")
	rstd := s.alloc(rows, f32, catTemp, "rstd")
	s.unref(tmp)
	if n := s.record("NativeLayerNorm", []*tensor{xc, w, b}, y); n != nil {
		s.save(n, xc, mean, rstd)
		if xc.perm {
			n.bwdTemp = xc.bytes()
		}
		n.dyCopy = true
		s.layerNormPartials(n, rows, w, b)
	}
	s.unref(xc)
	s.unref(mean)
	s.unref(rstd)
	return y
}

// layerNormPartials sets the two-pass weight and bias gradients of a
// LayerNorm over rows rows: with more than 65,536 rows and fewer than half
// the SMs' worth of 32-column tiles, LaunchGammaBetaBackwardCUDAKernel
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu) writes partial sums of
// min(32768 / ceil(N / 32), ceil(M / 32)) rows for each gradient and sums
// them down (measured: Whisper's encoder at batch 64, 96,000 rows of 512,
// two 4 MiB partials and two 8 MiB column-sum scratches,
// bench/results/2026-11-23-h100-traces/whisper).
func (s *sim) layerNormPartials(n *node, rows int64, w, b *tensor) {
	const tile = 32
	if w == nil {
		return // no weight, no weight gradient (OlmoLayerNorm)
	}
	cols := w.elems
	if rows <= 65536 || cols/tile >= s.cfg.sms/2 {
		return
	}
	tiles := (cols + tile - 1) / tile
	n.partials = &partials{rows: min(32768/tiles, (rows+tile-1)/tile), cols: cols, dt: w.dt, count: 1}
	if b != nil {
		n.partials.count = 2
	}
}

// embeddingDirectRows is the most ids embedding_dense_backward_cuda sums
// without sorting them.
const embeddingDirectRows = 3072

// embedding looks rows up: it saves only the int64 ids; its backward makes a
// dense gradient of the whole table.
func (s *sim) embedding(ids, w *tensor, rows, dim int64) *tensor {
	y := s.alloc(rows*dim, w.dt, catTemp, "embedding")
	if n := s.record("Embedding", []*tensor{w}, y); n != nil {
		s.save(n, ids)
		if rows <= embeddingDirectRows {
			// embedding_dense_backward_cuda (Embedding.cu) adds up to
			// 3,072 rows straight into a zeroed gradient
			// (embedding_backward_feature_kernel): no sort, no partial
			// sums (measured: GPT-2 XL's 1,024 positions,
			// bench/results/2026-11-23-h100-traces/gpt2xl-bf16ckpt).
			return y
		}
		// embedding_dense_backward sorts the ids: a few int64 arrays per row.
		n.bwdTemp = 4 * rows * i64
		// embedding_backward_cuda_kernel (EmbeddingBackwardKernel.cu)
		// allocates the weight's gradient first, then sums the rows into
		// an upper bound of partial segments, rows + rows/NROWS_PER_THREAD
		// (10), each dim wide in the accumulation type (fp32 for fp32 and
		// half weights), and frees it before returning (its int64 offsets,
		// a small-pool block, are left out). Traces: 13,839,360 B
		// for GPT-2's 4,096 rows, 27,681,792 B for BERT's 8,192.
		parts := (rows + rows/10) * dim * f32
		n.gradWS = s.workspaces([3]inputWS{{t: w, bytes: parts}})
	} else if s.cfg.inputGrads {
		s.requireGrad(y)
	}
	return y
}

// sdpaWSExtra is what the fused SDPA backward's workspace takes beyond
// its dq accumulator and row sums (sdpa).
const sdpaWSExtra = 256

// sdpa is scaled_dot_product_attention with a fused kernel (cuDNN or
// flash on Hopper in bf16; memory-efficient in fp32). It saves q, k, v, the
// output and an fp32 logsumexp per (batch, head, query).
func (s *sim) sdpa(q, k, v *tensor, b, heads, sq, hd int64) *tensor {
	// The backward allocates dq, dk and dv, then its workspace: an fp32
	// dq accumulator and fp32 row sums, and 256 bytes more (measured, the
	// same in every trace: GPT-2 124M in AMP at batch 4, GPT-2 XL in AMP
	// at batch 4 and in bf16 at batch 6), freed before it returns.
	// With fewer key-value heads than query heads (grouped-query
	// attention) the workspace also holds dK and dV expanded to every
	// query head, in the inputs' dtype, summed down before it is freed
	// (measured: the tiny MoE, 16 query and 4 key-value heads, 32 MiB
	// more than dq's accumulator at batch 4 × 1024,
	// bench/results/moe-traces/moe-bf16-ckpt).
	y, _ := s.sdpaKernel(q, k, v, b*sq*heads*hd, b*heads*sq, 0, func(qc, kc, _ *tensor) int64 {
		ws := qc.elems*f32 + b*heads*sq*f32 + sdpaWSExtra
		if kc.elems < qc.elems {
			ws += 2 * qc.elems * kc.dt
		}
		return ws
	})
	return y
}

// sdpaKernel is a fused scaled_dot_product_attention kernel over q, k and
// v, cast by autocast right to left (matmulView: the values, the keys,
// then the queries; measured: the tiny MoE in AMP, whose rotated q and k
// are fp32, bench/results/2026-11-23-h100-traces2/moe-ckpt-amp): an
// additive mask of maskElems in the query's dtype when SDPA converts one
// (0: none), the output of outElems and an fp32 row statistic of rows; the
// node saves the cast inputs, the output, the statistic and the mask, and
// its backward takes ws(qc, kc, y) bytes of workspace after the last
// input's gradient. It returns the output and the node (nil without a
// graph), having dropped its own references to the rest.
func (s *sim) sdpaKernel(q, k, v *tensor, outElems, rows, maskElems int64, ws func(qc, kc, y *tensor) int64) (*tensor, *node) {
	vc := s.castLow(v)
	kc := s.castLow(k)
	qc := s.castLow(q)
	var mask *tensor
	if maskElems > 0 {
		mask = s.alloc(maskElems, qc.dt, catTemp, "attention mask (additive)")
	}
	y := s.alloc(outElems, qc.dt, catTemp, "attention out")
	lse := s.alloc(rows, f32, catTemp, "logsumexp")
	n := s.record("SDPA", []*tensor{qc, kc, vc}, y)
	if n != nil {
		s.save(n, qc, kc, vc, y, lse, mask)
		last := n.ins[len(n.ins)-1]
		n.gradWS = s.workspaces([3]inputWS{{t: last, bytes: ws(qc, kc, y)}})
	}
	for _, t := range []*tensor{qc, kc, vc, mask, lse} {
		s.unref(t)
	}
	return y, n
}

// crossEntropy is F.cross_entropy over rows × classes logits: log_softmax
// then nll_loss. Under autocast nll_loss is an fp32-list op, so half
// log-probs are copied to fp32 and both are kept (docs/pytorch-memory.md §4).
func (s *sim) crossEntropy(logits *tensor, rows int64) *tensor {
	lp := s.unary("LogSoftmax", logits, false, true)
	lpc := s.castF32(lp)
	loss := s.alloc(1, f32, catTemp, "loss")
	if n := s.record("NllLoss", []*tensor{lpc}, loss); n != nil {
		s.save(n, lpc)
	}
	s.unref(lpc)
	s.unref(lp)
	return loss
}
