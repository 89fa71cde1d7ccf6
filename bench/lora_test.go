package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareLoRA checks that a bench/torch/lora.py record is predicted
// with its adapters (in fp32 or the base's dtype), and that setups the
// simulator lacks are skipped.
func TestCompareLoRA(t *testing.T) {
	const rec = `{"spec": "specs/gpt2-124m.yaml", "hf": false, "label": "%s", "ok": true,
"training": {"batch": 2, "seq": 128, "precision": "bf16", "checkpointing": "%s"},
"lora": {"rank": 8, "alpha": 8, "dropout": 0.0, "targets": "attn", "adapter_dtype": "%s", "input_require_grads": %s},
"peak_allocated_bytes": 1000000000, "peak_reserved_bytes": 1000000000, "device_total_used_bytes": 1000000000}`
	lines := []string{
		strings.Join(strings.Fields(fmt.Sprintf(rec, "lora", "none", "fp32", "false")), " "),
		strings.Join(strings.Fields(fmt.Sprintf(rec, "base dtype", "none", "base", "false")), " "),
		strings.Join(strings.Fields(fmt.Sprintf(rec, "grads off", "every-block", "fp32", "false")), " "),
	}
	path := filepath.Join(t.TempDir(), "lora.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if o := recs[0].Overrides(); o.LoRA != 8 || o.LoRATargets != "attn" || o.LoRADropout != "0" {
		t.Errorf("overrides %+v, want rank 8 attn dropout 0", o)
	}
	rep, err := Compare("..", nil, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || len(rep.Skipped) != 1 {
		t.Fatalf("rows %d skipped %v, want 2 rows and 1 skipped", len(rep.Rows), rep.Skipped)
	}
	if o := recs[1].Overrides(); o.LoRAAdapterDtype != "base" {
		t.Errorf("adapter dtype override %q, want base", o.LoRAAdapterDtype)
	}
	// bf16 adapters over the bf16 base: half the adapter bytes, no fp32 input copies.
	if b, f := rep.Rows[1].Predicted[Allocated], rep.Rows[0].Predicted[Allocated]; b >= f {
		t.Errorf("base-dtype adapters peak %d not below fp32 adapters' %d", b, f)
	}
	full, err := Compare("..", nil, []string{writeFull(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Frozen base: no gradients or AdamW state for 124 M parameters.
	if lo, fu := rep.Rows[0].Predicted[Allocated], full.Rows[0].Predicted[Allocated]; lo >= fu {
		t.Errorf("LoRA peak %d not below the full fine-tune's %d", lo, fu)
	}
}

func writeFull(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "full.jsonl")
	const rec = `{"spec": "specs/gpt2-124m.yaml", "ok": true, "training": {"batch": 2, "seq": 128, "precision": "bf16", "checkpointing": "none"}, "peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "device_total_used_bytes": 1}`
	if err := os.WriteFile(path, []byte(rec+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loraGaps are LoRA grid lines outside issue 15's targets, with what is
// known of them (docs/accuracy.md, "LoRA with peft").
var loraGaps = map[string][]int{
	// 11% over in reserved with peak allocated exact: the measured run's
	// first step holds two segments more (77.6 MB, the tied embedding's
	// bf16 copy for the lm_head, and 12.6 MB, the last attention
	// c_proj's scaled adapter output) and its backward's cuBLAS workspace
	// lands in a 50 MB segment behind a dropout mask instead of splitting
	// a 1.6 GB logits block, so its second step does not grow; the
	// simulation's does. The allocator history
	// (bench/results/lora-traces/c2-trace.json.gz, from
	// bench/torch/trace-lora.sh) differs from the simulation's order in
	// hundreds of places (autocast casts the weight before the input,
	// GELU's 0.5·x comes first, GPT-2 keeps ln_1/ln_2's output until the
	// residual add); none of them alone moves this line.
	"specs/gpt2-124m.yaml --batch 8 --seq 1024 --precision amp-bf16 --rank 64 --targets all": {Reserved, Device},
}

// TestLoRAAccuracy holds the LoRA grid measured on the H100 with peft
// (results/2026-11-23-h100-lora.jsonl) to issue 15's targets: peak
// allocated within 3%, reserved and device within 6%, nothing more than
// UnderLimit under, except the listed gaps (which may only be over).
func TestLoRAAccuracy(t *testing.T) {
	rep, err := Compare("..", []string{"results/2026-11-23-h100-lora.jsonl"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tuning.N != 15 {
		t.Fatalf("%d configurations predicted, want the 15 of the grid that ran and are modelled", rep.Tuning.N)
	}
	worst := [NumMetrics]float64{0.03, 0.06, 0.06}
	for _, r := range rep.Rows {
		for m := 0; m < NumMetrics; m++ {
			e := r.Err[m]
			known := false
			for _, x := range loraGaps[r.Label] {
				known = known || x == m
			}
			if e < -UnderLimit || (abs(e) > worst[m] && !known) {
				t.Errorf("%s: %s error %+.1f%%", r.Label, MetricNames[m], 100*e)
			}
		}
	}
}

// loraRaced is the one line of the LoRA tuning set (2 x H100) on which
// DDP's rank 0 kept its construction bucket past the rebuild: train.py's
// pause then was nvidia-smi alone, shorter than it said (it now
// synchronizes and sleeps 0.2 s; docs/multigpu.md). TestLoRAMultiGPU checks
// the race in the record itself and holds the line to memplan's no-pause
// prediction.
const loraRaced = "specs/tinyllama-1.1b.yaml --mode ddp --batch 4 --seq 1024 --precision bf16 --lora 64 --targets all --checkpointing every-block"

// TestLoRAMultiGPU holds LoRA under DDP, ZeRO-1 and FSDP2 on 2 x H100 (the
// twelfth session's tuning set and its three held-out files, predictions
// committed before they were measured) to issue 12's targets, busiest
// rank against memplan.
func TestLoRAMultiGPU(t *testing.T) {
	const tuning = "results/2026-11-26-h100x2-lora.jsonl"
	raw, err := os.ReadFile(filepath.Join("..", "bench", tuning))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var kept, raced []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Label string `json:"label"`
			Ranks []struct {
				DDP   map[string]any `json:"ddp"`
				Steps []struct {
					MaxAllocated int64 `json:"max_allocated"`
				} `json:"steps"`
			} `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(r.Label) != loraRaced {
			kept = append(kept, line)
			continue
		}
		// Rank 0's second step peaked higher than rank 1's by exactly the
		// construction bucket (its bytes as DDP logged them).
		bucket, _ := r.Ranks[0].DDP["bucket_sizes"].(string)
		diff := r.Ranks[0].Steps[1].MaxAllocated - r.Ranks[1].Steps[1].MaxAllocated
		if fmt.Sprint(diff) != bucket {
			t.Fatalf("%s: rank 0 - rank 1 at step 1 is %d B, DDP's construction bucket %s B: not the race", loraRaced, diff, bucket)
		}
		raced = append(raced, strings.Replace(line, `"step_pause": 0.2`, `"step_pause": 0`, 1))
	}
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if len(raced) != 1 || !strings.Contains(raced[0], `"step_pause": 0,`) {
		t.Fatalf("the raced line: %d found", len(raced))
	}
	held, err := filepath.Glob("results/2026-11-26-lora-*heldout*-h100x2.jsonl")
	if err != nil || len(held) != 3 {
		t.Fatalf("held-out files %v: %v", held, err)
	}
	rep, err := Compare("..", []string{write("tuning.jsonl", kept)}, held)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tuning.N != 7 || rep.HeldOut.N != 13 {
		t.Fatalf("%d tuning and %d held-out configurations; want 7 and 13", rep.Tuning.N, rep.HeldOut.N)
	}
	checkMultiGPU(t, rep, map[gapKey]bool{})
	rep, err = Compare("..", []string{write("raced.jsonl", raced)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		for m := 0; m < NumMetrics; m++ {
			if e := r.Err[m]; e < -UnderLimit || abs(e) > distTargets.Worst[m] {
				t.Errorf("%s with no pause: %s %+.1f%%", r.Label, MetricNames[m], 100*e)
			}
		}
	}
}
