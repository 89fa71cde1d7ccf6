package model

import "fmt"

// The interleaved pipeline schedule (torch.distributed.pipelining's
// ScheduleInterleaved1F1B, PyTorch 2.11 schedules.py): each of pp ranks
// holds v stages round robin (rank r holds stages r, r+pp, …), and runs
// the compute actions _get_1f1b_rank_ops generates for it. The estimator
// replays them (docs/parallelism.md §3.2).

// PPAction is one compute action of a pipeline rank: the forward or the
// full backward of micro-batch MB on stage Stage.
type PPAction struct {
	Stage, MB int64
	Backward  bool
}

// String is torch's notation for the action: 2F0 is stage 2's forward of
// micro-batch 0, 1B3 stage 1's backward of micro-batch 3.
func (a PPAction) String() string {
	op := "F"
	if a.Backward {
		op = "B"
	}
	return fmt.Sprintf("%d%s%d", a.Stage, op, a.MB)
}

// interleavedRounds is ScheduleInterleaved1F1B's number_of_rounds and
// microbatches_per_round, or the error its constructor raises.
func interleavedRounds(pp, m int64) (rounds, perRound int64, err error) {
	rounds = max(1, m/pp)
	if m%rounds != 0 {
		return 0, 0, fmt.Errorf("the interleaved schedule needs the micro-batches (%d) to be a multiple of the rounds (max(1, %d/pp %d) = %d), as ScheduleInterleaved1F1B requires", m, m, pp, rounds)
	}
	return rounds, m / rounds, nil
}

// InterleavedOrder returns the compute actions rank (from 0) of pp runs
// under ScheduleInterleaved1F1B with v stages per rank and m micro-batches,
// in order, as _get_1f1b_rank_ops makes them (its no-ops left out):
// warm-up forwards, then a forward and a backward in turn, then the
// remaining backwards. Forwards go round robin over the rank's stages,
// perRound micro-batches at a time; backwards the other way round.
func InterleavedOrder(rank, pp, v, m int64) ([]PPAction, error) {
	_, per, err := interleavedRounds(pp, m)
	if err != nil {
		return nil, err
	}
	total := v * m
	warm := min((v-1)*per+2*(pp-1-rank), total)
	steady := total - warm
	fwdStage := func(op int64) int64 { return (op/per%v)*pp + rank }
	bwdStage := func(op int64) int64 { return (v-1-(op-warm)/per%v)*pp + rank }
	// Micro-batches run so far per stage: stages are below v·pp.
	fmb, bmb := make([]int64, v*pp), make([]int64, v*pp)
	out := make([]PPAction, 0, 2*total)
	fwd := func(op int64) {
		st := fwdStage(op)
		out = append(out, PPAction{Stage: st, MB: fmb[st]})
		fmb[st]++
	}
	bwd := func(op int64) {
		st := bwdStage(op)
		out = append(out, PPAction{Stage: st, MB: bmb[st], Backward: true})
		bmb[st]++
	}
	for op := int64(0); op < warm+steady+warm; op++ {
		switch {
		case op < warm:
			fwd(op)
		case op < warm+steady:
			fwd(op)
			bwd(op)
		default:
			bwd(op)
		}
	}
	return out, nil
}

// maxLowered bounds the actions InterleavedOK lowers, so that a spec's
// check stays cheap (no order up to pp 8, 4 stages per rank and 16
// micro-batches fails the lowering).
const maxLowered = 1 << 20

// InterleavedOK says why ScheduleInterleaved1F1B cannot run pp ranks of v
// stages each over m micro-batches, or nil. Besides its constructor's
// check of the rounds, torch lowers the ranks' compute actions to a
// schedule with sends and receives (_add_send_recv): in turns over the
// ranks, each takes its next action once its input is there (stage s's
// forward of micro-batch j after stage s−1's, its backward after stage
// s+1's); a turn in which no rank can go on is an error there, a hang
// otherwise.
func InterleavedOK(pp, v, m int64) error {
	if pp < 2 || v < 1 || m < 1 || pp > 1<<20 || v > 1<<20 || m > 1<<30 {
		return fmt.Errorf("the interleaved schedule needs pp ≥ 2, stages per rank ≥ 1 and micro-batches ≥ 1 (got %d, %d, %d)", pp, v, m)
	}
	if pp*v*m > maxLowered {
		return nil // the rounds are checked; the lowering is not replayed
	}
	orders := make([][]PPAction, pp)
	for r := range orders {
		o, err := InterleavedOrder(int64(r), pp, v, m)
		if err != nil {
			return err
		}
		orders[r] = o
	}
	stages := pp * v
	done := [2][]bool{make([]bool, stages*m), make([]bool, stages*m)}
	ready := func(a PPAction) bool {
		switch {
		case !a.Backward && a.Stage > 0:
			return done[0][(a.Stage-1)*m+a.MB]
		case a.Backward && a.Stage < stages-1:
			return done[1][(a.Stage+1)*m+a.MB]
		}
		return true
	}
	next := make([]int, pp)
	for left := len(orders[0]) * int(pp); left > 0; {
		progress := false
		for r, o := range orders {
			if next[r] == len(o) || !ready(o[next[r]]) {
				continue
			}
			a := o[next[r]]
			k := 0
			if a.Backward {
				k = 1
			}
			done[k][a.Stage*m+a.MB] = true
			next[r]++
			left--
			progress = true
		}
		if !progress {
			return fmt.Errorf("the interleaved schedule with pp %d, %d stages per rank and %d micro-batches cannot be lowered to sends and receives (torch raises \"Malformed compute schedule\")", pp, v, m)
		}
	}
	return nil
}
