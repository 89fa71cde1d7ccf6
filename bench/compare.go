// Package bench compares memplan's predictions with memory measured on a
// GPU by bench/torch/measure.py, and checks them against accuracy targets.
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/montanaflynn/stats"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// Record is one line written by measure.py.
type Record struct {
	Spec string `json:"spec"`
	// HF marks a record whose Spec is a transformers config.json.
	HF            bool           `json:"hf"`
	Label         string         `json:"label"`
	Training      map[string]any `json:"training"`
	GPU           string         `json:"gpu"`
	Driver        string         `json:"driver"`
	Torch         string         `json:"torch"`
	CUDA          string         `json:"cuda"`
	Date          string         `json:"date"`
	DeviceMemory  int64          `json:"device_total_bytes"`
	PeakAllocated int64          `json:"peak_allocated_bytes"`
	PeakReserved  int64          `json:"peak_reserved_bytes"`
	DeviceUsed    int64          `json:"device_total_used_bytes"`
	OK            bool           `json:"ok"`
	Error         string         `json:"error"`

	// Data-parallel records (bench/torch/dist): the mode (ddp, ddp-view,
	// zero1, fsdp), FSDP's reshard_after_forward ("true", "false" or an
	// int), the number of GPUs, and the busiest rank's totals, which the
	// comparison uses (docs/multigpu.md).
	Mode    string `json:"mode"`
	Reshard any    `json:"reshard"`
	World   int64  `json:"world"`
	// Replicate is train.py's --replicate: HSDP, the world as this many
	// replicas of an FSDP group (0 or 1: FSDP over the world).
	Replicate int64 `json:"replicate"`
	// FakeWorld is the world size of a train.py run made as rank 0 alone
	// on one GPU over torch's fake process group (its MEMPLAN_FAKE_WORLD,
	// run.sh's "W=N F=0" lines; then World is the same), 0 for a real
	// torchrun job.
	FakeWorld int64 `json:"fake_world"`
	// Env is the environment train.py ran with: its allocator setting
	// (PYTORCH_ALLOC_CONF) is not in Training.
	Env              map[string]string `json:"env"`
	BusiestAllocated int64             `json:"busiest_peak_allocated_bytes"`
	BusiestReserved  int64             `json:"busiest_peak_reserved_bytes"`
	BusiestDevice    int64             `json:"busiest_device_total_used_bytes"`
	// EP and EPSkew are an expert-parallel record's group size and the
	// busiest share of routed rows it measured, which memplan is given
	// (train.py --ep, bench/torch/dist/ep.py).
	EP     int64   `json:"ep"`
	EPSkew float64 `json:"ep_skew"`
	// StepPause is the pause train.py's loop made after each step: 0.2
	// or, with --no-pause, 0; absent in records that predate the flag,
	// which all paused. Until the twelfth session the pause was
	// nvidia-smi and an allocator snapshot, usually but not always longer
	// than NCCL's watchdog period, 0.1 s (two runs raced); since then the
	// loop also synchronizes and sleeps 0.2 s, and records each pause.
	StepPause *float64 `json:"step_pause"`
	// Steps are a measure.py record's optimizer steps, one entry each
	// (three by default, six in held-out set 57): the run's length, which
	// memplan is given (model.Training.Steps), so that it simulates no
	// step the run did not have.
	Steps []json.RawMessage `json:"steps"`
	// LoRA is the adapter setup of a bench/torch/lora.py record.
	LoRA *RecordLoRA `json:"lora,omitempty"`
	// MetaInit says train.py built an FSDP2 model on the meta device
	// (--meta-init) rather than on the host.
	MetaInit bool `json:"meta_init,omitempty"`
	// KeepCache says the run left the cache as fully_shard's wrapping left
	// it (memplan's empty_cache_after_wrap false): train.py --keep-cache,
	// or a file measure.py wrote before its shard() emptied the cache
	// (keptCacheFiles; ReadRecords sets it).
	KeepCache bool `json:"keep_cache,omitempty"`
	// FSDPExperts is train.py's --fsdp-experts (dim0, dim1 or auto; absent
	// in records that predate it, which are dim0).
	FSDPExperts string `json:"fsdp_experts,omitempty"`
}

// RecordLoRA is the "lora" object of a bench/torch/lora.py record.
type RecordLoRA struct {
	Rank         int64   `json:"rank"`
	Alpha        float64 `json:"alpha"`
	Dropout      float64 `json:"dropout"`
	Targets      string  `json:"targets"`
	AdapterDtype string  `json:"adapter_dtype"`
	InputGrads   *bool   `json:"input_require_grads"`
}

