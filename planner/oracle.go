package planner

import (
	"fmt"
	"strings"

	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// Rank kinds: the ranks of a layout that run different programs. Without
// pipeline parallelism every rank runs the same one (All).
const (
	All    = "all"
	First  = "first stage"
	Middle = "middle stage"
	Last   = "last stage"
)

// RankMemory is the predicted memory of one kind of rank.
type RankMemory struct {
	Kind          string `json:"kind"`
	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	DeviceTotal   int64  `json:"device_total_bytes"`
}

// Busiest is an oracle's answer for a layout: the rank with the largest
// device total, and every kind of rank.
type Busiest struct {
	RankMemory
	Kinds []RankMemory `json:"kinds"`
}

// Oracle predicts the memory of a layout's ranks.
type Oracle interface {
	// Estimate returns the busiest rank of spec run with layout l, or an
	// error: a *NotSimulatedError when it cannot simulate the layout.
	Estimate(spec *model.Spec, l Layout) (Busiest, error)
}

// NotSimulatedError is returned by an Oracle for a layout it cannot
// simulate yet (Simulator: tensor, pipeline or context parallelism, and
// expert parallelism with a ZeRO stage).
type NotSimulatedError struct {
	// What lists the parallelisms, such as "tensor parallelism".
	What []string
}

func (e *NotSimulatedError) Error() string {
	return strings.Join(e.What, ", ") + " not yet simulated"
}

// Simulator is the Oracle backed by memplan's estimator: it simulates
// data parallelism with ZeRO stages 0–3, expert parallelism without ZeRO
// (docs/moe.md §4), checkpointing and any micro-batch and accumulation,
// and returns a *NotSimulatedError for layouts with TP, SP, PP, CP, or EP
// with a ZeRO stage.
type Simulator struct{}

// Estimate implements Oracle.
func (Simulator) Estimate(spec *model.Spec, l Layout) (Busiest, error) {
	if err := notSimulated(l); err != nil {
		return Busiest{}, err
	}
	r, err := estimate.Estimate(Apply(spec, l))
	if err != nil {
		return Busiest{}, fmt.Errorf("estimate %s: %w", l, err)
	}
	m := RankMemory{Kind: All, PeakAllocated: r.PeakAllocated, PeakReserved: r.PeakReserved, DeviceTotal: r.DeviceTotal}
	return Busiest{RankMemory: m, Kinds: []RankMemory{m}}, nil
}

func notSimulated(l Layout) error {
	var what []string
	add := func(on bool, s string) {
		if on {
			what = append(what, s)
		}
	}
	add(l.TP > 1, "tensor parallelism")
	add(l.SP, "sequence parallelism")
	add(l.LossParallel, "loss parallelism")
	add(l.PP > 1, "pipeline parallelism")
	add(l.CP > 1, "context parallelism")
	add(l.EP > 1 && l.Zero > 0, "expert parallelism with ZeRO")
	if what != nil {
		return &NotSimulatedError{What: what}
	}
	return nil
}

// Apply returns a copy of spec whose training setup is the layout's data
// and expert parallelism, ZeRO stage, checkpointing, micro-batch and
// accumulation, with nothing offloaded (the planner keeps all state on the
// GPUs).
func Apply(spec *model.Spec, l Layout) *model.Spec {
	s := *spec
	t := &s.Training
	t.DP, t.Zero, t.Checkpointing = l.DP*l.CP, l.Zero, l.Checkpointing
	t.EP = l.EP
	t.Batch, t.GradAccum, t.Offload = l.Micro, l.Accum, model.OffloadNone
	return &s
}
