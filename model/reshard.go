package model

import (
	"fmt"
	"strings"
)

// NodeGPUs is the GPUs of one node memplan assumes where it is not told:
// plan's default --node-size, and the node tune's sharding search
// reshards to (ReshardAfterForward).
const NodeGPUs = 8

// decodeReshard reads reshard_after_forward from the training mapping
// and applies its flag; it returns the key's line for checkReshard (0:
// none, or the flag's).
func decodeReshard(e *errs, tm *mapping, t *Training, o Overrides) int {
	return decodeCount(e, tm, "reshard_after_forward", &t.ReshardAfterForward, o.ReshardAfterForward)
}

// decodeCount reads the count key from the training mapping into dst and
// applies its flag's value (0: unset; negative: refused); it returns the
// key's line for later checks (0: none, or the flag's).
func decodeCount(e *errs, tm *mapping, key string, dst *int64, flag int64) int {
	line := 0
	if n := tm.get(key); n != nil {
		line = n.Line
	}
	tm.int(key, dst, false)
	if flag < 0 {
		e.add(0, "--%s: must be positive, got %d", strings.ReplaceAll(key, "_", "-"), flag)
	} else if flag > 0 {
		*dst, line = flag, 0
	}
	return line
}

// checkReshard checks reshard_after_forward once the data-parallel size
// is final (ReshardError has the rules).
func checkReshard(e *errs, t *Training, line int) {
	if err := ReshardError(t); err != nil {
		e.add(line, "reshard_after_forward: %v", err)
	}
}

// ReshardError says why t's ReshardAfterForward is not a layout memplan
// simulates, or nil. FSDP2 takes an int N (torch's
// _get_post_forward_mesh_info) only where it divides the ranks sharding a
// unit, turns N = 1 into False (memplan's ZeRO 2) and N = those ranks into
// True (ZeRO 3); memplan needs ZeRO 3 and simulates it neither with
// expert parallelism (the experts' units shard over fewer ranks), a
// pipeline (whose stages reshard by their schedule), context parallelism
// (FSDP over dp·cp) nor the parameters offloaded to the host; torch 2.11 refuses it beside tensor parallelism
// (FSDPParam.to_sharded_post_forward raises NotImplementedError,
// "Resharding to smaller mesh with TP is not supported yet": held-out set
// 95, bench/results/2026-11-29-h200-fake-47/README.md).
func ReshardError(t *Training) error {
	n := t.ReshardAfterForward
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("must be positive, got %d", n)
	case t.Zero != 3:
		return fmt.Errorf("%d keeps FSDP2's parameters sharded over %d ranks between the forward and the backward, which needs ZeRO stage 3 (zero: 3), got stage %d", n, n, t.Zero)
	case n == 1:
		return fmt.Errorf("1 keeps the parameters unsharded from the forward to the backward (FSDP2 turns it into False): that is ZeRO stage 2 (zero: 2)")
	case t.FSDPShards() < 2 || t.FSDPShards()%n != 0:
		if t.DPReplicate > 1 {
			return fmt.Errorf("%d must divide the %d GPUs of an HSDP group", n, t.FSDPShards())
		}
		return fmt.Errorf("%d must divide the data-parallel size %d", n, t.DP)
	case t.TP > 1:
		return fmt.Errorf("torch 2.11's FSDP2 does not reshard to fewer ranks beside tensor parallelism (tp %d): to_sharded_post_forward raises \"Resharding to smaller mesh with TP is not supported yet\"", t.TP)
	case t.EP > 1:
		return fmt.Errorf("not simulated with expert parallelism (ep %d)", t.EP)
	case t.PP > 1:
		return fmt.Errorf("not simulated with a pipeline (pp %d)", t.PP)
	case t.CP > 1:
		return fmt.Errorf("not simulated with context parallelism (cp %d)", t.CP)
	case t.Offload == OffloadParams:
		return fmt.Errorf("not simulated with the parameters offloaded (offload: params)")
	}
	return nil
}
