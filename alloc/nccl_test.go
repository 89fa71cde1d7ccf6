package alloc

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestNCCLChunks replays the probe bench/torch/dist/va_nccl.py ran on two
// H200s (bench/results/2026-11-28-h200x2-va-nccl/, rank 0): runs of new
// 32 MiB segments after each step of bringing NCCL up. Where the default
// group's first collective is a broadcast, as DDP's construction makes it,
// NCCL's chunks mapped there (communicatorUp) with the lower one freed at
// the first point-to-point connection (peerConnected) order the segments
// almost as the driver did, and far otherwise without them. Where it is
// an all_reduce, the lower room came free at the first broadcast on
// another group instead, which the model does not know: logged, not
// held (docs/allocator.md §8).
func TestNCCLChunks(t *testing.T) {
	for _, c := range []struct {
		file     string
		up, peer int  // the segments before which the collective and the connection run
		held     bool // hold the model to a tenth of the pairs out of order without the chunks
	}{
		{"first-broadcast", 82, 325, true},
		{"default", 82, 324, false},
	} {
		ev := readEvents(t, filepath.Join("testdata", "va-nccl", c.file+".json.gz"))
		count := func(hooks bool) int {
			var v vaSpace
			v.reset()
			var model, real []int64
			n := 0
			for _, e := range ev {
				if e[0] != "segment_alloc" {
					continue
				}
				if hooks && n == c.up {
					v.communicatorUp()
				}
				if hooks && n == c.peer {
					v.peerConnected()
				}
				addr, size := int64(e[1].(float64)), int64(e[2].(float64))
				m, _ := v.alloc(size)
				if size > 2<<20 {
					model, real = append(model, m), append(real, addr)
				}
				n++
			}
			return pairsOutOfOrder(model, real)
		}
		with, without := count(true), count(false)
		if c.held && with*10 > without {
			t.Errorf("%s: %d pairs out of order with NCCL's chunks, %d without: want a tenth", c.file, with, without)
		}
		t.Logf("%s: %d pairs out of order with NCCL's chunks, %d without", c.file, with, without)
	}
}

// TestNCCLHostMemory replays bench/torch/addr/va_maps.py's processes
// (alloc/testdata/va-maps: a 16 MiB anchor, 1,200 MiB of 44 MiB segments,
// with two ranks a send and a receive, cuBLAS's first product and its
// 32 MiB workspace, then twelve 64 MiB segments; rank 0 of two H200s,
// bench/results/2026-11-28-h200x2-va-maps) through the address model.
// Without the send and receive the context's freed reservation is
// cuBLAS's room and the first three 64 MiB segments go there, in the run
// as in the model. With them, NCCL's set-up maps host memory into that
// reservation first (vaSpace.mapHost): the run put every 64 MiB segment
// below all the others, and so does the model, which without that host
// memory would put NCCL's held chunk into the reservation and order the
// segments further from the run's.
func TestNCCLHostMemory(t *testing.T) {
	runs := vaMapsRuns(t)
	room := func(label string, host bool) (pairs, inRoom, realInRoom int) {
		r, ok := runs[label]
		if !ok {
			t.Fatalf("no run %s", label)
		}
		defer func(old bool) { hostMemoryMapped = old }(hostMemoryMapped)
		hostMemoryMapped = host
		var v vaSpace
		v.reset()
		anchor, _ := v.alloc(16 << 20)
		model, real := []int64{anchor}, []int64{r.Anchor}
		var firstPre, realFirstPre int64
		seq := false
		for _, s := range r.Segments {
			kind, mib, addr := s[0].(string), int64(s[1].(float64)), int64(s[2].(float64))
			if kind == "seq" && !seq {
				seq = true
				if strings.HasPrefix(label, "p2p") {
					v.communicatorUp()
					v.peerConnected()
				}
				v.openRoom(CuBLAS)
				v.alloc(32 << 20) // the workspace
			}
			m, _ := v.alloc(mib << 20)
			if kind == "pre" && firstPre == 0 {
				firstPre, realFirstPre = m, addr
			}
			if kind == "seq" && m > firstPre {
				inRoom++
			}
			if kind == "seq" && addr > realFirstPre {
				realInRoom++
			}
			model, real = append(model, m), append(real, addr)
		}
		return pairsOutOfOrder(model, real), inRoom, realInRoom
	}
	for _, c := range []struct {
		label string
		want  int // 64 MiB segments in the freed reservation, in the run
	}{
		{"pre1200", 3},
		{"p2p-pre1200", 0},
	} {
		with, in, real := room(c.label, true)
		without, inWithout, _ := room(c.label, false)
		if real != c.want || in != c.want {
			t.Errorf("%s: %d of the 64 MiB segments in the freed reservation in the model, %d in the run, want %d", c.label, in, real, c.want)
		}
		if with > without {
			t.Errorf("%s: %d pairs out of order with NCCL's host memory, %d without", c.label, with, without)
		}
		t.Logf("%s: %d pairs out of order and %d segments in the reservation with NCCL's host memory, %d and %d without", c.label, with, in, without, inWithout)
	}
}

