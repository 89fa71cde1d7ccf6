// Package tuner finds the largest micro-batch that fits a target fill of
// device memory, turns a global batch into micro-batch × accumulation, and
// says what to change when even batch 1 does not fit.
//
// The oracle is anything that predicts a spec's device total: the analytic
// estimator (Analytic), or a probe of the real device. The search relies
// on device memory growing with the batch: it evaluates two batches, solves
// the line through them for the band's upper edge, then walks to the
// largest valid batch whose prediction is at or below that edge.
package tuner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// Oracle predicts the device total of a spec, in bytes.
type Oracle func(*model.Spec) (int64, error)

// Analytic is the estimator as an oracle.
func Analytic(s *model.Spec) (int64, error) {
	r, err := estimate.Estimate(s)
	if err != nil {
		return 0, err
	}
	return r.DeviceTotal, nil
}

// StopOracle is an Oracle that may stop estimating once it knows the
// device total is above a level: it then returns a total above that
// level, a lower bound, with stopped set (AnalyticStop).
type StopOracle func(s *model.Spec, above int64) (total int64, stopped bool, err error)

// AnalyticStop is Analytic as a StopOracle: the simulation ends once the
// device total passes above (estimate.Options.StopAbove; 0: never).
func AnalyticStop(s *model.Spec, above int64) (int64, bool, error) {
	r, err := estimate.EstimateOptions(s, estimate.Options{StopAbove: above})
	if err != nil {
		return 0, false, err
	}
	return r.DeviceTotal, r.Stopped, nil
}

// Capped is an oracle for a job run under
// torch.cuda.set_per_process_memory_fraction(fraction): the caching
// allocator may not reserve more than fraction of the device, and frees its
// cache and retries before failing. It reports the peak reserved memory, or
// more than the cap when the run would fail. Tune with a band whose upper
// edge is fraction.
func Capped(fraction float64) Oracle {
	return func(s *model.Spec) (int64, error) {
		limit := int64(fraction * float64(s.Device.Memory))
		r, err := estimate.EstimateOptions(s, estimate.Options{ReservedLimit: limit})
		if err != nil {
			return 0, err
		}
		if r.OOM {
			return max(r.PeakReserved, limit+1), nil
		}
		return r.PeakReserved, nil
	}
}

// Band is a target fill of device memory, as fractions.
type Band struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// DefaultMargin is the safety margin the tuner keeps below the band's
// upper edge when the oracle is the estimator: the largest amount by which
// memplan's peak reserved fell short of the measurement on the held-out
// configurations (1.6%, ResNet-50 in fp32; docs/accuracy.md). With it the
// tuner's answers stayed at or below every measured largest batch
// (docs/tuner.md). The probe measures the device and needs none.
const DefaultMargin = 0.016

// Limit is the fraction of device memory the search stays at or below: the
// band's upper edge less the safety margin. Under a memory fraction pass it
// to Capped, so the simulated cap is the edge the search uses.
func Limit(band Band, c Constraints) float64 { return band.Hi * (1 - c.Margin) }

// DefaultBand is 85–90% of device memory.
var DefaultBand = Band{0.85, 0.90}

// ParseBand reads "0.85-0.90", "85%-90%", or a single upper edge ("0.9",
// taken as a 5-point band below it).
func ParseBand(s string) (Band, error) {
	parse := func(v string) (float64, error) {
		v = strings.TrimSpace(v)
		if p, ok := strings.CutSuffix(v, "%"); ok {
			f, err := strconv.ParseFloat(p, 64)
			return f / 100, err
		}
		return strconv.ParseFloat(v, 64)
	}
	lo, hi := 0.0, 0.0
	var err error
	if a, b, ok := strings.Cut(s, "-"); ok {
		if lo, err = parse(a); err == nil {
			hi, err = parse(b)
		}
	} else if hi, err = parse(s); err == nil {
		lo = hi - 0.05
	}
	if err != nil {
		return Band{}, fmt.Errorf("target %q: want LO-HI such as 0.85-0.90 or 85%%-90%%", s)
	}
	if !(lo > 0 && lo <= hi && hi <= 1) {
		return Band{}, fmt.Errorf("target %q: want 0 < LO ≤ HI ≤ 1", s)
	}
	return Band{lo, hi}, nil
}

