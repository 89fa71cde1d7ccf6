package model

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/internal/units"
)

// Overrides replace training and device fields of a spec, as the command
// line's --batch, --seq and friends do. Zero values leave the spec alone.
type Overrides struct {
	Batch, Seq, Image, GradAccum, DP                              int64
	Precision, Optimizer, Checkpointing, Attention, ZeroGrad, Dev string
	// Zero is a ZeRO stage, "0" to "3" ("" leaves the spec's); Offload
	// is none, optimizer or params.
	Zero, Offload string
	// AllocConf replaces the spec's alloc_conf (PYTORCH_ALLOC_CONF syntax).
	AllocConf string
}

// Load reads and parses a spec file.
func Load(path string, o Overrides) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	return Parse(path, data, o)
}

// Parse parses a spec. file names it in errors. Errors about the content
// are *Error or ErrorList values carrying file and line.
func Parse(file string, data []byte, o Overrides) (*Spec, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, &Error{File: file, Msg: "empty spec: want fields name, model, training and device"}
		}
		return nil, syntaxError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Msg: "more than one YAML document; a spec is one"}
	}
	e := &errs{file: file}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	s := &Spec{File: file}
	top := newMapping(e, doc, "spec")
	top.str("name", &s.Name)
	if n := top.get("model"); n != nil {
		decodeModel(e, n, &s.Model)
	} else {
		e.add(doc.Line, "spec: missing required field \"model\"")
	}
	tn := top.get("training")
	if tn == nil {
		e.add(doc.Line, "spec: missing required field \"training\"")
		tn = &yaml.Node{Kind: yaml.MappingNode, Line: doc.Line}
	}
	decodeTraining(e, tn, &s.Training, &s.Model, o)
	decodeDevice(e, top.get("device"), s, o.Dev)
	top.finish()
	if err := e.err(); err != nil {
		return nil, err
	}
	validate(e, s, lineOf(top, "model"), lineOf(top, "training"))
	if err := e.err(); err != nil {
		return nil, err
	}
	return s, nil
}

func lineOf(m *mapping, key string) int {
	if v := m.vals[key]; v != nil {
		return v.Line
	}
	return m.line
}

