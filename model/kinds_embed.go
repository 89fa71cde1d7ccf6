package model

// Embeddings, class tokens and the language-model head.

// Layer kinds of this file.
const (
	KEmbedding  = "embedding"
	KPositions  = "positions"
	KTokenTypes = "token_types"
	KClsToken   = "cls_token"
	KTakeCls    = "take_cls"
	KLMHead     = "lm_head"
)

func init() {
	register(KEmbedding, "token embedding: ids → vectors", func() KindSpec { return &Embedding{} })
	register(KPositions, "learned absolute positions added to the stream", func() KindSpec { return &Positions{} })
	register(KTokenTypes, "learned token-type embedding added to the stream", func() KindSpec { return &TokenTypes{} })
	register(KClsToken, "prepend a learned class token", func() KindSpec { return &ClsToken{} })
	register(KTakeCls, "keep the first token only", func() KindSpec { return &TakeCls{} })
	register(KLMHead, "vocabulary projection; tie names an embedding; upcast casts logits to fp32 before the loss (transformers' causal LM loss)", func() KindSpec { return &LMHead{} })
}

// Embedding is nn.Embedding over token ids. Name labels it for an
// lm_head's tie.
type Embedding struct {
	Vocab, Dim int64
	Name       string
	// Scale multiplies the rows by a constant in their dtype, a new
	// tensor (Gemma's normalizer √Dim, Granite's embedding_multiplier).
	Scale bool
	// Hold keeps the embeddings bound until the base model's forward
	// returns: transformers' decoders bind them to inputs_embeds and pass
	// hidden_states = inputs_embeds to the first layer, rebinding only
	// hidden_states, so the first layer's input outlives it whether or
	// not a layer saves it (measured in bf16, where none does: Phi-3's
	// and Qwen3's histories free it after the final norm,
	// bench/results/2026-11-29-h200-fake-47). With Scale the scaled
	// rows are held (Gemma's scaled embedding module, Granite's
	// inputs_embeds = inputs_embeds * multiplier); under a dropout the
	// looked-up rows, while the dropout makes the stream the blocks take
	// (StarCoder2's embedding_dropout, GPT-NeoX's emb_dropout; measured:
	// StarCoder2's history at tp 2, bench/results/2026-11-27-h200x4-heldout-28).
	// Set by the llama and neox lowerings (docs/pytorch-memory.md §4), not
	// a spec key.
	Hold bool
}

// Kind is the name specs use for the kind.
func (*Embedding) Kind() string { return KEmbedding }

func (k *Embedding) decode(a *args, _ *Layer) {
	a.int("vocab", &k.Vocab, true)
	a.int("dim", &k.Dim, true)
	a.str("name", &k.Name)
	a.bool("scale", &k.Scale)
}

func (k *Embedding) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
	if len(s) != 1 {
		return nil, bad(l, "needs token ids as input")
	}
	if k.Name != "" && names != nil {
		names[k.Name] = l
	}
	return Shape{s[0], k.Dim}, nil
}

func (k *Embedding) params(*Layer) float64 { return f64(k.Vocab) * f64(k.Dim) }

// Positions are learned absolute position embeddings added to the stream.
// Hold keeps the stream input (the token embeddings) and the looked-up
// positions alive until the model's forward returns, before the LM head:
// GPT-2's GPT2Model.forward binds them to inputs_embeds and
// position_embeds for the whole block loop (docs/pytorch-memory.md §4).
//
// Parameter says the embeddings are one parameter tensor added to the
// stream as it is, broadcast over the batch (torchvision's ViT
// pos_embedding), rather than rows looked up by position ids (GPT-2's
// wpe): nothing is allocated for them, and their gradient is the stream's
// gradient summed over the batch.
//
// HoldLocal keeps the looked-up positions until the embeddings module
// returns, when the next repeat's first copy starts (BertEmbeddings'
// position_embeddings). PerBatch looks up positions per sample
// ([batch, seq] ids, as RoBERTa makes them from the input ids) rather
// than once for the batch ([1, seq]).
type Positions struct {
	Max, Dim  int64
	Hold      bool
	Parameter bool
	HoldLocal bool
	PerBatch  bool
}

// Kind is the name specs use for the kind.
func (*Positions) Kind() string { return KPositions }

func (k *Positions) decode(a *args, _ *Layer) {
	a.int("max", &k.Max, true)
	a.int("dim", &k.Dim, true)
	a.bool("hold", &k.Hold)
	a.bool("parameter", &k.Parameter)
	a.bool("hold_local", &k.HoldLocal)
	a.bool("per_batch", &k.PerBatch)
}

