package alloc

import (
	"fmt"
	"os"
	"testing"
)

// TestVADebug sets the address model's placement of a history's segments
// beside the addresses the driver gave them: MEMPLAN_VA=events.json.gz
// (snap2events.py's output). Each segment_alloc is placed by the model and
// each segment_free returned to it; both columns are MiB below the
// highest address seen, so that their orders can be compared; last, how
// many pairs of the large pool's segments the two order differently.
// MEMPLAN_VA_NCCL=UP,PEER places NCCL's chunks, MEMPLAN_VA_CUBLAS=N opens
// cuBLAS's room before segment N (vaSpace.openRoom).
func TestVADebug(t *testing.T) {
	ev := readEvents(t, debugInput(t, "MEMPLAN_VA"))
	var v vaSpace
	v.reset()
	type seg struct {
		model, real, size int64
		chunk             int32
	}
	live := map[int64]seg{}
	var top int64
	for _, e := range ev {
		if e[0] == "segment_alloc" {
			top = max(top, int64(e[1].(float64))+int64(e[2].(float64)))
		}
	}
	var model, real []int64 // each segment's, for the count of pairs out of order
	n := 0
	// MEMPLAN_VA_NCCL=UP,PEER: NCCL's first communicator comes up before
	// segment UP and its first point-to-point connection before segment
	// PEER (vaSpace.communicatorUp, peerConnected); -1 for never.
	hooks := [2]int{-1, -1}
	fmt.Sscanf(os.Getenv("MEMPLAN_VA_NCCL"), "%d,%d", &hooks[0], &hooks[1])
	cublas := -1
	fmt.Sscan(os.Getenv("MEMPLAN_VA_CUBLAS"), &cublas)
	for i, e := range ev {
		addr, size := int64(e[1].(float64)), int64(e[2].(float64))
		switch e[0] {
		case "segment_alloc":
			if n == hooks[0] {
				v.communicatorUp()
			}
			if n == hooks[1] {
				v.peerConnected()
			}
			if n == cublas {
				v.openRoom(CuBLAS)
			}
			m, c := v.alloc(size)
			live[addr] = seg{m, addr, size, c}
			if size > 2<<20 { // the small pool's segments sit apart
				model, real = append(model, m), append(real, addr)
			}
			fmt.Printf("seg %3d ev %6d %6d MiB  model %8.0f  real %8.0f  %v\n", n, i, size>>20, float64(vaTop-m)/(1<<20), float64(top-addr)/(1<<20), e[3])
			n++
		case "segment_free":
			if s, ok := live[addr]; ok {
				v.free(s.model, s.size, s.chunk)
				delete(live, addr)
			}
		}
	}
	fmt.Printf("pairs out of order: %d of %d segments\n", pairsOutOfOrder(model, real), len(model))
}

// pairsOutOfOrder counts the pairs of segments the address model (model)
// orders otherwise than the driver's addresses (real), segment for segment.
func pairsOutOfOrder(model, real []int64) int {
	out := 0
	for i := range model {
		for j := i + 1; j < len(model); j++ {
			if (model[i] < model[j]) != (real[i] < real[j]) {
				out++
			}
		}
	}
	return out
}