func decodeModel(e *errs, n *yaml.Node, m *Model) {
	mm := newMapping(e, n, "model")
	m.lines = mm.keys
	line, ok := mm.str("type", &m.Type)
	if !ok {
		if mm.vals["type"] == nil && n.Kind == yaml.MappingNode {
			e.add(n.Line, "model: missing required field \"type\" (one of %s)", oneOf(ModelTypes))
		}
		return
	}
	m.Type = strings.ToLower(m.Type)
	switch m.Type {
	case GPT2, Llama, BERT:
		mm.int("layers", &m.NumLayers, true)
		mm.int("hidden", &m.Hidden, true)
		mm.int("heads", &m.Heads, true)
		mm.int("vocab", &m.Vocab, true)
		m.Intermediate = 4 * m.Hidden
		m.Tied = m.Type != Llama
		switch m.Type {
		case GPT2:
			m.Positions, m.Dropout, m.AttnDropout, m.Activation = 1024, 0.1, 0.1, KGELUNew
		case BERT:
			m.Positions, m.TypeVocab, m.Dropout, m.AttnDropout, m.Activation = 512, 2, 0.1, 0.1, KGELU
		case Llama:
			m.Activation, m.KVHeads = KSiLU, m.Heads
			if m.Heads > 0 {
				m.HeadDim = m.Hidden / m.Heads
			}
		}
		mm.int("intermediate", &m.Intermediate, m.Type == Llama)
		mm.bool("tied", &m.Tied)
		if m.Type != Llama {
			mm.int("positions", &m.Positions, false)
			mm.float("dropout", &m.Dropout, 0, 1)
		}
		mm.float("attention_dropout", &m.AttnDropout, 0, 1)
		if m.Type == BERT {
			mm.int("type_vocab", &m.TypeVocab, false)
		}
		if m.Type == Llama {
			mm.int("kv_heads", &m.KVHeads, false)
			mm.int("head_dim", &m.HeadDim, false)
			mm.bool("attention_bias", &m.AttentionBias)
			mm.bool("mlp_bias", &m.MLPBias)
			mm.bool("qk_norm", &m.QKNorm)
			mm.bool("sandwich_norm", &m.SandwichNorm)
			mm.float("logit_softcap", &m.LogitSoftcap, 0, 1e6)
			mm.int("experts", &m.Experts, false)
			mm.int("top_k", &m.TopK, m.Experts > 0)
			mm.int("shared_expert", &m.SharedExpert, false)
			mm.bool("shared_expert_gate", &m.SharedGate)
			mm.bool("fused_qkv", &m.FusedQKV)
		}
		decodeActivation(e, mm, m)
	case NeoX:
		mm.int("layers", &m.NumLayers, true)
		mm.int("hidden", &m.Hidden, true)
		mm.int("heads", &m.Heads, true)
		mm.int("vocab", &m.Vocab, true)
		m.Intermediate, m.KVHeads, m.Activation, m.AttentionBias = 4*m.Hidden, m.Heads, KGELU, true
		mm.int("intermediate", &m.Intermediate, false)
		mm.int("kv_heads", &m.KVHeads, false)
		mm.bool("tied", &m.Tied)
		mm.bool("bias", &m.AttentionBias)
		m.MLPBias = m.AttentionBias
		mm.bool("shared_norm", &m.SharedNorm)
		mm.float("rotary", &m.Rotary, 0, 1)
		decodeActivation(e, mm, m)
	case ResNet:
		m.Width, m.Classes, m.Channels = 64, 1000, 3
		mm.int("depth", &m.Depth, false)
		if mm.has("blocks") {
			decodeIntList(e, mm.get("blocks"), &m.Blocks)
			if _, ok := mm.str("block", &m.Block); !ok {
				e.add(mm.line, "model: \"blocks\" needs \"block\" (basic or bottleneck)")
			} else if m.Block != "basic" && m.Block != "bottleneck" {
				e.add(mm.keys["block"], "block: unknown block %q (valid: basic, bottleneck)", m.Block)
			}
		} else if m.Depth > 0 {
			st, ok := resnetStages[m.Depth]
			if !ok {
				e.add(mm.keys["depth"], "depth: %d is not a torchvision ResNet (valid: 18, 34, 50, 101, 152; or give blocks and block)", m.Depth)
			}
			m.Blocks, m.Block = st.blocks, st.block
		} else if n.Kind == yaml.MappingNode {
			e.add(n.Line, "model: resnet needs \"depth\" (18, 34, 50, 101, 152) or \"blocks\" and \"block\"")
		}
		var total int64
		for _, b := range m.Blocks {
			total += min(b, MaxLayers)
		}
		if total > MaxLayers/16 {
			e.add(mm.keys["blocks"], "blocks: more residual blocks than memplan simulates (%d)", MaxLayers/16)
			m.Blocks = nil
		}
		mm.int("width", &m.Width, false)
		if m.Width > 1<<20 {
			e.add(mm.keys["width"], "width: %d is larger than memplan supports (%d)", m.Width, 1<<20)
			m.Width = 64
		}
		mm.int("classes", &m.Classes, false)
		mm.int("channels", &m.Channels, false)
	case ViT:
		m.Patch, m.Classes, m.Channels, m.Activation = 16, 1000, 3, KGELU
		mm.int("layers", &m.NumLayers, true)
		mm.int("hidden", &m.Hidden, true)
		mm.int("heads", &m.Heads, true)
		m.Intermediate = 4 * m.Hidden
		mm.int("intermediate", &m.Intermediate, false)
		mm.int("patch", &m.Patch, false)
		mm.int("classes", &m.Classes, false)
		mm.int("channels", &m.Channels, false)
		mm.float("dropout", &m.Dropout, 0, 1)
		mm.float("attention_dropout", &m.AttnDropout, 0, 1)
	case Sequential:
		decodeInput(e, mm, &m.Input)
		if v := mm.get("layers"); v != nil {
			m.Layers = decodeLayers(e, v, "layers")
		} else {
			e.add(n.Line, "model: missing required field \"layers\"")
		}
	default:
		e.add(line, "type: unknown model type %q (valid: %s)", m.Type, oneOf(ModelTypes))
		return
	}
	mm.finish()
}

