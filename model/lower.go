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
	return []Layer{{Kind: KDropout, P: p}}
}

func cat(parts ...[]Layer) []Layer {
	var out []Layer
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (m *Model) lowerGPT2() []Layer {
	d, inter := m.Hidden, m.Intermediate
	block := cat(
		seq(Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KLayerNorm, Dim: d, Bias: true},
				Layer{Kind: KAttention, Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
					Bias: true, OutBias: true, Causal: true, FusedQKV: true, KVCache: true, P: m.AttnDropout, Style: "hf"}),
			dropout(m.Dropout))}),
		seq(Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KLayerNorm, Dim: d, Bias: true},
				Layer{Kind: KLinear, In: d, Out: inter, Bias: true},
				Layer{Kind: m.Activation},
				Layer{Kind: KLinear, In: inter, Out: d, Bias: true}),
			dropout(m.Dropout))}),
	)
	head := Layer{Kind: KLMHead, Vocab: m.Vocab, Dim: d, Upcast: true}
	if m.Tied {
		head.Tie = "wte"
	}
	return cat(
		seq(Layer{Kind: KEmbedding, Vocab: m.Vocab, Dim: d, Name: "wte"},
			Layer{Kind: KPositions, Max: m.Positions, Dim: d}),
		dropout(m.Dropout),
		seq(Layer{Kind: KRepeat, Times: m.NumLayers, Body: block},
			Layer{Kind: KLayerNorm, Dim: d, Bias: true},
			head),
	)
}

func (m *Model) lowerLlama() []Layer {
	d := m.Hidden
	post := func() []Layer {
		if m.SandwichNorm {
			return seq(Layer{Kind: KRMSNorm, Dim: d})
		}
		return nil
	}
	block := seq(
		Layer{Kind: KResidual, Body: cat(seq(
			Layer{Kind: KRMSNorm, Dim: d},
			Layer{Kind: KAttention, Dim: d, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim,
				Bias: m.AttentionBias, RoPE: true, Causal: true, P: m.AttnDropout, Style: "hf",
				QKNorm: m.QKNorm, FusedQKV: m.FusedQKV, KVCache: true}), post())},
		Layer{Kind: KResidual, Body: cat(seq(
			Layer{Kind: KRMSNorm, Dim: d},
			m.mlp()), post())},
	)
	head := Layer{Kind: KLMHead, Vocab: m.Vocab, Dim: d, Upcast: true, Softcap: m.LogitSoftcap}
	if m.Tied {
		head.Tie = "embed_tokens"
	}
	return seq(
		Layer{Kind: KEmbedding, Vocab: m.Vocab, Dim: d, Name: "embed_tokens"},
		Layer{Kind: KRepeat, Times: m.NumLayers, Body: block},
		Layer{Kind: KRMSNorm, Dim: d},
		head,
	)
}

// mlp is a Llama-style block's MLP: gated, or a mixture of gated experts.
func (m *Model) mlp() Layer {
	if m.Experts > 0 {
		return Layer{Kind: KMoE, Dim: m.Hidden, Hidden: m.Intermediate, Experts: m.Experts, TopK: m.TopK,
			Shared: m.SharedExpert, SharedGate: m.SharedGate, Activation: m.Activation, Bias: m.MLPBias}
	}
	return Layer{Kind: KGatedMLP, Dim: m.Hidden, Hidden: m.Intermediate, Activation: m.Activation, Bias: m.MLPBias}
}

func (m *Model) lowerBERT() []Layer {
	d := m.Hidden
	block := seq(
		Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KAttention, Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
				Bias: true, OutBias: true, P: m.AttnDropout, Style: "hf"}),
			dropout(m.Dropout))},
		Layer{Kind: KLayerNorm, Dim: d, Bias: true},
		Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KLinear, In: d, Out: m.Intermediate, Bias: true},
				Layer{Kind: m.Activation},
				Layer{Kind: KLinear, In: m.Intermediate, Out: d, Bias: true}),
			dropout(m.Dropout))},
		Layer{Kind: KLayerNorm, Dim: d, Bias: true},
	)
	head := Layer{Kind: KLMHead, Vocab: m.Vocab, Dim: d, Bias: true}
	if m.Tied {
		head.Tie = "word_embeddings"
	}
	return cat(
		seq(Layer{Kind: KEmbedding, Vocab: m.Vocab, Dim: d, Name: "word_embeddings"},
			Layer{Kind: KTokenTypes, Max: m.TypeVocab, Dim: d},
			Layer{Kind: KPositions, Max: m.Positions, Dim: d},
			Layer{Kind: KLayerNorm, Dim: d, Bias: true}),
		dropout(m.Dropout),
		seq(Layer{Kind: KRepeat, Times: m.NumLayers, Body: block},
			// BertLMPredictionHead: transform (dense, act, LayerNorm), decoder.
			Layer{Kind: KLinear, In: d, Out: d, Bias: true},
			Layer{Kind: m.Activation},
			Layer{Kind: KLayerNorm, Dim: d, Bias: true},
			head),
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
	return Layer{Kind: KConv2d, In: in, Out: out, Kernel: k, Stride: stride, Padding: pad}
}