// IsHF says whether the record's Spec is a transformers config.json:
// measure.py marks it (HF), bench/torch/dist/train.py records the path.
func (r Record) IsHF() bool { return r.HF || strings.HasSuffix(r.Spec, ".json") }

// unmodelled says why a record's setup cannot be predicted, or "".
func (r Record) unmodelled() string {
	if r.LoRA == nil {
		return ""
	}
	ckpt, _ := r.Training["checkpointing"].(string)
	if r.LoRA.InputGrads != nil && *r.LoRA.InputGrads != (ckpt != "" && ckpt != "none") {
		return "enable_input_require_grads other than with checkpointing is not simulated"
	}
	return ""
}

// Metrics indexes the three totals.
const (
	Allocated = iota
	Reserved
	Device
	NumMetrics
)

// MetricNames names the three totals.
var MetricNames = [NumMetrics]string{"peak allocated", "peak reserved", "device total"}

// Row is one configuration: measured and predicted totals and the relative
// error (predicted/measured − 1; negative is an under-prediction).
type Row struct {
	Label     string              `json:"label"`
	HeldOut   bool                `json:"held_out"`
	Measured  [NumMetrics]int64   `json:"measured_bytes"`
	Predicted [NumMetrics]int64   `json:"predicted_bytes"`
	Err       [NumMetrics]float64 `json:"relative_error"`
}

// Summary aggregates rows.
type Summary struct {
	N      int                 `json:"configurations"`
	Median [NumMetrics]float64 `json:"median_abs_error"`
	Worst  [NumMetrics]float64 `json:"worst_abs_error"`
	// Under counts predictions more than UnderLimit below the measurement.
	Under [NumMetrics]int `json:"under_predictions"`
}

// Report is the result of Compare.
type Report struct {
	Rows    []Row   `json:"rows"`
	Tuning  Summary `json:"tuning"`
	HeldOut Summary `json:"held_out"`
	All     Summary `json:"all"`
	Skipped []string
}

// Targets are the accuracy targets of the accuracy issue: median and worst
// absolute relative error per metric, and no under-prediction beyond
// UnderLimit.
var Targets = struct {
	Median, Worst [NumMetrics]float64
}{
	Median: [NumMetrics]float64{0.02, 0.04, 0.05},
	Worst:  [NumMetrics]float64{0.06, 0.10, 0.10},
}

// UnderLimit is how far below a measurement a prediction may fall before it
// counts as an under-prediction (the kind that makes a job OOM).
const UnderLimit = 0.03

// keptCacheFiles are the results files whose fake-process-group FSDP2
// records measure.py made before its shard() emptied the cache after
// fully_shard (commit d8a0217, 2026-11-23 15:37 UTC; the records say
// only the day): their runs kept the freed whole parameters' blocks, as
// memplan's empty_cache_after_wrap false simulates. Later records say
// which way they ran (training.empty_cache_after_wrap) or emptied it.
var keptCacheFiles = []string{
	"results/2026-11-22-h100-diag.jsonl",
	"results/2026-11-22-h100-zero.jsonl",
	"results/2026-11-22-h100-zero-heldout.jsonl",
	"results/2026-11-23-h100-heldout3.jsonl",
	"results/2026-11-23-h100-traces2/runs.jsonl",
}

// ReadRecords reads a JSON-lines file of measurements.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read measurements: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		r.KeepCache = r.KeepCache || slices.ContainsFunc(keptCacheFiles, func(f string) bool {
			return strings.HasSuffix(filepath.ToSlash(path), f)
		})
		out = append(out, r)
	}
	return out, sc.Err()
}

// settledPause is the --step-pause of harnesses whose DDP rebuild never
// races the first step's last all-reduce (docs/multigpu.md, "DDP's bucket
// rebuild race"): the estimator's threshold.
var settledPause = strconv.FormatFloat(estimate.DDPSettle, 'g', -1, 64)