func decodeActivation(e *errs, mm *mapping, m *Model) {
	line, ok := mm.str("activation", &m.Activation)
	if !ok {
		return
	}
	valid := map[string]string{"gelu": KGELU, "gelu_new": KGELUNew, "gelu_pytorch_tanh": KGELU, "relu": KReLU, "silu": KSiLU, "swish": KSiLU, "tanh": KTanh}
	k, found := valid[strings.ToLower(m.Activation)]
	if !found {
		var names []string
		for n := range valid {
			names = append(names, n)
		}
		e.add(line, "activation: unknown activation %q (valid: %s)", m.Activation, oneOf(names))
		return
	}
	m.Activation = k
}

func decodeIntList(e *errs, n *yaml.Node, dst *[]int64) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		e.add(n.Line, "blocks: want a list of block counts such as [3, 4, 6, 3], got %s", describe(n))
		return
	}
	for _, c := range n.Content {
		v, err := strconv.ParseInt(c.Value, 10, 64)
		if err != nil || v <= 0 || c.Kind != yaml.ScalarNode {
			e.add(c.Line, "blocks: want positive whole numbers, got %s", describe(c))
			return
		}
		*dst = append(*dst, v)
	}
}

func decodeInput(e *errs, mm *mapping, in *Input) {
	v := mm.get("input")
	if v == nil {
		e.add(mm.line, "model: missing required field \"input\" (one of: {features: N}, tokens, {image: {channels: C}})")
		return
	}
	if v.Kind == yaml.ScalarNode && v.Value == InputTokens {
		in.Kind = InputTokens
		return
	}
	im := newMapping(e, v, "input")
	switch {
	case im.has(InputFeatures):
		in.Kind = InputFeatures
		im.int(InputFeatures, &in.Features, true)
	case im.has(InputImage):
		in.Kind = InputImage
		sub := newMapping(e, im.get(InputImage), "input.image")
		in.Channels = 3
		sub.int("channels", &in.Channels, false)
		sub.finish()
	case im.has(InputTokens):
		in.Kind = InputTokens
		var b bool
		im.bool(InputTokens, &b)
	default:
		if v.Kind == yaml.MappingNode {
			e.add(v.Line, "input: want one of \"features: N\", \"image: {channels: C}\" or \"tokens\"")
		}
	}
	im.finish()
}

