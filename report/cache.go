package report

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
)

// The cells of one row (one spec on every device) share their estimates.
// The estimator reads the device only through its architecture (the
// cuBLAS workspace on Hopper, the cuDNN tables), vendor, and SM count and
// threads per SM (reduction scratch); its memory only scales the fill. So
// two devices that agree on those fields (an A100 40GB and 80GB, an H100
// and an H200) get the same device total for the same training settings:
// one device class, each estimate made once for both. An estimate that
// neither the cuDNN tables nor the SM count sized is shared more widely,
// by every device with the same cuBLAS workspace (plainKey).
//
// Rows share whole estimates too, through the report's sharedCache: two
// rows whose specs describe the same model (a spec listed twice, or as
// written and with an override it already has: specs/mistral-7b.yaml is
// bf16, so its "?precision=bf16" row is the same job) make each estimate
// once, and so do a row's fixes that are another row's training (the
// bf16 fix of an amp-bf16 row is the bf16 row's own spec). An estimate is a
// function of the model, the training and the device class alone, so a
// row that takes one from another row gets the figure it would have made.
//
// Across classes only bounds are shared: every estimate gives a lower
// bound on the device total that does not depend on the device (bound), so
// a fix whose bound is beyond a device's target cannot fit it and is not
// estimated there (tuner.Constraints.Bound). The batch curve learned on
// one class is not used to guide another's search: the estimator is not
// monotone in the batch (Qwen2.5-7B in bf16 on an H200 predicts more at
// batch 8 than at 9, 8 above the target and 9 below it), so a search that
// starts elsewhere can stop at another crossing of the target, and a
// shared report must give the answers of the cells computed alone
// (TestSharedMatchesUnshared).

// cacheKey identifies an estimate the cells of one row can share.
type cacheKey struct {
	training model.Training
	device   model.Device
}

// plainKey identifies an estimate that no cuDNN table sized: the same on
// every device with the same cuBLAS workspace whose SM count sizes its
// reduction scratch the same (estimate.Result.SharesWith), which is most
// transformers on 10 of the 12 catalog devices.
type plainKey struct {
	training model.Training
	hopper   bool
}

// deviceClass clears the device fields the estimator does not read.
func deviceClass(d model.Device) model.Device {
	d.Name, d.Product, d.Memory, d.Measured, d.MeasuredOn = "", "", 0, false, nil
	return d
}

func keyOf(s *model.Spec) cacheKey {
	return cacheKey{s.Training, deviceClass(s.Device)}
}

func (k cacheKey) plain() plainKey { return plainKey{k.training, k.device.Hopper()} }

// sharedCache holds the whole estimates of every row of a report, by
// model (an index into models) and cacheKey, for the rows computed in
// parallel: its methods lock.
type sharedCache struct {
	mu      sync.Mutex
	models  []*model.Spec // one spec of each distinct model, by index
	results map[sharedKey]*estimate.Result
	plain   map[sharedPlain]*estimate.Result
	over    map[sharedKey]int64 // rowCache.over's, for every row
}

type sharedKey struct {
	model int
	key   cacheKey
}

type sharedPlain struct {
	model int
	key   plainKey
}

func newSharedCache() *sharedCache {
	return &sharedCache{results: map[sharedKey]*estimate.Result{}, plain: map[sharedPlain]*estimate.Result{},
		over: map[sharedKey]int64{}}
}

// modelOf returns the index of s's model among the report's: equal to
// another row's when everything but the training and the device is (the
// model, and what the estimate copies from the spec: its notes).
func (c *sharedCache) modelOf(s *model.Spec) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.models {
		if s.HFType == m.HFType && reflect.DeepEqual(s.Notes, m.Notes) && reflect.DeepEqual(s.Model, m.Model) {
			return i
		}
	}
	c.models = append(c.models, s)
	return len(c.models) - 1
}

// made is the whole estimate of model m under key k that any row has
// made, or nil (rowCache.made's rules).
func (c *sharedCache) made(m int, s *model.Spec, k cacheKey) *estimate.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.results[sharedKey{m, k}]; ok {
		return r
	}
	if r, ok := c.plain[sharedPlain{m, k.plain()}]; ok && r.SharesWith(s.Device) {
		return r
	}
	return nil
}

// raise records a stopped estimate's total v under key k of model m.
func (c *sharedCache) raise(m int, k cacheKey, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sk := sharedKey{m, k}
	c.over[sk] = max(c.over[sk], v)
}

