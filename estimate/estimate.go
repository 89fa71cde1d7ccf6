// Package estimate predicts the GPU memory of a training run from a spec.
//
// It simulates the run's optimizer steps symbolically, until one ends in
// the state the step before it ended in (every later step repeats it;
// docs/allocator.md §8): every tensor
// PyTorch allocates (parameters, gradients, optimizer state, the
// activations autograd saves, temporaries, library workspaces) is allocated
// in a replay of PyTorch's CUDA caching allocator and freed when its last
// holder lets go. From the replay come the three totals PyTorch users see:
// the peak of torch.cuda.max_memory_allocated, of max_memory_reserved, and
// the device total that includes the CUDA context and loaded kernels. The
// rules, their sources and the measurements behind them are in
// docs/formulas.md.
package estimate

import (
	"fmt"
	"sort"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/model"
)

// SchemaVersion is the version of the JSON form of Result (docs/json.md).
const SchemaVersion = 1

// Stages of a training step.
const (
	StageForward   = "forward"
	StageBackward  = "backward"
	StageOptimizer = "optimizer"
)

// Phase names a stage of one micro-batch of one optimizer step.
type Phase struct {
	// Iteration is the optimizer step, from 0. Adam's state is created
	// during step 0, so later steps hold more.
	Iteration int    `json:"iteration"`
	Micro     int    `json:"micro_batch"`
	Stage     string `json:"stage"`
}

func (p Phase) String() string {
	when := "first step"
	if p.Iteration > 0 {
		when = "later steps"
	}
	if p.Micro > 0 {
		when += fmt.Sprintf(", micro-batch %d", p.Micro+1)
	}
	return p.Stage + " (" + when + ")"
}

// PhasePeak is the highest memory seen during one phase.
type PhasePeak struct {
	Phase
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
}

