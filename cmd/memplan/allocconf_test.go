package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAllocConf checks --alloc-conf and the environment fallback in
// PyTorch's order: PYTORCH_ALLOC_CONF, then PYTORCH_CUDA_ALLOC_CONF.
func TestAllocConf(t *testing.T) {
	reserved := func(args ...string) (int64, string) {
		t.Helper()
		code, out, errOut := memplan(append([]string{"estimate", "../../specs/gpt2-124m.yaml", "--format", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var r struct {
			Reserved int64    `json:"peak_reserved_bytes"`
			Notes    []string `json:"notes"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Reserved, errOut + strings.Join(r.Notes, "\n")
	}
	t.Setenv("PYTORCH_ALLOC_CONF", "")
	def, _ := reserved("--alloc-conf", "")
	exp, _ := reserved("--alloc-conf", "expandable_segments:True")
	if exp >= def {
		t.Fatalf("expandable segments reserve %d, default %d: want less", exp, def)
	}
	t.Setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
	if got, note := reserved(); got != def || !strings.Contains(note, "from PYTORCH_ALLOC_CONF") {
		t.Errorf("PYTORCH_ALLOC_CONF set (empty) beside PYTORCH_CUDA_ALLOC_CONF: reserved %d (want %d), notes %q", got, def, note)
	}
	t.Setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
	t.Setenv("PYTORCH_CUDA_ALLOC_CONF", "x:1")
	if got, note := reserved(); got != exp || !strings.Contains(note, `allocator settings from PYTORCH_ALLOC_CONF: "expandable_segments:True"`) {
		t.Errorf("from the environment: reserved %d (want %d), notes %q", got, exp, note)
	}
	if got, note := reserved("--alloc-conf", ""); got != def || strings.Contains(note, "allocator settings") {
		t.Errorf("--alloc-conf beside the environment: reserved %d (want %d), notes %q", got, def, note)
	}
	code, _, errOut := memplan("estimate", "../../specs/gpt2-124m.yaml", "--alloc-conf", "max_split_size_mb:8")
	if code != 2 || !strings.Contains(errOut, "--alloc-conf: max_split_size_mb: 8 is too small") {
		t.Errorf("bad --alloc-conf: exit %d, notes %q", code, errOut)
	}
}
