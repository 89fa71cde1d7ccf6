package parallel

import "fmt"

// Split is what tensor, sequence and context parallelism cut: a
// transformer's attention heads, key/value heads and MLP columns, and the
// sequence. Degrees of 0 count as 1.
type Split struct {
	Heads, KVHeads, Intermediate, Seq int64
	TP, CP                            int64
	SP                                bool
}

// SplitError is a layout that the frameworks refuse for a model: Rule
// names the rule without the numbers ("heads divisible by tp"), Reason
// says it with them. CheckSplit returns it.
type SplitError struct{ Rule, Reason string }

func (e *SplitError) Error() string { return e.Reason }

// CheckSplit applies the rules for splitting a transformer evenly
// (docs/planner.md §1), the one home for them: the planner's Validate and
// the estimator's lowering both call it.
//
//   - TP splits attention heads and key/value heads (grouped-query
//     attention's groups) evenly, as Megatron-LM's divide() asserts and
//     torchtitan's ColwiseParallel needs; key/value heads are not
//     replicated. The MLP's intermediate size must divide too. The
//     vocabulary need not (DTensor shards it unevenly, Megatron pads it).
//   - CP with load balancing needs the sequence divisible by 2·CP·TP
//     (torchtitan); SP alone needs it divisible by TP.
//   - SP and loss parallelism need TP > 1 (checked by callers that know
//     about loss parallelism; SP here).
func CheckSplit(s Split) error {
	tp, cp := max(s.TP, 1), max(s.CP, 1)
	bad := func(rule, format string, args ...any) error {
		return &SplitError{Rule: rule, Reason: fmt.Sprintf(format, args...)}
	}
	if s.SP && tp < 2 {
		return bad("sp and loss parallel need tp > 1", "sequence parallelism and loss parallelism need tp > 1")
	}
	if tp > 1 {
		kv := s.KVHeads
		if kv == 0 {
			kv = s.Heads
		}
		switch {
		case s.Heads%tp != 0:
			return bad("heads divisible by tp", "%d attention heads are not divisible by tp %d", s.Heads, tp)
		case kv%tp != 0:
			return bad("key/value heads divisible by tp", "%d key/value heads are not divisible by tp %d (Megatron-LM and torchtitan split them, they do not replicate them)", kv, tp)
		case s.Intermediate%tp != 0:
			return bad("MLP columns divisible by tp", "the MLP's %d columns are not divisible by tp %d", s.Intermediate, tp)
		}
	}
	switch {
	case cp > 1 && s.Seq%(2*cp*tp) != 0:
		return bad("sequence divisible by 2·cp·tp", "sequence %d is not divisible by 2·cp·tp = %d (load-balanced context parallelism)", s.Seq, 2*cp*tp)
	case s.SP && s.Seq%tp != 0:
		return bad("sequence divisible by tp with sp", "sequence %d is not divisible by tp %d (sequence parallelism)", s.Seq, tp)
	}
	return nil
}
