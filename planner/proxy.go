package planner

import (
	"github.com/memplan/memplan/model"
)

// The throughput proxy's constants (docs/planner.md §3): an H100-class
// GPU's sustained bf16 rate and the bandwidth one GPU sees inside a node
// (NVLink) and across nodes (one 400 Gb/s NIC per GPU), as algorithm
// bandwidths. The proxy ranks layouts of one model; it is not a
// prediction of step time.
const (
	proxyFLOPS  = 400e12
	proxyIntra  = 300e9
	proxyInter  = 40e9
	actDTypeLen = 2 // bf16 activations on the wire
)

// Proxy is the documented throughput proxy of a layout (docs/planner.md
// §3): a step's compute, stretched by the pipeline bubble and
// checkpointing's recompute, plus its communication at the bandwidth of
// the links each group spans, without overlap.
type Proxy struct {
	// StepSeconds is the proxy's step time; smaller ranks first.
	StepSeconds float64 `json:"step_seconds"`
	// CommBytes is what one GPU sends per step over all its groups.
	CommBytes int64 `json:"comm_bytes"`
	// CrossNode says some group's collectives cross nodes.
	CrossNode bool `json:"cross_node"`
	// Bubble is the pipeline's idle fraction; Recompute the extra compute
	// of checkpointing, as a fraction of the step's.
	Bubble    float64 `json:"bubble"`
	Recompute float64 `json:"recompute"`
}

// shape is what the proxy needs to know about a model.
type shape struct {
	params, layers, hidden, kvDim, seq int64
	gradLen, paramLen                  int64 // bytes per element reduced and gathered
	// trainable is the parameters with gradients (all but under LoRA,
	// whose frozen base is gathered but never reduced), trainLen the bytes
	// of their elements that ZeRO-1 broadcasts, and flops the work per
	// parameter and token (6; 4 under LoRA: no weight gradients for the
	// frozen base).
	trainable, trainLen, flops int64
	// A mixture of experts: experts and topK per block, and routed the
	// routed experts' parameters over all blocks (the rest of params is
	// dense: attention, embeddings, routers, shared experts).
	experts, topK, routed int64
	// tied is the elements of a tied embedding (vocabulary × hidden), 0
	// when untied: a pipeline all-reduces its two copies' gradients.
	tied int64
}

// active is the parameters one token runs through: all of a dense model's,
// and of a mixture of experts' routed experts only top-k of E.
func (sh shape) active() int64 {
	if sh.experts == 0 {
		return sh.params
	}
	return sh.params - sh.routed + sh.routed*sh.topK/sh.experts
}

func shapeOf(spec *model.Spec, params int64) shape {
	m, t := &spec.Model, &spec.Training
	hd := m.HeadDim
	if hd == 0 && m.Heads > 0 {
		hd = m.Hidden / m.Heads
	}
	kv := m.KVHeads
	if kv == 0 {
		kv = m.Heads
	}
	sh := shape{params: params, layers: max(m.NumLayers, 1), hidden: m.Hidden, kvDim: kv * hd, seq: max(t.Seq, 1), gradLen: 4, paramLen: 2,
		trainable: params, flops: 6}
	switch t.Precision {
	case model.BF16:
		sh.gradLen = 2
	case model.FP32:
		sh.paramLen = 4
	}
	sh.trainLen = sh.paramLen
	if m.Tied {
		sh.tied = m.Vocab * m.Hidden
	}
	if m.Experts > 0 && m.TopK > 0 {
		sh.experts, sh.topK = m.Experts, m.TopK
		sh.routed = min(model.RoutedParams(m.Lower()), params)
	}
	if t.LoRA.Enabled() {
		// peft's adapters are fp32 (autocast_adapter_dtype), or the base's.
		sh.trainable, sh.flops, sh.gradLen, sh.trainLen = spec.Trainable(), 4, 4, 4
		if t.LoRA.AdapterDtype == model.AdapterBase && t.Precision == model.BF16 {
			sh.gradLen, sh.trainLen = 2, 2
		}
	}
	return sh
}

