package bench

import "testing"

// TestRecordAllocConf checks that a record measured under
// PYTORCH_ALLOC_CONF (measure.py --alloc-conf) is predicted under it.
func TestRecordAllocConf(t *testing.T) {
	r := Record{Training: map[string]any{"batch": 8.0, "alloc_conf": "expandable_segments:True"}}
	if got := r.Overrides().AllocConf; got != "expandable_segments:True" {
		t.Errorf("Overrides().AllocConf = %q, want %q", got, "expandable_segments:True")
	}
	if got := (Record{Training: map[string]any{"batch": 8.0}}).Overrides().AllocConf; got != "" {
		t.Errorf("Overrides().AllocConf = %q for a record without one, want \"\"", got)
	}
}
