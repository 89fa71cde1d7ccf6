package estimate

import "github.com/memplan/memplan/model"

// Embeddings, class tokens and the language-model head with its loss.

func init() {
	register(model.KEmbedding, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.Embedding)
		o := &embeddingOp{k, s.matrix(k.Vocab, k.Dim, 1, "embedding.weight")}
		if k.Name != "" {
			names[k.Name] = o.w
		}
		return o
	})
	register(model.KPositions, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.Positions)
		return &addedEmbeddingOp{dim: k.Dim, perBatch: k.PerBatch, hold: k.Hold, embHold: k.HoldLocal,
			param: k.Parameter, w: s.matrix(k.Max, k.Dim, 1, model.KPositions+".weight")}
	})
	register(model.KTokenTypes, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		k := l.Spec.(*model.TokenTypes)
		return &addedEmbeddingOp{dim: k.Dim, perBatch: true, embHold: k.HoldLocal, embHoldX: k.HoldLocal,
			w: s.matrix(k.Max, k.Dim, 1, model.KTokenTypes+".weight")}
	})
	register(model.KClsToken, func(s *sim, l *model.Layer, _ map[string]*tensor) op {
		return &clsTokenOp{s.param(l.Spec.(*model.ClsToken).Dim, "class_token")}
	})
	register(model.KTakeCls, func(*sim, *model.Layer, map[string]*tensor) op { return takeClsOp{} })
	register(model.KLMHead, func(s *sim, l *model.Layer, names map[string]*tensor) op {
		k := l.Spec.(*model.LMHead)
		w := names[k.Tie]
		if k.Tie == "" || w == nil {
			w = s.matrix(k.Vocab, k.Dim, 1, "lm_head.weight")
		} else if s.wholeBuild {
			// Built on the GPU (loadWhole): the head's Linear allocates
			// its own weight, which tying to the embedding then frees;
			// the tied weight now has two modules to be replaced in.
			s.unref(s.alloc(k.Vocab*k.Dim, s.cfg.param, catParam, "lm_head.weight (before tying)"))
			w.refs++
			s.tiedWhole = w
		}
		return &lmHeadOp{k, w, s.optParam(k.Bias, k.Vocab, "lm_head.bias")}
	})
}

type embeddingOp struct {
	k *model.Embedding
	w *tensor
}

func (o *embeddingOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	y := s.embedding(x, o.w, s.cfg.batch*sh[0], o.k.Dim)
	if o.k.Scale {
		// Gemma's scaled embedding module, Granite's inputs_embeds *
		// embedding_multiplier: a new tensor in the rows' dtype; the
		// looked-up rows go with the name.
		y = s.rescale(y)
	}
	if o.k.Hold {
		// inputs_embeds, until the base model returns (dropBodyHold).
		s.bodyHold = append(s.bodyHold, s.ref(y))
	}
	return y
}

// addedEmbeddingOp is a learned embedding added to the stream: positions
// (wpe(position_ids) is [1, seq, dim], broadcast over the batch) or token
// types (a [batch, seq] index). hold keeps the stream input and the
// looked-up rows until the model's forward returns (model.Positions.Hold);
// embHold the rows and embHoldX the stream input until the embeddings
// module returns (HoldLocal of model.Positions and model.TokenTypes).
type addedEmbeddingOp struct {
	dim      int64
	perBatch bool
	hold     bool
	embHold  bool
	embHoldX bool
	param    bool // model.Positions.Parameter: w is added as it is
	w        *tensor
}

func (o *addedEmbeddingOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	if o.param {
		y := s.add(x, o.w)
		if o.hold {
			s.bodyHold = append(s.bodyHold, s.ref(x))
		}
		return y
	}
	rows := sh[0]
	if o.perBatch {
		rows *= s.cfg.batch
	}
	ids := &tensor{elems: rows, dt: i64, refs: 1}
	e := s.embedding(ids, o.w, rows, o.dim)
	y := s.add(x, e)
	switch {
	case o.hold:
		s.bodyHold = append(s.bodyHold, s.ref(x), e)
	case o.embHold:
		if o.embHoldX {
			s.embHold = append(s.embHold, s.ref(x))
		}
		s.embHold = append(s.embHold, e)
	default:
		s.unref(e)
	}
	return y
}

