// Package report builds memplan's capacity-planning report: for each spec
// on each device, the fill at the spec's batch, the largest batch inside
// the target, and when even batch 1 misses, the fewest GPUs and the
// data-parallel ZeRO/FSDP layout that fit, or with a global batch memplan
// plan's layout (docs/report.md). It renders the
// same Report as text, JSON, CSV, Markdown and a self-contained HTML page.
package report

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
	"github.com/memplan/memplan/tuner"
)

// Loader reads the spec at path for the named device.
type Loader func(path, device string) (*model.Spec, error)

// Options set the report's target and extras.
type Options struct {
	Band   tuner.Band
	Margin float64
	// Prices maps a device name to its price per GPU-hour (0 or absent:
	// no cost).
	Prices map[string]float64
	// Progress, when set, is called after each cell with the cells done
	// and the total.
	Progress func(done, total int)
	// Now stamps the report (time.Now when zero).
	Now time.Time
	// Version names the memplan build.
	Version string
	// GlobalBatch, when positive, plans a cell that nothing tried fits
	// (data-parallel ZeRO/FSDP and offload up to 64 GPUs) with memplan
	// plan's search for this many samples per step (planner.Plan, tensor,
	// pipeline, context and expert parallelism included, up to
	// PlanMaxGPUs GPUs, planner.DefaultMaxGPUs when 0): its first layout is the cell's.
	// Off by default: a plan needs the job's global batch, which a spec
	// written for one GPU does not say, and takes seconds for a 70B model.
	GlobalBatch int64
	// PlanMaxGPUs is the most GPUs those plans may use (0:
	// planner.DefaultMaxGPUs).
	PlanMaxGPUs int64
	// PlanFlags are memplan plan's flags for the overrides the report was
	// given ("--seq 8192 --precision bf16"), quoted for a shell: the text
	// and markdown formats add them to the memplan plan command they
	// suggest for the devices nothing tried fits.
	PlanFlags string
}

// Breakdown is the device total at the spec's batch by where it goes.
// Communication is NCCL's memory outside the allocator; the collectives'
// buffers inside it (FSDP's all-gather and reduce-scatter pools) count
// where the simulator holds them (parameters, gradients, allocator).
type Breakdown struct {
	Parameters  int64 `json:"parameters_bytes"`
	Gradients   int64 `json:"gradients_bytes"`
	Optimizer   int64 `json:"optimizer_bytes"`
	Activations int64 `json:"activations_bytes"`
	Transient   int64 `json:"transient_bytes"`
	Allocator   int64 `json:"allocator_bytes"`
	Context     int64 `json:"context_bytes"`
	// Communication is added to the JSON when nonzero (2026-11-23).
	Communication int64 `json:"communication_bytes,omitempty"`
}

