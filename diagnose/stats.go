package diagnose

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Stats is the allocator's state as torch.cuda.memory_stats() or
// memory_summary() reports it.
type Stats struct {
	// Step is the "step" field of a JSON line, or the line's index.
	Step int `json:"step"`
	// Allocated and Reserved are allocated_bytes.all.current and
	// reserved_bytes.all.current; the peaks are their .peak.
	Allocated     int64 `json:"allocated_bytes"`
	Reserved      int64 `json:"reserved_bytes"`
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	PeakReserved  int64 `json:"peak_reserved_bytes"`
	// InactiveSplit is free memory inside segments that are partly in use
	// (inactive_split_bytes.all.current): cached, but not releasable.
	InactiveSplit int64 `json:"inactive_split_bytes"`
	// Retries counts cudaMalloc failures the allocator recovered from by
	// freeing its cache (num_alloc_retries); OOMs counts the errors raised.
	Retries int64 `json:"alloc_retries"`
	OOMs    int64 `json:"ooms"`
	// Allocs and Frees count the allocations made and freed so far
	// (allocation.all.allocated and .freed); 0 in a summary.
	Allocs int64 `json:"allocations,omitempty"`
	Frees  int64 `json:"frees,omitempty"`
}

// ParseStats reads one memory_stats() dump (JSON, possibly indented) or
// JSON lines with one dump per line. A line may wrap the dump's keys with
// others (a "step" number is kept).
func ParseStats(data []byte) ([]Stats, error) {
	var one map[string]any
	if err := json.Unmarshal(data, &one); err == nil {
		s, err := statsFrom(one, 0)
		if err != nil {
			return nil, err
		}
		return []Stats{s}, nil
	}
	var out []Stats
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, &InputError{Line: i + 1, Err: fmt.Errorf("memory_stats JSON: %w", err)}
		}
		s, err := statsFrom(m, len(out))
		if err != nil {
			return nil, &InputError{Line: i + 1, Err: err}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("memory_stats JSON: empty")
	}
	return out, nil
}

func statsFrom(m map[string]any, index int) (Stats, error) {
	if v, ok := m["memory_stats"].(map[string]any); ok {
		m = mergeStep(v, m)
	}
	if _, ok := m["allocated_bytes.all.current"]; !ok {
		return Stats{}, errors.New(`memory_stats JSON: no "allocated_bytes.all.current" key (is this torch.cuda.memory_stats()?)`)
	}
	var bad error
	get := func(k string) int64 {
		v, ok := m[k]
		if !ok {
			return 0
		}
		f, ok := v.(float64)
		if !ok || f < 0 || f > math.MaxInt64/2 || f != math.Trunc(f) {
			bad = fmt.Errorf("memory_stats JSON: %q is %v, want a byte count", k, v)
			return 0
		}
		return int64(f)
	}
	s := Stats{
		Step:          index,
		Allocated:     get("allocated_bytes.all.current"),
		Reserved:      get("reserved_bytes.all.current"),
		PeakAllocated: get("allocated_bytes.all.peak"),
		PeakReserved:  get("reserved_bytes.all.peak"),
		InactiveSplit: get("inactive_split_bytes.all.current"),
		Retries:       get("num_alloc_retries"),
		OOMs:          get("num_ooms"),
		Allocs:        get("allocation.all.allocated"),
		Frees:         get("allocation.all.freed"),
	}
	if st, ok := m["step"]; ok {
		if f, ok := st.(float64); ok && f >= 0 && f < math.MaxInt32 {
			s.Step = int(f)
		}
	}
	return s, bad
}

// mergeStep keeps a wrapper's "step" beside a nested memory_stats object.
func mergeStep(inner, outer map[string]any) map[string]any {
	if st, ok := outer["step"]; ok {
		c := make(map[string]any, len(inner)+1)
		for k, v := range inner {
			c[k] = v
		}
		c["step"] = st
		return c
	}
	return inner
}
