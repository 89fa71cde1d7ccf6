package estimate

import (
	"fmt"
	"slices"
	"sort"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/parallel"
)

// DistributedDataParallel's reducer (DDP, and ZeroRedundancyOptimizer over
// DDP), from torch/nn/parallel/distributed.py and
// torch/csrc/distributed/c10d/{comm,reducer}.cpp (docs/multigpu.md, DDP):
//
//   - construction: _sync_module_states broadcasts every parameter and
//     buffer from rank 0 (broadcast_coalesced): the tensors, in module
//     registration order, are grouped into buckets of at least 250 MiB,
//     each flattened into a new tensor (a view for a bucket of one tensor),
//     at most two in flight, each freed once its broadcast is done. Then
//     the reducer allocates one flat bucket holding every gradient.
//   - the first backward records the order in which the gradients become
//     ready; the next forward (_pre_forward → _rebuild_buckets) frees the
//     flat bucket and allocates buckets cut in that order (a first of at
//     least 1 MiB, then 25 MiB), before the model runs.
//
// With gradient_as_bucket_view the gradients are views of their bucket.

// ddpState is the reducer's state in the simulation.
type ddpState struct {
	flat     *tensor             // the construction's single bucket, until rebuilt
	ready    map[*tensor]int     // each parameter's last gradient in the first step
	n        int                 // gradients seen
	rebuilt  bool                // the buckets were rebuilt
	bucketOf map[*tensor]*tensor // a parameter's rebuilt bucket
	sizes    []int64             // the buckets' bytes as allocated: the flat one, then the rebuilt
	bcast    []int64             // the initial broadcast's flattened buckets' bytes
	held     *tensor             // the flat bucket outliving the rebuild (ddpRaces)
	// params are the module's parameters, nil for the rank's one module
	// (s.params); stage is the interleaved schedule's stage whose module
	// this is, nil for the rank's one module.
	params []*tensor
	stage  *pipeline
}

// moduleParams are the parameters d's module holds.
func (d *ddpState) moduleParams(s *sim) []*tensor {
	if d.stage != nil {
		return d.params
	}
	return s.params
}

// ddpConstruct is DistributedDataParallel's constructor on this rank, once
// the model is on the device. Under the interleaved schedule each stage
// module has its own (torchtitan and bench/torch/dist/pp.py wrap each
// model chunk), constructed in the order of the rank's stages once all
// are built; s.ddp is then the module whose stage the schedule runs.
func (s *sim) ddpConstruct(ins []*inst) {
	if s.pp != nil && len(s.pp.local) > 1 {
		for _, q := range s.pp.local {
			q.ddp = s.ddpModule(q.ins, q.params, q.buffers, q)
			s.ddpMods = append(s.ddpMods, q.ddp)
		}
		s.ddp = s.pp.local[0].ddp
		return
	}
	s.ddp = s.ddpModule(ins, nil, s.buffers, nil)
}

// ddpStates are the rank's reducers: one per stage module under the
// interleaved schedule, else s.ddp alone (or none).
func (s *sim) ddpStates() []*ddpState {
	if s.ddpMods != nil {
		return s.ddpMods
	}
	if s.ddp == nil {
		return nil
	}
	return []*ddpState{s.ddp}
}

// ddpModule is one module's DistributedDataParallel constructor: the
// initial broadcast of its parameters (in registration order) and
// buffers, then the reducer's flat bucket of every gradient. params and
// stage are nil for the rank's one module (all of s.params).
func (s *sim) ddpModule(ins []*inst, params, buffers []*tensor, stage *pipeline) *ddpState {
	d := &ddpState{ready: map[*tensor]int{}, params: params, stage: stage}
	// _verify_param_shape_across_processes: the group's first collective
	// brings its communicator up, and with it the room NCCL's set-up
	// leaves in the address space.
	s.communicatorUp()
	states := registered(ins, map[*tensor]bool{}, nil, true)
	seen := make(map[*tensor]bool, len(states))
	for _, t := range states {
		seen[t] = true
	}
	// Parameters no layer holds (bitsandbytes' pieces) follow in the
	// order they were made; LoRA's adapters follow their linears
	// (registered), as _sync_module_states takes named_parameters().
	all := params
	if stage == nil {
		all = append(append([]*tensor(nil), s.frozen...), s.params...)
	}
	for _, t := range all {
		if !seen[t] {
			states = append(states, t)
		}
	}
	states = append(states, buffers...)
	bytes := make([]int64, len(states), len(states)+2)
	keys := make([]int, len(states), len(states)+2)
	for i, t := range states {
		bytes[i], keys[i] = t.bytes(), int(t.dt)
	}
	if s.rotaryElems > 0 {
		// inv_freq and original_inv_freq (kinds_attention.go).
		for range 2 {
			bytes, keys = append(bytes, s.rotaryElems*f32), append(keys, f32)
		}
	}
	buckets, err := parallel.AssignBuckets(bytes, keys, []int64{parallel.BroadcastBucketBytes}, false)
	if err != nil {
		s.err = err
		return nil
	}
	var inFlight []*tensor
	for _, b := range buckets {
		if len(inFlight) == 2 {
			s.unref(inFlight[0])
			inFlight = inFlight[1:]
		}
		if len(b) == 1 {
			// flatten_dense_tensors of one tensor is a view of it.
			inFlight = append(inFlight, nil)
			continue
		}
		var n int64
		for _, k := range b {
			n += bytes[k]
		}
		inFlight = append(inFlight, s.alloc(n, u8, catTemp, "DDP init broadcast"))
		d.bcast = append(d.bcast, n)
	}
	for _, t := range inFlight {
		s.unref(t)
	}
	var n int64
	for _, p := range d.moduleParams(s) {
		n += p.bytes()
	}
	d.sizes = []int64{n}
	d.flat = s.alloc(n, u8, catGrad, "DDP gradient buckets")
	return d
}