// vaMapsRuns reads alloc/testdata/va-maps: each run's anchor and its
// segments as [kind, MiB, address].
func vaMapsRuns(t *testing.T) map[string]vaMapsRun {
	t.Helper()
	runs := map[string]vaMapsRun{}
	for dec := json.NewDecoder(openGzip(t, filepath.Join("testdata", "va-maps", "va-maps.jsonl.gz"))); dec.More(); {
		var r vaMapsRun
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		runs[r.Label] = r
	}
	return runs
}

type vaMapsRun struct {
	Label    string
	Anchor   int64
	Segments [][3]any
}

// TestReplayPipelineStages replays pipeline stages' allocator histories,
// recorded on H200s with every rank's snapshot, through the allocator and
// its address model, with NCCL's first communicator, its first
// point-to-point connection and cuBLAS's first product at the events where
// the histories have them (the first event of the data-parallel shape
// check or of the pipeline's warm-up, the first of that warm-up, the first
// of the forward's first product). Since NCCL's set-up frees the context's
// reservation and its host memory takes it (communicatorUp, mapHost;
// docs/allocator.md §8, thirty-seventh session) the model reserves what
// each of these stages reserved, to the MiB; before, where the
// reservation freed at cuBLAS's first product was room for the forward's
// segments, it missed all four: 11,042, 7,460, 11,894 and 10,464 MiB.
func TestReplayPipelineStages(t *testing.T) {
	for _, c := range []struct {
		file              string
		up, peer, product int
		reserved          int64 // MiB, the history's peak
	}{
		// Held-out set 59's GPipe stages (Llama 4's test shape, Maverick's).
		{"2026-11-28-h200x2-heldout-59/histories/c1-rank1.json.gz", 61, 61, 147, 12182},
		{"2026-11-28-h200x2-heldout-59/histories/c3-rank1.json.gz", 55, 55, 144, 7716},
		// Llama 4's 1F1B over pp 2 × DDP dp 2, the last stage.
		{"2026-11-28-h200x4-pp-llama4-traces/sd-c1-rank2.json.gz", 59, 84, 174, 11754},
		// Held-out set 53's Maverick GPipe line, the first stage.
		{"2026-11-28-h200x2-heldout-53/histories/c1-rank0.json.gz", 54, 54, 101, 9952},
	} {
		t.Run(c.file, func(t *testing.T) {
			peak := func(host bool) int64 {
				defer func(old bool) { hostMemoryMapped = old }(hostMemoryMapped)
				hostMemoryMapped = host
				a := New(Default())
				var top int64
				replayEach(t, filepath.Join("..", "bench", "results", c.file), a, func(i int) {
					if i == c.up {
						a.CommunicatorUp()
					}
					if i == c.peer { // the same event as up where the warm-up is the first collective
						a.PeerConnected()
					}
					if i == c.product {
						a.LibraryLoaded(CuBLAS)
					}
					top = max(top, a.Reserved())
				})
				return max(top, a.Reserved()) >> 20
			}
			got, before := peak(true), peak(false)
			if got != c.reserved {
				t.Errorf("reserved %d MiB, the history %d", got, c.reserved)
			}
			t.Logf("reserved %d MiB (%d without NCCL's host memory), the history %d", got, before, c.reserved)
		})
	}
}
