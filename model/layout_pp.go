package model

import (
	"fmt"
	"strings"
)

// Pipeline parallelism as torch.distributed.pipelining runs it: how the
// blocks are split over stages (StageLayers), which layers one stage holds
// (LowerStage, LowerStageRank), and the spec fields pp, pp_schedule and
// pp_virtual. The simulation of
// a stage is estimate's (docs/parallelism.md §3.2).

// Pipeline schedules of torch.distributed.pipelining.
const (
	// PPGPipe is ScheduleGPipe: every micro-batch's forward, then every
	// backward.
	PPGPipe = "gpipe"
	// PP1F1B is Schedule1F1B: pp−stage forwards of warm-up, then one
	// backward and one forward in turn.
	PP1F1B = "1f1b"
	// PPInterleaved is ScheduleInterleaved1F1B: several stages per rank.
	PPInterleaved = "interleaved"
)

// StageLayers splits layers transformer blocks over stages as torchtitan's
// generate_llm_fqn_per_model_part does with input and output weights of 1:
// the embedding and the head count as one layer each, the layers+2 are
// spread as evenly as possible with the remainder going to the first
// stages, and the first and last stages give one layer's room to the
// embedding and the head. It returns the blocks on each stage, or an error
// when a stage would get none.
func StageLayers(layers, stages int64) ([]int64, error) {
	if stages < 1 || layers < 1 {
		return nil, fmt.Errorf("%d layers over %d stages", layers, stages)
	}
	if stages == 1 {
		return []int64{layers}, nil
	}
	eff := layers + 2
	per, extra := eff/stages, eff%stages
	if per < 1 {
		return nil, fmt.Errorf("%d stages is more than the %d layers plus the embedding and the head", stages, layers)
	}
	out := make([]int64, stages)
	left := layers
	for i := range out {
		n := per
		if int64(i) < extra {
			n++
		}
		if i == 0 || int64(i) == stages-1 {
			n--
		}
		n = min(n, left)
		out[i], left = n, left-n
	}
	return out, nil
}

// splittable returns the index of the first of the top-level repeats of
// blocks a pipeline splits and how many there are (DeepSeek's dense
// first layers are a repeat of their own before the experts' one), or an
// error saying why the model cannot be split.
func (m *Model) splittable(layers []Layer) (int, int, error) {
	switch m.Type {
	case GPT2, Llama, NeoX, BERT:
	default:
		return 0, 0, fmt.Errorf("%s models cannot be split into pipeline stages (only the transformer shorthands gpt2, llama, neox and bert)", m.Type)
	}
	for i := range layers {
		if _, ok := layers[i].Spec.(*Repeat); ok {
			n := 1
			for i+n < len(layers) {
				if _, ok := layers[i+n].Spec.(*Repeat); !ok {
					break
				}
				n++
			}
			return i, n, nil
		}
	}
	return 0, 0, fmt.Errorf("%s model has no repeated blocks to split", m.Type)
}

// RunsTransformersForward says whether m's parallel layouts run
// transformers' own model forward (bench/torch/dist's pp.py stages and
// tp.py splits of a transformers config, hftp.py): a pipeline stage is
// the base model with the other layers taken out, and under tensor
// parallelism the whole model (or each stage) split by hftp.py's plan.
// Each forward makes the rotary tables (and eager attention's masks)
// before its first block as the whole model's does, and sliding windows
// stay. The other llama specs' layouts run bench/torch/dist/common.py's
// Llama, as torchtitan's, whose attention casts the rotary tables it is
// given and has no sliding window. The families measured through
// transformers' forward are the changes to Llama's block that torchtitan's
// models do not carry: DeepSeek's and GPT-OSS's blocks (GLM-4 MoE's with
// them), Gemma 2 and 3 (sandwich norms, Gemma 2's softcaps), Granite (its
// multipliers), SmolLM3 (layers without rotary embeddings), StarCoder2
// (LayerNorms, biases, a two-layer MLP, dropouts), Cohere (its parallel
// block), Phi-3 (fused projections), OLMo (norms without weights, the
// projections made before any is viewed as heads) and OLMo 2 and 3 (norms
// after the branches, over each whole query and key projection: OLMo-core's
// plan under tensor parallelism, model.Attention.QKNormRanks) and Llama 4
// (dense experts, whole heads rotated as complex numbers from the
// forward's table, chunked attention's masks)
// (docs/parallelism.md §3.1.3–3.1.7, §3.2.7; docs/moe.md §13). A model read
// from a transformers config (Model.Transformers) runs transformers' forward
// too, whatever its block, as the scripts run a config: its attention keeps
// the key/value cache transformers fills in training without
// checkpointing, makes its rotary tables in every forward and passes
// enable_gqa to context parallelism's ring, which takes the key/value heads
// unrepeated (measured: Qwen3-0.6B at cp 2 and 8, tp 2, forty-fourth
// session); a spec's Llama-shaped model, written or imported, runs
// torchtitan's.
func (m *Model) RunsTransformersForward() bool {
	return m.Transformers || m.deepseek() || m.gptOSS() || m.gemmaSandwich() || m.granite() || m.NoRoPEPattern > 0 ||
		m.starcoder() || m.cohere() || m.FusedQKV || m.FusedGateUp || m.PostNorm || m.QKNormWhole ||
		m.PlainNorm || m.ProjectFirst || m.llama4()
}