// Overrides turns a record's training setup into spec overrides.
func (r Record) Overrides() model.Overrides {
	i := func(k string) int64 {
		if v, ok := r.Training[k].(float64); ok {
			return int64(v)
		}
		return 0
	}
	s := func(k string) string {
		v, _ := r.Training[k].(string)
		return v
	}
	o := model.Overrides{Batch: i("batch"), Seq: i("seq"), Image: i("image"), GradAccum: i("grad_accum"),
		Precision: s("precision"), Optimizer: s("optimizer"), Checkpointing: s("checkpointing"),
		Attention: s("attention"), ZeroGrad: s("zero_grad"), DP: i("dp"), AllocConf: s("alloc_conf")}
	if z := i("zero"); z > 0 {
		o.Zero = fmt.Sprint(z)
	}
	if n := len(r.Steps); n > 0 {
		o.Steps = int64(n)
	}
	if o.AllocConf == "" {
		o.AllocConf = r.Env["PYTORCH_ALLOC_CONF"]
	}
	if i("dp") > 1 {
		// A fake process group (measure.py) keeps no NCCL Work: nothing
		// outlives DDP's bucket rebuild, as after a loop's pause; its
		// shard() moves the whole model to the GPU before fully_shard
		// (unless --host-init) and empties the cache after (unless
		// --keep-cache, or before it could: keptCacheFiles).
		o.StepPause, o.FSDPInit = settledPause, model.FSDPInitGPU
		if s("fsdp_init") == "host" {
			o.FSDPInit = model.FSDPInitHost
		}
		o.EmptyCacheAfterWrap = !r.KeepCache
		if v, ok := r.Training["empty_cache_after_wrap"].(bool); ok {
			o.EmptyCacheAfterWrap = v
		}
	}
	if r.World > 1 && r.Mode != "" {
		// train.py's loop pauses after every step unless told not to:
		// DDP's rebuild frees the old flat bucket (docs/multigpu.md, "DDP's
		// bucket rebuild race").
		o.StepPause = settledPause
		if r.StepPause != nil {
			o.StepPause = strconv.FormatFloat(*r.StepPause, 'g', -1, 64)
		}
		o.DP, o.Zero, o.BucketView = r.World, "0", r.Mode == "ddp-view"
		o.FSDPInit = model.FSDPInitHost // train.py builds the model on the host
		if r.MetaInit {
			o.FSDPInit = model.FSDPInitMeta
		}
		o.FSDPExperts = r.FSDPExperts
		switch r.Mode {
		case "zero1":
			o.Zero = "1"
		case "fsdp":
			r.fsdpOverrides(&o)
		}
	}
	if r.EP > 1 {
		o.EP, o.EPSkew = r.EP, fmt.Sprint(r.EPSkew)
	}
	if l := r.LoRA; l != nil && l.Rank > 0 {
		o.LoRA, o.LoRATargets = l.Rank, l.Targets
		o.LoRAAlpha, o.LoRADropout = fmt.Sprint(l.Alpha), fmt.Sprint(l.Dropout)
		o.LoRAAdapterDtype = l.AdapterDtype
	}
	o.Dev = deviceNamed(r.GPU)
	if o.Dev == "" && r.DeviceMemory > 0 {
		o.Dev = fmt.Sprintf("%dB", r.DeviceMemory)
	}
	return o
}

// fsdpOverrides sets o to train.py's FSDP2: ZeRO 3 (reshard_after_forward
// true), or 2 for false (or 1, which FSDP2 turns into False), an integer
// below the FSDP group's ranks resharding to it, HSDP's replicas
// (--replicate), and the cache emptied after wrapping unless --keep-cache.
func (r Record) fsdpOverrides(o *model.Overrides) {
	o.Zero = "3"
	o.EmptyCacheAfterWrap = !r.KeepCache
	if r.Replicate > 1 {
		o.DPReplicate = r.Replicate
	}
	switch n, err := strconv.ParseInt(fmt.Sprint(r.Reshard), 10, 64); {
	case fmt.Sprint(r.Reshard) == "false" || err == nil && n == 1:
		o.Zero = "2"
	case err == nil && n < r.World/max(r.Replicate, 1):
		o.ReshardAfterForward = n // N = the group is True
	}
}

// deviceNamed is the catalog's device whose product name is gpu (as
// torch.cuda.get_device_name gives it), or "".
func deviceNamed(gpu string) string {
	for _, d := range model.Devices() {
		if d.Product == gpu {
			return d.Name
		}
	}
	return ""
}

// fakeGroup says the record is one rank of a data-parallel run on a fake
// process group: measure.py's (dp > 1 in one process) or train.py's
// (FakeWorld).
func (r *Record) fakeGroup() bool {
	dp, _ := r.Training["dp"].(float64)
	return dp > 1 && r.World <= 1 || r.FakeWorld > 0
}