func (k *Positions) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	if s[0] > k.Max {
		return nil, bad(l, "sequence length %d exceeds max positions %d", s[0], k.Max)
	}
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *Positions) params(*Layer) float64 { return f64(k.Max) * f64(k.Dim) }

// TokenTypes is a learned token-type embedding added to the stream (BERT).
type TokenTypes struct {
	Max, Dim int64
	// HoldLocal keeps the stream input (the token embeddings) and the
	// looked-up rows until the embeddings module returns, when the next
	// repeat's first copy starts (BertEmbeddings.forward's inputs_embeds
	// and token_type_embeddings).
	HoldLocal bool
}

// Kind is the name specs use for the kind.
func (*TokenTypes) Kind() string { return KTokenTypes }

func (k *TokenTypes) decode(a *args, _ *Layer) {
	a.int("max", &k.Max, true)
	a.int("dim", &k.Dim, true)
	a.bool("hold_local", &k.HoldLocal)
}

func (k *TokenTypes) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *TokenTypes) params(*Layer) float64 { return f64(k.Max) * f64(k.Dim) }

// ClsToken prepends a learned class token.
type ClsToken struct{ Dim int64 }

// Kind is the name specs use for the kind.
func (*ClsToken) Kind() string { return KClsToken }

func (k *ClsToken) decode(a *args, _ *Layer) { a.int("dim", &k.Dim, true) }

func (k *ClsToken) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	return Shape{s[0] + 1, s[1]}, needWidth(l, s, k.Dim, "dim")
}

func (k *ClsToken) params(*Layer) float64 { return f64(k.Dim) }

// TakeCls keeps the first token only.
type TakeCls struct{}

// Kind is the name specs use for the kind.
func (*TakeCls) Kind() string         { return KTakeCls }
func (*TakeCls) decode(*args, *Layer) {}
func (*TakeCls) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if err := needTokens(l, s); err != nil {
		return nil, err
	}
	return Shape{s[1]}, nil
}
func (*TakeCls) params(*Layer) float64 { return 0 }

// LMHead is the vocabulary projection and the loss. Tie names the
// embedding whose weight it shares; Upcast casts the logits to fp32 before
// the loss (transformers' causal LM loss); Softcap caps the logits with
// softcap·tanh(logits/softcap).
type LMHead struct {
	Vocab, Dim int64
	Bias       bool
	Tie        string
	Upcast     bool
	Softcap    float64
	// Scale divides the logits by a constant, a new tensor, before the
	// loss (Granite's logits_scaling).
	Scale bool
	// LocalInput drops the input once the logits are made, before the
	// loss: it is a local of a head module that returns the logits
	// (BertLMPredictionHead's transform output). Without it the input
	// stays bound through the loss, as a causal LM's forward keeps
	// hidden_states.
	LocalInput bool
}

// Kind is the name specs use for the kind.
func (*LMHead) Kind() string { return KLMHead }

func (k *LMHead) decode(a *args, _ *Layer) {
	a.int("vocab", &k.Vocab, true)
	a.int("dim", &k.Dim, true)
	a.bool("bias", &k.Bias)
	a.str("tie", &k.Tie)
	a.bool("upcast", &k.Upcast)
	a.float("softcap", &k.Softcap, 0, 1e6, false)
	a.bool("scale", &k.Scale)
	a.bool("local_input", &k.LocalInput)
}

func (k *LMHead) infer(l *Layer, s Shape, names map[string]*Layer) (Shape, error) {
	if err := needWidth(l, s, k.Dim, "dim"); err != nil {
		return nil, err
	}
	if k.Tie != "" && names != nil {
		e, ok := names[k.Tie]
		if !ok {
			return nil, bad(l, "tie %q names no earlier embedding", k.Tie)
		}
		if em, _ := e.Spec.(*Embedding); em == nil || em.Vocab != k.Vocab || em.Dim != k.Dim {
			var v, d int64
			if em != nil {
				v, d = em.Vocab, em.Dim
			}
			return nil, bad(l, "tied to %q of %d×%d, but the head is %d×%d", k.Tie, v, d, k.Vocab, k.Dim)
		}
	}
	out := append(Shape(nil), s...)
	out[len(out)-1] = k.Vocab
	return out, nil
}

func (k *LMHead) params(*Layer) float64 {
	n := b64(k.Bias) * f64(k.Vocab)
	if k.Tie == "" {
		n += f64(k.Vocab) * f64(k.Dim)
	}
	return n
}
