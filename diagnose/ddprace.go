package diagnose

import "strings"

// DDPRace is DDP's bucket rebuild race seen in a snapshot (docs/multigpu.md,
// "DDP's bucket rebuild race"): the flat gradient bucket DDP allocated when
// it was built is still allocated next to the buckets its rebuild at the
// second step's forward allocated, because NCCL's stash of the first step's
// last all-reduce had not been emptied when the rebuild dropped it.
type DDPRace struct {
	// Old is the bytes still allocated by DDP's construction
	// (DistributedDataParallel._ddp_init_helper), New those the rebuild
	// allocated (_pre_forward).
	Old int64 `json:"old_bucket_bytes"`
	New int64 `json:"rebuilt_bucket_bytes"`
}

// minRaceBytes is the least construction memory taken for a kept bucket:
// DDP's construction keeps nothing else of that size once it has rebuilt.
const minRaceBytes = 1 << 20

// ddpRace returns the race when the live blocks hold both DDP's
// construction bucket (at least half the rebuilt buckets' size: the old
// bucket holds every gradient, as the new ones do) and the rebuilt
// buckets, or nil. Blocks without recorded frames tell nothing.
func ddpRace(t *traceTables, blocks []liveBlock) *DDPRace {
	var r DDPRace
	for _, b := range blocks {
		switch t.ddpSite(b.stack) {
		case "_ddp_init_helper":
			r.Old += b.size
		case "_pre_forward":
			r.New += b.size
		}
	}
	if r.Old < minRaceBytes || r.New == 0 || 2*r.Old < r.New {
		return nil
	}
	return &r
}

// ddpSite returns the function of torch/nn/parallel/distributed.py
// nearest the allocation in stack s ("" when DDP is not on it).
func (t *traceTables) ddpSite(s int32) string {
	if s < 0 {
		return ""
	}
	for _, id := range t.stackFrames(s) {
		if f := t.frames[id]; strings.HasSuffix(f.file, "nn/parallel/distributed.py") {
			return f.name
		}
	}
	return ""
}
