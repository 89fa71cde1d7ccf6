package model

import (
	"fmt"
	"strings"
	"testing"
)

// TestInterleavedOrder checks the compute actions of each rank against
// the order torch's ScheduleInterleaved1F1B makes (_get_1f1b_rank_ops,
// no-ops left out): the first two cases are the compute actions of the
// schedule torch's get_schedule_ops printed for pp 2, 4 micro-batches in
// pytorch/pytorch#172833; the others worked out from its warm-up count
// (v−1)·perRound + 2·(pp−1−rank) and its stage indices.
func TestInterleavedOrder(t *testing.T) {
	for _, tc := range []struct {
		rank, pp, v, m int64
		want           string
	}{
		{0, 2, 2, 4, "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"},
		{1, 2, 2, 4, "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"},
		{0, 2, 1, 2, "0F0 0F1 0B0 0B1"},
		{1, 2, 1, 2, "1F0 1B0 1F1 1B1"},
	} {
		t.Run(fmt.Sprintf("rank%d-pp%d-v%d-m%d", tc.rank, tc.pp, tc.v, tc.m), func(t *testing.T) {
			o, err := InterleavedOrder(tc.rank, tc.pp, tc.v, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range o {
				got = append(got, a.String())
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("InterleavedOrder = %s, want %s", g, tc.want)
			}
		})
	}
}

// TestInterleavedOK checks what ScheduleInterleaved1F1B refuses: micro-
// batches that are not a multiple of its rounds (its constructor), and
// orders its lowering to sends and receives cannot schedule.
func TestInterleavedOK(t *testing.T) {
	for _, tc := range []struct {
		pp, v, m int64
		want     string
	}{
		{2, 2, 4, ""},
		{2, 2, 2, ""},
		{2, 2, 3, ""},
		{4, 2, 8, ""},
		{4, 4, 12, ""},
		{2, 2, 5, "multiple of the rounds"},
		{4, 2, 9, "multiple of the rounds"},
		{1, 2, 4, "needs pp ≥ 2"},
	} {
		t.Run(fmt.Sprintf("pp%d-v%d-m%d", tc.pp, tc.v, tc.m), func(t *testing.T) {
			err := InterleavedOK(tc.pp, tc.v, tc.m)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("InterleavedOK = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestInterleavedLowering lists, for small pipelines, which micro-batch
// counts torch's lowering accepts: every order it accepts runs every
// stage's forwards and backwards once per micro-batch.
func TestInterleavedLowering(t *testing.T) {
	for pp := int64(2); pp <= 4; pp++ {
		for v := int64(1); v <= 3; v++ {
			for m := int64(1); m <= 12; m++ {
				if InterleavedOK(pp, v, m) != nil {
					continue
				}
				seen := map[string]bool{}
				for r := int64(0); r < pp; r++ {
					o, _ := InterleavedOrder(r, pp, v, m)
					for _, a := range o {
						if a.Stage%pp != r || seen[a.String()] {
							t.Fatalf("pp %d v %d m %d: rank %d runs %s", pp, v, m, r, a)
						}
						seen[a.String()] = true
					}
				}
				if int64(len(seen)) != 2*pp*v*m {
					t.Errorf("pp %d v %d m %d: %d actions, want %d", pp, v, m, len(seen), 2*pp*v*m)
				}
			}
		}
	}
}