// decodeLayers reads the explicit form's list of layers.
func decodeLayers(e *errs, n *yaml.Node, what string) []Layer {
	if n.Kind != yaml.SequenceNode {
		e.add(n.Line, "%s: want a list of layers, got %s", what, describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		e.add(n.Line, "%s: the list of layers is empty", what)
	}
	var out []Layer
	for _, c := range n.Content {
		if l, ok := decodeLayer(e, c); ok {
			out = append(out, l)
		}
	}
	return out
}

func decodeLayer(e *errs, n *yaml.Node) (Layer, bool) {
	l := Layer{Line: n.Line}
	var args *yaml.Node
	switch {
	case n.Kind == yaml.ScalarNode:
		l.Kind = n.Value
	case n.Kind == yaml.MappingNode && len(n.Content) == 2:
		l.Kind, args = n.Content[0].Value, n.Content[1]
	default:
		e.add(n.Line, "layer: want \"- kind\" or \"- kind: {arguments}\", got %s", describe(n))
		return l, false
	}
	ks, ok := layerKinds[l.Kind]
	if !ok {
		var names []string
		for k := range layerKinds {
			names = append(names, k)
		}
		msg := fmt.Sprintf("unknown layer %q", l.Kind)
		if s := suggest(l.Kind, names); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		e.add(n.Line, "%s (valid: %s)", msg, oneOf(names))
		return l, false
	}
	if args != nil && args.Tag == "!!null" {
		args = nil
	}
	if l.Kind == KFork {
		if args == nil || args.Kind != yaml.SequenceNode || len(args.Content) == 0 {
			e.add(n.Line, "fork: want a list of branches, each a list of layers: - fork: [[...], [...]]")
			return l, false
		}
		for _, b := range args.Content {
			l.Branches = append(l.Branches, decodeLayers(e, b, "fork branch"))
		}
		return l, true
	}
	// Lists are shorthand for the layers of block and residual.
	if args != nil && args.Kind == yaml.SequenceNode && (l.Kind == KBlock || l.Kind == KResidual) {
		l.Body = decodeLayers(e, args, l.Kind)
		return l, true
	}
	if args == nil {
		if len(ks.required) > 0 {
			e.add(n.Line, "%s: missing required field %q", l.Kind, ks.required[0])
			return l, false
		}
		return l, true
	}
	m := newMapping(e, args, l.Kind)
	if args.Kind != yaml.MappingNode {
		return l, false
	}
	l.Bias = l.Kind == KLinear || l.Kind == KConv2d || l.Kind == KLayerNorm
	req := map[string]bool{}
	for _, r := range ks.required {
		req[r] = true
	}
	for _, a := range append(append([]string{}, ks.required...), ks.optional...) {
		r := req[a]
		switch a {
		case "in":
			m.int(a, &l.In, r)
		case "out":
			m.int(a, &l.Out, r)
		case "dim":
			m.int(a, &l.Dim, r)
		case "hidden":
			m.int(a, &l.Hidden, r)
		case "vocab":
			m.int(a, &l.Vocab, r)
		case "heads":
			m.int(a, &l.Heads, r)
		case "kv_heads":
			m.int(a, &l.KVHeads, r)
		case "head_dim":
			m.int(a, &l.HeadDim, r)
		case "kernel":
			m.int(a, &l.Kernel, r)
		case "stride":
			m.int(a, &l.Stride, r)
		case "padding":
			v := m.get(a)
			if v != nil {
				p, err := strconv.ParseInt(v.Value, 10, 64)
				if err != nil || p < 0 {
					e.add(v.Line, "padding: want a whole number ≥ 0, got %s", describe(v))
				}
				l.Padding = p
			}
		case "channels":
			m.int(a, &l.Channels, r)
		case "max":
			m.int(a, &l.Max, r)
		case "times":
			m.int(a, &l.Times, r)
		case "p":
			if r && !m.has(a) {
				e.add(args.Line, "%s: missing required field \"p\"", l.Kind)
			}
			m.float(a, &l.P, 0, 1)
		case "bias":
			m.bool(a, &l.Bias)
		case "out_bias":
			m.bool(a, &l.OutBias)
		case "rope":
			m.bool(a, &l.RoPE)
		case "causal":
			m.bool(a, &l.Causal)
		case "experts":
			m.int(a, &l.Experts, r)
		case "top_k":
			m.int(a, &l.TopK, r)
		case "shared":
			m.int(a, &l.Shared, r)
		case "shared_gate":
			m.bool(a, &l.SharedGate)
		case "qk_norm":
			m.bool(a, &l.QKNorm)
		case "kv_cache":
			m.bool(a, &l.KVCache)
		case "inplace":
			m.bool(a, &l.Inplace)
		case "fused_qkv":
			m.bool(a, &l.FusedQKV)
		case "upcast":
			m.bool(a, &l.Upcast)
		case "softcap":
			m.float(a, &l.Softcap, 0, 1e6)
		case "style":
			if line, ok := m.str(a, &l.Style); ok && l.Style != "hf" && l.Style != "torch" {
				e.add(line, "style: unknown attention style %q (valid: hf, torch)", l.Style)
			}
		case "activation":
			l.Activation = KSiLU
			if line, ok := m.str(a, &l.Activation); ok {
				switch l.Activation {
				case KSiLU, KGELU, KGELUNew, KReLU, KTanh:
				default:
					e.add(line, "activation: unknown activation %q (valid: gelu, gelu_new, relu, silu, tanh)", l.Activation)
				}
			}
		case "name":
			m.str(a, &l.Name)
		case "tie":
			m.str(a, &l.Tie)
		case "layers":
			if v := m.get(a); v != nil {
				l.Body = decodeLayers(e, v, l.Kind+".layers")
			} else {
				e.add(args.Line, "%s: missing required field \"layers\"", l.Kind)
			}
		case "shortcut":
			if v := m.get(a); v != nil {
				l.Shortcut = decodeLayers(e, v, "residual.shortcut")
			}
		}
	}
	m.finish()
	if l.Kind == KAttention {
		if l.KVHeads == 0 {
			l.KVHeads = l.Heads
		}
		if l.Style == "" {
			l.Style = "hf"
		}
		if l.HeadDim == 0 && l.Heads > 0 {
			if l.Dim%l.Heads != 0 {
				e.add(n.Line, "attention: heads (%d) must divide dim (%d), or give head_dim", l.Heads, l.Dim)
			}
			l.HeadDim = l.Dim / l.Heads
		}
		if l.Heads > 0 && l.KVHeads > 0 && l.Heads%l.KVHeads != 0 {
			e.add(n.Line, "attention: kv_heads (%d) must divide heads (%d)", l.KVHeads, l.Heads)
		}
	}
	if (l.Kind == KGatedMLP || l.Kind == KMoE) && l.Activation == "" {
		l.Activation = KSiLU
	}
	if (l.Kind == KConv2d || l.Kind == KMaxPool) && l.Stride == 0 {
		l.Stride = 1
		if l.Kind == KMaxPool {
			l.Stride = l.Kernel
		}
	}
	return l, true
}

func decodeTraining(e *errs, n *yaml.Node, t *Training, m *Model, o Overrides) {
	tm := newMapping(e, n, "training")
	*t = Training{Precision: FP32, Optimizer: Optimizer{AdamW, ImplForeach}, Checkpointing: Checkpointing{Mode: CkptNone},
		Attention: AttnSDPA, ZeroGrad: ZeroGradNone, GradAccum: 1, DP: 1, Offload: OffloadNone}
	tm.int("batch", &t.Batch, o.Batch == 0)
	tm.int("seq", &t.Seq, false)
	tm.int("image", &t.Image, false)
	tm.int("grad_accum", &t.GradAccum, false)
	tm.int("dp", &t.DP, false)
	var s string
	set := func(key, flag string, parse func(string) error) {
		line, ok := tm.str(key, &s)
		if flag != "" {
			if err := parse(flag); err != nil {
				e.add(0, "--%s: %v", strings.ReplaceAll(key, "_", "-"), err)
			}
			return
		}
		if ok {
			if err := parse(s); err != nil {
				e.add(line, "%s: %v", key, err)
			}
		}
	}
	set("precision", o.Precision, func(v string) error { return parsePrecision(v, &t.Precision) })
	set("optimizer", o.Optimizer, func(v string) error { return parseOptimizer(v, &t.Optimizer) })
	set("checkpointing", o.Checkpointing, func(v string) error { return parseCheckpointing(v, &t.Checkpointing) })
	set("attention", o.Attention, func(v string) error { return parseChoice(v, &t.Attention, "attention", AttnSDPA, AttnEager) })
	set("zero_grad", o.ZeroGrad, func(v string) error {
		return parseChoice(v, &t.ZeroGrad, "zero_grad mode", ZeroGradNone, ZeroGradZeros)
	})
	set("zero", o.Zero, func(v string) error {
		z, err := strconv.ParseInt(v, 10, 64)
		if err != nil || z < 0 || z > 3 {
			return fmt.Errorf("want a ZeRO stage 0, 1, 2 or 3, got %q", v)
		}
		t.Zero = z
		return nil
	})
	set("offload", o.Offload, func(v string) error {
		return parseChoice(v, &t.Offload, "offload mode", OffloadNone, OffloadOptimizer, OffloadParams)
	})
	set("alloc_conf", o.AllocConf, func(v string) error {
		if _, err := alloc.Parse(v); err != nil {
			return err
		}
		t.AllocConf = v
		return nil
	})
	zline, _ := tm.str("offload", &s)
	tm.finish()
	if o.DP < 0 {
		e.add(0, "--dp: must be positive, got %d", o.DP)
	} else if o.DP > 0 {
		t.DP = o.DP
	}
	if t.Offload == OffloadParams && t.Zero != 3 {
		e.add(zline, "offload: params needs ZeRO stage 3 (zero: 3), got stage %d", t.Zero)
	}
	if t.Offload == OffloadOptimizer && t.Zero == 0 {
		e.add(zline, "offload: optimizer needs a ZeRO stage (zero: 1, 2 or 3)")
	}
	for _, ov := range []struct {
		v    int64
		dst  *int64
		flag string
	}{{o.Batch, &t.Batch, "batch"}, {o.Seq, &t.Seq, "seq"}, {o.Image, &t.Image, "image"}, {o.GradAccum, &t.GradAccum, "grad-accum"}} {
		if ov.v < 0 {
			e.add(0, "--%s: must be positive, got %d", ov.flag, ov.v)
		} else if ov.v > 0 {
			*ov.dst = ov.v
		}
	}
	if m.TokenInput() && t.Seq == 0 && m.Type != "" {
		e.add(n.Line, "training: missing required field \"seq\" (the sequence length)")
	}
	if m.ImageInput() && t.Image == 0 {
		t.Image = 224
	}
}

func parseChoice(v string, dst *string, what string, valid ...string) error {
	v = strings.ToLower(v)
	for _, c := range valid {
		if v == c {
			*dst = c
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q (valid: %s)", what, v, strings.Join(valid, ", "))
}

func parsePrecision(v string, dst *string) error {
	switch strings.ToLower(v) {
	case "amp", "amp-bf16", "bf16-mixed":
		*dst = AMPBF16
	case "amp-fp16", "fp16-mixed", "16-mixed":
		*dst = AMPFP16
	case "fp32", "32", "float32":
		*dst = FP32
	case "bf16", "bf16-true", "pure-bf16":
		*dst = BF16
	default:
		return fmt.Errorf("unknown precision %q (valid: %s)", v, strings.Join(Precisions, ", "))
	}
	return nil
}

// parseOptimizer reads "adamw", "adamw-fused", "adam-for-loop", "sgd",
// "sgd-momentum-foreach", "adafactor" or "adam8bit".
func parseOptimizer(v string, dst *Optimizer) error {
	s := strings.ToLower(v)
	impl := ImplForeach
	for _, suf := range []string{ImplForeach, ImplFused, ImplForLoop, "forloop"} {
		if strings.HasSuffix(s, "-"+suf) {
			impl, s = suf, strings.TrimSuffix(s, "-"+suf)
			if impl == "forloop" {
				impl = ImplForLoop
			}
			break
		}
	}
	switch s {
	case Adam, AdamW, SGD, SGDMomentum:
	case Adafactor, Adam8bit, "adamw8bit", "adam-8bit":
		if impl != ImplForeach || strings.Contains(strings.ToLower(v), "-"+ImplForeach) {
			return fmt.Errorf("optimizer %q takes no implementation suffix", s)
		}
		if s != Adafactor {
			s = Adam8bit
		}
		impl = ImplForLoop
		if s == Adam8bit {
			impl = ImplFused
		}
	default:
		return fmt.Errorf("unknown optimizer %q (valid: %s; adam, adamw and sgd take -foreach, -fused or -for-loop)", v, strings.Join(OptimizerNames, ", "))
	}
	*dst = Optimizer{Name: s, Impl: impl}
	return nil
}

func parseCheckpointing(v string, dst *Checkpointing) error {
	s := strings.ToLower(v)
	switch s {
	case "none", "off", "false":
		*dst = Checkpointing{Mode: CkptNone}
	case "every-block", "block", "full", "true", "on":
		*dst = Checkpointing{Mode: CkptBlock}
	case "sqrt", "sqrt-n":
		*dst = Checkpointing{Mode: CkptSqrt}
	default:
		if k, ok := strings.CutPrefix(s, "every-"); ok {
			n, err := strconv.ParseInt(k, 10, 64)
			if err == nil && n > 0 {
				*dst = Checkpointing{Mode: CkptEveryK, K: n}
				if n == 1 {
					dst.Mode = CkptBlock
				}
				return nil
			}
		}
		return fmt.Errorf("unknown checkpointing %q (valid: none, every-block, sqrt, every-K such as every-2)", v)
	}
	return nil
}

func decodeDevice(e *errs, n *yaml.Node, s *Spec, flag string) {
	name, mem := "", ""
	line := 0
	if flag != "" {
		name = flag
		if strings.ContainsAny(flag, "0123456789") && !isCatalog(flag) {
			if _, err := units.ParseBytes(flag); err == nil {
				name, mem = "custom", flag
			}
		}
	} else if n == nil {
		name = "h100-80gb"
		s.Notes = append(s.Notes, "no device given: planning for h100-80gb")
	} else if n.Kind == yaml.ScalarNode {
		name, line = n.Value, n.Line
	} else {
		dm := newMapping(e, n, "device")
		dm.str("name", &name)
		dm.str("memory", &mem)
		dm.finish()
		line = n.Line
		if v := dm.vals["memory"]; v != nil {
			line = v.Line
		}
	}
	if mem == "" {
		d, ok := LookupDevice(name)
		if !ok {
			msg := fmt.Sprintf("unknown device %q (valid: %s; or give {name, memory: 80GiB})", name, strings.Join(DeviceNames(), ", "))
			if flag != "" {
				e.add(0, "--device: %s", msg)
			} else {
				e.add(line, "device: %s", msg)
			}
			return
		}
		s.Device = d
		return
	}
	p, err := units.ParseBytes(mem)
	if err != nil {
		e.add(line, "device memory: %v", err)
		return
	}
	s.Device = Device{Name: name, Memory: p.Bytes, Arch: "unknown", Vendor: NVIDIA}
	if d, ok := LookupDevice(name); ok {
		s.Device.Product, s.Device.Arch, s.Device.Vendor = d.Product, d.Arch, d.Vendor
	}
	if p.Decimal {
		s.Notes = append(s.Notes, fmt.Sprintf("device memory %q taken as decimal: %d bytes (%s); write %sGiB for binary units",
			mem, p.Bytes, units.Format(p.Bytes), strings.TrimRight(strings.ToLower(mem), "gbtmk ")))
	}
}

func isCatalog(name string) bool { _, ok := LookupDevice(name); return ok }

// MaxLayers bounds the layer instances of a model once repeats are
// expanded (the largest published models have a few thousand).
const MaxLayers = 200_000

// maxParams keeps parameter counts exact in float64 as well as int64.
const maxParams = float64(1 << 50)

// maxBytes bounds every byte count memplan computes: past it, sums of a few
// of them could wrap around int64.
const maxBytes = float64(1 << 60)

// validate checks relations between fields and that byte counts fit.
func validate(e *errs, s *Spec, modelLine, trainLine int) {
	m, t := &s.Model, &s.Training
	at := func(field string) int {
		if l, ok := m.lines[field]; ok {
			return l
		}
		return modelLine
	}
	switch m.Type {
	case GPT2, Llama, BERT, ViT, NeoX:
		if m.Heads > 0 && m.Hidden%m.Heads != 0 && !(m.Type == Llama && m.HeadDim > 0) {
			e.add(at("heads"), "heads (%d) must divide hidden (%d)", m.Heads, m.Hidden)
		}
		if (m.Type == Llama || m.Type == NeoX) && m.KVHeads > 0 && m.Heads%m.KVHeads != 0 {
			e.add(at("kv_heads"), "kv_heads (%d) must divide heads (%d)", m.KVHeads, m.Heads)
		}
	}
	if m.Type == ViT {
		if t.Image%m.Patch != 0 {
			e.add(trainLine, "image (%d) must be a multiple of patch (%d)", t.Image, m.Patch)
			return
		}
		g := t.Image / m.Patch
		m.Positions = g*g + 1
	}
	if m.TokenInput() && m.Positions > 0 && t.Seq > m.Positions {
		e.add(trainLine, "seq (%d) exceeds the model's positions (%d)", t.Seq, m.Positions)
	}
	if len(e.list) > 0 {
		return
	}
	// Rough upper bound of the bytes involved, in float64 so that it cannot
	// wrap: parameters at 40 bytes each, and every activation element at 64
	// bytes.
	layers := m.Lower()
	in := s.InputShape()
	names := map[string]*Layer{}
	out, err := InferShape(layers, in, names)
	if err != nil {
		line := modelLine
		if se, ok := err.(*shapeErr); ok && se.line > 0 {
			line = se.line
		}
		e.add(line, "%v", err)
		return
	}
	_ = out
	if n := Count(layers, MaxLayers+1); n > MaxLayers {
		e.add(modelLine, "more than %d layers once repeats are expanded; memplan simulates each one", MaxLayers)
		return
	}
	params := paramsFloat(layers)
	acts := actFloat(layers, in) * float64(t.Batch)
	if params > maxParams || params*40+acts*64 > maxBytes || math.IsInf(acts, 0) {
		e.add(modelLine, "sizes too large: %.3g parameters and %.3g activation elements would overflow 64-bit byte counts", params, acts)
	}
}

func paramsFloat(ls []Layer) float64 {
	var n float64
	for i := range ls {
		n += ls[i].paramsF()
	}
	return n
}

// actFloat sums per-sample activation elements, with the attention score
// matrix, as a float64 upper bound.
func actFloat(ls []Layer, s Shape) float64 {
	var n float64
	for _, l := range ls {
		switch l.Kind {
		case KRepeat:
			n += float64(l.Times) * actFloat(l.Body, s)
		case KBlock, KResidual:
			n += actFloat(l.Body, s) + actFloat(l.Shortcut, s)
		case KFork:
			for _, b := range l.Branches {
				n += actFloat(b, s)
			}
		case KAttention:
			n += float64(s[0]) * float64(s[0]) * float64(l.Heads)
		}
		out, err := l.Infer(s, map[string]*Layer{"": {}})
		if err == nil {
			s = out
		}
		w := 1.0
		for _, d := range s {
			w *= float64(d)
		}
		n += 8 * w
	}
	return n
}

// InputShape is the shape of one sample entering the model.
func (s *Spec) InputShape() Shape {
	m, t := &s.Model, &s.Training
	switch {
	case m.TokenInput():
		return Shape{t.Seq}
	case m.ImageInput():
		c := m.Channels
		if m.Type == Sequential {
			c = m.Input.Channels
		}
		return Shape{c, t.Image, t.Image}
	}
	return Shape{m.Input.Features}
}

// Params is the number of trainable parameters.
func (s *Spec) Params() int64 { return Params(s.Model.Lower()) }
