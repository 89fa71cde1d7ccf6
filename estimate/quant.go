package estimate

import "github.com/memplan/memplan/model"

// bitsandbytes' frozen base weights (docs/lora.md §6), modelled from its
// source and never measured: bitsandbytes is not installed on the
// measuring machines. Not yet wired into the build (estimate refuses
// training.quant); the storage and the linear's op sequence are here and
// tested. When wired, every int8/nf4 result must carry the note
// "bitsandbytes is not installed on the measuring machines: 4-bit and
// 8-bit figures are modelled from its source, unmeasured".

// nf4Block and dqBlock are quantize_4bit's blocksize and the block size of
// the double quantization of its absmax.
const nf4Block, dqBlock = 64, 256

// quantPiece is one GPU tensor a quantized weight is stored as.
type quantPiece struct {
	name      string
	elems, dt int64
}

// quantStorage lists the tensors of an out×in weight quantized by
// bitsandbytes, in the order Params4bit / Int8Params create them:
// nf4 packs two weights a byte with an fp32 absmax per 64 (or, double
// quantized, a uint8 absmax per 64, an fp32 offset, an fp32 absmax per 256
// of those and the 256-entry fp32 code), plus the 16-entry nf4 code; int8
// keeps one byte a weight and an fp32 scale per output row.
func quantStorage(kind string, dq bool, out, in int64) []quantPiece {
	n := out * in
	switch kind {
	case model.QuantInt8:
		return []quantPiece{{"int8 weight (CB)", n, u8}, {"row scales (SCB)", out, f32}}
	case model.QuantNF4:
		blocks := (n + nf4Block - 1) / nf4Block
		p := []quantPiece{{"nf4 packed weight", (n + 1) / 2, u8}}
		if !dq {
			p = append(p, quantPiece{"absmax", blocks, f32})
		} else {
			p = append(p, quantPiece{"absmax (8-bit)", blocks, u8}, quantPiece{"absmax offset", 1, f32},
				quantPiece{"absmax of absmax", (blocks + dqBlock - 1) / dqBlock, f32},
				quantPiece{"8-bit dynamic code", 256, f32})
		}
		return append(p, quantPiece{"nf4 code", 16, f32})
	}
	return nil
}

// quantLinear is a frozen bitsandbytes linear over rows×in input: the input
// cast to the compute dtype, the dequantized weight (transient, in the
// compute dtype; with double quantization an fp32 absmax too) for the
// fallback GEMM training micro-batches take, the output cast back to the
// input's dtype. nf4 saves only the packed weight (never the input) and
// dequantizes again in backward; int8 casts the input to fp16, quantizes it
// row-wise (int8 and an fp32 scale per row), saves the input itself and
// dequantizes the weight in backward in the input's dtype.
func (s *sim) quantLinear(kind string, dq bool, x, w *tensor, rows, in, out, compute int64) *tensor {
	var tmp []*tensor
	xc := s.to(x, compute)
	if kind == model.QuantInt8 {
		h := s.to(x, half)
		tmp = append(tmp, h, s.alloc(rows*in, u8, catTemp, "int8 input (CA)"), s.alloc(rows, f32, catTemp, "row scales (SCA)"))
	} else {
		tmp = append(tmp, s.alloc(in*out, compute, catTemp, "dequantized weight"))
		if dq {
			tmp = append(tmp, s.alloc((in*out+nf4Block-1)/nf4Block, f32, catTemp, "dequantized absmax"))
		}
	}
	y := s.alloc(rows*out, compute, catTemp, "matmul out")
	s.gemm(compute, false)
	if n := s.record("MatMul"+kind, []*tensor{xc, w}, y); n != nil {
		n.gemm = true
		s.save(n, w)
		n.bwdTemp = in * out * compute
		if kind == model.QuantInt8 {
			s.save(n, x)
			n.bwdTemp = in*out*x.dt + rows*out*x.dt
		}
	}
	for i := len(tmp) - 1; i >= 0; i-- {
		s.unref(tmp[i])
	}
	s.unref(xc)
	r := s.to(y, x.dt)
	s.unref(y)
	return r
}
