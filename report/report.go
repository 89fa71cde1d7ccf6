// Package report builds memplan's capacity-planning report: for each spec
// on each device, the fill at the spec's batch, the largest batch inside
// the target, and when even batch 1 misses, the fewest GPUs and the
// data-parallel ZeRO/FSDP layout that fit (docs/report.md). It renders the
// same Report as text, JSON, CSV, Markdown and a self-contained HTML page.
package report

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
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
	// CostPerHour is GPUs × the device's price per GPU-hour (--prices).
	CostPerHour float64 `json:"cost_per_hour,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// Row is one spec on every device.
type Row struct {
	Path  string `json:"path"`
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

// Build computes the report for every path on every device, running
// cells in parallel on GOMAXPROCS workers. A spec that fails is reported
// in its row; the others complete, and Build returns ErrSomeFailed.
func Build(paths, devices []string, load Loader, o Options) (*Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now().UTC()
	}
	r := &Report{Version: o.Version, Generated: o.Now, Band: o.Band, Margin: o.Margin, Devices: devices,
		Rows: make([]Row, len(paths))}
	memo := &cache{m: map[cacheKey]int64{}}
	type job struct{ i, j int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, len(paths)*len(devices)
	for i, p := range paths {
		r.Rows[i] = Row{Path: p, Spec: p, Cells: make([]Cell, len(devices))}
	}
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				name, c := cell(paths[jb.i], devices[jb.j], load, memo.oracle(paths[jb.i]), o)
				mu.Lock()
				r.Rows[jb.i].Cells[jb.j] = c
				if name != "" {
					r.Rows[jb.i].Spec = name
				}
				done++
				if o.Progress != nil {
					o.Progress(done, total)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range paths {
		for j := range devices {
			jobs <- job{i, j}
		}
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

// cell computes one spec on one device; the error, if any, is in the cell.
func cell(path, dev string, load Loader, oracle tuner.Oracle, o Options) (string, Cell) {
	c := Cell{Device: dev}
	spec, err := load(path, dev)
	if err != nil {
		c.Error = err.Error()
		return "", c
	}
	c.Device, c.Memory, c.Batch = spec.Device.Name, spec.Device.Memory, spec.Training.Batch
	if err := fill(&c, spec, oracle, o); err != nil {
		c.Error = err.Error()
	}
	return spec.Name, c
}

func fill(c *Cell, spec *model.Spec, oracle tuner.Oracle, o Options) error {
	est, err := estimate.Estimate(spec)
	if err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	c.DeviceTotal, c.Fill = est.DeviceTotal, est.Fill
	c.Verdict = tuner.Fits(est.DeviceTotal, spec.Device.Memory, o.Band, o.Margin).String()
	c.Breakdown = breakdown(est)
	dp := int64(max(spec.Training.DP, 1))
	t, err := tuner.Tune(spec, o.Band, tuner.Constraints{Margin: o.Margin, FirstFix: true}, oracle)
	switch {
	case err == nil:
		c.MaxBatch, c.GPUs, c.Layout = t.Batch, dp, layout(spec.Training)
	case errors.Is(err, tuner.ErrNoFit):
		if len(t.Fixes) > 0 && t.Fixes[0].Fits {
			f := t.Fixes[0]
			c.Fix, c.GPUs, c.Layout = &f, f.GPUs, f.Change
		} else {
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
	for _, o := range r.Overhead {
		if o.Name == estimate.OverheadNCCL {
			b.Communication += o.Bytes
		}
	}
	b.Context = r.DeviceTotal - r.PeakReserved - b.Communication
	return b
}