// overOf is the highest stopped total any row recorded under key k of
// model m (raise), 0 if none.
func (c *sharedCache) overOf(m int, k cacheKey) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.over[sharedKey{m, k}]
}

func (c *sharedCache) keep(m int, k cacheKey, r *estimate.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results[sharedKey{m, k}] = r
	c.plain[sharedPlain{m, k.plain()}] = r
}

// rowCache memoizes the estimator over the cells of one row. A row is
// computed by one goroutine, so it needs no lock (its sharedCache locks).
type rowCache struct {
	// shared, when set, is the report's: whole estimates of other rows
	// of the same model (model, its index, set with the row's first
	// spec).
	shared *sharedCache
	model  int
	// results holds every estimate made, by device class; plain holds the
	// last one of each plainKey, which other devices may share
	// (estimate.Result.SharesWith).
	results map[cacheKey]*estimate.Result
	plain   map[plainKey]*estimate.Result
	// state and act hold the bounds (bounds) learned so far, by
	// boundKey and by training.
	state, act map[model.Training]int64
	// over holds what the estimates that stopped early (stopOracle)
	// reached: lower bounds of the device total, by device class.
	over map[cacheKey]int64
	// params is the row's model's parameter count (model.Params), for
	// the model-state bound (stateBound); 0 until first needed.
	params int64
	// check, in tests, verifies on every estimate that the bound holds
	// and does not depend on the device, and records violations.
	check      bool
	violations []string
}

func newRowCache() *rowCache {
	return &rowCache{results: map[cacheKey]*estimate.Result{}, plain: map[plainKey]*estimate.Result{},
		state: map[model.Training]int64{}, act: map[model.Training]int64{}, over: map[cacheKey]int64{}}
}

// estimate is estimate.Estimate through the cache. The Result is shared:
// callers read it and must not change it; its Fill, Fits and Device are
// those of the first device of its class.
func (c *rowCache) estimate(s *model.Spec) (*estimate.Result, error) {
	k := keyOf(s)
	if r := c.made(s, k); r != nil {
		return r, nil
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		return nil, err
	}
	c.keep(s, k, r)
	return r, nil
}

// made is the whole estimate of s (key k) the row has made already, of
// its device class or shared more widely (plainKey), or that another row
// of the same model made (taken into the row as if made there), or nil.
func (c *rowCache) made(s *model.Spec, k cacheKey) *estimate.Result {
	if r, ok := c.results[k]; ok {
		return r
	}
	if r, ok := c.plain[k.plain()]; ok && r.SharesWith(s.Device) {
		return r
	}
	if c.shared == nil {
		return nil
	}
	r := c.shared.made(c.model, s, k)
	if r != nil {
		c.record(s, k, r)
	}
	return r
}

// oracle is tuner.Analytic through the cache (the same estimate, whose
// DeviceTotal Analytic returns).
func (c *rowCache) oracle(s *model.Spec) (int64, error) {
	r, err := c.estimate(s)
	if err != nil {
		return 0, err
	}
	return r.DeviceTotal, nil
}

// stopOracle is tuner.AnalyticStop through the cache: a whole estimate
// made already answers, and so does an earlier stopped one of the same
// device class that passed above; otherwise the estimate stops above
// above (estimate.Options.StopAbove). A stopped estimate is not kept as a
// Result (its figures are lower bounds), only its total in over.
func (c *rowCache) stopOracle(s *model.Spec, above int64) (int64, bool, error) {
	k := keyOf(s)
	if r := c.made(s, k); r != nil {
		return r.DeviceTotal, false, nil
	}
	if c.shared != nil {
		if lb := c.shared.overOf(c.model, k); lb > 0 {
			c.over[k] = max(c.over[k], lb)
		}
	}
	if lb, ok := c.over[k]; ok && above > 0 && lb > above {
		return lb, true, nil
	}
	r, err := estimate.EstimateOptions(s, estimate.Options{StopAbove: above})
	if err != nil {
		return 0, false, err
	}
	if r.Stopped {
		estimatesMade.Add(1)
		c.over[k] = max(c.over[k], r.DeviceTotal)
		if c.shared != nil {
			c.shared.raise(c.model, k, r.DeviceTotal)
		}
		return r.DeviceTotal, true, nil
	}
	c.keep(s, k, r)
	return r.DeviceTotal, false, nil
}

// estimatesMade counts the estimates every report made (for the
// benchmark's estimates/op), stopped ones included.
var estimatesMade atomic.Int64