// Item is one line of a breakdown.
type Item struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Result is an estimate. Its JSON form is memplan's stable output
// (docs/json.md); byte counts are exact integers.
type Result struct {
	SchemaVersion int    `json:"schema_version"`
	Name          string `json:"name"`
	ModelType     string `json:"model_type"`
	Params        int64  `json:"parameters"`
	// Trainable and Frozen split Params with LoRA (docs/lora.md §4):
	// the adapters, and the base with requires_grad off. Both 0 without.
	Trainable int64          `json:"trainable_parameters,omitempty"`
	Frozen    int64          `json:"frozen_parameters,omitempty"`
	Training  model.Training `json:"training"`
	Device    model.Device   `json:"device"`

	// Model state in steady state.
	ParamBytes     int64 `json:"parameter_bytes"`
	GradBytes      int64 `json:"gradient_bytes"`
	OptimizerBytes int64 `json:"optimizer_state_bytes"`
	// ActivationBytes is what autograd holds for backward at the end of a
	// forward pass (with checkpointing: the segment inputs).
	ActivationBytes int64 `json:"activation_bytes"`

	// The three totals.
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
	DeviceTotal   int64 `json:"device_total_bytes"`
	PeakPhase     Phase `json:"peak_phase"`

	// AtPeak splits PeakAllocated by what holds it at that moment.
	AtPeak []Item `json:"at_peak"`
	// Ranks says how the data-parallel ranks differ, when they do (ZeRO-1's
	// partition); the figures above are the busiest rank's.
	Ranks *Ranks `json:"ranks,omitempty"`
	// Pipeline gives every kind of pipeline stage (first, middle, last)
	// with pipeline parallelism; the figures above are the busiest's.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// Experts gives the kinds of expert-parallel rank when the routing
	// is skewed; the figures above are the busiest's (moe_ep.go).
	Experts *ExpertRanks `json:"experts,omitempty"`
	// DDPRaceBytes is DDP's old flat gradient bucket, which the figures
	// above keep past the second step's rebuild on a rank that races the
	// first step's last all-reduce (0: none; ddp.go, docs/multigpu.md):
	// the most a loop that pauses after its first step would save.
	DDPRaceBytes int64 `json:"ddp_rebuild_race_bytes,omitempty"`

	// Overhead is device memory outside PyTorch's allocator.
	Overhead []Item `json:"overhead"`
	// Phases are the simulated steps' phases with their peaks: two steps
	// or more, as many as the allocator's cache took to repeat (the
	// steps after the first of the steady program replayed; replay.go).
	Phases []PhasePeak `json:"phases"`

	// OOM is set when a reserved-memory cap (Options) cannot be kept even
	// after freeing cached blocks; AllocRetries counts those frees.
	OOM          bool `json:"oom,omitempty"`
	AllocRetries int  `json:"alloc_retries,omitempty"`

	// Stopped is set when the simulation ended early because the device
	// total passed Options.StopAbove: the totals are then what the run
	// had reached when it stopped, lower bounds of the whole run's, and
	// the breakdowns are incomplete.
	Stopped bool `json:"stopped,omitempty"`

	// LeakPerStep is the memory the run keeps for good after every step
	// (a checkpointed recompute's unwaited collectives; docs/parallelism.md
	// §3.1.6), 0 for none. Then the peaks and the device total are the
	// run's last step's, of LeakSteps steps (model.Training.Steps, or
	// model.LongRunSteps): the second step's, which the simulation makes,
	// plus (LeakSteps − 2) · LeakPerStep.
	LeakPerStep int64 `json:"leak_per_step_bytes,omitempty"`
	LeakSteps   int64 `json:"leak_steps,omitempty"`

	// sized is what the device sized in it: a cuDNN table, reduction
	// scratch by SM count (SharesWith).
	sized deviceSizing

	// Segments are the allocator's segments at the end of the run, which
	// is when it holds the most (nothing is returned to the driver): the
	// cudaMalloc sizes the probe replays on a real device.
	Segments []int64 `json:"-"`

	// Fill is DeviceTotal over the device's memory; Fits says it is ≤ 1.
	// Fragmentation is the caching allocator's cache when reserved memory
	// first reached its peak (docs/allocator.md §5, docs/json.md).
	Fragmentation *alloc.Fragmentation `json:"fragmentation,omitempty"`

	Fill  float64  `json:"fill"`
	Fits  bool     `json:"fits"`
	Notes []string `json:"notes,omitempty"`
	// Unmeasured lists the parts of the run modelled from source that no
	// measurement checks: "quant" (a bitsandbytes int8/nf4 base),
	// "bnb_optimizer" (bitsandbytes' 8-bit or paged optimizers;
	// docs/lora.md §6-§7).
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// Largest is the largest peak allocated, peak reserved and device total
// over the kinds of rank r describes (pipeline stages, expert-parallel
// ranks), each on its own: what a measurement that takes each total's
// largest over the ranks compares with. Without kinds it is r's own.
func (r *Result) Largest() (allocated, reserved, device int64) {
	allocated, reserved, device = r.PeakAllocated, r.PeakReserved, r.DeviceTotal
	take := func(a, rs, d int64) {
		allocated, reserved, device = max(allocated, a), max(reserved, rs), max(device, d)
	}
	if p := r.Pipeline; p != nil {
		for _, k := range p.Kinds {
			take(k.PeakAllocated, k.PeakReserved, k.DeviceTotal)
		}
	}
	if x := r.Experts; x != nil {
		for _, k := range x.Kinds {
			take(k.PeakAllocated, k.PeakReserved, k.DeviceTotal)
		}
	}
	return allocated, reserved, device
}

// Overheads outside the caching allocator (the CUDA context and the
// kernel modules loaded lazily) and the cuBLAS workspaces, as measured
// (internal/measured has where and how; docs/formulas.md §D).
var (
	cudaContext   = measured.CUDAContext.Bytes
	modulesBase   = measured.ModulesBase.Bytes
	modulesHalf   = measured.ModulesHalf.Bytes
	hopperCublas  = measured.HopperCublas.Bytes // cuBLAS workspace on sm90
	defaultCublas = measured.DefaultCublas.Bytes
)

func mustNCCL(b int64, err error) int64 {
	if err != nil {
		panic(err)
	}
	return b
}

// Estimate predicts the memory of the training run a spec describes.
func Estimate(spec *model.Spec) (*Result, error) { return estimateWith(spec, nil, nil) }

// estimateWith runs Estimate with test hooks: setup runs before the
// simulation, inspect after it. A pipeline-parallel run simulates each
// stage (stages.go).
func estimateWith(spec *model.Spec, inspect func(*sim), setup func(*sim)) (*Result, error) {
	switch {
	case spec.Training.PP > 1:
		return estimatePipeline(spec, inspect, setup)
	case spec.Training.EP > 1:
		return estimateExperts(spec, inspect, setup) // moe_ep.go
	}
	return simulateRank(spec, inspect, setup)
}

// simulateRank is one rank's simulation: the whole model, or with s.pp set by
// setup, one pipeline stage.
func simulateRank(spec *model.Spec, inspect func(*sim), setup func(*sim)) (r *Result, err error) {
	run := spec.Training
	// On the run's layout: the context-parallel rank's spec below counts
	// dp·cp as its data-parallel ranks, as FSDP shards over them.
	if err := model.CheckEP(&run, &spec.Model); err != nil {
		return nil, fmt.Errorf("ep: %w", err)
	}
	if run.CP > 1 {
		var err error
		if spec, err = cpRank(spec); err != nil {
			return nil, err
		}
	}
	t := spec.Training
	cfg, err := newConfig(spec)
	if err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, ckptMode: t.Checkpointing.Mode, ckptK: t.Checkpointing.K}
	s.tape, s.cache = s.slab.newTape(), s.slab.castCache()
	if setup != nil {
		setup(s)
	}
	defer s.al.release()
	if s.stopAbove > 0 {
		s.armStop(run)
		defer s.recoverStop(spec, run, &r, &err)
	}
	confNotes, err := s.al.configure(t.AllocConf)
	if err != nil {
		return nil, err
	}
	s.enter(0, 0, "load")
	s.bnbSetup(spec)
	layers := spec.Model.Lower()
	prog, err := spec.Model.LowerRankOf(layers, &t)
	if err != nil {
		return nil, err
	}
	ins, layers := s.buildRank(t, run, layers, prog, &spec.Model)
	s.applyLoRA(spec)
	s.shardSetup(ins)
	if s.pp != nil {
		s.trainPipeline(spec)
	} else {
		s.train(spec, ins)
	}
	if s.err != nil {
		return nil, s.err
	}
	if inspect != nil {
		inspect(s)
	}
	r = s.result(spec, layers, run)
	r.Training = run // the run's sequence and dp, not the rank's
	if s.pp != nil {
		s.pipelineOverhead(r)
	}
	r.Notes = append(r.Notes, confNotes...)
	s.slab.release(s.tape)
	return r, nil
}

