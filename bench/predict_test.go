package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPredictGrid prints memplan's predictions for the measure.py lines of
// the grid MEMPLAN_PREDICT_GRID (one line each: the grid line, then peak
// allocated, peak reserved and device total in bytes, as
// bench/torch/heldout.py reads them), predicted as the comparison will
// predict their records (Record.predict): a fake process group's lines
// (--dp, --zero) with the conventions measure.py records (--host-init,
// --keep-cache), on MEMPLAN_PREDICT_GPU (default "NVIDIA H200"). For
// held-out sets, whose predictions are committed before they run:
//
//	MEMPLAN_PREDICT_GRID=$PWD/bench/torch/heldout78.txt go test -count=1 ./bench -run TestPredictGrid -v
func TestPredictGrid(t *testing.T) {
	path := os.Getenv("MEMPLAN_PREDICT_GRID")
	if path == "" {
		t.Skip("set MEMPLAN_PREDICT_GRID to a grid of measure.py lines")
	}
	gpu := os.Getenv("MEMPLAN_PREDICT_GPU")
	if gpu == "" {
		gpu = "NVIDIA H200"
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := gridRecord(line, gpu)
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.predict("..")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s %d %d %d\n", line, p[Allocated], p[Reserved], p[Device])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// gridRecord is the record measure.py would write for a grid line (its
// flags), before its measurements: what Record.Overrides reads.
func gridRecord(line, gpu string) (Record, error) {
	f := strings.Fields(line)
	r := Record{Spec: f[0], Label: line, GPU: gpu, OK: true, Training: map[string]any{}}
	var keep, host bool
	for i := 1; i < len(f); i++ {
		k := strings.TrimPrefix(f[i], "--")
		switch k {
		case "hf":
			r.HF = true
			continue
		case "keep-cache":
			keep = true
			continue
		case "host-init":
			host = true
			continue
		}
		if i+1 >= len(f) {
			return r, fmt.Errorf("%s: %s has no value", line, f[i])
		}
		v := f[i+1]
		i++
		key := strings.ReplaceAll(k, "-", "_")
		switch key {
		case "batch", "seq", "image", "grad_accum", "dp", "zero":
			n, err := strconv.Atoi(v)
			if err != nil {
				return r, fmt.Errorf("%s: --%s %s: %w", line, k, v, err)
			}
			r.Training[key] = float64(n)
		case "precision", "optimizer", "checkpointing", "attention", "zero_grad", "alloc_conf":
			r.Training[key] = v
		default:
			return r, fmt.Errorf("%s: measure.py has no --%s", line, k)
		}
	}
	if z, _ := r.Training["zero"].(float64); z >= 2 {
		r.Training["fsdp_init"] = "gpu"
		if host {
			r.Training["fsdp_init"] = "host"
		}
		r.Training["empty_cache_after_wrap"] = !keep
	}
	return r, nil
}

// TestGridRecord reads grid lines as measure.py records them: its flags
// into the training setup, a fake process group's FSDP2 conventions
// (fsdp_init, empty_cache_after_wrap) only with ZeRO 2 or 3; an unknown
// flag or a missing value is an error.
func TestGridRecord(t *testing.T) {
	for _, tc := range []struct {
		line string
		want map[string]any
		hf   bool
		err  string
	}{
		{"specs/gpt2-124m.yaml --batch 8 --precision bf16", map[string]any{"batch": 8.0, "precision": "bf16"}, false, ""},
		{"m.json --hf --seq 512 --dp 8 --zero 3 --keep-cache --host-init",
			map[string]any{"seq": 512.0, "dp": 8.0, "zero": 3.0, "fsdp_init": "host", "empty_cache_after_wrap": false}, true, ""},
		{"specs/x.yaml --dp 4 --zero 2", map[string]any{"dp": 4.0, "zero": 2.0, "fsdp_init": "gpu", "empty_cache_after_wrap": true}, false, ""},
		{"specs/x.yaml --dp 4 --zero 1 --keep-cache", map[string]any{"dp": 4.0, "zero": 1.0}, false, ""},
		{"specs/x.yaml --batch", nil, false, "has no value"},
		{"specs/x.yaml --batch two", nil, false, "invalid syntax"},
		{"specs/x.yaml --steps 3", nil, false, "measure.py has no --steps"},
	} {
		r, err := gridRecord(tc.line, "NVIDIA H200")
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.line, err, tc.err)
			}
			continue
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if fmt.Sprint(r.Training) != fmt.Sprint(tc.want) || r.HF != tc.hf || r.GPU != "NVIDIA H200" {
			t.Errorf("%q: training %v hf %v, want %v %v", tc.line, r.Training, r.HF, tc.want, tc.hf)
		}
	}
}
