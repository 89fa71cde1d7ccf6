package model

// Lower returns the layer tree of a model: the explicit layers for the
// sequential type, or the tree a shorthand stands for. Each shorthand follows
// the implementation users train (transformers' GPT2LMHeadModel,
// LlamaForCausalLM and BertForMaskedLM, torchvision's resnet and vit), so
// that the estimator sees the same operations PyTorch runs.
func (m *Model) Lower() []Layer {
	switch m.Type {
	case GPT2:
		return m.lowerGPT2()
	case Llama:
		return m.lowerLlama()
	case BERT:
		return m.lowerBERT()
	case ResNet:
		return m.lowerResNet()
	case ViT:
		return m.lowerViT()
	case NeoX:
		return m.lowerNeoX()
	}
	return m.Layers
}

func seq(ls ...Layer) []Layer { return ls }

func dropout(p float64) []Layer {
	if p <= 0 {
		return nil
	}
	return []Layer{L(&Dropout{P: p})}
}

func cat(parts ...[]Layer) []Layer {
	var out []Layer
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// lowerGPT2 follows transformers' GPT2Block: resid_dropout runs inside
// the attention module, which frees its packed projection on return;
// hidden_states = ln_1(x) stays bound until the residual add, and
// attn_output until the block returns (after the MLP's add); ln_2's
// output likewise until the second add; GPT2Model.forward keeps
// inputs_embeds and position_embeds until it returns (docs/pytorch-memory.md §4).
func (m *Model) lowerGPT2() []Layer {
	d, inter := m.Hidden, m.Intermediate
	block := cat(
		seq(L(&Residual{Hold: true, HoldFirst: true}, cat(
			seq(ln(d),
				L(&Attention{Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
					Bias: true, OutBias: true, Causal: true, FusedQKV: true, KVCache: !m.NoCache, P: m.AttnDropout,
					OutDropout: m.Dropout, Style: "hf", Conv1D: true, Softmax: SoftmaxValue})))...)),
		seq(L(&Residual{HoldFirst: true}, cat(
			seq(ln(d),
				conv1D(d, inter),
				Act(m.Activation),
				conv1D(inter, d)),
			dropout(m.Dropout))...)),
	)
	head := &LMHead{Vocab: m.Vocab, Dim: d, Upcast: true}
	if m.Tied {
		head.Tie = "wte"
	}
	return cat(
		seq(L(&Embedding{Vocab: m.Vocab, Dim: d, Name: "wte"}),
			L(&Positions{Max: m.Positions, Dim: d, Hold: true})),
		dropout(m.Dropout),
		seq(L(&Repeat{Times: m.NumLayers}, block...),
			ln(d),
			L(head)),
	)
}

func (m *Model) lowerLlama() []Layer {
	d := m.Hidden
	// The decoder layer registers self_attn and mlp, then its norms.
	norm := func() Layer {
		l := m.llamaNorm()
		l.Registered = 1
		return l
	}
	pre := func() []Layer {
		if m.PostNorm {
			return nil
		}
		return seq(norm())
	}
	post := func() []Layer {
		if m.SandwichNorm || m.PostNorm {
			return seq(norm())
		}
		return nil
	}
	attn := func() Layer {
		return L(&Attention{Dim: d, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim,
			Bias: m.AttentionBias, OutBias: m.OutBias, RoPE: true, Rotary: m.Rotary, Causal: true, P: m.AttnDropout,
			OutDropout: m.Dropout, Style: "hf",
			QKNorm: m.QKNorm, FusedQKV: m.FusedQKV, OutFirst: m.FusedQKV, KVCache: !m.NoCache, QKNormOffset: m.QKNorm && m.Gemma,
			QKNormWhole: m.QKNormWhole, QKNormLate: m.QKNormLate, QKNormFP32: m.QKNorm && m.NormProductFP32, RoPEFP32: m.RoPEFP32, RoPECast: m.RoPECast, RoPEConcat: m.RoPEConcat,
			ProjectFirst: m.ProjectFirst, NoRoPEPattern: m.NoRoPEPattern,
			Window: m.SlidingWindow, WindowPattern: m.SlidingPattern, Chunked: m.SlidingWindow > 0 && m.llama4(), LocalRoPE: m.LocalRoPE,
			Softcap: m.AttnSoftcap, RoPEUpcast: m.RoPEUpcast, Sinks: m.AttnSinks, RoPEHalves: m.RoPEHalves, MLA: m.mla(),
			RoPEComplex: m.RoPEComplex && m.KVLoRARank == 0, QKL2Norm: m.QKL2Norm, Temperature: m.AttnTemperature,
			Softmax: m.eagerSoftmax()})
	}
	blockWith := func(mlp []Layer) []Layer {
		// Llama4TextDecoderLayer binds the attention's output to a name
		// of its own (attention_states) and keeps the norm's output bound
		// to hidden_states until the add rebinds it: the norm's output
		// lives until the add, the attention's until the layer returns
		// (its allocator history, bench/results/2026-11-28-h200-llama4-traces).
		l4 := m.llama4()
		return seq(
			L(&Residual{ScaleBranch: m.ResidualMultiplier > 0, HoldFirst: l4, Hold: l4}, cat(pre(), seq(attn()), post())...),
			L(&Residual{ScaleBranch: m.ResidualMultiplier > 0}, cat(pre(), mlp, post())...),
		)
	}
	block := blockWith(m.mlp())
	if m.ParallelBlock {
		// Cohere's decoder layer: one norm under both branches, whose
		// output and the branches' outputs stay bound until
		// residual + attention + mlp exists (as Phi's).
		fork := L(&Fork{Hold: true})
		fork.Branches = [][]Layer{seq(attn()), m.mlp()}
		block = seq(L(&Residual{HoldFirst: true}, norm(), fork))
	}
	head := &LMHead{Vocab: m.Vocab, Dim: d, Upcast: true, Softcap: m.LogitSoftcap, Scale: m.scalesLogits()}
	if m.Tied {
		head.Tie = "embed_tokens"
	}
	dense := func() []Layer {
		return blockWith(seq(L(&GatedMLP{Dim: d, Hidden: m.DenseIntermediate, Activation: m.Activation})))
	}
	blocks := m.llamaBlocks(block, dense)
	return cat(
		seq(L(&Embedding{Vocab: m.Vocab, Dim: d, Name: "embed_tokens", Scale: m.Gemma || m.EmbeddingMultiplier > 0,
			Hold: true})),
		dropout(m.EmbeddingDropout),
		blocks,
		seq(m.llamaNorm(),
			L(head)),
	)
}

// llamaBlocks repeats a llama model's decoder layer (block) over its
// layers, with a dense MLP's layer (dense) where a mixture of experts has
// none: DeepSeek's first_k_dense_replace (the first DenseLayers), or Llama
// 4 Maverick's interleave_moe_layer_step (experts on layer i when (i+1) %
// MoEInterleave == 0; each layer its own repeat, so that its index places
// the NoPE and chunked layers, Repeat.First).
func (m *Model) llamaBlocks(block []Layer, dense func() []Layer) []Layer {
	switch n, k := m.MoEInterleave, m.DenseLayers; {
	case m.Experts > 0 && n > 1:
		var blocks []Layer
		for i := range m.NumLayers {
			body := dense()
			if (i+1)%n == 0 {
				body = block
			}
			blocks = append(blocks, L(&Repeat{Times: 1, First: i}, body...))
		}
		return blocks
	case m.Experts > 0 && k > 0:
		return seq(L(&Repeat{Times: k}, dense()...), L(&Repeat{Times: m.NumLayers - k, First: k}, block...))
	}
	return seq(L(&Repeat{Times: m.NumLayers}, block...))
}

// eagerSoftmax is how the model's eager attention makes its
// probabilities: Llama 4's eager_attention_forward takes the softmax in
// the scores' dtype and hands it on as it is (SoftmaxInput), where
// Llama's casts it from fp32 (SoftmaxFP32).
func (m *Model) eagerSoftmax() string {
	if m.llama4() {
		return SoftmaxInput
	}
	return SoftmaxFP32
}

// mla is the model's multi-head latent attention widths, or nil
// (Model.KVLoRARank).
func (m *Model) mla() *MLA {
	if m.KVLoRARank == 0 {
		return nil
	}
	return &MLA{QRank: m.QLoRARank, KVRank: m.KVLoRARank, Nope: m.QKNopeDim, Rope: m.QKRopeDim, V: m.VHeadDim, Interleave: m.RoPEInterleave, Complex: m.RoPEComplex}
}

// scalesLogits says whether the head's logits are multiplied or divided
// by a constant, a new tensor (Granite's logits_scaling, Cohere's
// logit_scale).
func (m *Model) scalesLogits() bool { return m.LogitsScaling > 0 || m.LogitScale > 0 }

// llamaNorm is a llama model's norm: an RMSNorm (LlamaRMSNorm, or
// Gemma's, or OLMo 2's), OLMo's plain LayerNorm or StarCoder2's
// nn.LayerNorm.
func (m *Model) llamaNorm() Layer {
	switch {
	case m.PlainNorm:
		return L(&LayerNorm{Dim: m.Hidden, Plain: true})
	case m.AffineNorm:
		return ln(m.Hidden)
	case m.CenteredNorm:
		return L(&RMSNorm{Dim: m.Hidden, Centered: true})
	}
	return L(&RMSNorm{Dim: m.Hidden, Offset: m.Gemma, FP32Product: m.NormProductFP32, WeightLast: m.llama4()})
}

// mlp is a Llama-style block's MLP: gated, a mixture of gated experts, or
// StarCoder2's two projections around the activation with its residual
// dropout after them (Starcoder2MLP).
func (m *Model) mlp() []Layer {
	switch {
	case m.Experts > 0:
		return seq(L(&MoE{Dim: m.Hidden, Hidden: m.Intermediate, Experts: m.Experts, TopK: m.TopK,
			Shared: m.SharedExpert, SharedGate: m.SharedGate, Activation: m.Activation, Bias: m.MLPBias,
			Router: m.Router, Gate: m.ExpertGate, Groups: m.RouterGroups, TopGroups: m.RouterTopGroups, SharedAfter: m.SharedAfter, NoRenorm: m.RouterNoRenorm, Dense: m.DenseExperts}))
	case m.PlainMLP:
		return cat(seq(linear(m.Hidden, m.Intermediate, m.MLPBias), Act(m.Activation),
			linear(m.Intermediate, m.Hidden, m.MLPBias)), dropout(m.Dropout))
	}
	return seq(L(&GatedMLP{Dim: m.Hidden, Hidden: m.Intermediate, Activation: m.Activation, Bias: m.MLPBias, Fused: m.FusedGateUp}))
}

// lowerBERT follows transformers' BertLayer. BertSelfOutput and BertOutput
// compute LayerNorm(dropout(dense(h)) + input) with the dropout's output
// bound to h until the norm returns: the residuals hold their branch.
func (m *Model) lowerBERT() []Layer {
	d := m.Hidden
	block := seq(
		L(&Residual{Hold: true}, cat(
			seq(L(&Attention{Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
				Bias: true, OutBias: true, P: m.AttnDropout, Style: "hf", Softmax: SoftmaxInput})),
			dropout(m.Dropout))...),
		ln(d),
		L(&Residual{Hold: true, HoldChunk: true}, cat(
			seq(linear(d, m.Intermediate, true),
				Act(m.Activation),
				linear(m.Intermediate, d, true)),
			dropout(m.Dropout))...),
		ln(d),
	)
	head := &LMHead{Vocab: m.Vocab, Dim: d, Bias: true, LocalInput: true}
	if m.Tied {
		head.Tie = "word_embeddings"
	}
	// BertEmbeddings.forward keeps inputs_embeds, token_type_embeddings
	// and position_embeddings until it returns (HoldLocal; RoBERTa's
	// positions are per sample, Positions.PerBatch); BertModel.forward keeps its
	// embedding_output, the encoder's input, until it returns
	// (Repeat.HoldInput). Both seen in RoBERTa's and BERT's allocator
	// histories (bench/results/2026-11-26-h100x2-lora-3-traces).
	return cat(
		seq(L(&Embedding{Vocab: m.Vocab, Dim: d, Name: "word_embeddings"}),
			L(&TokenTypes{Max: m.TypeVocab, Dim: d, HoldLocal: true}),
			L(&Positions{Max: m.Positions, Dim: d, HoldLocal: true, PerBatch: m.Roberta}),
			ln(d)),
		dropout(m.Dropout),
		seq(L(&Repeat{Times: m.NumLayers, HoldInput: true}, block...),
			// BertLMPredictionHead: transform (dense, act, LayerNorm),
			// decoder; the encoder's output stays bound in the task
			// model's forward until the loss (Linear.Head), the
			// transform's output only until the logits are made
			// (LMHead.LocalInput).
			L(&Linear{In: d, Out: d, Bias: true, Head: true}),
			Act(m.Activation),
			ln(d),
			L(head)),
	)
}

// resnetStages gives torchvision's block counts per depth.
var resnetStages = map[int64]struct {
	blocks []int64
	block  string
}{
	18:  {[]int64{2, 2, 2, 2}, "basic"},
	34:  {[]int64{3, 4, 6, 3}, "basic"},
	50:  {[]int64{3, 4, 6, 3}, "bottleneck"},
	101: {[]int64{3, 4, 23, 3}, "bottleneck"},
	152: {[]int64{3, 8, 36, 3}, "bottleneck"},
}

func conv(in, out, k, stride, pad int64) Layer {
	return L(&Conv2d{ConvArgs{In: in, Out: out, Kernel: k, Stride: stride, Padding: pad}})
}

func bn(c int64) Layer { return L(&BatchNorm{Channels: c}) }

func ln(d int64) Layer { return L(&LayerNorm{Dim: d, Bias: true}) }

func linear(in, out int64, bias bool) Layer { return L(&Linear{In: in, Out: out, Bias: bias}) }

// conv1D is transformers' Conv1D, a linear layer with bias computed as
// addmm(bias, x, weight) (Linear.Conv1D).
func conv1D(in, out int64) Layer { return L(&Linear{In: in, Out: out, Bias: true, Conv1D: true}) }

func (m *Model) lowerResNet() []Layer {
	w := m.Width
	relu := func() Layer { return L(&Activation{Name: KReLU, Inplace: true}) }
	layers := seq(conv(m.Channels, w, 7, 2, 3), bn(w), relu(),
		L(&MaxPool{Kernel: 3, Stride: 2, Padding: 1}))
	in := w
	expansion := int64(1)
	if m.Block == "bottleneck" {
		expansion = 4
	}
	for i, n := range m.Blocks {
		planes := w << i
		for j := int64(0); j < n; j++ {
			stride := int64(1)
			if i > 0 && j == 0 {
				stride = 2
			}
			out := planes * expansion
			var body []Layer
			if m.Block == "bottleneck" {
				body = seq(conv(in, planes, 1, 1, 0), bn(planes), relu(),
					conv(planes, planes, 3, stride, 1), bn(planes), relu(),
					conv(planes, out, 1, 1, 0), bn(out))
			} else {
				body = seq(conv(in, planes, 3, stride, 1), bn(planes), relu(),
					conv(planes, planes, 3, 1, 1), bn(planes))
			}
			res := L(&Residual{Inplace: true}, body...)
			if stride != 1 || in != out {
				res.Shortcut = seq(conv(in, out, 1, stride, 0), bn(out))
			}
			layers = append(layers, L(&Block{}, res, relu()))
			in = out
		}
	}
	return append(layers, L(&AvgPool{}), L(&Flatten{}), linear(in, m.Classes, true))
}

func (m *Model) lowerViT() []Layer {
	d := m.Hidden
	block := seq(
		L(&Residual{}, cat(
			seq(ln(d),
				L(&Attention{Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
					Bias: true, OutBias: true, FusedQKV: true, P: m.AttnDropout, Style: "torch"})),
			dropout(m.Dropout))...),
		L(&Residual{HoldFirstBody: true}, cat(
			seq(ln(d),
				linear(d, m.Intermediate, true),
				Act(m.Activation)),
			dropout(m.Dropout),
			seq(linear(m.Intermediate, d, true)),
			dropout(m.Dropout))...),
	)
	return cat(
		seq(L(&PatchEmbed{Channels: m.Channels, Dim: d, Kernel: m.Patch}),
			L(&ClsToken{Dim: d}),
			// VisionTransformer.forward keeps the class-token concatenation
			// bound to x while self.encoder(x) runs.
			L(&Positions{Max: m.Positions, Dim: d, Parameter: true, Hold: true})),
		dropout(m.Dropout),
		seq(L(&Repeat{Times: m.NumLayers}, block...),
			ln(d),
			L(&TakeCls{}),
			linear(d, m.Classes, true)),
	)
}

// lowerNeoX is a decoder with parallel residual blocks,
// x + attn(ln(x)) + mlp(ln(x)): transformers' GPTNeoXForCausalLM (a
// LayerNorm per branch) and FalconForCausalLM (one shared LayerNorm, with
// multi-query attention).
func (m *Model) lowerNeoX() []Layer {
	d := m.Hidden
	attn := func() Layer {
		return L(&Attention{Dim: d, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: d / m.Heads,
			Bias: m.AttentionBias, OutBias: m.AttentionBias, RoPE: true, Rotary: m.Rotary, Causal: true, FusedQKV: !m.SplitQKV,
			SlicedRotary: m.SplitQKV, P: m.AttnDropout, KVCache: !m.NoCache, Style: "hf"})
	}
	// Each branch's output goes through the block's dropout before the
	// sum (Phi's resid_dropout, applied to each in turn).
	mlp := func() []Layer {
		return cat(seq(linear(d, m.Intermediate, m.MLPBias), Act(m.Activation), linear(m.Intermediate, d, m.MLPBias)), dropout(m.Dropout))
	}
	attnBranch := func() []Layer { return cat(seq(attn()), dropout(m.Dropout)) }
	// Phi's decoder layer (the neox model with separate projections)
	// binds the norm's output and each branch's output until its sum
	// with the residual is made; GPT-NeoX's and Falcon's pass them on.
	phi := m.SplitQKV
	fork := func(branches ...[]Layer) Layer { l := L(&Fork{Hold: phi}); l.Branches = branches; return l }
	var body []Layer
	res := &Residual{}
	if m.SharedNorm {
		body = seq(ln(d), fork(attnBranch(), mlp()))
		res.HoldFirst = phi
	} else {
		body = seq(fork(cat(seq(ln(d)), attnBranch()), cat(seq(ln(d)), mlp())))
	}
	head := &LMHead{Vocab: m.Vocab, Dim: d, Upcast: true, Bias: m.HeadBias}
	if m.Tied {
		head.Tie = "embed_in"
	}
	return cat(
		seq(L(&Embedding{Vocab: m.Vocab, Dim: d, Name: "embed_in", Hold: true})),
		dropout(m.EmbeddingDropout),
		seq(L(&Repeat{Times: m.NumLayers}, L(res, body...)),
			ln(d),
			L(head)),
	)
}
