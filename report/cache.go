package report

import (
	"sync"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// cacheKey identifies an estimate the cells of one report can share. The
// estimator reads the device only through its architecture (the cuBLAS
// workspace on Hopper), vendor, and SM count and threads per SM (reduction
// scratch); its memory only scales the fill. So two cells of one spec
// path whose devices agree on those fields (an A100 40GB and 80GB, an H100
// and an H200) get the same device total for the same training settings,
// and each batch is estimated once for both.
type cacheKey struct {
	path     string
	training model.Training
	device   model.Device
}

// deviceClass clears the device fields the estimator does not read.
func deviceClass(d model.Device) model.Device {
	d.Name, d.Product, d.Memory, d.Measured = "", "", 0, false
	return d
}

// cache memoizes the analytic oracle across the cells of a report.
type cache struct {
	mu sync.Mutex
	m  map[cacheKey]int64
}

// oracle is tuner.Analytic for specs loaded from path, through the cache.
func (c *cache) oracle(path string) tuner.Oracle {
	return func(s *model.Spec) (int64, error) {
		k := cacheKey{path, s.Training, deviceClass(s.Device)}
		c.mu.Lock()
		v, ok := c.m[k]
		c.mu.Unlock()
		if ok {
			return v, nil
		}
		v, err := tuner.Analytic(s)
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.m[k] = v
		c.mu.Unlock()
		return v, nil
	}
}