// LowerStage returns the layers stage (0-based) of stages holds: its share
// of the blocks (StageLayers), with everything before them (the embedding)
// on the first stage and everything after them (the final norm and the
// head) on the last. On the last stage the head is a plain linear layer
// whose logits are the stage's output: the schedule's loss function
// (torchtitan's, logits.float() and cross_entropy) runs outside the model.
func (m *Model) LowerStage(stage, stages int64) ([]Layer, error) {
	out, err := m.stageSlice(stage, stages)
	if err != nil {
		return nil, err
	}
	return m.stageHead(out), nil
}

// stageHead makes the head of a last stage's layers a plain linear layer
// whose logits are the stage's output, followed by what the causal LM's
// forward does to them (pp.HFStage as transformers' CausalLM classes):
// Gemma 2's softcap, then Granite's division by logits_scaling or
// Cohere's logit_scale. Where the stage runs transformers' model forward
// (RunsTransformersForward), the head runs after that forward has
// returned, its locals (the masks) gone: a task head (Linear.Head).
func (m *Model) stageHead(ls []Layer) []Layer {
	var out []Layer
	for _, l := range ls {
		h, ok := l.Spec.(*LMHead)
		if !ok {
			out = append(out, l)
			continue
		}
		out = append(out, L(&Linear{In: h.Dim, Out: h.Vocab, Bias: h.Bias, Head: m.RunsTransformersForward()}))
		if h.Softcap > 0 {
			out = append(out, L(&Softcap{}))
		}
		if h.Scale {
			out = append(out, L(&Rescale{}))
		}
	}
	return out
}

// stageSlice is the top-level layers of one GPU's model that stage holds,
// the head left as it is but for its tie. Tied embeddings are split as
// Megatron-LM (and DeepSpeed's TiedLayerSpec) split them: the first stage
// holds the embedding, the last a head with a weight of its own, the
// same values kept by an all-reduce of the two gradients over the
// embedding group, the first and the last stage's ranks, after each
// backward (its communicator: estimate's pipelineNCCL). Each stage's
// weight is a plain parameter there, with its own gradient and optimizer
// state. (torchtitan refuses tied weights under a pipeline.)
func (m *Model) stageSlice(stage, stages int64) ([]Layer, error) {
	all := m.Lower()
	at, reps, err := m.splittable(all)
	if err != nil {
		return nil, err
	}
	split, err := StageLayers(m.NumLayers, stages)
	if err != nil {
		return nil, err
	}
	if stage < 0 || stage >= stages {
		return nil, fmt.Errorf("stage %d of %d", stage, stages)
	}
	var out []Layer
	switch {
	case stage == 0:
		out = append(out, all[:at]...)
	case m.RunsTransformersForward():
		out = append(out, m.stageInput(all[:at])...)
	}
	lo := int64(0)
	for _, n := range split[:stage] {
		lo += n
	}
	hi := lo + split[stage]
	// The stage's blocks, lo to hi of the model's: the part of each
	// repeat that falls among them (DeepSeek's dense first layers and its
	// experts' layers are two repeats, torchtitan's split counts them as
	// one list).
	first := int64(0)
	for _, rep := range all[at : at+reps] {
		r := *rep.Spec.(*Repeat)
		from, to := max(lo, first), min(hi, first+r.Times)
		first += r.Times
		if from >= to {
			continue
		}
		if !m.RunsTransformersForward() {
			rep.Body = titanAttention(rep.Body)
		}
		// The first stage's copies take the embeddings' output, which the
		// base model's forward may keep (Repeat.HoldInput); later stages
		// take a received activation.
		r.HoldInput = r.HoldInput && from == 0
		r.Times, r.First = to-from, from
		rep.Spec = &r
		out = append(out, rep)
	}
	if stage == stages-1 {
		out = append(out, untie(all[at+reps:])...)
	}
	return out, nil
}