// Cell is one spec on one device.
type Cell struct {
	Device string `json:"device"`
	Memory int64  `json:"memory_bytes"`
	// Batch, DeviceTotal, Fill and Verdict are at the spec's own batch
	// (per GPU, on the spec's own GPUs).
	Batch       int64     `json:"batch"`
	DeviceTotal int64     `json:"device_total_bytes"`
	Fill        float64   `json:"fill"`
	Verdict     string    `json:"verdict"`
	Breakdown   Breakdown `json:"breakdown"`
	// MaxBatch is the largest micro-batch that fits the target on the
	// spec's GPUs (0: batch 1 misses; see Fix).
	MaxBatch int64 `json:"max_batch"`
	// GPUs is the fewest GPUs of this type the job needs (the spec's own
	// data-parallel width when it fits as written); Layout says how they
	// are used. Zero GPUs: nothing tried fits this device.
	GPUs   int64  `json:"gpus"`
	Layout string `json:"layout"`
	// Fix is the change that fits, re-estimated, when batch 1 misses.
	Fix *tuner.Fix `json:"fix,omitempty"`
	// Planned says that GPUs and Layout are memplan plan's answer
	// (Options.GlobalBatch; added 2026-11-27), GPUs 0 when no layout fits.
	Planned bool `json:"planned,omitempty"`
	// CostPerHour is GPUs × the device's price per GPU-hour (--prices).
	CostPerHour float64 `json:"cost_per_hour,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// Row is one spec on every device.
type Row struct {
	Path string `json:"path"`
	// HF says that Path is a transformers config.json (model.IsHFConfig).
	HF    bool   `json:"hf,omitempty"`
	Spec  string `json:"spec"`
	Error string `json:"error,omitempty"`
	Cells []Cell `json:"cells"`
}

// Report is the whole capacity report.
type Report struct {
	Version   string     `json:"memplan_version"`
	Generated time.Time  `json:"generated"`
	Band      tuner.Band `json:"band"`
	Margin    float64    `json:"margin"`
	Devices   []string   `json:"devices"`
	Rows      []Row      `json:"rows"`
	// planFlags is Options.PlanFlags.
	planFlags string
}

// Failed reports whether some row or cell failed.
func (r *Report) Failed() bool {
	for _, row := range r.Rows {
		if row.Error != "" {
			return true
		}
		for _, c := range row.Cells {
			if c.Error != "" {
				return true
			}
		}
	}
	return false
}

// ErrSomeFailed is returned by Build, with the complete report, when some
// rows or cells failed; their errors are in the report.
var ErrSomeFailed = errors.New("some report rows failed")

// Build computes the report for every path on every device. Each row (one
// path on every device) is computed by one worker, GOMAXPROCS of them in
// parallel, so that its cells share their estimates (cache.go). A spec
// that fails is reported in its row; the others complete, and Build
// returns ErrSomeFailed.
func Build(paths, devices []string, load Loader, o Options) (*Report, error) {
	return build(paths, devices, load, o, nil)
}

// build is Build; check, when set, is called with each row's cache once
// the row is done (tests verify the shared bounds with it).
func build(paths, devices []string, load Loader, o Options, check func(*rowCache)) (*Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now().UTC()
	}
	r := &Report{Version: o.Version, Generated: o.Now, Band: o.Band, Margin: o.Margin, Devices: devices,
		Rows: make([]Row, len(paths)), planFlags: o.PlanFlags}
	jobs := make(chan int)
	shared := newSharedCache()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, len(paths)*len(devices)
	progress := func() {
		mu.Lock()
		done++
		if o.Progress != nil {
			o.Progress(done, total)
		}
		mu.Unlock()
	}
	for w := 0; w < min(runtime.GOMAXPROCS(0), max(len(paths), 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				memo := newRowCache()
				memo.check, memo.shared = check != nil, shared
				r.Rows[i] = row(paths[i], devices, load, memo, o, progress)
				if check != nil {
					check(memo)
				}
			}
		}()
	}
	for i := range paths {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for i := range r.Rows {
		row := &r.Rows[i]
		if len(row.Cells) > 0 && allSame(row.Cells) {
			row.Error = row.Cells[0].Error // the spec itself is bad
		}
	}
	if r.Failed() {
		return r, ErrSomeFailed
	}
	return r, nil
}

func allSame(cs []Cell) bool {
	for _, c := range cs {
		if c.Error == "" || c.Error != cs[0].Error {
			return false
		}
	}
	return true
}

// row computes one path on every device, the device with the most memory
// first: its fix search stops early (an early change fits), and the
// changes it estimates bound them on the smaller devices (cache.go).
func row(path string, devices []string, load Loader, memo *rowCache, o Options, progress func()) Row {
	rw := Row{Path: path, Spec: path, Cells: make([]Cell, len(devices))}
	specs := make([]*model.Spec, len(devices))
	order := make([]int, 0, len(devices))
	for j, dev := range devices {
		spec, err := load(path, dev)
		if err != nil {
			rw.Cells[j] = Cell{Device: dev, Error: err.Error()}
			progress()
			continue
		}
		if len(order) == 0 && memo.shared != nil {
			memo.model = memo.shared.modelOf(spec)
		}
		specs[j] = spec
		order = append(order, j)
	}
	sort.SliceStable(order, func(a, b int) bool {
		return specs[order[a]].Device.Memory > specs[order[b]].Device.Memory
	})
	for _, j := range order {
		spec := specs[j]
		c := Cell{Device: spec.Device.Name, Memory: spec.Device.Memory, Batch: spec.Training.Batch}
		if err := fill(&c, spec, memo, o); err != nil {
			c.Error = err.Error()
		}
		rw.Cells[j], rw.Spec, rw.HF = c, spec.Name, spec.HFType != ""
		progress()
	}
	return rw
}

func fill(c *Cell, spec *model.Spec, memo *rowCache, o Options) error {
	est, err := memo.estimate(spec)
	if err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	// The estimate may be another device's of the same class: the fill is
	// this device's.
	c.DeviceTotal = est.DeviceTotal
	if spec.Device.Memory > 0 {
		c.Fill = float64(est.DeviceTotal) / float64(spec.Device.Memory)
	}
	c.Verdict = tuner.Fits(est.DeviceTotal, spec.Device.Memory, o.Band, o.Margin).String()
	c.Breakdown = breakdown(est)
	dp := int64(max(spec.Training.DP, 1))
	// The search starts from the spec's own batch, estimated above.
	cons := tuner.Constraints{Margin: o.Margin, FirstFix: true, Bound: memo.lowerBound, Stop: memo.stopOracle,
		Hint: spec.Training.Batch}
	t, err := tuner.Tune(spec, o.Band, cons, memo.oracle)
	switch {
	case err == nil:
		c.MaxBatch, c.GPUs, c.Layout = t.Batch, dp, layout(spec.Training)
	case errors.Is(err, tuner.ErrNoFit):
		switch {
		case len(t.Fixes) > 0 && t.Fixes[0].Fits:
			f := t.Fixes[0]
			c.Fix, c.GPUs, c.Layout = &f, f.GPUs, f.Change
		case o.GlobalBatch > 0:
			if err := planCell(c, spec, o); err != nil {
				return err
			}
		default:
			c.Layout = fmt.Sprintf("nothing tried fits (up to %d GPUs, offload)", maxGPUs)
		}
	default:
		return fmt.Errorf("tune: %w", err)
	}
	if p := o.Prices[c.Device]; p > 0 && c.GPUs > 0 {
		c.CostPerHour = p * float64(c.GPUs)
	}
	return nil
}

// maxGPUs is the widest sharding the fixes try (tuner's limit).
const maxGPUs = 64

// planCell gives c memplan plan's first layout for spec at the report's
// global batch (Options.GlobalBatch), under the report's target, or says
// that none fits up to the plan's GPUs.
func planCell(c *Cell, spec *model.Spec, o Options) error {
	most := cmp.Or(o.PlanMaxGPUs, planner.DefaultMaxGPUs)
	first, err := planner.FirstLayout(spec, planner.Request{GlobalBatch: o.GlobalBatch, MaxGPUs: most, Band: o.Band, Margin: o.Margin})
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	c.Planned = true
	if first == nil {
		c.Layout = fmt.Sprintf("no layout fits up to %d GPUs at global batch %d (memplan plan)", most, o.GlobalBatch)
		return nil
	}
	c.GPUs, c.Layout = first.GPUs, first.Name+" (memplan plan)"
	return nil
}

func layout(t model.Training) string {
	dp := max(t.DP, 1)
	if dp == 1 && t.Zero == 0 {
		return "1 GPU"
	}
	s := fmt.Sprintf("data parallel ×%d", dp)
	if t.Zero > 0 {
		s += fmt.Sprintf(", ZeRO-%d", t.Zero)
	}
	return s
}

func breakdown(r *estimate.Result) Breakdown {
	var b Breakdown
	for _, it := range r.AtPeak {
		switch it.Name {
		case "parameters":
			b.Parameters += it.Bytes
		case "gradients":
			b.Gradients += it.Bytes
		case "optimizer state":
			b.Optimizer += it.Bytes
		case "activations (saved)":
			b.Activations += it.Bytes
		case "allocator rounding":
			b.Allocator += it.Bytes
		default:
			b.Transient += it.Bytes
		}
	}
	b.Allocator += r.PeakReserved - r.PeakAllocated
	b.Communication += r.NCCLBytes()
	b.Context = r.DeviceTotal - r.PeakReserved - b.Communication
	return b
}
