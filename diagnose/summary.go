package diagnose

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

var (
	summaryRow   = lazyRegexp(`^\|\s*([A-Za-z][A-Za-z \-]*?)\s*\|\s*([0-9]+(?: [KMGTP]?i?B)?)\s*\|\s*([0-9]+(?: [KMGTP]?i?B)?)\s*\|`)
	summaryOOMs  = lazyRegexp(`CUDA OOMs:\s*([0-9]+)`)
	summaryRetry = lazyRegexp(`cudaMalloc retries:\s*([0-9]+)`)
)

// ParseSummary reads the table torch.cuda.memory_summary() prints. Its
// sizes are whole units (MiB for most jobs), so figures are within one unit.
func ParseSummary(data []byte) (Stats, error) {
	var s Stats
	rows := map[string]bool{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		if m := summaryOOMs().FindStringSubmatch(l); m != nil {
			s.OOMs, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := summaryRetry().FindStringSubmatch(l); m != nil {
			s.Retries, _ = strconv.ParseInt(m[1], 10, 64)
		}
		m := summaryRow().FindStringSubmatch(l)
		if m == nil {
			continue
		}
		cur, err1 := summarySize(m[2])
		peak, err2 := summarySize(m[3])
		if err := errors.Join(err1, err2); err != nil {
			return Stats{}, &InputError{Line: i + 1, Err: err}
		}
		switch m[1] {
		case "Allocated memory":
			s.Allocated, s.PeakAllocated = cur, peak
		case "GPU reserved memory":
			s.Reserved, s.PeakReserved = cur, peak
		case "Non-releasable memory":
			s.InactiveSplit = cur
		default:
			continue
		}
		rows[m[1]] = true
	}
	if !rows["Allocated memory"] || !rows["GPU reserved memory"] {
		return Stats{}, errors.New("memory_summary text without its \"Allocated memory\" and \"GPU reserved memory\" rows (cut short?)")
	}
	return s, nil
}

func summarySize(s string) (int64, error) {
	num, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("memory_summary: bad size %q", s)
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40, "PiB": 50}
	sh, ok := shift[unit]
	if !ok || v > (1<<62)>>sh {
		return 0, fmt.Errorf("memory_summary: bad size %q", s)
	}
	return v << sh, nil
}
