package alloc

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReplayDebug replays an allocator history through the model:
// MEMPLAN_REPLAY=events.json.gz (bench/torch/dist/snap2events.py's output,
// the {"events": …} files of bench/results/*-trace/, or memplan's own from
// estimate's TestTraceDebug with MEMPLAN_TRACE_OUT).
// MEMPLAN_REPLAY_FIRST=other.json.gz replays another history first, with
// its blocks still held (memplan's load before PyTorch's steps, say: the
// thirteenth session found FSDP2's wrapping that way, docs/multigpu.md).
// Each event's stream is the " sN" at the end of its label; a
// segment_free replays torch.cuda.empty_cache. It prints every segment the
// model maps of at least MEMPLAN_REPLAY_MIB MiB (default 100) beside the
// history's own, and the reserved totals.
func TestReplayDebug(t *testing.T) {
	path := os.Getenv("MEMPLAN_REPLAY")
	if path == "" {
		t.Skip("set MEMPLAN_REPLAY=events.json.gz")
	}
	minMiB := int64(100)
	fmt.Sscan(os.Getenv("MEMPLAN_REPLAY_MIB"), &minMiB)
	a := New(Default())
	streams := map[string]Stream{}
	var real, realPeak, peak int64
	replay := func(file, tag string) {
		// A list of events, or {"events": [...], "segments": [...]} as the
		// sessions' snapshot conversions store them (bench/results/*-trace/).
		var raw json.RawMessage
		if err := json.NewDecoder(openGzip(t, file)).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		var ev [][]any
		if err := json.Unmarshal(raw, &ev); err != nil {
			var wrapped struct{ Events [][]any }
			if err2 := json.Unmarshal(raw, &wrapped); err2 != nil {
				t.Fatal(err)
			}
			ev = wrapped.Events
		}
		live := map[string]Block{}
		for i, e := range ev {
			key := fmt.Sprint(tag, e[1])
			size, label := int64(e[2].(float64)), fmt.Sprint(e[3])
			st := "" // the " sN" a history's label ends with, if any
			if k := strings.LastIndex(label, " s"); k >= 0 && strings.Trim(label[k+2:], "0123456789") == "" && k+2 < len(label) {
				st = label[k:]
			}
			s, ok := streams[st]
			if !ok {
				s = Stream(len(streams))
				streams[st] = s
			}
			switch e[0] {
			case "alloc":
				before := a.Reserved()
				live[key] = a.Malloc(size, s)
				peak = max(peak, a.Reserved())
				if grew := a.Reserved() - before; grew >= minMiB<<20 {
					fmt.Printf("%s %6d model maps %5d MiB for %5d MiB  %s\n", tag, i, grew>>20, size>>20, label)
				}
			case "free_completed":
				if b, ok := live[key]; ok {
					a.Free(b)
					delete(live, key)
				}
			case "segment_alloc":
				real += size
				realPeak = max(realPeak, real)
				if size >= minMiB<<20 {
					fmt.Printf("%s %6d history maps %5d MiB  %s\n", tag, i, size>>20, label)
				}
			case "segment_free":
				real -= size
				a.ReleaseCached()
			}
		}
	}
	if first := os.Getenv("MEMPLAN_REPLAY_FIRST"); first != "" {
		replay(first, "first")
	}
	replay(path, "replay")
	fmt.Printf("model: reserved peak %d MiB, end %d MiB; history's segments: peak %d MiB, end %d MiB\n",
		peak>>20, a.Reserved()>>20, realPeak>>20, real>>20)
}
