package tuner

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// AdviceThreshold is the fraction of the device total a setting must save
// before estimate advises it (docs/allocator.md §9).
const AdviceThreshold = 0.02

// Expandable is the allocator setting the advice and the search try first:
// reserved memory tracks allocated memory to within a page per segment
// (docs/allocator.md §4).
const Expandable = "expandable_segments:True"

// AllocAdvice is another allocator setting that lowers a spec's predicted
// device total by more than AdviceThreshold, re-estimated under it.
type AllocAdvice struct {
	// AllocConf is the setting to run with (PYTORCH_ALLOC_CONF syntax).
	AllocConf string `json:"alloc_conf"`
	// DeviceTotal is the device total predicted under AllocConf.
	DeviceTotal int64 `json:"device_total_bytes"`
	// Saved is the current device total less DeviceTotal; Fraction is
	// Saved over the current device total.
	Saved    int64   `json:"saved_bytes"`
	Fraction float64 `json:"saved_fraction"`
}

// AdviceCandidates are the settings AdviseAllocConf re-estimates a spec
// under, given the setting it runs with: none when that is already
// expandable or is backend:cudaMallocAsync (which the simulation does not
// model) or does not parse; otherwise the current setting plus
// expandable_segments:True, then expandable_segments:True alone when the
// current setting is not the default. max_split_size_mb is left out: in
// the simulations of docs/allocator.md §9 it never saved more than the
// advice threshold, and usually raised the device total.
func AdviceCandidates(current string) []string {
	c, err := alloc.Parse(current)
	if err != nil || c.ExpandableSegments || c.Backend == "cudaMallocAsync" {
		return nil
	}
	if c.IsDefault() {
		return []string{Expandable}
	}
	return []string{WithExpandable(current), Expandable}
}

// WithExpandable returns conf with expandable_segments:True in place of
// any expandable_segments setting it has, its other settings kept as
// given.
func WithExpandable(conf string) string {
	var keep []string
	depth, start := 0, 0
	flush := func(end int) {
		part := strings.TrimSpace(conf[start:end])
		key, _, _ := strings.Cut(part, ":")
		if part != "" && strings.TrimSpace(key) != "expandable_segments" {
			keep = append(keep, part)
		}
	}
	for i := 0; i < len(conf); i++ {
		switch conf[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				flush(i)
				start = i + 1
			}
		}
	}
	flush(len(conf))
	return strings.Join(append(keep, Expandable), ",")
}

// AdviceMayHelp reports whether AdviseAllocConf can find a setting that
// saves more than AdviceThreshold of r, spec's estimate, without running
// it. Under PyTorch's default setting the only candidate adds
// expandable_segments:True, which rounds every request as the default does
// (docs/allocator.md), so peak allocated and the memory outside the
// allocator stay and the candidate can save at most the bytes reserved but
// unallocated at the peak. When those are within the threshold the
// re-estimate is skipped (a third of a plain estimate's cost). For other
// settings it answers true: their candidates may round differently.
func AdviceMayHelp(spec *model.Spec, r *estimate.Result) bool {
	c, err := alloc.Parse(spec.Training.AllocConf)
	if err != nil || !c.IsDefault() || r.DeviceTotal <= 0 {
		return true
	}
	return float64(r.PeakReserved-r.PeakAllocated) > AdviceThreshold*float64(r.DeviceTotal)
}

// AdviseAllocConf re-estimates spec under each of
// AdviceCandidates(spec.Training.AllocConf) with oracle and returns the one
// with the lowest device total when it is below current (the spec's own
// device total) by more than AdviceThreshold; on equal totals the earlier
// candidate, the one that changes least. It returns nil when no candidate
// saves that much.
func AdviseAllocConf(spec *model.Spec, current int64, oracle Oracle) (*AllocAdvice, error) {
	return AdviseAllocConfStop(spec, current, func(s *model.Spec, _ int64) (int64, bool, error) {
		v, err := oracle(s)
		return v, false, err
	})
}