// proxyOf computes a layout's proxy for a global batch over nodes of
// nodeSize GPUs. The mesh is laid out as torchtitan's, innermost first:
// tp, cp, dp, pp; a group crosses nodes when its span does not fit one.
func proxyOf(sh shape, l Layout, nodeSize int64) Proxy {
	var p Proxy
	g := l.GPUs()
	tokens := float64(l.GlobalBatch() * sh.seq)
	compute := float64(sh.flops) * float64(sh.active()) * tokens / float64(g) / proxyFLOPS
	passes := 2.0 // forward and backward collectives per layer
	if m := l.Checkpointing.Mode; m != "" && m != model.CkptNone {
		p.Recompute = 1.0 / 3
		passes = 3
	}
	compute *= 1 + p.Recompute
	if l.PP > 1 {
		m, pp := float64(l.Accum), float64(l.PP)
		if l.Schedule == Interleaved {
			m *= float64(l.Virtual)
		}
		p.Bubble = (pp - 1) / (m + pp - 1)
	}
	p.StepSeconds = compute / (1 - p.Bubble)
	add := func(bytes float64, span int64) {
		bw := proxyIntra
		if span > nodeSize {
			bw, p.CrossNode = proxyInter, true
		}
		p.CommBytes += int64(bytes)
		p.StepSeconds += bytes / bw
	}
	micros := float64(l.Accum)
	act := float64(l.Micro*sh.seq/l.CP*sh.hidden) * actDTypeLen
	layers := float64((sh.layers + l.PP - 1) / l.PP)
	ep := sh.experts > 0 && l.EP > 1
	if t := float64(l.TP); l.TP > 1 {
		// Per layer and pass: two all-gathers and two reduce-scatters
		// with SP (the volume of two all-reduces without); a mixture of
		// experts split over EP ranks beside TP keeps its tokens sharded,
		// so only the attention's two.
		n := 4.0
		if ep {
			n = 2
		}
		add(n*(t-1)/t*act*passes*layers*micros, l.TP)
	}
	if e := float64(l.EP); ep {
		// Per MoE layer and pass: the dispatch and the combine all-to-all
		// of the rank's routed rows (its tokens, its sequence shard beside
		// TP, times top-k), (e − 1)/e of them sent, over an EP group of
		// consecutive ranks (innermost dimensions first).
		rows := float64(l.Micro*sh.seq/l.CP/l.TP) * float64(sh.topK)
		add(2*(e-1)/e*rows*float64(sh.hidden)*actDTypeLen*passes*layers*micros, l.EP)
	}
	if c := float64(l.CP); l.CP > 1 {
		kv := float64(2*l.Micro*sh.seq*sh.kvDim*actDTypeLen) / float64(l.TP)
		add((c-1)/c*kv*passes*layers*micros, l.TP*l.CP)
	}
	if l.PP > 1 {
		add(2*act/float64(l.TP)*micros*float64(max(l.Virtual, 1)), g)
		if sh.tied > 0 {
			add(tiedBytes(sh, l), g)
		}
	}
	if d := l.DP * l.CP; d > 1 {
		dense, trainDense := sh.params, sh.trainable
		if ep {
			// The routed experts are reduced over the efsdp ranks that
			// hold the same ones (below); the rest over dp·cp.
			dense, trainDense = sh.params-sh.routed, max(sh.trainable-sh.routed, 0)
		}
		dpComm(l, sh, float64(dense)/float64(l.TP*l.PP), float64(trainDense)/float64(l.TP*l.PP), d, add)
	}
	if efsdp := l.DP * l.CP * l.TP / max(l.EP, 1); ep && efsdp > 1 {
		// A rank's E/ep experts over the dp·cp·tp/ep ranks that hold them.
		mine := float64(sh.routed) / float64(l.EP*l.PP)
		add(dpBytes(l, sh, mine, mine, efsdp), l.TP*l.CP*l.DP)
	}
	return p
}

// dpComm adds what one GPU sends per step over the dp·cp ranks d for n
// parameters, train of them with gradients (dpBytes), at the span of the
// whole data-parallel group; ZeRO 3 resharded to N ranks sends ZeRO 2's
// volume so and the backward's all-gather within the N ranks of a node.
func dpComm(l Layout, sh shape, n, train float64, d int64, add func(bytes float64, span int64)) {
	span := l.TP * l.CP * l.DP
	if to := l.ReshardTo; to > 1 && l.Zero == 3 {
		z2 := l
		z2.Zero = 2
		add(dpBytes(z2, sh, n, train, d), span)
		add(float64(l.Accum)*n*float64(to-1)/float64(to)*float64(sh.paramLen), l.TP*to)
		return
	}
	add(dpBytes(l, sh, n, train, d), span)
}

// tiedBytes is what the first and the last stage of pipeline layout l
// send to all-reduce their copies of a tied embedding's gradient, once a
// step: the rank's vocabulary shard (of its dp·cp shard under FSDP), all
// of it in a ring of two (model's stageSlice).
func tiedBytes(sh shape, l Layout) float64 {
	n := float64(sh.tied) / float64(l.TP)
	if l.Zero >= 2 {
		n /= float64(l.DP * l.CP)
	}
	return n * float64(sh.gradLen)
}

// dpBytes is what one GPU sends per step to reduce (and, by ZeRO stage,
// gather) n parameters, train of them with gradients, over d ranks,
// (d − 1)/d of them each.
func dpBytes(l Layout, sh shape, n, train float64, d int64) float64 {
	f := float64(d-1) / float64(d)
	shard, train, micros := n*f, train*f, float64(l.Accum)
	switch l.Zero {
	case 0:
		return 2 * train * float64(sh.gradLen)
	case 1:
		return 2*train*float64(sh.gradLen) + train*float64(sh.trainLen)
	case 2:
		return micros * (train*float64(sh.gradLen) + shard*float64(sh.paramLen))
	}
	return micros * (train*float64(sh.gradLen) + 2*shard*float64(sh.paramLen))
}
