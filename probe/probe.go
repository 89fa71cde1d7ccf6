package probe

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/montanaflynn/stats"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

// Options configure a probe.
type Options struct {
	DeviceIndex int
	// Lo and Hi are the target fill of the device, as fractions.
	Lo, Hi float64
	// Progress, if set, is called after each step.
	Progress func(Step)
	// MaxSteps bounds the search (default 24).
	MaxSteps int
}

// Step is one batch tried on the device.
type Step struct {
	Batch int64 `json:"batch"`
	// Requested is what the plan asks the driver for: the allocator's
	// segments plus a stand-in for the job's kernel modules.
	Requested   int64   `json:"requested_bytes"`
	Allocations int     `json:"allocations"`
	DeviceUsed  int64   `json:"device_used_bytes"`
	Fill        float64 `json:"fill"`
	// Allocated is false when the plan would cross the band's upper edge
	// and was not allocated.
	Allocated bool   `json:"allocated"`
	Note      string `json:"note,omitempty"`
}

// Result is what the device allowed.
type Result struct {
	Device      string `json:"device"`
	Index       int    `json:"device_index"`
	Driver      int    `json:"driver_version"`
	Total       int64  `json:"total_bytes"`
	UsedAtStart int64  `json:"used_at_start_bytes"`
	// OthersBytes is memory held before the probe's own context: used at
	// start minus the context cost the estimator assumes.
	OthersBytes  int64    `json:"others_bytes"`
	Granularity  int64    `json:"granularity_bytes"`
	Steps        []Step   `json:"steps"`
	Batch        int64    `json:"batch"`
	InBand       bool     `json:"in_band"`
	Lo           float64  `json:"band_lo"`
	Hi           float64  `json:"band_hi"`
	FixedBytes   int64    `json:"fixed_bytes"`
	PerSample    int64    `json:"per_sample_bytes"`
	AnalyticUsed int64    `json:"analytic_device_total_bytes"`
	Differences  []string `json:"differences"`
}

// ErrNoFit is returned (wrapped) when batch 1 does not fit the free memory
// inside the band; nothing is allocated then.
var ErrNoFit = errors.New("batch 1 does not fit")

// contextBytes is the context cost the estimator assumes (docs/formulas.md §D).
const contextBytes = 527 * units.MiB

type plan struct {
	segs  []int64
	total int64
	est   *estimate.Result
}

func planFor(spec *model.Spec, b int64) (plan, error) {
	s := *spec
	s.Training.Batch = b
	r, err := estimate.Estimate(&s)
	if err != nil {
		return plan{}, err
	}
	p := plan{segs: append([]int64(nil), r.Segments...), est: r}
	// The job loads kernels the probe does not: hold their size too.
	for _, o := range r.Overhead {
		if o.Name != "CUDA context" {
			p.segs = append(p.segs, o.Bytes)
		}
	}
	for _, n := range p.segs {
		p.total += n
	}
	return p, nil
}

