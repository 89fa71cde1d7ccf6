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
// segment_free replays torch.cuda.empty_cache. MEMPLAN_REPLAY_ADDR=1
// orders segments by the history's own addresses instead of the address
// model (the n-th segment the model makes takes the n-th address the
// history mapped). MEMPLAN_REPLAY_PLACES=1
// prints the allocations of 1 MiB or more the model places other than the
// history did (another segment, by the order segments were made, or
// another offset), the first with the history's free blocks beside it. It
// prints every segment the
// model maps of at least MEMPLAN_REPLAY_MIB MiB (default 100) beside the
// history's own, and the reserved totals. MEMPLAN_REPLAY_AT=N[,M...]
// prints the large pool's free blocks before those events, and with
// MEMPLAN_REPLAY_BLOCKS=1 every block of those segments in address order,
// an allocated one with the event that made it. MEMPLAN_REPLAY_CUBLAS=N
// opens cuBLAS's room before event N, MEMPLAN_REPLAY_NCCL=UP,PEER NCCL's
// chunks (Allocator.LibraryLoaded, CommunicatorUp, PeerConnected), with
// MEMPLAN_REPLAY_NCCL_LOW=1 a low chunk beside them (lowChunk); a
// history estimate's TestTraceDebug wrote carries those events itself
// ("library", "communicator_up", "peer_connected"), and the simulation's
// torch.cuda.empty_cache ("empty_cache": Allocator.ReleaseCached, as
// FSDP2's wrap of a model on the GPU ends), which
// MEMPLAN_REPLAY_SKIP=library[,…] leaves out.
// Run it with -count=1: go test's cache can answer a rewritten history of
// the same path with the last one's result (the thirty-sixth session's
// bisect.py runs did, until then).
func TestReplayDebug(t *testing.T) {
	path := debugInput(t, "MEMPLAN_REPLAY")
	minMiB := int64(100)
	fmt.Sscan(os.Getenv("MEMPLAN_REPLAY_MIB"), &minMiB)
	a := New(Default())
	streams := map[string]Stream{}
	var real, realPeak, peak int64
	replay := func(file, tag string) {
		ev := readEvents(t, file)
		if os.Getenv("MEMPLAN_REPLAY_ADDR") != "" {
			// The history's own segment addresses as the order key,
			// instead of the address model.
			var addrs []int64
			for _, e := range ev {
				if e[0] == "segment_alloc" {
					addrs = append(addrs, int64(e[1].(float64)))
				}
			}
			a.addr = func(n int) int64 {
				if n < len(addrs) {
					return addrs[n]
				}
				return int64(n)
			}
		}
		live := map[string]Block{}
		born := map[Block]int{} // the event that allocated each live block
		at := map[int]bool{}
		for _, f := range strings.Split(os.Getenv("MEMPLAN_REPLAY_AT"), ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err == nil {
				at[n] = true
			}
		}
		place := newPlaces(os.Getenv("MEMPLAN_REPLAY_PLACES") != "")
		// MEMPLAN_REPLAY_NCCL=UP,PEER: NCCL's first communicator comes up
		// before event UP, its first point-to-point connection before
		// event PEER (Allocator.CommunicatorUp, PeerConnected).
		hooks := [2]int{-1, -1}
		fmt.Sscanf(os.Getenv("MEMPLAN_REPLAY_NCCL"), "%d,%d", &hooks[0], &hooks[1])
		cublas := -1 // MEMPLAN_REPLAY_CUBLAS: the event cuBLAS's first product precedes
		fmt.Sscan(os.Getenv("MEMPLAN_REPLAY_CUBLAS"), &cublas)
		skip := map[string]bool{}
		for _, k := range strings.Split(os.Getenv("MEMPLAN_REPLAY_SKIP"), ",") {
			skip[k] = true
		}
		for i, e := range ev {
			if skip[fmt.Sprint(e[0])] {
				continue
			}
			if at[i] {
				printFree(a, tag, i, ev, born)
			}
			if i == hooks[0] {
				a.CommunicatorUp()
				if os.Getenv("MEMPLAN_REPLAY_NCCL_LOW") != "" {
					lowChunk(a)
				}
			}
			if i == hooks[1] {
				a.PeerConnected()
			}
			if i == cublas {
				a.LibraryLoaded(CuBLAS)
			}
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
			case "library":
				a.LibraryLoaded(Library(size))
			case "communicator_up":
				a.CommunicatorUp()
			case "peer_connected":
				a.PeerConnected()
			case "empty_cache": // a simulated history's (estimate's TestTraceDebug)
				a.ReleaseCached()
			case "alloc":
				before := a.Reserved()
				live[key] = a.Malloc(size, s)
				born[live[key]] = i
				place.alloc(a, live[key], i, int64(e[1].(float64)), size, label)
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
				place.segment(int64(e[1].(float64)), size)
				real += size
				realPeak = max(realPeak, real)
				if size >= minMiB<<20 {
					fmt.Printf("%s %6d history maps %5d MiB  %s\n", tag, i, size>>20, label)
				}
			case "segment_free":
				place.segmentFree(int64(e[1].(float64)))
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

// printFree prints the large-pool segments that hold free blocks, each
// with its free blocks in MiB, read from the allocator's layout (with
// MEMPLAN_REPLAY_BLOCKS set, every block, an allocated one as
// MiB@event:label from ev and born).
func printFree(a *Allocator, tag string, i int, ev [][]any, born map[Block]int) {
	all := os.Getenv("MEMPLAN_REPLAY_BLOCKS") != ""
	l := a.AppendLayout(nil, func(b Block) int64 { return int64(born[b]) + 1 })
	fmt.Printf("%s %6d free blocks (segment MiB: free MiB...):\n", tag, i)
	for k := 3; k < len(l); {
		size, small := l[k+1], l[k+3] == 1
		k += 5
		var free, blocks []string
		for sum := int64(0); sum < size; k += 4 {
			sum += l[k+1]
			mib := float64(l[k+1]) / (1 << 20)
			if st := l[k+3]; st < 0 {
				free = append(free, fmt.Sprintf("%.1f", mib))
				blocks = append(blocks, fmt.Sprintf("[free %.1f]", mib))
			} else {
				lab := fmt.Sprint(ev[st-1][3])
				blocks = append(blocks, fmt.Sprintf("%.1f@%d:%s", mib, st-1, lab[max(0, len(lab)-40):]))
			}
		}
		if small || len(free) == 0 {
			continue
		}
		if all {
			free = blocks
		}
		fmt.Printf("   %6.1f: %s\n", float64(size)/(1<<20), strings.Join(free, " "))
	}
}

// places compares where the model and the history put each allocation of
// 1 MiB or more (MEMPLAN_REPLAY_PLACES): segments are numbered in the order
// each side made them, the history's read from its addresses.
type places struct {
	on       bool
	shown    int
	segs     []int64 // the history's segment addresses, in the order made (0: freed)
	segBytes []int64
}

func newPlaces(on bool) *places { return &places{on: on} }

func (p *places) segment(addr, size int64) {
	if p.on {
		p.segs, p.segBytes = append(p.segs, addr), append(p.segBytes, size)
	}
}

func (p *places) segmentFree(addr int64) {
	for i, s := range p.segs {
		if s == addr {
			p.segs[i] = 0
		}
	}
}

// where is the history's segment (its index) and offset of addr.
func (p *places) where(addr int64) (int, int64) {
	for i, s := range p.segs {
		if s != 0 && addr >= s && addr < s+p.segBytes[i] {
			return i, addr - s
		}
	}
	return -1, 0
}

func (p *places) alloc(a *Allocator, b Block, i int, addr, size int64, label string) {
	if !p.on || size < 1<<20 || p.shown >= 40 {
		return
	}
	g, off, n := a.Placement(b)
	rg, roff := p.where(addr)
	if g == rg && off == roff {
		return
	}
	p.shown++
	fmt.Printf("place %6d %8.1f MiB  model seg %d (%d MiB) +%.1f  history seg %d (%d MiB) +%.1f  %s\n", i, float64(size)/(1<<20),
		g, n>>20, float64(off)/(1<<20), rg, p.segBytes[max(rg, 0)]>>20, float64(roff)/(1<<20), label)
}

// lowChunk adds, as the newest chunk of the address model, one far below
// every other with a free 16 MiB piece, a held 2 MiB one and a free 2 MiB
// one: where the four-H100 GPT-OSS tp 4 history put its first segments
// of 16 and 2 MiB after NCCL came up (0x2dc0c00000 and 18 MiB above it,
// PyTorch's other segments near 0x7fb…), as two pipeline histories on
// H200s did (bench/results/2026-11-28-h200x4-pp-llama4-traces/sc-c1-*).
// MEMPLAN_REPLAY_NCCL_LOW=1 adds it at MEMPLAN_REPLAY_NCCL's first event, a
// trial the thirty-ninth session made and did not keep in the model
// (docs/allocator.md §8).
func lowChunk(a *Allocator) {
	v := &a.va
	at := v.frontier - 64<<30
	c := v.addChunk(at, 20<<20)
	v.chunks[c].live = 1
	v.chunks[c].head = v.newPiece(at, 16<<20, v.newPiece(at+18<<20, 2<<20, 0))
	v.update(c)
}

// readEvents reads a history's events: a list, or {"events": [...],
// "segments": [...]} as the sessions' snapshot conversions store them
// (bench/results/*-trace/).
func readEvents(t *testing.T, file string) [][]any {
	t.Helper()
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
	return ev
}

// debugInput is the history a debug test reads, named by the environment
// variable env; the test is skipped without one.
func debugInput(t *testing.T, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Skip("set " + env + "=events.json.gz")
	}
	return path
}