// dropBodyHold releases what the base model's forward kept bound in its
// locals (model.Positions.Hold, model.Repeat.HoldInput), and the
// embeddings module's (dropEmbHold): when it returns, before the LM head
// or a task head's first layer, or at the end of a forward without one.
func (s *sim) dropBodyHold() {
	s.dropEmbHold()
	for _, t := range s.bodyHold {
		s.unref(t)
	}
	s.bodyHold = s.bodyHold[:0]
	if s.cfg.modelRope {
		// The rotary tables are the base model's locals too: what holds
		// them now are the nodes that saved them and the checkpointed
		// segments' frames (ckpt.rope).
		s.dropRope()
	}
	if s.maskLocal {
		s.dropMasks()
		s.maskLocal = false
	}
}

// dropEmbHold releases what the embeddings module kept bound in its
// locals (HoldLocal of model.TokenTypes and model.Positions): it has
// returned once a repeat starts.
func (s *sim) dropEmbHold() {
	for _, t := range s.embHold {
		s.unref(t)
	}
	s.embHold = s.embHold[:0]
}

// enterRepeat runs before the first copy of a repeat: the embeddings
// module has returned (dropEmbHold), and with model.Repeat.HoldInput the
// base model's forward keeps x until it returns. run starts a new group
// of checkpointing units at such a copy (entersRepeat), so that it runs
// there whatever the checkpointing.
func (s *sim) enterRepeat(in *inst, x *tensor) {
	s.dropEmbHold()
	if in.l.Spec.(*model.Repeat).HoldInput {
		s.bodyHold = append(s.bodyHold, s.ref(x))
	}
}

// entersRepeat reports whether in is a repeat's first copy whose
// enterRepeat has something to do.
func (s *sim) entersRepeat(in *inst) bool {
	return in.first && (len(s.embHold) > 0 || in.l.Spec.(*model.Repeat).HoldInput)
}

// dropLossHold releases what the task model's forward kept bound until its
// loss was computed (model.Linear.Head).
func (s *sim) dropLossHold() {
	for _, t := range s.lossHold {
		s.unref(t)
	}
	s.lossHold = s.lossHold[:0]
}

type clsTokenOp struct{ w *tensor }

func (o *clsTokenOp) forward(s *sim, x *tensor, _, out model.Shape) *tensor {
	y := s.alloc(s.cfg.batch*out.Elems(), promote(x.dt, o.w.dt), catTemp, "cat class token")
	s.record("Cat", []*tensor{o.w, x}, y)
	return y
}

type takeClsOp struct{}

func (takeClsOp) forward(s *sim, x *tensor, _, out model.Shape) *tensor {
	// torchvision's x = self.encoder(x) has returned and rebound x
	// (model.Positions.Hold): x[:, 0] follows.
	s.dropBodyHold()
	v := s.view(x, s.cfg.batch*out.Elems())
	s.record("Select", []*tensor{x}, v)
	return v
}

type lmHeadOp struct {
	k    *model.LMHead
	w, b *tensor
}

// takesInput reports whether forward takes over the caller's hold on its
// input (model.LMHead.LocalInput).
func (o *lmHeadOp) takesInput() bool { return o.k.LocalInput }

// forward computes logits and the loss. With upcast (transformers' causal
// LM loss) the logits are cast to fp32 first and the labels are shifted
// with a pad and a contiguous copy. With model.LMHead.LocalInput it takes
// over the caller's hold on x (takesInput) and drops it once the logits
// are made.
func (o *lmHeadOp) forward(s *sim, x *tensor, sh, _ model.Shape) *tensor {
	s.dropBodyHold() // the base model's forward has returned
	k := o.k
	rows := s.rows(sh)
	logits := s.matmul(x, o.w, o.b, rows, k.Vocab)
	if k.LocalInput {
		s.unref(x)
	}
	if k.Softcap > 0 {
		logits = s.softcap(logits)
	}
	if k.Scale {
		logits = s.rescale(logits) // logits / logits_scaling (Granite)
	}
	s.lossAfterAutocast()
	src := s.ref(logits)
	var labels [2]*tensor
	if k.Upcast {
		s.unref(src)
		src = s.to(logits, f32)
		labels[0] = s.alloc(rows+s.cfg.batch, i64, catTemp, "padded labels")
		labels[1] = s.alloc(rows, i64, catTemp, "shift labels")
	}
	loss := s.crossEntropy(src, rows)
	s.dropLossHold() // the task model's forward returns
	s.unref(src)
	s.unref(labels[0])
	s.unref(labels[1])
	s.unref(logits)
	return loss
}
