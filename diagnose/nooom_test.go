package diagnose

import (
	"strings"
	"testing"
)

// TestNoOOMRecorded: evidence that shows no out-of-memory error gives a
// low-confidence verdict that says so; evidence of an error, or a file that
// cannot tell, keeps the verdict as decided.
func TestNoOOMRecorded(t *testing.T) {
	const g = int64(1) << 30
	healthy := Stats{Allocated: 2 * g, Reserved: 6 * g, PeakAllocated: 3 * g, PeakReserved: 6 * g, InactiveSplit: 3 * g}
	crashed := healthy
	crashed.OOMs = 1
	tests := []struct {
		name string
		evs  []*Evidence
		want bool
	}{
		{"stats without an error", []*Evidence{{File: "s.json", Kind: KindStats, Stats: []Stats{healthy}}}, true},
		{"stats counting an error", []*Evidence{{File: "s.json", Kind: KindStats, Stats: []Stats{healthy, crashed}}}, false},
		{"snapshot history without an oom", []*Evidence{{File: "x.pickle", Kind: KindSnapshot,
			Snapshot: &Snapshot{Allocated: 2 * g, Reserved: 6 * g, Events: 1000}}}, true},
		{"snapshot with an oom", []*Evidence{{File: "x.pickle", Kind: KindSnapshot,
			Snapshot: &Snapshot{Allocated: 2 * g, Reserved: 6 * g, Events: 1000, Request: g}}}, false},
		{"snapshot without history", []*Evidence{{File: "x.pickle", Kind: KindSnapshot,
			Snapshot: &Snapshot{Allocated: 2 * g, Reserved: 6 * g}}}, false},
		{"a log's message", []*Evidence{{File: "log", Kind: KindLog, OOMs: []OOM{{Rank: -1, Request: g}}},
			{File: "s.json", Kind: KindStats, Stats: []Stats{healthy}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := noOOMRecorded(tt.evs); got != tt.want {
				t.Fatalf("noOOMRecorded = %v, want %v", got, tt.want)
			}
			v := Diagnose(tt.evs, Job{}).Verdict
			says := strings.HasPrefix(v.Reason, "no out-of-memory error is recorded")
			if says != tt.want || (tt.want && v.Confidence != Low) {
				t.Errorf("verdict %s (%s): %q; want the no-error note: %v", v.Cause, v.Confidence, v.Reason, tt.want)
			}
		})
	}
}