// Compare predicts every successful record (spec paths are relative to
// root) and summarises the errors; records from heldOut files are held out.
func Compare(root string, tuning, heldOut []string) (*Report, error) {
	rep := &Report{}
	for _, set := range []struct {
		files []string
		held  bool
	}{{tuning, false}, {heldOut, true}} {
		for _, f := range set.files {
			recs, err := ReadRecords(f)
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				if !r.OK {
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", r.Label, r.Error))
					continue
				}
				if why := r.unmodelled(); why != "" {
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %s", r.Label, why))
					continue
				}
				p, err := r.predict(root)
				if err != nil {
					return nil, err
				}
				row := Row{Label: r.Label, HeldOut: set.held, Measured: r.measured(), Predicted: p}
				if row.Label == "" {
					row.Label = r.Spec
				}
				for m := range row.Err {
					row.Err[m] = float64(row.Predicted[m])/float64(row.Measured[m]) - 1
				}
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	var tu, ho []Row
	for _, r := range rep.Rows {
		if r.HeldOut {
			ho = append(ho, r)
		} else {
			tu = append(tu, r)
		}
	}
	rep.Tuning, rep.HeldOut, rep.All = Summarize(tu), Summarize(ho), Summarize(rep.Rows)
	return rep, nil
}

// predict is memplan's prediction for the record (its spec path relative
// to root): peak allocated, peak reserved and device total, each the
// largest over the kinds of rank, as the measurement is over the ranks.
func (r Record) predict(root string) ([NumMetrics]int64, error) {
	load := model.Load
	if r.IsHF() {
		load = model.LoadHF
	}
	spec, err := load(filepath.Join(root, r.Spec), r.Overrides())
	if err != nil {
		return [NumMetrics]int64{}, fmt.Errorf("%s: %w", r.Label, err)
	}
	e, err := estimate.Estimate(spec)
	if err != nil {
		return [NumMetrics]int64{}, fmt.Errorf("%s: %w", r.Label, err)
	}
	return predicted(e, r.fakeGroup()), nil
}

// predicted is memplan's figure for a measured run: the largest over the
// kinds of rank, metric by metric, as a measurement is the largest over
// the ranks. The harnesses reset the peak statistics once the model is
// built and wrapped (measure.py's and the dist scripts' loops), so where
// memplan's peak allocated is the load's (a model built whole on the GPU
// before it is split or sharded) the steps' peak is taken instead; the
// reserve the load left is still held at the reset, and is in the
// measured peak reserved. A run on a fake process group (fake) made no
// NCCL communicator: its device total has none of NCCL's memory, which
// memplan counts for the real job.
func predicted(e *estimate.Result, fake bool) [NumMetrics]int64 {
	a, rs, d := e.Largest()
	if e.PeakPhase.Stage == "load" && e.Pipeline == nil && e.Experts == nil {
		a = 0
		for _, ph := range e.Phases {
			a = max(a, ph.PeakAllocated)
		}
	}
	if fake {
		d -= e.NCCLBytes()
	}
	return [NumMetrics]int64{a, rs, d}
}

// Summarize computes medians, worst cases and under-predictions.
func Summarize(rows []Row) Summary {
	s := Summary{N: len(rows)}
	if len(rows) == 0 {
		return s
	}
	for m := 0; m < NumMetrics; m++ {
		abs := make(stats.Float64Data, len(rows))
		for i, r := range rows {
			abs[i] = math.Abs(r.Err[m])
			if r.Err[m] < -UnderLimit {
				s.Under[m]++
			}
		}
		s.Median[m], _ = abs.Median()
		s.Worst[m], _ = abs.Max()
	}
	return s
}

// Missed lists the targets a summary does not meet.
func (s Summary) Missed() []string {
	var out []string
	for m := 0; m < NumMetrics; m++ {
		if s.Median[m] > Targets.Median[m] {
			out = append(out, fmt.Sprintf("%s median %.1f%% > %.0f%%", MetricNames[m], 100*s.Median[m], 100*Targets.Median[m]))
		}
		if s.Worst[m] > Targets.Worst[m] {
			out = append(out, fmt.Sprintf("%s worst %.1f%% > %.0f%%", MetricNames[m], 100*s.Worst[m], 100*Targets.Worst[m]))
		}
		if s.Under[m] > 0 {
			out = append(out, fmt.Sprintf("%s: %d predictions more than %.0f%% under", MetricNames[m], s.Under[m], 100*UnderLimit))
		}
	}
	return out
}

// Worst returns the rows sorted by their largest absolute error, worst first.
func (r *Report) Worst() []Row {
	rows := append([]Row(nil), r.Rows...)
	key := func(x Row) float64 {
		return max(math.Abs(x.Err[0]), math.Abs(x.Err[1]), math.Abs(x.Err[2]))
	}
	sort.SliceStable(rows, func(i, j int) bool { return key(rows[i]) > key(rows[j]) })
	return rows
}

// measured is the record's three totals: the busiest rank's for a
// data-parallel record.
func (r Record) measured() [NumMetrics]int64 {
	if r.BusiestAllocated > 0 {
		return [NumMetrics]int64{r.BusiestAllocated, r.BusiestReserved, r.BusiestDevice}
	}
	return [NumMetrics]int64{r.PeakAllocated, r.PeakReserved, r.DeviceUsed}
}