// newConfig is what the simulated ops need to know about a spec's run.
func newConfig(spec *model.Spec) (*config, error) {
	t := spec.Training
	if err := spec.LoRALayoutOK(); err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	cfg := &config{
		amp:             t.Mixed(),
		fp16:            t.Precision == model.AMPFP16,
		compute:         f32,
		param:           f32,
		cublasWorkspace: defaultCublas,
		eager:           t.Attention == model.AttnEager,
		batch:           t.Batch,
		sms:             int64(spec.Device.SMs),
		threadsSM:       int64(spec.Device.ThreadsPerSM),
		dp:              t.FSDPShards(), // dp, or an HSDP group's GPUs
		ep:              max(t.EP, 1),
		efsdp:           max(t.DP, 1) * max(t.TP, 1) / max(t.EP, 1),
		fsdpExperts:     t.FSDPExperts,
		epSkew:          t.EPSkew,
		mayRace:         MayRace(t) || racesMidStep(t),
		midStep:         racesMidStep(t),
		zero:            t.Zero,
		offload:         t.Offload,
		bucketView:      t.BucketView,
		lossOutside:     t.LossOutsideAutocast && t.PP <= 1,
		inputGrads:      t.LoRA.Enabled() && t.Checkpointing.Mode != model.CkptNone,
	}
	if t.Precision != model.FP32 {
		cfg.compute = half
	}
	if t.Precision == model.BF16 || t.Precision == model.FSDPBF16 {
		cfg.param = half
	}
	cfg.master = cfg.param
	if t.Precision == model.FSDPBF16 {
		cfg.master = f32
	}
	if spec.Device.Hopper() {
		cfg.cublasWorkspace = hopperCublas
	}
	cfg.cudnn = cudnnFor(spec.Device)
	return cfg, nil
}

