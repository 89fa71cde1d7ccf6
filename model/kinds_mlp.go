package model

import (
	"fmt"
	"strings"
)

// Gated MLPs and mixtures of experts.

// Layer kinds of this file.
const (
	KGatedMLP = "gated_mlp"
	KMoE      = "moe"
)

func init() {
	register(KGatedMLP, "down(act(gate(x)) * up(x)), SwiGLU when activation is silu", func() KindSpec { return &GatedMLP{} })
	register(KMoE, "mixture of gated-MLP experts with a top-k router (transformers 5's grouped_mm experts, docs/moe.md); shared: an always-on shared expert's size", func() KindSpec { return &MoE{} })
}

// GatedMLP is down(act(gate(x)) * up(x)).
type GatedMLP struct {
	Dim, Hidden int64
	Activation  string
	Bias        bool
	// Fused makes gate and up one projection of 2·Hidden columns, chunked
	// in two, and the product up · act(gate) (Phi-3's Phi3MLP).
	Fused bool
}

// Kind is the name specs use for the kind.
func (*GatedMLP) Kind() string { return KGatedMLP }

func (k *GatedMLP) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.int("hidden", &k.Hidden, true)
	a.activationArg(&k.Activation)
	a.bool("bias", &k.Bias)
	a.bool("fused", &k.Fused)
}

func (k *GatedMLP) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *GatedMLP) params(*Layer) float64 {
	return 3*f64(k.Dim)*f64(k.Hidden) + b64(k.Bias)*(2*f64(k.Hidden)+f64(k.Dim))
}

// MoE is a mixture of Experts gated MLPs of size Hidden, TopK per token,
// with a router; Shared is the intermediate size of an always-on shared
// expert (0: none), with a sigmoid gate when SharedGate is set.
type MoE struct {
	Dim, Hidden, Experts, TopK int64
	Shared                     int64
	SharedGate                 bool
	Activation                 string
	Bias                       bool
	// Router is how the router picks and weighs the experts: one of the
	// Router constants.
	Router string
	// Gate is how the experts combine the gate and up halves of
	// gate_up_proj's output: GateAct or GateClamped.
	Gate string
	// Groups and TopGroups are a grouped router's expert groups and the
	// groups a token may route to (GroupedRouter).
	Groups, TopGroups int64
	// SharedAfter runs the shared expert after the routed ones, ungated,
	// and adds it (DeepseekV3MoE); else it runs first (Qwen2-MoE).
	SharedAfter bool
	// Dense runs every token through every expert (Llama 4's
	// Llama4TextExperts): the tokens repeated once per expert and scaled
	// by their router scores (zero outside a token's top k), then two
	// batched products around the gate over all of them, the outputs
	// summed over the experts; with RouterTopKSigmoid, and the shared
	// expert (SharedAfter) run after them, the sum added to its output in
	// place.
	Dense bool
	// NoRenorm leaves RouterSoftmaxTopK's top k as the softmax made them
	// (Qwen's norm_topk_prob false), and RouterSigmoidGroup's as the
	// sigmoid made them (GLM-4's): no renormalisation.
	NoRenorm bool
}

// The routers of MoE.Router.
const (
	// RouterSoftmaxTopK is Mixtral's and Qwen's (Qwen2MoeTopKRouter): a
	// linear layer without bias, softmax over every expert in fp32, the
	// top k, renormalised.
	RouterSoftmaxTopK = ""
	// RouterSoftmaxTopKFP32 is Mixtral's (MixtralTopKRouter): as
	// RouterSoftmaxTopK, but the renormalised top k stay fp32 (no cast
	// back to the logits' dtype), so the experts' weighted rows are fp32.
	RouterSoftmaxTopKFP32 = "softmax_topk_fp32"
	// RouterTopKSoftmax is GPT-OSS's (GptOssTopKRouter): a linear layer
	// with bias, the top k of its logits, softmax over those k in their
	// dtype.
	RouterTopKSoftmax = "topk_softmax"
	// RouterSigmoidGroup is DeepSeek-V3's (DeepseekV3TopkRouter): fp32
	// logits, sigmoid scores plus a correction bias (a buffer), the best
	// MoE.TopGroups of MoE.Groups expert groups kept, the top k of them,
	// their scores gathered, renormalised and scaled.
	RouterSigmoidGroup = "sigmoid_group"
	// RouterSoftmaxGreedy is DeepSeek-V2's DeepseekV2TopkRouter with
	// topk_method greedy: fp32 logits, softmax over every expert, the top
	// k, scaled (routed_scaling_factor), not renormalised.
	RouterSoftmaxGreedy = "softmax_greedy"
	// RouterSoftmaxGroup is DeepseekV2TopkRouter with topk_method
	// group_limited_greedy: as RouterSoftmaxGreedy, but the scores
	// outside the MoE.TopGroups groups with the best top score (of
	// MoE.Groups) set to zero first.
	RouterSoftmaxGroup = "softmax_group"
	// RouterTopKSigmoid is Llama 4's (Llama4Router): a linear layer
	// without bias, the top k of its logits scattered into a tensor of
	// −inf, and the sigmoid of that in fp32, cast back: a score for
	// every expert, zero outside the top k (MoE.Dense).
	RouterTopKSigmoid = "topk_sigmoid"
)