// AdviseAllocConfStop is AdviseAllocConf through a StopOracle
// (AnalyticStop): a candidate's estimate stops once its total is known to
// save no more than AdviceThreshold of current, or to be above the best
// candidate so far, since neither is advised; the advice is the same.
func AdviseAllocConfStop(spec *model.Spec, current int64, oracle StopOracle) (*AllocAdvice, error) {
	var best *AllocAdvice
	for _, conf := range AdviceCandidates(spec.Training.AllocConf) {
		s := *spec
		s.Training.AllocConf = conf
		var level int64 // 0: no stop
		if current > 0 {
			// Any total at or above this saves at most the threshold.
			level = int64(math.Ceil(float64(current) * (1 - AdviceThreshold)))
		}
		if best != nil && (level == 0 || best.DeviceTotal < level) {
			level = best.DeviceTotal
		}
		total, stopped, err := oracle(&s, level)
		if err != nil {
			return nil, fmt.Errorf("alloc_conf %s: %w", conf, err)
		}
		if stopped {
			continue
		}
		if best == nil || total < best.DeviceTotal {
			best = &AllocAdvice{AllocConf: conf, DeviceTotal: total}
		}
	}
	if best == nil || current <= 0 {
		return nil, nil
	}
	best.Saved = current - best.DeviceTotal
	best.Fraction = float64(best.Saved) / float64(current)
	if best.Fraction <= AdviceThreshold {
		return nil, nil
	}
	return best, nil
}

// AllocTrial is the largest batch under one allocator setting.
type AllocTrial struct {
	// AllocConf is the setting; "" is PyTorch's default.
	AllocConf   string  `json:"alloc_conf"`
	Batch       int64   `json:"batch"`
	DeviceTotal int64   `json:"device_total_bytes"`
	Fill        float64 `json:"fill"`
}

// AllocChoice is the outcome of TuneAllocConf: the setting chosen and the
// largest batch under each candidate, in the order tried.
type AllocChoice struct {
	Chosen     string       `json:"chosen"`
	Candidates []AllocTrial `json:"candidates"`
}

// SearchCandidates are the settings TuneAllocConf tries for a spec that
// runs with current, simplest first: PyTorch's default,
// expandable_segments:True, then current and current with expandable
// segments when current is neither of those.
func SearchCandidates(current string) []string {
	out := []string{"", Expandable}
	seen := map[string]bool{}
	for _, c := range out {
		seen[canonical(c)] = true
	}
	for _, c := range []string{current, WithExpandable(current)} {
		if current == "" || seen[canonical(c)] {
			continue
		}
		seen[canonical(c)] = true
		out = append(out, c)
	}
	return out
}

// canonical is conf as alloc.Config prints it, or conf itself when it
// does not parse.
func canonical(conf string) string {
	c, err := alloc.Parse(conf)
	if err != nil {
		return conf
	}
	return c.String()
}

// TuneAllocConf runs Tune under each of
// SearchCandidates(spec.Training.AllocConf) and returns the result with the
// largest batch, the earlier (simpler) setting on ties, with the setting
// chosen and every candidate's largest batch. When batch 1 fits under no
// setting it returns the default setting's result, with its fixes, and
// ErrNoFit.
func TuneAllocConf(spec *model.Spec, band Band, c Constraints, oracle Oracle) (*Result, *AllocChoice, error) {
	var best *Result
	var bestErr error
	choice := &AllocChoice{}
	for _, conf := range SearchCandidates(spec.Training.AllocConf) {
		s := *spec
		s.Training.AllocConf = conf
		r, err := Tune(&s, band, c, oracle)
		if err != nil && !errors.Is(err, ErrNoFit) {
			return nil, nil, fmt.Errorf("alloc_conf %q: %w", conf, err)
		}
		choice.Candidates = append(choice.Candidates, AllocTrial{conf, r.Batch, r.DeviceTotal, r.Fill})
		if best == nil || r.Batch > best.Batch {
			best, bestErr, choice.Chosen = r, err, conf
		}
	}
	return best, choice, bestErr
}
