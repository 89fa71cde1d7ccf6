package probe

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/montanaflynn/stats"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// Options configure a probe.
type Options struct {
	DeviceIndex int
	// Lo and Hi are the target fill of the device, as fractions.
	Lo, Hi float64
	// Progress, if set, is called after each step.
	Progress func(Step)
	// MaxSteps bounds the search (default 40); the largest batch that fit
	// so far is reported when it is reached.
	MaxSteps int
	// Hint is where the search starts looking, such as the analytic
	// answer; 0 grows from batch 1. It changes the number of steps, not
	// the answer.
	Hint int64
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
var contextBytes = measured.CUDAContext.Bytes

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

// Session is an open context on one device, for measuring plans.
type Session struct {
	ctx     context.Context
	c       Context
	live    map[uintptr]bool
	name    string
	ver     int
	total   int64
	free0   int64
	used0   int64
	gran    int64
	limit   int64 // never allocate past this much device use
	measure bool
}

// NewSession checks the device index, makes the device's primary context
// current (locking the goroutine to its OS thread until Close) and reads
// its memory. hi is the fill the session never allocates past.
func NewSession(ctx context.Context, d Driver, index int, hi float64) (*Session, error) {
	runtime.LockOSThread()
	s, err := newSession(ctx, d, index, hi)
	if err != nil {
		runtime.UnlockOSThread()
	}
	return s, err
}

func newSession(ctx context.Context, d Driver, index int, hi float64) (*Session, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, &DriverError{Lib: libName(d), Msg: "no CUDA device found"}
	}
	if index < 0 || index >= n {
		return nil, &IndexError{Index: index, Count: n}
	}
	name, err := d.DeviceName(index)
	if err != nil {
		return nil, err
	}
	ver, _ := d.Version()
	c, err := d.OpenContext(index)
	if err != nil {
		return nil, err
	}
	free0, total, err := c.MemInfo()
	if err != nil {
		c.Close()
		return nil, err
	}
	// Until measured, assume the 2 MiB granularity of current NVIDIA
	// drivers (docs/pytorch-memory.md §5).
	return &Session{ctx: ctx, c: c, live: map[uintptr]bool{}, name: name, ver: ver, total: total, free0: free0,
		used0: total - free0, gran: measured.AllocGranularity.Bytes, limit: int64(hi * float64(total))}, nil
}

// Total is the device's memory as the driver reports it.
func (s *Session) Total() int64 { return s.total }

func (s *Session) freeAll() error {
	var first error
	for p := range s.live {
		if err := s.c.Free(p); err != nil && first == nil {
			first = err
		}
		delete(s.live, p)
	}
	return first
}

// Close frees everything and releases the context.
func (s *Session) Close() error {
	defer runtime.UnlockOSThread()
	err := s.freeAll()
	if e := s.c.Close(); err == nil {
		err = e
	}
	return err
}

func (s *Session) round(n int64) int64 {
	g := max(s.gran, 1)
	return (n + g - 1) / g * g
}

// measureGranularity reads how much free memory a request just over 2 MiB
// takes.
func (s *Session) measureGranularity() error {
	if s.measure {
		return nil
	}
	s.measure = true
	p, err := s.c.Alloc(2<<20 + 1)
	if err != nil {
		return nil // keep the assumption
	}
	s.live[p] = true
	if f, _, err := s.c.MemInfo(); err == nil && s.free0-f > 2<<20 {
		s.gran = s.free0 - f - (2 << 20)
	}
	return s.freeAll()
}

// need is the device memory a plan would add, rounded to the granularity.
func (s *Session) need(p plan) int64 {
	var n int64
	for _, x := range p.segs {
		n += s.round(x)
	}
	return n
}

// step allocates the plan for batch b, reads the device, and frees it. A
// plan that would take device use past the session's limit is not
// allocated; its step reports the projected use.
func (s *Session) step(spec *model.Spec, b int64) (Step, error) {
	p, err := planFor(spec, b)
	if err != nil {
		return Step{}, err
	}
	st := Step{Batch: b, Allocations: len(p.segs), Requested: s.need(p)}
	project := func(note string) Step {
		st.Note, st.DeviceUsed = note, s.used0+st.Requested
		st.Fill = float64(st.DeviceUsed) / float64(s.total)
		return st
	}
	if s.used0+st.Requested > s.limit {
		return project(fmt.Sprintf("plan needs %s: over %.0f%% of the device, not allocated",
			units.Format(st.Requested), 100*float64(s.limit)/float64(s.total))), nil
	}
	for _, n := range p.segs {
		if err := s.ctx.Err(); err != nil {
			return st, err
		}
		ptr, err := s.c.Alloc(n)
		if err != nil {
			if errors.Is(err, ErrOutOfMemory) {
				return project(err.Error()), s.freeAll()
			}
			return st, err
		}
		s.live[ptr] = true
	}
	f, _, err := s.c.MemInfo()
	if err != nil {
		return st, err
	}
	st.Allocated, st.DeviceUsed = true, s.total-f
	st.Fill = float64(st.DeviceUsed) / float64(s.total)
	return st, s.freeAll()
}