// Run probes the device for the spec. It locks the calling goroutine to
// its OS thread, frees everything it allocated before returning (also when
// ctx is cancelled, as on Ctrl-C), and never allocates past Hi of the
// device.
func Run(ctx context.Context, d Driver, spec *model.Spec, o Options) (res *Result, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if o.MaxSteps == 0 {
		o.MaxSteps = 24
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, &DriverError{Lib: libName(d), Msg: "no CUDA device found"}
	}
	if o.DeviceIndex < 0 || o.DeviceIndex >= n {
		return nil, fmt.Errorf("device index %d: there are %d devices (0-%d)", o.DeviceIndex, n, n-1)
	}
	name, err := d.DeviceName(o.DeviceIndex)
	if err != nil {
		return nil, err
	}
	ver, _ := d.Version()
	c, err := d.OpenContext(o.DeviceIndex)
	if err != nil {
		return nil, err
	}
	live := map[uintptr]bool{}
	freeAll := func() error {
		var first error
		for p := range live {
			if err := c.Free(p); err != nil && first == nil {
				first = err
			}
			delete(live, p)
		}
		return first
	}
	defer func() {
		if e := freeAll(); e != nil && err == nil {
			err = e
		}
		if e := c.Close(); e != nil && err == nil {
			err = e
		}
	}()
	free0, total, err := c.MemInfo()
	if err != nil {
		return nil, err
	}
	r := &Result{Device: name, Index: o.DeviceIndex, Driver: ver, Total: total, UsedAtStart: total - free0, Lo: o.Lo, Hi: o.Hi}
	r.OthersBytes = max(0, r.UsedAtStart-contextBytes)
	limit := int64(o.Hi * float64(total))

	// Until measured, assume the 2 MiB granularity of current NVIDIA
	// drivers (PYTORCH-MEMORY.md §5).
	r.Granularity = 2 << 20
	round := func(n int64) int64 {
		g := max(r.Granularity, 1)
		return (n + g - 1) / g * g
	}
	measureGranularity := func() error {
		p, err := c.Alloc(2<<20 + 1)
		if err != nil {
			return nil // keep the assumption
		}
		live[p] = true
		if f, _, err := c.MemInfo(); err == nil && free0-f > 2<<20 {
			r.Granularity = free0 - f - (2 << 20)
		}
		return freeAll()
	}

	try := func(b int64) (Step, error) {
		p, err := planFor(spec, b)
		if err != nil {
			return Step{}, err
		}
		st := Step{Batch: b, Allocations: len(p.segs)}
		for _, n := range p.segs {
			st.Requested += round(n)
		}
		if r.UsedAtStart+st.Requested > limit {
			st.Note = fmt.Sprintf("plan needs %s: over %.0f%% of the device, not allocated", units.Format(st.Requested), 100*o.Hi)
			st.DeviceUsed = r.UsedAtStart + st.Requested
			st.Fill = float64(st.DeviceUsed) / float64(total)
			return st, nil
		}
		for _, n := range p.segs {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			ptr, err := c.Alloc(n)
			if err != nil {
				st.Note = err.Error()
				if errors.Is(err, ErrOutOfMemory) {
					st.DeviceUsed = r.UsedAtStart + st.Requested
					st.Fill = float64(st.DeviceUsed) / float64(total)
					return st, freeAll()
				}
				return st, err
			}
			live[ptr] = true
		}
		f, _, err := c.MemInfo()
		if err != nil {
			return st, err
		}
		st.Allocated, st.DeviceUsed = true, total-f
		st.Fill = float64(st.DeviceUsed) / float64(total)
		return st, freeAll()
	}
	record := func(st Step) {
		r.Steps = append(r.Steps, st)
		if o.Progress != nil {
			o.Progress(st)
		}
	}

	// Batch 1 is checked against the plan before anything is allocated.
	if p, err := planFor(spec, 1); err != nil {
		return r, err
	} else {
		var need int64
		for _, n := range p.segs {
			need += round(n)
		}
		if r.UsedAtStart+need > limit {
			st := Step{Batch: 1, Requested: need, Allocations: len(p.segs), DeviceUsed: r.UsedAtStart + need,
				Fill: float64(r.UsedAtStart+need) / float64(total), Note: "not allocated"}
			record(st)
			return r, fmt.Errorf("%w on %s: the plan needs %s, %s is free and the band allows %s more (%s missing)",
				ErrNoFit, name, units.Format(need), units.Format(free0), units.Format(max(0, limit-r.UsedAtStart)),
				units.Format(r.UsedAtStart+need-limit))
		}
	}
	if err := measureGranularity(); err != nil {
		return r, err
	}
	st, err := try(1)
	if err != nil {
		return r, err
	}
	record(st)
	if !st.Allocated {
		return r, fmt.Errorf("%w on %s: the plan needs %s, %s is free and the band allows %s more",
			ErrNoFit, name, units.Format(st.Requested), units.Format(free0), units.Format(max(0, limit-r.UsedAtStart)))
	}
	good, bad := int64(1), int64(0)
	fits := func(s Step) bool { return s.Allocated && s.Fill <= o.Hi }
	for b := int64(2); bad == 0 && len(r.Steps) < o.MaxSteps; b *= 2 {
		st, err := try(b)
		if err != nil {
			return r, err
		}
		record(st)
		if fits(st) {
			good = b
			if st.Fill >= o.Lo {
				break
			}
		} else {
			bad = b
		}
	}
	for bad > good+1 && len(r.Steps) < o.MaxSteps {
		mid := good + (bad-good)/2
		st, err := try(mid)
		if err != nil {
			return r, err
		}
		record(st)
		if fits(st) {
			good = mid
		} else {
			bad = mid
		}
	}
	r.Batch = good
	var pts stats.Series
	for _, s := range r.Steps {
		if s.Batch == good && s.Allocated {
			r.InBand = s.Fill >= o.Lo && s.Fill <= o.Hi
		}
		if s.Allocated {
			pts = append(pts, stats.Coordinate{X: float64(s.Batch), Y: float64(s.DeviceUsed)})
		}
	}
	if len(pts) >= 2 {
		if line, err := stats.LinearRegression(pts); err == nil && len(line) >= 2 {
			x0, x1 := line[0], line[len(line)-1]
			if x1.X != x0.X {
				per := (x1.Y - x0.Y) / (x1.X - x0.X)
				r.PerSample, r.FixedBytes = int64(per), int64(x0.Y-per*x0.X)
			}
		}
	}
	if p, err := planFor(spec, good); err == nil {
		r.AnalyticUsed = p.est.DeviceTotal
		r.Differences = differences(r, p)
	}
	return r, nil
}

func differences(r *Result, p plan) []string {
	var d []string
	d = append(d, fmt.Sprintf("context and other processes at start: %s measured; the estimator assumes a %s context",
		units.Format(r.UsedAtStart), units.Format(contextBytes)))
	if r.OthersBytes > 64*units.MiB {
		d = append(d, fmt.Sprintf("about %s is held by other processes", units.Format(r.OthersBytes)))
	}
	if r.Granularity > 0 {
		d = append(d, fmt.Sprintf("allocation granularity %s (the plan's segments are multiples of 2 MiB)", units.Format(r.Granularity)))
	}
	for _, s := range r.Steps {
		if s.Batch == r.Batch && s.Allocated {
			d = append(d, fmt.Sprintf("at batch %d the device used %s; the analytic device total is %s (%+.1f%%)",
				r.Batch, units.Format(s.DeviceUsed), units.Format(p.est.DeviceTotal),
				100*(float64(p.est.DeviceTotal)/float64(s.DeviceUsed)-1)))
		}
	}
	d = append(d, "the probe allocates memory but runs no kernels: cuDNN and cuBLAS transient workspaces, NCCL buffers and fragmentation beyond the plan are not exercised")
	return d
}

func libName(d Driver) string {
	if _, ok := d.(*Fake); ok {
		return "fake"
	}
	return "libcuda.so.1"
}
