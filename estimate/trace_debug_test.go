package estimate

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestTraceDebug prints the simulator's allocations for
// MEMPLAN_TRACE="spec.yaml [--batch N] [--seq N] [--precision P]
// [--checkpointing C] [--attention A] [--alloc-conf S] [--device D]
// [--rank R] [--targets T] [--dropout P] [--adapter-dtype D]" (paths relative to
// this package's directory; MEMPLAN_TRACE_HF=1 reads a transformers
// config). With MEMPLAN_TRACE_OUT=file.json.gz it writes them instead in
// the event format of bench/torch/measure.py's --trace, for
// bench/torch/align.py to set beside a real trace.
func TestTraceDebug(t *testing.T) {
	f := strings.Fields(os.Getenv("MEMPLAN_TRACE"))
	if len(f) == 0 {
		t.Skip(`set MEMPLAN_TRACE="../specs/x.yaml [--batch N ...]"`)
	}
	var o model.Overrides
	for i := 1; i+1 < len(f); i += 2 {
		v := f[i+1]
		var n int64
		fmt.Sscan(v, &n)
		switch f[i] {
		case "--batch":
			o.Batch = n
		case "--seq":
			o.Seq = n
		case "--precision":
			o.Precision = v
		case "--checkpointing":
			o.Checkpointing = v
		case "--attention":
			o.Attention = v
		case "--alloc-conf":
			o.AllocConf = v
		case "--device":
			o.Dev = v
		case "--rank", "--lora":
			o.LoRA = n
		case "--targets", "--lora-targets":
			o.LoRATargets = v
		case "--dropout", "--lora-dropout":
			o.LoRADropout = v
		case "--adapter-dtype", "--lora-adapter-dtype":
			o.LoRAAdapterDtype = v
		default:
			t.Fatalf("flag %s not handled here", f[i])
		}
	}
	load := model.Load
	if os.Getenv("MEMPLAN_TRACE_HF") != "" {
		load = model.LoadHF
	}
	s, err := load(f[0], o)
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("MEMPLAN_TRACE_OUT")
	var ev [][]any
	ids := map[*tensor]int{}
	estimateWith(s, func(*sim) {}, func(sm *sim) {
		sm.trace = func(x *tensor, alloc bool) {
			if out == "" {
				a := "free "
				if alloc {
					a = "alloc"
				}
				fmt.Printf("%s %d live %8.1f  %s  [%s]\n", a, x.bytes(), float64(sm.al.allocated)/(1<<20), x.label(), sm.phase.Stage)
				return
			}
			if alloc {
				ids[x] = len(ids) + 1
				ev = append(ev, []any{"alloc", ids[x], x.bytes(), x.label() + " [" + sm.phase.Stage + "]"})
			} else {
				ev = append(ev, []any{"free_completed", ids[x], x.bytes(), x.label()})
			}
		}
	})
	if out == "" {
		return
	}
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(w)
	if err := json.NewEncoder(z).Encode(ev); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