// stageInput is what transformers' base model forward does to the
// inputs_embeds a later stage is handed (pp.HFStage passes the received
// activation so), from the first stage's layers before the blocks, pre:
// the embedding module itself is skipped, but a scale the forward applies
// to inputs_embeds (Granite's embedding_multiplier) multiplies the
// received activation again, and a dropout on the embeddings
// (StarCoder2's embedding_dropout) drops it. Gemma's √hidden scale comes
// with the looked-up rows only: transformers 5.17 applies it before the
// forward takes inputs_embeds (measured: Gemma 2's later stage makes no
// such product, bench/results/2026-11-28-h100x4-pp-families-traces).
func (m *Model) stageInput(pre []Layer) []Layer {
	var out []Layer
	for _, l := range pre {
		switch k := l.Spec.(type) {
		case *Embedding:
			if k.Scale && !m.Gemma {
				out = append(out, L(&Rescale{Hold: k.Hold}))
			}
		default:
			out = append(out, l)
		}
	}
	return out
}

// untie returns ls with its head's tie dropped: the head's weight its own
// (a copy of each tied head; ls is not changed).
func untie(ls []Layer) []Layer {
	out := append([]Layer(nil), ls...)
	for i, l := range out {
		if h, ok := l.Spec.(*LMHead); ok && h.Tie != "" {
			c := *h
			c.Tie = ""
			out[i].Spec = &c
		}
	}
	return out
}

// LowerStageRank is the program one rank of a layout runs for a pipeline
// stage: the stage's layers (stageSlice) lowered by the layout's tensor or
// context parallelism as LowerRank lowers a whole model, then the head
// made the stage's output (docs/parallelism.md §3.2): under tensor
// parallelism a vocabulary-parallel linear whose logits are gathered, or
// kept as the rank's shard with loss parallelism.
func (m *Model) LowerStageRank(stage, stages int64, t *Training) ([]Layer, error) {
	ls, err := m.stageSlice(stage, stages)
	if err != nil {
		return nil, err
	}
	if t.TP <= 1 && t.CP <= 1 {
		return m.stageHead(ls), nil
	}
	// No stage holds both ends of a tie (stageSlice): the embedding is
	// lowered as an untied one, whose whole gradient stays.
	mm := *m
	mm.Tied = false
	ls, err = mm.lowerLayers(ls, t)
	if err != nil {
		return nil, err
	}
	for i, l := range ls {
		if h, ok := l.Spec.(*VocabHead); ok {
			c := *h
			c.Output = true
			ls[i] = L(&c)
		}
	}
	return m.stageHead(ls), nil
}

// PipelineStages is the number of pipeline stages: pp, times the stages
// per rank under the interleaved schedule.
func (t *Training) PipelineStages() int64 {
	if t.PPSchedule == PPInterleaved {
		return t.PP * t.Virtual()
	}
	return t.PP
}

// Virtual is the stages each rank holds: PPVirtual under the interleaved
// schedule (2 when unset), else 1.
func (t *Training) Virtual() int64 {
	if t.PPSchedule != PPInterleaved {
		return 1
	}
	if t.PPVirtual < 1 {
		return 2
	}
	return t.PPVirtual
}

// RankStages is the stages rank holds: rank itself, or under the
// interleaved schedule rank, rank+pp, … (round robin, torch's
// generate_stage_to_rank_mapping).
func (t *Training) RankStages(rank int64) []int64 {
	v := t.Virtual()
	out := make([]int64, v)
	for i := range out {
		out[i] = rank + int64(i)*t.PP
	}
	return out
}