// Constraints restrict the batches considered.
type Constraints struct {
	MultipleOf  int64 // 0 or 1: any
	PowersOfTwo bool
	Min, Max    int64 // 0: no bound
	// Seqs lists the sequence lengths the job sees; tuning uses the
	// longest (variable-length data must fit its longest batch).
	Seqs []int64
	// Hint, when set, is where the search starts looking: the analytic
	// answer, when the oracle is the probe and each evaluation allocates
	// device memory; the spec's own batch in the report, which estimates
	// it anyway. It changes how many evaluations the search takes, and
	// its answer only where memory is not monotone in the batch (another
	// crossing of the limit).
	Hint int64
	// FirstFix, when batch 1 does not fit, asks only for the first fix
	// (FirstFix instead of Fixes): the report shows no other.
	FirstFix bool
	// Margin is kept below the band's upper edge for the estimator's own
	// error, as a fraction of that edge (DefaultMargin; 0 for none).
	Margin float64
	// Bound, when set, gives a lower bound on the oracle's answer for a
	// spec without estimating it, 0 when it knows none (the report learns
	// one from the same change estimated on another device). A fix whose
	// bound is beyond the target cannot fit and is not estimated; when no
	// fix fits, the closest miss is the closest of those estimated.
	Bound func(*model.Spec) int64
	// Stop, when set, estimates the fixes (batch 1 does not fit) in
	// place of the oracle, which it must agree with: a fix is estimated
	// only until it is known not to fit and, for Fixes, not to come
	// closer than the closest miss so far, so the fixes are those the
	// oracle gives. With FirstFix each miss stops once it is known not
	// to fit, and the closest miss returned when none fits is the closest
	// by those lower bounds.
	Stop StopOracle
	// Tolerance, when set, ends the search once the bracket is narrower
	// than that fraction of the batch (the probe uses 0.1%: a model that
	// fits millions of samples needs no single-sample answer, and each
	// probe step allocates). The answer still fits; it may be up to that
	// fraction below the largest that does.
	Tolerance float64
}

func (c Constraints) valid(b int64) bool {
	if b < max(c.Min, 1) || (c.Max > 0 && b > c.Max) {
		return false
	}
	if c.MultipleOf > 1 && b%c.MultipleOf != 0 {
		return false
	}
	return !c.PowersOfTwo || b&(b-1) == 0
}

// below returns the largest valid batch ≤ b, or 0.
func (c Constraints) below(b int64) int64 {
	if c.Max > 0 {
		b = min(b, c.Max)
	}
	if c.MultipleOf > 1 {
		b -= b % c.MultipleOf
	}
	for ; b >= 1; b-- {
		if c.valid(b) {
			return b
		}
		if c.PowersOfTwo {
			for p := int64(1) << 62; p >= 1; p >>= 1 {
				if p <= b && c.valid(p) {
					return p
				}
			}
			return 0
		}
	}
	return 0
}