// Measure allocates the plan for spec's batch and returns the device use
// it reached (or, for a plan past the session's limit, the projected use,
// which is above the limit).
func (s *Session) Measure(spec *model.Spec) (int64, error) {
	if err := s.measureGranularity(); err != nil {
		return 0, err
	}
	st, err := s.step(spec, spec.Training.Batch)
	if err == nil && !st.Allocated {
		// Not allocated (past the limit) or refused by the driver: either
		// way it does not fit.
		return max(st.DeviceUsed, s.limit+1), nil
	}
	return st.DeviceUsed, err
}

// Run probes the device for the spec. It locks the calling goroutine to
// its OS thread, frees everything it allocated before returning (also when
// ctx is cancelled, as on Ctrl-C), and never allocates past Hi of the
// device.
func Run(ctx context.Context, d Driver, spec *model.Spec, o Options) (res *Result, err error) {
	if o.MaxSteps == 0 {
		o.MaxSteps = 40
	}
	s, err := NewSession(ctx, d, o.DeviceIndex, o.Hi)
	if err != nil {
		return nil, err
	}
	defer func() {
		if e := s.Close(); e != nil && err == nil {
			err = e
		}
	}()
	r := &Result{Device: s.name, Index: o.DeviceIndex, Driver: s.ver, Total: s.total, UsedAtStart: s.used0,
		Lo: o.Lo, Hi: o.Hi, Granularity: s.gran}
	r.OthersBytes = max(0, r.UsedAtStart-contextBytes)
	record := func(st Step) {
		r.Steps = append(r.Steps, st)
		if o.Progress != nil {
			o.Progress(st)
		}
	}
	first, err := s.firstStep(spec, r, record)
	if err != nil {
		return r, err
	}
	good, err := s.search(spec, o, r, first, record)
	if err != nil {
		return r, err
	}
	r.Batch = good
	fit(r, o)
	if p, err := planFor(spec, good); err == nil {
		r.AnalyticUsed = p.est.DeviceTotal
		r.Differences = differences(r, p)
	}
	return r, nil
}

// firstStep allocates batch 1, after checking its plan against the free
// memory so that a plan that cannot fit allocates nothing (ErrNoFit).
func (s *Session) firstStep(spec *model.Spec, r *Result, record func(Step)) (Step, error) {
	p1, err := planFor(spec, 1)
	if err != nil {
		return Step{}, err
	}
	if need := s.need(p1); r.UsedAtStart+need > s.limit {
		record(Step{Batch: 1, Requested: need, Allocations: len(p1.segs), DeviceUsed: r.UsedAtStart + need,
			Fill: float64(r.UsedAtStart+need) / float64(s.total), Note: "not allocated"})
		return Step{}, fmt.Errorf("%w on %s: the plan needs %s, %s is free and the band allows %s more (%s missing)",
			ErrNoFit, s.name, units.Format(need), units.Format(s.free0), units.Format(max(0, s.limit-r.UsedAtStart)),
			units.Format(r.UsedAtStart+need-s.limit))
	}
	if err := s.measureGranularity(); err != nil {
		return Step{}, err
	}
	r.Granularity = s.gran
	st, err := s.step(spec, 1)
	if err != nil {
		return st, err
	}
	record(st)
	if !st.Allocated {
		return st, fmt.Errorf("%w on %s: %s", ErrNoFit, s.name, st.Note)
	}
	return st, nil
}

// search is the tuner's: growing from batch 1 at least by doubling
// (faster along the line through the last two steps), then narrowing the
// bracket by secant and bisection steps to the largest batch at or below
// the band's upper edge. At the step limit the answer is the largest
// batch that fit so far.
func (s *Session) search(spec *model.Spec, o Options, r *Result, first Step, record func(Step)) (int64, error) {
	errSteps := errors.New("step limit")
	eval := func(b int64) (int64, error) {
		if b == 1 {
			return first.DeviceUsed, nil
		}
		if len(r.Steps) >= o.MaxSteps {
			return 0, errSteps
		}
		st, err := s.step(spec, b)
		if err != nil {
			return 0, err
		}
		record(st)
		if !st.Allocated {
			return max(st.DeviceUsed, s.limit+1), nil
		}
		return st.DeviceUsed, nil
	}
	good, err := tuner.Largest(tuner.Constraints{Hint: o.Hint, Tolerance: 0.001}, 1, s.limit, eval)
	if err != nil && !errors.Is(err, errSteps) {
		return good, err
	}
	return good, nil
}

// fit sets whether the answer is inside the band, and the line through
// the allocated steps (device use = fixed + per sample × batch).
func fit(r *Result, o Options) {
	var pts stats.Series
	for _, st := range r.Steps {
		if st.Batch == r.Batch && st.Allocated {
			r.InBand = st.Fill >= o.Lo && st.Fill <= o.Hi
		}
		if st.Allocated {
			pts = append(pts, stats.Coordinate{X: float64(st.Batch), Y: float64(st.DeviceUsed)})
		}
	}
	if len(pts) < 2 {
		return
	}
	line, err := stats.LinearRegression(pts)
	if err != nil || len(line) < 2 {
		return
	}
	x0, x1 := line[0], line[len(line)-1]
	if x1.X != x0.X {
		per := (x1.Y - x0.Y) / (x1.X - x0.X)
		r.PerSample, r.FixedBytes = int64(per), int64(x0.Y-per*x0.X)
	}
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
	return libcuda
}
