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
// [--rank R] [--targets T] [--dropout P] [--adapter-dtype D] [--dp N]
// [--zero Z] [--optimizer O] [--tp N] [--sp] [--loss-parallel] [--cp N]
// [--pp N] [--grad-accum M] [--bucket-view] [--ep N] [--ep-skew S] [--step-pause S]
// [--fsdp-init I] [--fsdp-root R] [--reshard-after-forward N]" (paths relative to
// this package's directory; MEMPLAN_TRACE_HF=1 reads a transformers
// config). With MEMPLAN_TRACE_OUT=file.json.gz it writes them instead in
// the event format of bench/torch/measure.py's --trace, for
// bench/torch/align.py to set beside a real trace. Where one estimate
// simulates several ranks (pipeline stages, expert parallelism's
// receiving and sending ranks), MEMPLAN_TRACE_LAST=1 keeps the last and
// MEMPLAN_TRACE_FIRST=1 the first, MEMPLAN_TRACE_RANK=N the N-th (1-based;
// otherwise their events follow each other).
// MEMPLAN_TRACE_STEPS=1 simulates steps until the cache repeats, as an
// untraced estimate does (each simulated in full: a trace otherwise keeps
// two steps, stepsComparable).
// MEMPLAN_TRACE_LOAD=1 writes only the load (the state before the first
// step), for alloc's TestReplayDebug to replay before a real history
// (MEMPLAN_REPLAY_FIRST).
// The address model's events (addressEvent) are written too, as
// ["library", 0, L, ""], ["communicator_up", 0, 0, ""] and
// ["peer_connected", 0, 0, ""], and the simulation's empty_cache
// (emptyCache) as ["empty_cache", 0, 0, ""], which TestReplayDebug
// replays, so that a simulated history replays to the estimate's reserve
// (TestHistoryReplaysToEstimate).
func TestTraceDebug(t *testing.T) {
	f := strings.Fields(os.Getenv("MEMPLAN_TRACE"))
	if len(f) == 0 {
		t.Skip(`set MEMPLAN_TRACE="../specs/x.yaml [--batch N ...]"`)
	}
	o, err := argsOverrides(f[1:])
	if err != nil {
		t.Fatal(err)
	}
	load := model.Load
	if os.Getenv("MEMPLAN_TRACE_HF") != "" {
		load = model.LoadHF
	}
	s, err := load(f[0], *o)
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("MEMPLAN_TRACE_OUT")
	var ev [][]any
	ids := map[*tensor]int{}
	ranks, next := 0, 0
	estimateWith(s, func(*sim) {}, func(sm *sim) {
		if ranks++; ranks > 1 && os.Getenv("MEMPLAN_TRACE_FIRST") != "" {
			return // keep the first simulated rank's (a skewed EP run's receiving rank)
		}
		if n := os.Getenv("MEMPLAN_TRACE_RANK"); n != "" && n != fmt.Sprint(ranks) {
			return // keep the n-th simulated rank's (1-based: a pipeline's stages times EP's kinds)
		}
		if os.Getenv("MEMPLAN_TRACE_LAST") != "" {
			ev, ids = ev[:0], map[*tensor]int{} // keep the last simulated rank's (a skewed EP run's sending rank)
		}
		loadOnly := os.Getenv("MEMPLAN_TRACE_LOAD") != ""
		sm.traceSteps = os.Getenv("MEMPLAN_TRACE_STEPS") != "" // steps until the cache repeats, simulated in full
		sm.traceAddr = func(kind evKind, n int64) {
			if loadOnly && sm.phase.Stage != "load" {
				return
			}
			name := map[evKind]string{evLibrary: "library", evCommUp: "communicator_up", evPeer: "peer_connected", evEmptyCache: "empty_cache"}[kind]
			if out == "" {
				fmt.Printf("%s %d  [%s %d]\n", name, n, sm.phase.Stage, sm.phase.Iteration)
				return
			}
			ev = append(ev, []any{name, 0, n, ""})
		}
		sm.trace = func(x *tensor, alloc bool) {
			if loadOnly && sm.phase.Stage != "load" {
				return
			}
			if out == "" {
				a := "free "
				if alloc {
					a = "alloc"
				}
				where := ""
				if x.blk.Valid() && x.bytes() >= 1<<20 {
					g, off, n := sm.al.a.Placement(x.blk)
					where = fmt.Sprintf(" seg %d (%d MiB) off %d MiB", g, n>>20, off>>20)
				}
				fmt.Printf("%s %d live %8.1f  %s  [%s %d]%s\n", a, x.bytes(), float64(sm.al.allocated)/(1<<20), x.label(), sm.phase.Stage, sm.phase.Iteration, where)
				return
			}
			if alloc {
				// A tensor's memory is reused from the slab once it has
				// died: each allocation gets an id of its own (len(ids)
				// would repeat one once a tensor comes back).
				next++
				ids[x] = next
				st := 0
				if x.blk.Valid() {
					st = int(sm.al.a.StreamOf(x.blk))
				}
				ev = append(ev, []any{"alloc", ids[x], x.bytes(), fmt.Sprintf("%s [%s] s%d", x.label(), sm.phase.Stage, st)})
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

// argsOverrides reads memplan's command-line flags (the subset the tests
// use) into model.Overrides.
func argsOverrides(f []string) (*model.Overrides, error) {
	var o model.Overrides
	strs := map[string]*string{"--precision": &o.Precision, "--checkpointing": &o.Checkpointing,
		"--attention": &o.Attention, "--alloc-conf": &o.AllocConf, "--device": &o.Dev,
		"--targets": &o.LoRATargets, "--dropout": &o.LoRADropout, "--adapter-dtype": &o.LoRAAdapterDtype,
		"--zero": &o.Zero, "--optimizer": &o.Optimizer, "--ep-skew": &o.EPSkew, "--step-pause": &o.StepPause, "--fsdp-init": &o.FSDPInit, "--fsdp-root": &o.FSDPRoot,
		"--pp-schedule": &o.PPSchedule}
	ints := map[string]*int64{"--batch": &o.Batch, "--seq": &o.Seq, "--rank": &o.LoRA, "--dp": &o.DP,
		"--tp": &o.TP, "--cp": &o.CP, "--pp": &o.PP, "--grad-accum": &o.GradAccum, "--ep": &o.EP, "--pp-virtual": &o.PPVirtual,
		"--steps": &o.Steps, "--reshard-after-forward": &o.ReshardAfterForward}
	bools := map[string]*bool{"--sp": &o.SP, "--loss-parallel": &o.LossParallel, "--bucket-view": &o.BucketView,
		"--loss-outside-autocast": &o.LossOutsideAutocast}
	for i := 0; i < len(f); i += 2 {
		if p, ok := bools[f[i]]; ok {
			*p = true
			i--
		} else if i+1 >= len(f) {
			return nil, fmt.Errorf("flag %s needs a value", f[i])
		} else if p, ok := strs[f[i]]; ok {
			*p = f[i+1]
		} else if p, ok := ints[f[i]]; ok {
			if _, err := fmt.Sscan(f[i+1], p); err != nil {
				return nil, fmt.Errorf("flag %s: %w", f[i], err)
			}
		} else {
			return nil, fmt.Errorf("flag %s not handled here", f[i])
		}
	}
	return &o, nil
}