func bn(c int64) Layer { return Layer{Kind: KBatchNorm, Channels: c} }

func (m *Model) lowerResNet() []Layer {
	w := m.Width
	relu := Layer{Kind: KReLU, Inplace: true}
	layers := seq(conv(m.Channels, w, 7, 2, 3), bn(w), relu,
		Layer{Kind: KMaxPool, Kernel: 3, Stride: 2, Padding: 1})
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
				body = seq(conv(in, planes, 1, 1, 0), bn(planes), relu,
					conv(planes, planes, 3, stride, 1), bn(planes), relu,
					conv(planes, out, 1, 1, 0), bn(out))
			} else {
				body = seq(conv(in, planes, 3, stride, 1), bn(planes), relu,
					conv(planes, planes, 3, 1, 1), bn(planes))
			}
			res := Layer{Kind: KResidual, Body: body, Inplace: true}
			if stride != 1 || in != out {
				res.Shortcut = seq(conv(in, out, 1, stride, 0), bn(out))
			}
			layers = append(layers, Layer{Kind: KBlock, Body: seq(res, relu)})
			in = out
		}
	}
	return append(layers, Layer{Kind: KAvgPool}, Layer{Kind: KFlatten},
		Layer{Kind: KLinear, In: in, Out: m.Classes, Bias: true})
}

func (m *Model) lowerViT() []Layer {
	d := m.Hidden
	block := seq(
		Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KLayerNorm, Dim: d, Bias: true},
				Layer{Kind: KAttention, Dim: d, Heads: m.Heads, KVHeads: m.Heads, HeadDim: d / m.Heads,
					Bias: true, OutBias: true, FusedQKV: true, P: m.AttnDropout, Style: "torch"}),
			dropout(m.Dropout))},
		Layer{Kind: KResidual, Body: cat(
			seq(Layer{Kind: KLayerNorm, Dim: d, Bias: true},
				Layer{Kind: KLinear, In: d, Out: m.Intermediate, Bias: true},
				Layer{Kind: m.Activation}),
			dropout(m.Dropout),
			seq(Layer{Kind: KLinear, In: m.Intermediate, Out: d, Bias: true}),
			dropout(m.Dropout))},
	)
	return cat(
		seq(Layer{Kind: KPatchEmbed, Channels: m.Channels, Dim: d, Kernel: m.Patch},
			Layer{Kind: KClsToken, Dim: d},
			Layer{Kind: KPositions, Max: m.Positions, Dim: d}),
		dropout(m.Dropout),
		seq(Layer{Kind: KRepeat, Times: m.NumLayers, Body: block},
			Layer{Kind: KLayerNorm, Dim: d, Bias: true},
			Layer{Kind: KTakeCls},
			Layer{Kind: KLinear, In: d, Out: m.Classes, Bias: true}),
	)
}

// lowerNeoX is a decoder with parallel residual blocks,
// x + attn(ln(x)) + mlp(ln(x)): transformers' GPTNeoXForCausalLM (a
// LayerNorm per branch) and FalconForCausalLM (one shared LayerNorm, with
// multi-query attention).
func (m *Model) lowerNeoX() []Layer {
	d := m.Hidden
	attn := Layer{Kind: KAttention, Dim: d, Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: d / m.Heads,
		Bias: m.AttentionBias, OutBias: m.AttentionBias, RoPE: true, Rotary: m.Rotary, Causal: true, FusedQKV: true,
		KVCache: true, Style: "hf"}
	mlp := seq(Layer{Kind: KLinear, In: d, Out: m.Intermediate, Bias: m.MLPBias},
		Layer{Kind: m.Activation},
		Layer{Kind: KLinear, In: m.Intermediate, Out: d, Bias: m.MLPBias})
	ln := Layer{Kind: KLayerNorm, Dim: d, Bias: true}
	var body []Layer
	if m.SharedNorm {
		body = seq(ln, Layer{Kind: KFork, Branches: [][]Layer{seq(attn), mlp}})
	} else {
		body = seq(Layer{Kind: KFork, Branches: [][]Layer{seq(ln, attn), cat(seq(ln), mlp)}})
	}
	head := Layer{Kind: KLMHead, Vocab: m.Vocab, Dim: d, Upcast: true}
	if m.Tied {
		head.Tie = "embed_in"
	}
	return seq(
		Layer{Kind: KEmbedding, Vocab: m.Vocab, Dim: d, Name: "embed_in"},
		Layer{Kind: KRepeat, Times: m.NumLayers, Body: seq(Layer{Kind: KResidual, Body: body})},
		Layer{Kind: KLayerNorm, Dim: d, Bias: true},
		head,
	)
}