// registered appends the parameters of ins to out in module registration
// order, each once: forward order, except that within a block (a repeat's
// copy) the layers marked model.Layer.Registered come after the others.
func registered(ins []*inst, seen map[*tensor]bool, out []*tensor, adapters bool) []*tensor {
	for _, in := range ins {
		if in.unit {
			out = registeredPass(in.body, seen, out, 0, adapters)
			out = registeredPass(in.body, seen, out, 1, adapters)
			continue
		}
		out = registeredPass([]*inst{in}, seen, out, -1, adapters)
	}
	return out
}

// registeredPass appends the parameters of the layers in ins (and their
// sublayers) whose Registered is reg, or of all of them when reg < 0.
func registeredPass(ins []*inst, seen map[*tensor]bool, out []*tensor, reg int8, adapters bool) []*tensor {
	for _, in := range ins {
		if reg >= 0 && in.l != nil && in.l.Registered != reg {
			if reg == 0 {
				continue // placed by the later pass
			}
			// A sublayer of a later layer is placed with it.
			for list := range in.sublists() {
				out = registeredPass(list, seen, out, reg, adapters)
			}
			continue
		}
		for _, p := range in.p {
			if p != nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		if adapters {
			// peft's LoraLayer registers base_layer, then lora_A and
			// lora_B: the adapters follow their linear's weight and bias.
			for _, p := range in.p {
				if p != nil && p.lora != nil && !seen[p.lora.a] {
					seen[p.lora.a], seen[p.lora.b] = true, true
					out = append(out, p.lora.a, p.lora.b)
				}
			}
		}
		sub := reg
		if reg > 0 {
			sub = -1 // the whole subtree of a later layer, in order
		}
		for list := range in.sublists() {
			out = registeredPass(list, seen, out, sub, adapters)
		}
	}
	return out
}

// ddpReady records that node n's backward has made its parameters'
// gradients ready: their AccumulateGrad hooks fire in the node's edge
// order (for AddmmBackward0 the bias before the weight, node.biasFirst),
// and a parameter's last arrival in the first step is when it is ready.
func (s *sim) ddpReady(n *node) {
	d := s.ddp
	if d.rebuilt {
		return
	}
	k := len(n.ins) - 1
	for i := range n.ins {
		if n.biasFirst && i >= k-1 {
			i = 2*k - 1 - i // ins end [W, b]: b, then W
		}
		if p := n.ins[i]; p.param {
			d.ready[p] = d.n
			d.n++
		}
	}
}

// DDPSettle is the pause after the first optimizer step has finished on
// the GPU, in seconds (model.Training.StepPause), from which DDP's old flat
// bucket is freed at its rebuild (docs/multigpu.md, "DDP's bucket rebuild
// race"). What holds it: ProcessGroupNCCL stashes the tensors of an
// asynchronous collective in its Work until work.wait(), which DDP never
// calls on its bucket all-reduces; the watchdog thread, which wakes every
// ncclWatchdogPeriod, hands a completed collective's stash to the process
// group, and the next collective on the group (workEnqueue) empties it.
// The rebuild's broadcasts are such collectives, so the old bucket is
// freed there if the watchdog woke between the end of the first step's last
// all-reduce and the rebuild. bench/torch/dist/watchdog.py measured it
// freed in every trial with 0.2, 0.3 or 0.5 s between the steps and held in
// 67 of 68 with none; held after 0.3 s of idling and freed by the next
// all-reduce in 12 of 12; rebuildtiming.py never saw it held where the
// window was over 0.1 s. Twice the period leaves a margin for the thread's
// own work and wake-up.
const DDPSettle = 2 * ncclWatchdogPeriod

// ncclWatchdogPeriod is how often ProcessGroupNCCL's watchdog thread looks
// for completed collectives, in seconds (kWatchdogThreadSleepMillis, 100 ms
// in torch 2.11).
const ncclWatchdogPeriod = 0.1

// PauseRecipe is what a training loop does to pause DDPSettle after its
// first optimizer step, in Python: the one wording of the fix every command
// gives (docs/multigpu.md).
var PauseRecipe = fmt.Sprintf("torch.cuda.synchronize() then time.sleep(%g) after the first optimizer step", DDPSettle)

// MayRace reports whether a training setup's DDP bucket rebuild can race
// the first step's last all-reduce: DDP's buckets (data parallelism at
// ZeRO 0 or 1) and a loop that does not pause for DDPSettle after its
// first step. The estimate keeps the old bucket on the ranks that race,
// and a pause is a fix (tuner, diagnose). A loop that accumulates
// gradients outside a pipeline rebuilds inside its first step instead
// (racesMidStep), where no pause between steps helps.
func MayRace(t model.Training) bool {
	return t.DP > 1 && t.Zero <= 1 && t.StepPause < DDPSettle && !racesMidStep(t)
}

// racesMidStep reports whether DDP rebuilds its buckets inside the first
// optimizer step: a loop that accumulates gradients over micro-batches
// without a pipeline (each backward all-reduces; DDP's forward rebuilds
// at the first forward after the first backward, the second
// micro-batch's). The rebuild follows the first micro-batch's last
// all-reduce at once, so it races it whatever the loop does between
// steps; the old bucket then lives until a collective of the second
// micro-batch's backward (DDPSettle), freed by the step's end
// (ddpSettleMidStep). Measured on four H200s (held-out set 64,
// bench/results/2026-11-28-h200x4-heldout-64): Llama-3.2-1B under DDP over
// 8 micro-batches, three of four ranks held it at the first step's peak
// (+4.6 GiB), none in a later step. A pipeline's stages sync only their
// last micro-batch's backward (no_sync before it), so they rebuild in the
// second step, as without accumulation.
func racesMidStep(t model.Training) bool {
	return t.DP > 1 && t.Zero <= 1 && t.GradAccum > 1 && t.PP <= 1
}

// ddpRaces reports whether this rank's rebuild can race the first step's
// last all-reduce: the setup may race (MayRace), and the rank is not a
// pipeline's last stage. A stage's window is the time from its own last
// all-reduce to its rebuild at its next forward, which waits for its first
// activations of the second step: the last stage finishes its first step's
// backwards first and waits for every stage before it to finish theirs, to
// step their optimizers and to run a micro-batch forward, so its window is
// the longest (measured: every first stage of five pipelines raced on one
// of its two data-parallel ranks, no last stage did). A middle stage waits
// for fewer stages than the last: not measured (no machine of eight GPUs
// was lent), it is taken to race, the safe side.
func (s *sim) ddpRaces(d *ddpState) bool {
	if !s.cfg.mayRace {
		return false
	}
	if d.stage != nil {
		// A stage module of the interleaved schedule: the last stage's
		// waits for its first activations, as above; of the others
		// ddpDropFlat keeps only the first to rebuild's bucket.
		return !d.stage.last()
	}
	if s.pp == nil {
		return true
	}
	for _, q := range s.pp.local {
		if !q.last() {
			return true
		}
	}
	return false
}

// ddpRebuild is _rebuild_buckets at the first forward after the first
// backward: the second step's first, or the first step's second
// micro-batch's when the loop accumulates (racesMidStep).
func (s *sim) ddpRebuild() {
	d := s.ddp
	if d == nil || d.rebuilt || len(d.ready) == 0 {
		return
	}
	d.rebuilt = true
	order := make([]*tensor, 0, len(d.ready))
	for _, p := range d.moduleParams(s) {
		if _, ok := d.ready[p]; ok {
			order = append(order, p)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return d.ready[order[i]] < d.ready[order[j]] })
	bytes := make([]int64, len(order))
	keys := make([]int, len(order))
	for i, p := range order {
		bytes[i], keys[i] = p.bytes(), int(p.dt)
	}
	buckets, err := parallel.AssignBuckets(bytes, keys,
		[]int64{parallel.DDPFirstBucketBytes, parallel.DDPBucketCapBytes}, true)
	if err != nil {
		s.err = err
		return
	}
	// buckets_.clear() drops the flat bucket first; gradients still alive
	// as its views (zero_grad without set_to_none) keep it until they are
	// copied into their new bucket. When the rebuild follows the first
	// step's last all-reduce at once, the flat bucket outlives it (the
	// race, ddpRaces): held to the end of the simulation.
	old := d.flat
	d.flat = nil
	s.ddpDropFlat(d, old)
	if s.cfg.bucketView {
		d.bucketOf = make(map[*tensor]*tensor, len(order))
	}
	for _, b := range buckets {
		var n int64
		for _, k := range b {
			n += bytes[k]
		}
		t := s.alloc(n, u8, catGrad, "DDP gradient buckets")
		d.sizes = append(d.sizes, n)
		for _, k := range b {
			p := order[k]
			if d.bucketOf != nil {
				d.bucketOf[p] = t
			}
			if p.pgrad != nil && p.pgrad.base != nil && s.cfg.bucketView {
				// bucket_view.copy_(grad); grad = bucket_view.
				v := s.view(t, p.bytes())
				s.unref(p.pgrad)
				p.pgrad = v
			}
		}
	}
}

// ddpDropFlat drops d's flat bucket old at its rebuild: freed, or kept to
// the end of the simulation where the rebuild may race the first step's
// last all-reduce (ddpRaces), with a note.
func (s *sim) ddpDropFlat(d *ddpState, old *tensor) {
	// The interleaved schedule's stage modules rebuild one after another
	// in the second step. Only the first to rebuild can follow its own
	// last all-reduce with no collective in between (its stage is the
	// rank's last to run backward); the others' old buckets are freed at
	// their rebuilds (bench/results/2026-11-26-h200x4-pp-interleaved-ddp-trace:
	// every rank). The first's is freed at the group's next collective
	// after the watchdog has woken: its own rebuild or the next module's
	// on the ranks of that trace, past the step's peak on one rank of a
	// held-out run (2026-11-26-h200x4-pp-interleaved-ddp-heldout-2.jsonl,
	// TinyLlama s 4096, rank 1, 1.06 GiB over its data-parallel peer), so
	// it is kept, as without a pipeline.
	for _, o := range s.ddpStates() {
		if d.stage != nil && o != d && o.rebuilt {
			s.unref(old)
			return
		}
	}
	if !s.ddpRaces(d) {
		s.unref(old)
		return
	}
	d.held = old
	if s.cfg.midStep {
		s.note(fmt.Sprintf("DDP's bucket rebuild race: DDP rebuilds its buckets at the second micro-batch's forward, "+
			"at once after the first micro-batch's last all-reduce, so NCCL may hold the old flat gradient bucket (%s) "+
			"until the second micro-batch's backward all-reduces; the estimate keeps it for that micro-batch (docs/multigpu.md)",
			units.Format(old.bytes())))
		return
	}
	what, past, before := "the old flat gradient bucket", "the second step's rebuild", "which a second step started at once can precede"
	if d.stage != nil {
		what, past, before = "the first stage module's old flat gradient bucket", "its rebuild", "which the rank's next stage modules' rebuilds may precede"
	}
	s.note(fmt.Sprintf("DDP's bucket rebuild race: %s (%s) is kept past %s, "+
		"as NCCL holds it until its watchdog (every %g s) has seen the first step's last all-reduce end and another collective runs, %s; "+
		"%s frees it: say so with --step-pause %g (docs/multigpu.md)",
		what, units.Format(old.bytes()), past, ncclWatchdogPeriod, before, PauseRecipe, DDPSettle))
}

// ddpSettleMidStep frees the old flat bucket a rebuild inside the first
// step kept (racesMidStep): by the end of the second micro-batch's
// backward its all-reduces have run, the watchdog having woken during its
// forward, and the first of them emptied NCCL's stash (DDPSettle).
func (s *sim) ddpSettleMidStep() {
	if d := s.ddp; s.cfg.midStep && d != nil && d.held != nil {
		s.unref(d.held)
		d.held = nil
	}
}

// ddpBucket is the bucket a parameter's gradient is a view of under
// gradient_as_bucket_view, or nil.
func (s *sim) ddpBucket(p *tensor) *tensor {
	d := s.ddp
	if d == nil || !s.cfg.bucketView {
		return nil
	}
	if d.stage != nil && !slices.Contains(d.params, p) {
		// Another stage module's parameter (the interleaved schedule).
		for _, o := range s.ddpStates() {
			if slices.Contains(o.params, p) {
				d = o
			}
		}
	}
	if d.bucketOf != nil {
		return d.bucketOf[p]
	}
	return d.flat
}
