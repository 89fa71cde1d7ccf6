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
	compute := float64(sh.flops) * float64(sh.params) * tokens / float64(g) / proxyFLOPS
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
	if t := float64(l.TP); l.TP > 1 {
		// Per layer and pass: two all-gathers and two reduce-scatters
		// with SP (the volume of two all-reduces without).
		add(4*(t-1)/t*act*passes*layers*micros, l.TP)
	}
	if c := float64(l.CP); l.CP > 1 {
		kv := float64(2*l.Micro*sh.seq*sh.kvDim*actDTypeLen) / float64(l.TP)
		add((c-1)/c*kv*passes*layers*micros, l.TP*l.CP)
	}
	if l.PP > 1 {
		add(2*act/float64(l.TP)*micros*float64(max(l.Virtual, 1)), g)
	}
	if d := float64(l.DP * l.CP); d > 1 {
		shard := float64(sh.params) / float64(l.TP*l.PP) * (d - 1) / d
		train := float64(sh.trainable) / float64(l.TP*l.PP) * (d - 1) / d
		var bytes float64
		switch l.Zero {
		case 0:
			bytes = 2 * train * float64(sh.gradLen)
		case 1:
			bytes = 2*train*float64(sh.gradLen) + train*float64(sh.trainLen)
		case 2:
			bytes = micros * (train*float64(sh.gradLen) + shard*float64(sh.paramLen))
		default:
			bytes = micros * (train*float64(sh.gradLen) + 2*shard*float64(sh.paramLen))
		}
		add(bytes, l.TP*l.CP*l.DP)
	}
	return p
}