// PipelineOK says why a training setup's pipeline cannot run the model,
// or nil: torchtitan's split must give every stage a block, the schedule
// must be known, Schedule1F1B refuses fewer micro-batches than stages and
// ScheduleInterleaved1F1B what InterleavedOK refuses.
func (t *Training) PipelineOK(m *Model) error {
	if t.PP <= 1 {
		return nil
	}
	if _, _, err := m.splittable(m.Lower()); err != nil {
		return err
	}
	if t.PPVirtual > 1 && t.PPSchedule != PPInterleaved {
		return fmt.Errorf("%d stages per rank needs the interleaved schedule (%s runs one)", t.PPVirtual, t.PPSchedule)
	}
	if _, err := StageLayers(m.NumLayers, t.PipelineStages()); err != nil {
		return err
	}
	if err := t.scheduleOK(); err != nil {
		return err
	}
	if t.LoRA.Enabled() {
		return fmt.Errorf("LoRA with pipeline parallelism is not simulated")
	}
	if t.Offload != OffloadNone && t.Offload != "" {
		return fmt.Errorf("offload with pipeline parallelism is not simulated")
	}
	return nil
}

// scheduleOK checks the schedule against the micro-batches as torch does.
func (t *Training) scheduleOK() error {
	switch t.PPSchedule {
	case PPGPipe:
	case PP1F1B:
		if t.GradAccum < t.PP {
			return fmt.Errorf("1f1b needs at least as many micro-batches (%d) as stages (%d), as Schedule1F1B requires", t.GradAccum, t.PP)
		}
	case PPInterleaved:
		return InterleavedOK(t.PP, t.Virtual(), max(t.GradAccum, 1))
	default:
		return fmt.Errorf("unknown pipeline schedule %q (valid: %s)", t.PPSchedule, strings.Join([]string{PPGPipe, PP1F1B, PPInterleaved}, ", "))
	}
	return nil
}

// decodePipeline reads training.pp and pp_schedule, with the command
// line's overrides.
func decodePipeline(tm *mapping, t *Training, o Overrides) {
	tm.int("pp", &t.PP, false)
	tm.str("pp_schedule", &t.PPSchedule)
	tm.int("pp_virtual", &t.PPVirtual, false)
	if o.PP > 0 {
		t.PP = o.PP
	}
	if o.PPVirtual > 0 {
		t.PPVirtual = o.PPVirtual
	}
	if o.PPSchedule != "" {
		t.PPSchedule = strings.ToLower(o.PPSchedule)
	}
	if t.PP > 1 && t.PPSchedule == "" {
		t.PPSchedule = PP1F1B
	}
}

// checkPipeline reports a pipeline the model cannot run, at the line of
// training.pp (0 where a flag set it).
func checkPipeline(e *errs, tm *mapping, t *Training, m *Model, o Overrides) {
	if t.PP < 0 || o.PP < 0 {
		e.add(lineOf(tm, "pp"), "pp: must be positive, got %d", min(t.PP, o.PP))
		return
	}
	if t.PPVirtual < 0 || o.PPVirtual < 0 {
		e.add(lineOf(tm, "pp_virtual"), "pp_virtual: must be positive, got %d", min(t.PPVirtual, o.PPVirtual))
		return
	}
	if err := t.PipelineOK(m); err != nil {
		line := lineOf(tm, "pp")
		if o.PP > 0 {
			line = 0
		}
		e.add(line, "pp %d: %v", t.PP, err)
	}
}

// titanAttention returns ls with every attention layer's sliding window and
// key/value cache dropped (copies of the layers that change; ls is not
// changed). The parallel layouts are simulated on torchtitan's Llama (and
// bench/torch/dist's common.Llama), whose attention is causal SDPA without
// transformers' sliding-window masks and keeps no cache: a pipeline's
// stages (stageSlice) and tensor and context parallelism (lowerLayers)
// lower through it.
func titanAttention(ls []Layer) []Layer {
	out := append([]Layer(nil), ls...)
	for i := range out {
		l := &out[i]
		if a, ok := l.Spec.(*Attention); ok && (a.Window > 0 || a.KVCache) {
			c := *a
			c.Window, c.KVCache = 0, false
			l.Spec = &c
		}
		l.Body, l.Shortcut = titanAttention(l.Body), titanAttention(l.Shortcut)
		if l.Branches != nil {
			bs := make([][]Layer, len(l.Branches))
			for j, b := range l.Branches {
				bs[j] = titanAttention(b)
			}
			l.Branches = bs
		}
	}
	return out
}