// GroupedRouter says whether router picks expert groups before experts
// (MoE.Groups, MoE.TopGroups).
func GroupedRouter(router string) bool {
	return router == RouterSigmoidGroup || router == RouterSoftmaxGroup
}

// ExpertsFirst says whether router belongs to a block that registers its
// experts before its router (DeepSeek's DeepseekV2Moe and DeepseekV3MoE,
// Llama 4's Llama4TextMoe).
func ExpertsFirst(router string) bool {
	return router == RouterSigmoidGroup || router == RouterSoftmaxGreedy || router == RouterSoftmaxGroup || router == RouterTopKSigmoid
}

// The experts' gates of MoE.Gate.
const (
	// GateAct is act(gate) · up over gate_up_proj's two halves
	// (transformers' _default_apply_gate).
	GateAct = ""
	// GateClamped is GPT-OSS's GptOssExperts._apply_gate over interleaved
	// gate and up columns: gate clamped from above and up from both
	// sides at 7, then (up + 1) · gate · σ(1.702 · gate).
	GateClamped = "clamped"
)

// expertChoice is the spelling a spec uses for a router or a gate and the
// value it stands for (the defaults, "", have names too).
type expertChoice struct{ name, value string }

// The spellings of MoE.Router and MoE.Gate, in the order errors list them.
var (
	routerChoices = []expertChoice{{"softmax_topk", RouterSoftmaxTopK}, {RouterSoftmaxTopKFP32, RouterSoftmaxTopKFP32},
		{RouterTopKSoftmax, RouterTopKSoftmax}, {RouterSigmoidGroup, RouterSigmoidGroup},
		{RouterSoftmaxGreedy, RouterSoftmaxGreedy}, {RouterSoftmaxGroup, RouterSoftmaxGroup}, {RouterTopKSigmoid, RouterTopKSigmoid}}
	gateChoices = []expertChoice{{"act", GateAct}, {GateClamped, GateClamped}}
)

// parseExpertChoice sets *dst to what the spelling *dst stands for, or
// says which spellings there are.
func parseExpertChoice(choices []expertChoice, dst *string) error {
	var names []string
	for _, c := range choices {
		if c.name == *dst {
			*dst = c.value
			return nil
		}
		names = append(names, c.name)
	}
	return fmt.Errorf("unknown choice %q (valid: %s)", *dst, strings.Join(names, ", "))
}

// Kind is the name specs use for the kind.
func (*MoE) Kind() string { return KMoE }

func (k *MoE) decode(a *args, _ *Layer) {
	a.int("dim", &k.Dim, true)
	a.int("hidden", &k.Hidden, true)
	a.int("experts", &k.Experts, true)
	a.int("top_k", &k.TopK, true)
	a.int("shared", &k.Shared, false)
	a.bool("shared_gate", &k.SharedGate)
	a.activationArg(&k.Activation)
	a.bool("bias", &k.Bias)
	for _, c := range []struct {
		key     string
		dst     *string
		choices []expertChoice
	}{{"router", &k.Router, routerChoices}, {"gate", &k.Gate, gateChoices}} {
		if line, ok := a.str(c.key, c.dst); ok {
			if err := parseExpertChoice(c.choices, c.dst); err != nil {
				a.e.add(line, "%s: %v", c.key, err)
			}
		}
	}
	a.int("groups", &k.Groups, false)
	a.int("top_groups", &k.TopGroups, false)
	a.bool("shared_after", &k.SharedAfter)
	a.bool("no_renorm", &k.NoRenorm)
	a.bool("dense", &k.Dense)
}

func (k *MoE) infer(l *Layer, s Shape, _ map[string]*Layer) (Shape, error) {
	if k.TopK > k.Experts {
		return nil, bad(l, "top_k (%d) exceeds experts (%d)", k.TopK, k.Experts)
	}
	if k.Dense != (k.Router == RouterTopKSigmoid) {
		return nil, bad(l, "dense experts and the topk_sigmoid router come together (Llama 4's block)")
	}
	if GroupedRouter(k.Router) {
		// DeepseekV3TopkRouter sums each group's best two scores;
		// DeepseekV2TopkRouter takes each group's best one.
		least := int64(1)
		if k.Router == RouterSigmoidGroup {
			least = 2
		}
		if k.Groups < 1 || k.Experts%k.Groups != 0 || k.TopGroups < 1 || k.TopGroups > k.Groups || k.Experts/k.Groups < least {
			return nil, bad(l, "%s router: groups (%d) must divide experts (%d) into groups of %d or more, and top_groups (%d) be 1 to groups", k.Router, k.Groups, k.Experts, least, k.TopGroups)
		}
	}
	return s, needWidth(l, s, k.Dim, "dim")
}

func (k *MoE) params(*Layer) float64 {
	d := f64(k.Dim)
	n := d*f64(k.Experts) + f64(k.Experts)*3*d*f64(k.Hidden)
	if k.Router == RouterTopKSoftmax {
		n += f64(k.Experts) // the router's bias
	}
	n += b64(k.Bias) * f64(k.Experts) * (2*f64(k.Hidden) + d)
	if k.Shared > 0 {
		n += 3 * d * f64(k.Shared)
		if k.SharedGate {
			n += d
		}
	}
	return n
}