// result assembles the simulation's figures for the rank's spec; NCCL's
// communicators are counted from the run's layout, whose process groups
// they are (under context parallelism FSDP shards over dp·cp, which is the
// cp group itself when dp is 1).
func (s *sim) result(spec *model.Spec, layers []model.Layer, run model.Training) *Result {
	cfg := s.cfg
	params := model.Params(layers)
	if s.pp != nil {
		// A stage's own: under expert parallelism its E/ep experts.
		params = model.RankParams(layers, run.EP)
	}
	r := &Result{
		SchemaVersion:   SchemaVersion,
		Name:            spec.Name,
		ModelType:       spec.Model.Type,
		Params:          params,
		Training:        spec.Training,
		Device:          spec.Device,
		ActivationBytes: s.saved,
		PeakAllocated:   s.peak.allocated,
		PeakReserved:    s.peak.reserved,
		PeakPhase:       s.peak.at,
		Phases:          s.phases[1:],
		Notes:           append([]string(nil), spec.Notes...),
		OOM:             s.al.oom,
		Segments:        s.al.Segments(),
		AllocRetries:    s.al.retries,
		Fragmentation:   s.al.fragmentation(),
	}
	r.ParamBytes = s.paramTotal()
	for _, d := range s.ddpStates() {
		if d.held != nil {
			r.DDPRaceBytes += d.held.bytes()
		}
	}
	r.GradBytes = r.ParamBytes
	if s.frozen != nil {
		r.Trainable, r.Frozen = spec.Trainable(), r.Params
		r.Params += r.Trainable
		for _, p := range s.frozen {
			r.ParamBytes += p.bytes()
		}
	}
	if cfg.zero >= 2 {
		r.ParamBytes, r.GradBytes = s.shardBytes()
	}
	if cfg.zero >= 2 && cfg.offload != model.OffloadNone {
		r.GradBytes = 0
	}
	if cfg.offload == model.OffloadParams {
		r.ParamBytes = 0
	}
	r.OptimizerBytes = s.live[catOptState]
	var sum int64
	for c := category(0); c < numCats; c++ {
		if b := s.peak.live[c]; b > 0 {
			r.AtPeak = append(r.AtPeak, Item{catNames[c], b})
			sum += b
		}
	}
	if d := r.PeakAllocated - sum; d > 0 {
		r.AtPeak = append(r.AtPeak, Item{"allocator rounding", d})
	}
	r.Overhead = overhead(s.used, ncclFor(run, s.tpAllToAll))
	s.bnbResult(r)
	defer func() { r.Ranks = s.ranks(r) }()
	r.Notes = append(r.Notes, cfg.cudnn.notes()...)
	r.sized = deviceSizing{cudnn: cfg.cudnn.used, reds: s.smReds, sms: cfg.sms, threadsSM: cfg.threadsSM}
	r.DeviceTotal = r.PeakReserved + r.OverheadBytes()
	s.foldLeak(r, run.Steps, spec.Device.Memory)
	if spec.Device.Memory > 0 {
		r.Fill = float64(r.DeviceTotal) / float64(spec.Device.Memory)
		r.Fits = r.DeviceTotal <= spec.Device.Memory
	}
	r.Notes = append(r.Notes, s.notes...)
	if spec.Device.Vendor == model.AMD {
		r.Notes = append(r.Notes, "the overheads outside the allocator were measured on NVIDIA GPUs; on ROCm they differ")
	}
	sort.SliceStable(r.AtPeak, func(i, j int) bool { return r.AtPeak[i].Bytes > r.AtPeak[j].Bytes })
	return r
}

// OverheadPaged names the overhead item of a paged optimizer's state: CUDA
// unified memory, resident on the device while it fits, outside PyTorch's
// allocator (docs/lora.md §7).
const OverheadPaged = "paged optimizer state (unified memory)"

// OverheadNCCL names the overhead item of NCCL's communicators (their
// buffers live outside PyTorch's allocator; docs/multigpu.md).
const OverheadNCCL = "NCCL communicators"

// OverheadBytes is the device memory outside the caching allocator that
// r counts (its Overhead's items together).
func (r *Result) OverheadBytes() int64 { return total(r.Overhead) }

// NCCLBytes is the device memory of NCCL's communicators in r's overhead
// (0 without one).
func (r *Result) NCCLBytes() int64 {
	var n int64
	for _, o := range r.Overhead {
		if o.Name == OverheadNCCL {
			n += o.Bytes
		}
	}
	return n
}

func overhead(u usage, nccl int64) []Item {
	mods := modulesBase
	if u.gemmHalf {
		mods += modulesHalf
	}
	items := []Item{{"CUDA context", cudaContext}, {"kernel modules (lazy loading)", mods}}
	if nccl > 0 {
		items = append(items, Item{OverheadNCCL, nccl})
	}
	return items
}

// note adds a line to the result's notes, once.
func (s *sim) note(msg string) {
	for _, n := range s.notes {
		if n == msg {
			return
		}
	}
	s.notes = append(s.notes, msg)
}
