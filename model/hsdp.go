package model

import "fmt"

// decodeHSDP reads dp_replicate from the training mapping and applies its
// flag; it returns the key's line for checkHSDP (0: none, or the flag's).
func decodeHSDP(e *errs, tm *mapping, t *Training, o Overrides) int {
	return decodeCount(e, tm, "dp_replicate", &t.DPReplicate, o.DPReplicate)
}

// checkHSDP checks dp_replicate once the data-parallel size is final
// (HSDPError has the rules).
func checkHSDP(e *errs, t *Training, line int) {
	if err := HSDPError(t); err != nil {
		e.add(line, "dp_replicate: %v", err)
	}
}

// FSDPShards is the ranks FSDP shards each parameter over among the
// data-parallel ones: dp, or under HSDP (Training.DPReplicate > 1) dp
// divided by the replicas.
func (t *Training) FSDPShards() int64 {
	return max(t.DP, 1) / max(t.DPReplicate, 1)
}

// HSDPError says why t's DPReplicate is not a layout memplan simulates,
// or nil. HSDP is FSDP2 over a two-dimensional mesh (replicas × shards:
// torchtitan's data_parallel_replicate_degree), so it needs ZeRO 2 or 3
// and the replicas to divide dp; memplan simulates it without tensor,
// context, pipeline or expert parallelism and without offload.
func HSDPError(t *Training) error {
	r := t.DPReplicate
	switch {
	case r < 0:
		return fmt.Errorf("must be positive, got %d", r)
	case r <= 1:
		return nil
	case t.Zero < 2:
		return fmt.Errorf("%d replicas of an FSDP group need ZeRO stage 2 or 3 (zero: 2 or 3), got stage %d", r, t.Zero)
	case t.DP%r != 0 || t.DP/r < 2:
		return fmt.Errorf("%d replicas must divide the data-parallel size %d into groups of two GPUs or more", r, t.DP)
	case t.TP > 1 || t.CP > 1 || t.PP > 1 || t.EP > 1:
		return fmt.Errorf("not simulated with tensor, context, pipeline or expert parallelism")
	case t.Offload != OffloadNone && t.Offload != "":
		return fmt.Errorf("not simulated with offload (offload: %s)", t.Offload)
	}
	return nil
}
