package estimate

import "github.com/memplan/memplan/model"

// The forward of bitsandbytes' frozen linears and of peft's LoRA layers
// over them (docs/lora.md §3, §6), unmeasured.

// bnbLinear runs a quantized linear and, when LoRA wraps it, peft's
// lora.Linear4bit / lora.Linear8bitLt forward after it.
func (s *sim) bnbLinear(x, w, b *tensor, rows int64) *tensor {
	var y *tensor
	if s.bnb.kind == model.QuantInt8 {
		y = s.linear8bit(x, w, b, rows)
	} else {
		y = s.linear4bit(x, w, b, rows)
	}
	if w.lora == nil {
		return y
	}
	if s.bnb.kind == model.QuantNF4 {
		// "As per Tim Dettmers, for 4bit, we need to defensively clone."
		c := s.clone(y)
		s.unref(y)
		y = c
	}
	return s.bnbLoRA(x, y, w.lora, rows) // takes over y
}

// linear4bit is Linear4bit.forward over rows×in input: the compute dtype
// is the input's (set_compute_type keeps fp32 and bf16 inputs as they
// are), gemm_4bit's fallback reconstructs the absmax (two fp32 arrays with
// double quantization), dequantizes the weight in that dtype and calls
// F.linear (whose operands autocast casts to half), and the result goes
// back to the input's dtype. MatMul4Bit saves only the packed weight; its
// backward dequantizes again (in the load dtype, cast to the gradient's)
// for the input gradient.
func (s *sim) linear4bit(x, w, b *tensor, rows int64) *tensor {
	in, out := w.quant.in, w.quant.out
	blocks := (in*out + nf4Block - 1) / nf4Block
	var tmp []*tensor
	if s.bnb.dq {
		tmp = append(tmp, s.alloc(blocks, f32, catTemp, "dequantized absmax"), s.alloc(blocks, f32, catTemp, "absmax + offset"))
	}
	tmp = append(tmp, s.alloc(in*out, x.dt, catTemp, "dequantized weight"))
	dt := x.dt
	if s.cfg.amp && dt == f32 {
		// Autocast inside the Function's forward: copies, recorded nowhere.
		dt = half
		tmp = append(tmp, s.alloc(rows*in, half, catTemp, "half copy of input"), s.alloc(in*out, half, catTemp, "half copy of dequantized weight"))
	}
	y := s.alloc(rows*out, dt, catTemp, "matmul out")
	s.gemm(dt, b != nil)
	for i := len(tmp) - 1; i >= 0; i-- {
		s.unref(tmp[i])
	}
	if n := s.record("MatMul4Bit", []*tensor{x, w, b}, y); n != nil {
		n.gemm = true
		s.save(n, w)
		n.bwdTemp = in * out * s.bnb.load
		if s.bnb.load != dt {
			n.bwdTemp += in * out * dt
		}
		if s.bnb.dq {
			n.bwdTemp += blocks * f32
		}
	}
	r := s.to(y, x.dt)
	s.unref(y)
	return r
}

// linear8bit is Linear8bitLt.forward (MatMul8bitLt, LLM.int8() with
// transformers' threshold 6.0) over rows×in input: the input cast to fp16,
// its row scales and int8 rows, the outlier search (|A| and the mask
// A.abs() ≥ threshold), the int32 product, its fp16 dequantization and the
// cast to the input's dtype. It saves the input itself, so an int8 base
// keeps every frozen linear's input; its backward dequantizes the weight in
// the input's dtype.
func (s *sim) linear8bit(x, w, b *tensor, rows int64) *tensor {
	in, out := w.quant.in, w.quant.out
	fp16In := x.dt == half && s.bnb.fp16
	var a16 *tensor
	if !fp16In {
		a16 = s.alloc(rows*in, half, catTemp, "fp16 copy of input")
	}
	sca := s.alloc(rows, f32, catTemp, "row scales (SCA)")
	ca := s.alloc(rows*in, u8, catTemp, "int8 input (CA)")
	abs := s.alloc(rows*in, half, catTemp, "abs of input")
	mask := s.alloc(rows*in, u8, catTemp, "outlier mask")
	s.unref(abs)
	s.unref(mask)
	i32 := s.alloc(rows*out, f32, catTemp, "int32 product")
	o16 := s.alloc(rows*out, half, catTemp, "fp16 product")
	y := o16
	if !fp16In {
		y = s.alloc(rows*out, x.dt, catTemp, "matmul out")
		s.unref(o16)
	}
	s.unref(i32)
	s.unref(ca)
	s.unref(sca)
	s.unref(a16)
	if n := s.record("MatMul8bitLt", []*tensor{x, w, b}, y); n != nil {
		s.save(n, w, x)
		n.bwdTemp = in*out*x.dt + out*f32
	}
	return y
}

// clone is x.clone(): a copy whose gradient passes through.
func (s *sim) clone(x *tensor) *tensor {
	y := s.alloc(x.elems, x.dt, catTemp, "clone")
	if n := s.record("Clone", []*tensor{x}, y); n != nil {
		n.pass = true
	}
	return y
}

// bnbLoRA is the adapter half of peft's lora.Linear4bit and
// lora.Linear8bitLt forward, taking over the hold on the base's result y:
// without autocast, x = x.to(adapter dtype), then output =
// lora_B(lora_A(dropout(x))) · scaling, output.to(the result's dtype)
// before the sum (unlike lora.Linear, which sums first), result = result +
// output; under autocast neither cast happens. The cast input and the
// output are locals until the function returns.
func (s *sim) bnbLoRA(x, y *tensor, ad *adapter, rows int64) *tensor {
	var xa *tensor
	if s.cfg.amp {
		xa = s.ref(x)
	} else {
		xa = s.to(x, ad.a.dt)
	}
	sc := s.adapterProduct(xa, ad, rows)
	if !s.cfg.amp {
		c := s.to(sc, y.dt)
		s.unref(sc)
		sc = c
	}
	sum := s.add(y, sc)
	s.unref(y)
	s.unref(sc)
	s.unref(xa)
	return sum
}
