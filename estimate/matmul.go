package estimate

// Matrix products: linear layers under autocast, their saved operands
// and the cuBLAS workspaces they take.

// matmul is x[rows, in] · W[out, in]ᵀ (+ b): addmm/mm. It saves each
// operand (after autocast's casts) only when the other requires grad, as
// the generated autograd code does (docs/lora.md §2): a frozen weight's
// input is not saved. The bias is not saved. A weight LoRA wraps runs its
// adapters after the base product.
func (s *sim) matmul(x, w, b *tensor, rows, out int64) *tensor {
	return s.matmulView(x, w, b, rows, out, false, false)
}

// matmulConv1D is matmul as transformers' Conv1D computes it,
// addmm(bias, x, weight): autocast casts the weight, then the input, then
// the bias (arguments right to left), so the bias's cast node runs first
// in backward (model.Linear.Conv1D).
func (s *sim) matmulConv1D(x, w, b *tensor, rows, out int64) *tensor {
	return s.matmulView(x, w, b, rows, out, false, true)
}

// matmulView is matmul; transposed says x is a transposed view (as
// nn.MultiheadAttention's in_proj sees its input), which F.linear copies to
// a row-major matrix after autocast's casts: the copy is what the product
// reads and saves, and it dies when the product returns, before the cast.
//
// Autocast's wrapper casts the op's arguments in one call expression
// (`(*F)(cached_cast(to_type, args, device_type)...)`,
// aten/src/ATen/autocast_mode.h), and GCC, which builds PyTorch's Linux
// wheels, evaluates call arguments right to left: F.linear(input, weight,
// bias) casts the bias, then the weight, then the input (measured:
// ViT-B/16's checkpointed blocks, bench/results/2026-11-23-h100-traces2).
// The casts die when the op returns.
func (s *sim) matmulView(x, w, b *tensor, rows, out int64, transposed, conv1d bool) *tensor {
	if w.quant != nil {
		return s.bnbLinear(x, w, b, rows) // bitsandbytes (quant_ops.go)
	}
	if x.wrapped {
		x = s.fromLocalEach(x) // tp_collectives.go
		defer s.unref(x)
	}
	var bc, wc, xc *tensor
	if conv1d {
		wc, xc = s.castLow(w), s.castLow(x)
		if b != nil {
			bc = s.castLow(b)
		}
	} else {
		if b != nil {
			bc = s.castLow(b)
		}
		wc, xc = s.castLow(w), s.castLow(x)
	}
	if transposed {
		xh := xc
		xc = s.contiguous(xh)
		defer s.unref(xh)
		x.gradPerm = true
	}
	dt := promote(xc.dt, wc.dt)
	// The product's autograd node saves its operands before the product
	// runs (VariableType's generated code saves inputs first), so in a
	// recompute a checkpoint's early stop on these saves comes before the
	// output exists (measured: ViT-B/16's MLP, whose second linear makes
	// the block's last saves, bench/results/2026-11-23-h100-traces2): the
	// output is made after the node's saves, unless they stopped the
	// recompute.
	y := s.unmade(rows*out, dt, catTemp, "matmul out")
	out0 := y
	if b == nil {
		s.recordMm(xc, wc, y)
	} else if transposed {
		// output = matmul(input, weight.t()); output.add_(bias): the add's
		// node runs first in backward and sums the bias's gradient.
		s.recordMm(xc, wc, y)
		v := s.view(y, y.elems)
		if n := s.record("AddInplace", []*tensor{y, bc}, v); n != nil {
			n.pass = true
			if bc.req {
				n.reduceTemp = s.columnSumScratch(rows, out, dt)
			}
		}
		s.unref(y)
		y = v
	} else if n := s.record("Addmm", []*tensor{xc, wc, bc}, y); n != nil {
		// AddmmBackward0 (addmm(bias, x, Wᵀ)): PyTorch's generated
		// backward computes the gradients in the sorted order of the
		// input names (mat1 = x, mat2 = Wᵀ, self = bias) and releases the
		// saved tensors sorted by name (mat1_, mat2_); docs/pytorch-memory.md §4.
		s.linearNode(n, xc, wc)
		n.biasFirst = wc.req && bc.req // ins end [W, b]
		if bc.req {
			n.reduceTemp = s.columnSumScratch(rows, out, dt)
		}
	}
	s.make(out0)
	// A transposed input goes through at::matmul and add_ (mm, no cublasLt
	// epilogue) rather than addmm.
	s.gemm(dt, b != nil && !transposed)
	s.unref(xc)
	s.unref(wc)
	s.unref(bc)
	if w.lora != nil {
		y = s.loraForward(x, y, w.lora, rows) // takes over y
	}
	return y
}

// recordMm is a linear layer without bias: x.reshape(-1, in).mm(Wᵀ), whose
// MmBackward0 names x self and Wᵀ mat2. The generated backward computes
// mat2's gradient first, then self's, and releases mat2_ before self_
// (sorted names; docs/pytorch-memory.md §4).
func (s *sim) recordMm(xc, wc, y *tensor) {
	n := s.record("Mm", []*tensor{wc, xc}, y)
	if n == nil {
		return
	}
	s.linearNode(n, wc, xc)
}

// linearNode marks n a linear layer's product node and saves its operands:
// a when b requires grad, then b when a does, the order the node releases
// them in. Over a 3-D input (rank) the input's gradient is a view of the
// product (node.viewGrad).
func (s *sim) linearNode(n *node, a, b *tensor) {
	n.gemm = true
	n.viewGrad = s.rank >= 2
	if b.req {
		s.save(n, a)
	}
	if a.req {
		s.save(n, b)
	}
}
