package estimate

import "github.com/memplan/memplan/model"

// bitsandbytes' frozen base weights (docs/lora.md §6), modelled from its
// source and never measured: bitsandbytes is not installed on the
// measuring machines, so every result with training.quant carries a note
// and Result.Unmeasured says "quant".

// nf4Block and dqBlock are quantize_4bit's blocksize and the block size of
// the double quantization of its absmax.
const nf4Block, dqBlock = 64, 256

// bnbState is what the simulation knows about bitsandbytes in a run: the
// base's quantization, the linears it applies to, and the optimizer state
// it keeps in unified memory (bnbopt.go).
type bnbState struct {
	kind string // "" (the base as loaded), model.QuantInt8 or model.QuantNF4
	dq   bool   // nf4's double quantization
	fp16 bool   // the run's half dtype is fp16, not bf16 (int8 casts to fp16)
	load int64  // dtype the base is loaded in, before quantization
	// attn, mlp and other are the model's linears transformers replaces
	// (every linear but the output head: model.LoRALinears).
	attn, mlp, other []model.LoRALinear
	dynMap           bool // quantize_blockwise's shared dynamic map is on the device
	qmaps            bool // the 8-bit optimizer's two shared quantization maps are
	// paged is the optimizer state in CUDA unified memory, as resident on
	// the device (bnbopt.go).
	paged int64
}

// qweight marks a frozen quantized weight [out, in].
type qweight struct{ in, out int64 }

// splitLinears groups the model's LoRA-targetable linears by kind.
func splitLinears(spec *model.Spec) (attn, mlp, other []model.LoRALinear) {
	return splitGroups(spec.Model.LoRALinears())
}

// splitGroups splits list by LoRALinear.Group.
func splitGroups(list []model.LoRALinear) (attn, mlp, other []model.LoRALinear) {
	for _, x := range list {
		switch x.Group {
		case model.TargetsAttn:
			attn = append(attn, x)
		case model.TargetsMLP:
			mlp = append(mlp, x)
		default:
			other = append(other, x)
		}
	}
	return attn, mlp, other
}

// bnbSetup reads the spec's quantization before the model is built.
func (s *sim) bnbSetup(spec *model.Spec) {
	t := spec.Training
	s.bnb.kind, s.bnb.dq = t.Quant, t.DoubleQuant
	s.bnb.fp16 = t.Precision == model.AMPFP16
	s.bnb.load = s.cfg.param
	if t.Quant == "" {
		return
	}
	// bitsandbytes replaces Linear modules, which fused experts and
	// their routers are not (model.Model.Linears).
	s.bnb.attn, s.bnb.mlp, s.bnb.other = splitGroups(spec.Model.Linears())
	s.note("bitsandbytes is not installed on the measuring machines: the " + t.Quant +
		" figures are modelled from its source (docs/lora.md §6), unmeasured")
	if t.Quant == model.QuantNF4 {
		s.note("nf4: every linear modelled through bitsandbytes' dequantize-then-F.linear path; at ≤ 1536 tokens per micro-batch it may pick its fused kernel, which needs no dequantized weight in forward (an over-estimate of that transient)")
	} else {
		s.note("int8: LLM.int8() with threshold 6.0, modelled with no outlier columns (their fp16 slice is data-dependent and small)")
	}
	s.note("quant: the base is not passed through prepare_model_for_kbit_training (its fp32 casts of embeddings, norms and lm_head are not modelled)")
}

// quantMatrix allocates a linear weight [second, last] as bitsandbytes
// stores it when the run quantizes it (transformers replaces every linear
// but the output head), and returns nil otherwise. The weight arrives on
// the device in its load dtype, is quantized there and the original is
// freed (Params4bit._quantize, Int8Params._quantize).
func (s *sim) quantMatrix(second, last, lead int64, name string) *tensor {
	if s.bnb.kind == "" || lead != 1 {
		return nil
	}
	probe := tensor{name: name, second: second, last: last}
	if _, ok := loraLinear(&probe, s.bnb.attn, s.bnb.mlp, s.bnb.other); !ok {
		return nil
	}
	out, in := second, last
	var w *tensor
	if s.bnb.kind == model.QuantInt8 {
		w = s.quantInt8(out, in, name)
	} else {
		w = s.quantNF4(out, in, name)
	}
	w.second, w.last = out, in
	w.quant = &qweight{in: in, out: out}
	return w
}

// qpiece allocates one tensor of a quantized weight's storage, a frozen
// parameter for the rest of the run.
func (s *sim) qpiece(elems, dt int64, name string) *tensor {
	t := s.alloc(elems, dt, catParam, name)
	t.param = true
	s.params = append(s.params, t)
	return t
}

// quantInt8 is Int8Params._quantize: an fp16 copy of the weight on the
// device, int8_vectorwise_quant (an fp32 scale per output row, then the
// int8 weight), the copy freed.
func (s *sim) quantInt8(out, in int64, name string) *tensor {
	src := s.alloc(out*in, half, catTemp, name)
	src.prefix = "fp16 copy of "
	s.qpiece(out, f32, "row scales (SCB)")
	w := s.qpiece(out*in, u8, name)
	w.prefix = "int8 "
	s.unref(src)
	return w
}

// quantNF4 is Params4bit._quantize and functional.quantize_4bit, in its
// order: the loaded weight, the fp32 absmax per 64 and the packed weight,
// the 16-entry nf4 code; with double quantization the mean of the absmax,
// absmax − mean (a temporary), quantize_blockwise's shared dynamic map
// (once), its fp32 absmax per 256 and uint8 output, and a copy of the map
// for the quant state; then the temporaries and the loaded weight go.
func (s *sim) quantNF4(out, in int64, name string) *tensor {
	n := out * in
	blocks := (n + nf4Block - 1) / nf4Block
	src := s.alloc(n, s.bnb.load, catTemp, name)
	src.prefix = "loaded "
	var absmax *tensor
	if s.bnb.dq {
		absmax = s.alloc(blocks, f32, catTemp, "absmax (fp32, before double quantization)")
	} else {
		s.qpiece(blocks, f32, "absmax")
	}
	w := s.qpiece((n+1)/2, u8, name)
	w.prefix = "nf4 "
	s.qpiece(16, f32, "nf4 code")
	if s.bnb.dq {
		s.qpiece(1, f32, "absmax offset")
		shifted := s.alloc(blocks, f32, catTemp, "absmax - offset")
		if !s.bnb.dynMap {
			s.bnb.dynMap = true
			s.alloc(256, f32, catParam, "dynamic map (shared)")
		}
		s.qpiece((blocks+dqBlock-1)/dqBlock, f32, "absmax of absmax")
		s.qpiece(blocks, u8, "absmax (8-bit)")
		s.qpiece(256, f32, "dynamic map copy")
		s.unref(shifted)
		s.unref(absmax)
	}
	s.unref(src)
	return w
}

// quantStorageBytes is the resident storage of one quantized out×in
// weight (the per-weight tensors quantNF4 and quantInt8 keep).
func quantStorageBytes(kind string, dq bool, out, in int64) int64 {
	n := out * in
	if kind == model.QuantInt8 {
		return n + 4*out
	}
	blocks := (n + nf4Block - 1) / nf4Block
	b := (n+1)/2 + 16*f32
	if !dq {
		return b + blocks*f32
	}
	return b + f32 + (blocks+dqBlock-1)/dqBlock*f32 + blocks + 256*f32
}
