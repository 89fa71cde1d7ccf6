package report

import (
	"fmt"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// The cells of one row (one spec on every device) share their estimates.
// The estimator reads the device only through its architecture (the
// cuBLAS workspace on Hopper, the cuDNN tables), vendor, and SM count and
// threads per SM (reduction scratch); its memory only scales the fill. So
// two devices that agree on those fields (an A100 40GB and 80GB, an H100
// and an H200) get the same device total for the same training settings:
// one device class, each estimate made once for both.
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

// deviceClass clears the device fields the estimator does not read.
func deviceClass(d model.Device) model.Device {
	d.Name, d.Product, d.Memory, d.Measured, d.MeasuredOn = "", "", 0, false, nil
	return d
}

func keyOf(s *model.Spec) cacheKey {
	return cacheKey{s.Training, deviceClass(s.Device)}
}

// rowCache memoizes the estimator over the cells of one row. A row is
// computed by one goroutine, so it needs no lock.
type rowCache struct {
	totals  map[cacheKey]int64
	results map[cacheKey]*estimate.Result // the full estimates at the spec's own batch
	bounds  map[model.Training]int64      // by boundKey
	// check, in tests, verifies on every estimate that the bound holds
	// and does not depend on the device, and records violations.
	check      bool
	violations []string
}

func newRowCache() *rowCache {
	return &rowCache{totals: map[cacheKey]int64{}, results: map[cacheKey]*estimate.Result{},
		bounds: map[model.Training]int64{}}
}

// estimate is estimate.Estimate through the cache. The Result is shared:
// callers read it and must not change it; its Fill, Fits and Device are
// those of the first device of its class.
func (c *rowCache) estimate(s *model.Spec) (*estimate.Result, error) {
	k := keyOf(s)
	if r, ok := c.results[k]; ok {
		return r, nil
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		return nil, err
	}
	c.results[k] = r
	c.keep(k, r)
	return r, nil
}

// oracle is tuner.Analytic through the cache (the same estimate, whose
// DeviceTotal Analytic returns).
func (c *rowCache) oracle(s *model.Spec) (int64, error) {
	k := keyOf(s)
	if v, ok := c.totals[k]; ok {
		return v, nil
	}
	r, err := estimate.Estimate(s)
	if err != nil {
		return 0, err
	}
	c.keep(k, r)
	return r.DeviceTotal, nil
}

// keep records an estimate: its total and its bound.
func (c *rowCache) keep(k cacheKey, r *estimate.Result) {
	c.totals[k] = r.DeviceTotal
	t := k.training
	lb, bk := bound(r), boundKey(t)
	old, ok := c.bounds[bk]
	if c.check && (lb > r.DeviceTotal || ok && old != lb) {
		c.violations = append(c.violations, fmt.Sprintf("%+v on %s: bound %d (before: %d), device total %d",
			t, k.device.Arch, lb, old, r.DeviceTotal))
	}
	if !ok || lb > old {
		c.bounds[bk] = lb
	}
}

// bound is a lower bound on an estimate's device total that no device
// changes: the parameters, gradients and optimizer state on the device,
// which are all alive during the optimizer step, plus the memory outside
// the allocator (CUDA context, kernel modules, NCCL), none of which the
// estimator sizes by device.
func bound(r *estimate.Result) int64 {
	b := r.ParamBytes + r.GradBytes + r.OptimizerBytes
	for _, o := range r.Overhead {
		b += o.Bytes
	}
	return b
}

// boundKey clears the training settings the bound does not depend on: the
// batch and checkpointing change activations only. So the estimate of a
// spec at batch 1 bounds its fix "per-block checkpointing" before it is
// estimated, and a ZeRO stage over n GPUs bounds the same stage with
// checkpointing. (The optimizer's implementation is kept: a fused AdamW's
// state differs from a foreach one's by a few hundred bytes.)
func boundKey(t model.Training) model.Training {
	t.Batch, t.Checkpointing = 0, model.Checkpointing{}
	return t
}

// lowerBound is Constraints.Bound for the row: the bound of the spec's
// training from any estimate already made that shares its boundKey, on
// any device; 0 when none was.
func (c *rowCache) lowerBound(s *model.Spec) int64 { return c.bounds[boundKey(s.Training)] }