// keep records an estimate of s the row made, for the row and the report.
func (c *rowCache) keep(s *model.Spec, k cacheKey, r *estimate.Result) {
	estimatesMade.Add(1)
	if c.shared != nil {
		c.shared.keep(c.model, k, r)
	}
	c.record(s, k, r)
}

// record records an estimate of s in the row: its total and its bounds;
// in tests it checks the model-state bound against it.
func (c *rowCache) record(s *model.Spec, k cacheKey, r *estimate.Result) {
	c.results[k] = r
	c.plain[k.plain()] = r
	state, act := bounds(r)
	c.keepBound(c.state, boundKey(k.training), state, r, k)
	c.keepBound(c.act, k.training, act, r, k)
	if c.check {
		if b := c.stateBound(s); b > r.DeviceTotal {
			c.violations = append(c.violations, fmt.Sprintf("%+v on %s: model-state bound %d, device total %d",
				k.training, k.device.Arch, b, r.DeviceTotal))
		}
	}
}

// keepBound records bound b under key in m; in tests it checks that the
// bound holds and that another device gave the same.
func (c *rowCache) keepBound(m map[model.Training]int64, key model.Training, b int64, r *estimate.Result, k cacheKey) {
	old, ok := m[key]
	if c.check && (b > r.DeviceTotal || ok && old != b) {
		c.violations = append(c.violations, fmt.Sprintf("%+v on %s: bound %d (before: %d), device total %d",
			k.training, k.device.Arch, b, old, r.DeviceTotal))
	}
	if !ok || b > old {
		m[key] = b
	}
}

// bounds are two lower bounds on an estimate's device total that no device
// changes, each plus the memory outside the allocator (CUDA context,
// kernel modules, NCCL), which the estimator does not size by device:
//   - state: the parameters, gradients and optimizer state on the device,
//     all alive during the second simulated optimizer step;
//   - act: the parameters, the optimizer state and the activations saved
//     at the end of the last forward pass, all alive then (the state from
//     the first step on).
func bounds(r *estimate.Result) (state, act int64) {
	out := r.OverheadBytes()
	return r.ParamBytes + r.GradBytes + r.OptimizerBytes + out, r.ParamBytes + r.OptimizerBytes + r.ActivationBytes + out
}

// boundKey clears the training settings the state bound does not depend on: the
// batch and checkpointing change activations only. So the estimate of a
// spec at batch 1 bounds its fix "per-block checkpointing" before it is
// estimated, and a ZeRO stage over n GPUs bounds the same stage with
// checkpointing. (The optimizer's implementation is kept: a fused AdamW's
// state differs from a foreach one's by a few hundred bytes.)
func boundKey(t model.Training) model.Training {
	t.Batch, t.Checkpointing = 0, model.Checkpointing{}
	return t
}

// lowerBound is Constraints.Bound for the row: the larger of the state
// bound of any estimate already made that shares the spec's boundKey, and
// the activation bound of the spec's training estimated on another device;
// 0 when neither is known.
func (c *rowCache) lowerBound(s *model.Spec) int64 {
	return max(c.state[boundKey(s.Training)], c.act[s.Training], c.stateBound(s), c.over[keyOf(s)])
}

// stateBound is the planner's lower bound of the device total
// (planner.LowerBoundWith: the model state, DDP's buckets and the saved
// block inputs the simulator allocates at once, counted without
// simulating), for trainings a planner layout describes: data parallelism
// and ZeRO on whole GPUs, nothing offloaded; 0 for the others. It needs no
// estimate, so it bounds a fix no device has estimated yet (an 8-bit
// optimizer, bf16, a ZeRO stage over n GPUs).
func (c *rowCache) stateBound(s *model.Spec) int64 {
	t := &s.Training
	if t.TP > 1 || t.PP > 1 || t.CP > 1 || t.EP > 1 || (t.Offload != "" && t.Offload != model.OffloadNone) {
		return 0
	}
	if c.params == 0 {
		c.params = model.Params(s.Model.Lower())
	}
	l := planner.Layout{DP: int64(max(t.DP, 1)), TP: 1, PP: 1, CP: 1, EP: 1, Zero: int64(t.Zero),
		Checkpointing: t.Checkpointing, Micro: t.Batch, Accum: max(t.GradAccum, 1)}
	b, _ := planner.LowerBoundWith(s, c.params)(l)
	return b
}