// Trial is one evaluation of the oracle.
type Trial struct {
	Batch       int64   `json:"batch"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
}

// Result is the outcome of Tune.
type Result struct {
	Batch       int64   `json:"batch"`
	Seq         int64   `json:"seq,omitempty"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
	Band        Band    `json:"band"`
	// Margin is the bytes left below the band's upper edge.
	Margin int64 `json:"margin_bytes"`
	// SafetyMargin is the fraction of the upper edge the search kept free
	// for the estimator's error (Constraints.Margin).
	SafetyMargin float64 `json:"safety_margin"`
	// BelowBand is set when the best batch fills less than the band's
	// lower edge (the constraints or the next batch's size prevent more).
	BelowBand bool    `json:"below_band"`
	Trials    []Trial `json:"trials"`
	// Plan splits a global batch, when one was asked for.
	Plan *Plan `json:"plan,omitempty"`
	// Fixes are set when batch 1 does not fit.
	Fixes    []Fix    `json:"fixes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// ErrNoFit is returned (wrapped) when even the smallest valid batch
// exceeds the band; the Result's Fixes say what would make it fit.
var ErrNoFit = errors.New("no batch fits the target")

// Tune finds the largest valid micro-batch whose predicted device total is
// at or below band.Hi of the device's memory.
func Tune(spec *model.Spec, band Band, c Constraints, oracle Oracle) (*Result, error) {
	s := *spec
	for i, q := range c.Seqs {
		if i == 0 || q > s.Training.Seq {
			s.Training.Seq = q
		}
	}
	mem := s.Device.Memory
	limit := limitBytes(band, c.Margin, mem)
	r := &Result{Band: band, Seq: s.Training.Seq}
	cache := map[int64]int64{}
	eval := func(b int64) (int64, error) {
		if v, ok := cache[b]; ok {
			return v, nil
		}
		t := s
		t.Training.Batch = b
		v, err := oracle(&t)
		if err != nil {
			return 0, err
		}
		cache[b] = v
		r.Trials = append(r.Trials, Trial{b, v, float64(v) / float64(mem)})
		return v, nil
	}
	b0 := c.below(1 << 40)
	lo := int64(1)
	for !c.valid(lo) && lo < 1<<40 {
		lo++
	}
	if b0 == 0 || !c.valid(lo) {
		return nil, fmt.Errorf("no batch satisfies the constraints")
	}
	f0, err := eval(lo)
	if err != nil {
		return nil, err
	}
	if f0 > limit {
		r.Batch, r.DeviceTotal, r.Fill = 0, f0, float64(f0)/float64(mem)
		f := fixer{spec: &s, band: band, margin: c.Margin, oracle: oracle, bound: c.Bound, stop: c.Stop}
		if c.FirstFix {
			r.Fixes = f.first1()
		} else {
			r.Fixes = f.all()
		}
		return r, fmt.Errorf("%w: batch %d needs %.1f%% of %s", ErrNoFit, lo, 100*r.Fill, s.Device.Name)
	}
	best, err := Largest(c, lo, limit, eval)
	if err != nil {
		return nil, err
	}
	v, _ := eval(best)
	r.Batch, r.DeviceTotal, r.Fill = best, v, float64(v)/float64(mem)
	r.Margin, r.SafetyMargin = int64(band.Hi*float64(mem))-v, c.Margin
	if r.Fill < band.Lo {
		r.BelowBand = true
		edge := fmt.Sprintf("%.0f%%", 100*band.Hi)
		if c.Margin > 0 {
			edge += fmt.Sprintf(" less the %.1f%% safety margin", 100*c.Margin)
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf("the best batch fills %.1f%%, below the band's %.0f%%: the next valid batch would exceed %s",
			100*r.Fill, 100*band.Lo, edge))
	}
	return r, nil
}

// Largest returns the largest batch satisfying c whose eval is at or below
// limit, given that lo satisfies c and fits. If eval fails once lo has been
// evaluated, it returns the error with the largest fitting batch found so
// far. eval is called once per batch at most if it caches.
//
// It brackets the limit with a batch known to fit and one known not to,
// extrapolating from the line through the last two fitting points (bracket
// in search.go), then narrows the bracket by regula falsi: the line
// through the bracket's ends, where memory is nearly linear in the batch,
// crosses the limit close to the answer, and the batch just above a
// fitting step is checked because the step usually lands just below it.
// An end that stays while the other moves twice has its weight in the
// line halved (the Illinois rule), so a curved stretch closes from both
// sides. Where the allocator's rounding makes memory flat the line says
// nothing: a step that lands on its side's value, or two rounds that do
// not halve the bracket, are followed by a bisection, so the search takes
// O(log range) evaluations (docs/performance.md, eighteenth session:
// 571 → 460 evaluations over every bundled spec and imported config on
// three devices, TestTuneTrials).
//
// Memory is not always monotone in the batch (the allocator's rounding
// and cached blocks: specs/qwen2.5-7b.yaml on an H200 predicts 142.1 GiB at
// batch 9 and 133.0 GiB at 10): the answer then is a batch that fits whose
// next valid batch does not, not necessarily the largest of all that fit.
func Largest(c Constraints, lo, limit int64, eval func(int64) (int64, error)) (int64, error) {
	s := &search{c: c, limit: limit, eval: eval}
	fv, err := s.eval(lo)
	if err != nil {
		return 0, err
	}
	if fv > limit {
		return 0, fmt.Errorf("batch %d does not fit", lo)
	}
	s.fit, s.fv = lo, fv
	next := nextValid(c, lo)
	if h := c.below(c.Hint); h > lo {
		next = h // the walk's first step, its line then drawn from lo
	}
	if err := s.bracket(next); err != nil {
		return s.fit, err
	}
	return s.narrow()
}

func nextValid(c Constraints, b int64) int64 {
	if c.PowersOfTwo {
		n := b * 2
		if c.valid(n) {
			return n
		}
		return 0
	}
	for n := b + 1; n <= b+max(c.MultipleOf, 1); n++ {
		if c.valid(n) {
			return n
		}
	}
	return 0
}

// Plan is a global batch split into micro-batches.
type Plan struct {
	GlobalBatch int64 `json:"global_batch"`
	DP          int64 `json:"data_parallel"`
	MicroBatch  int64 `json:"micro_batch"`
	Accum       int64 `json:"grad_accum"`
	// Achieved is micro × accum × dp; Exact says it equals GlobalBatch.
	Achieved int64  `json:"achieved_global_batch"`
	Exact    bool   `json:"exact"`
	Note     string `json:"note,omitempty"`
}

// Split turns a global batch over dp data-parallel ranks into micro-batch ×
// accumulation steps with micro-batch ≤ maxMicro and as few steps as
// possible: exactly when a split with at most twice the minimal number of
// steps exists, otherwise the nearest achievable global batch, stated.
func Split(global, dp, maxMicro int64) (*Plan, error) {
	if global <= 0 || dp <= 0 || maxMicro <= 0 {
		return nil, fmt.Errorf("global batch, data-parallel size and micro-batch must be positive")
	}
	p := &Plan{GlobalBatch: global, DP: dp}
	per := max(global/dp, 1)
	minAccum := (per + maxMicro - 1) / maxMicro
	for accum := minAccum; accum <= 2*minAccum; accum++ {
		if per%accum == 0 && per/accum <= maxMicro {
			p.MicroBatch, p.Accum = per/accum, accum
			break
		}
	}
	if p.MicroBatch == 0 {
		lo, hi := per/minAccum, min((per+minAccum-1)/minAccum, maxMicro)
		p.MicroBatch, p.Accum = hi, minAccum
		if lo >= 1 && per-lo*minAccum <= hi*minAccum-per {
			p.MicroBatch = lo
		}
	}
	p.Achieved = p.MicroBatch * p.Accum * dp
	p.Exact = p.Achieved == global
	if !p.Exact {
		p.Note = fmt.Sprintf("no split of %d over %d ranks with at most %d accumulation steps is exact; nearest is %d",
			global, dp, 2*minAccum, p.Achieved)
	}
	return p, nil
}
