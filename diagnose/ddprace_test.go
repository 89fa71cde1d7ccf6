package diagnose

import (
	"strings"
	"testing"
)

// TestDDPRace reads snapshots of a two-rank DDP job taken after its second
// step's bucket rebuild (bench/torch/dist/racesnap.py, 2 × H100, torch
// 2.11; bench/results/2026-11-26-h100x2-racesnap): in the race ones the
// 16 MiB flat bucket DDP built is still allocated beside the rebuilt 12 +
// 4 MiB buckets, in the others (a synchronize and 0.3 s of sleep after the
// first step) it was freed. The race's verdict leads its fixes with the
// pause.
func TestDDPRace(t *testing.T) {
	for _, c := range []struct {
		file     string
		old, new int64
	}{
		{"race-rank0.pickle", 16 << 20, 16 << 20},
		{"race-rank1.pickle", 16 << 20, 16 << 20},
		{"norace-rank0.pickle", 0, 0},
		{"norace-rank1.pickle", 0, 0},
		// A second run (after racesnap.py moved its toy into watchdog.py),
		// read after the rule was written.
		{"second/race-rank0.pickle", 16 << 20, 16 << 20},
		{"second/race-rank1.pickle", 16 << 20, 16 << 20},
		{"second/norace-rank0.pickle", 0, 0},
		{"second/norace-rank1.pickle", 0, 0},
	} {
		t.Run(c.file, func(t *testing.T) {
			e, err := Read("testdata/ddprace/" + c.file)
			if err != nil {
				t.Fatal(err)
			}
			r := e.Snapshot.DDPRace
			switch {
			case c.old == 0 && r != nil:
				t.Fatalf("race found: %+v, want none", *r)
			case c.old != 0 && (r == nil || r.Old != c.old || r.New != c.new):
				t.Fatalf("race %+v, want old %d and rebuilt %d bytes", r, c.old, c.new)
			}
			v := Diagnose([]*Evidence{e}, Job{}).Verdict
			if got := v.Figures.DDPRaceBytes; got != c.old {
				t.Errorf("DDPRaceBytes %d, want %d", got, c.old)
			}
			led := len(v.Fixes) > 0 && strings.HasPrefix(v.Fixes[0], "torch.cuda.synchronize() then time.sleep(0.2)")
			if led != (c.old != 0) {
				t.Errorf("fixes %q: the pause first %v, want %v", v.Fixes, led, c.old != 0)
			}
		})
	}
}

// TestDDPRaceCrash reads a real out-of-memory crash of the race
// (bench/torch/crash/crash.py ddp-race, 2 × H100; rank 0 raced and ran past
// its 3.5 GiB cap in its second backward): the log and the snapshot
// together give pressure, the 1 GiB old bucket, and the pause first.
func TestDDPRaceCrash(t *testing.T) {
	var evs []*Evidence
	for _, f := range []string{"testdata/crashes/ddp-race/log.txt", "testdata/crashes/ddp-race-rank0/snapshot.pickle.gz"} {
		e, err := Read(f)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	v := Diagnose(evs, Job{}).Verdict
	if v.Cause != Pressure || v.Figures.DDPRaceBytes != 1<<30 {
		t.Fatalf("cause %s with DDPRaceBytes %d (%s), want pressure with the 1 GiB bucket", v.Cause, v.Figures.DDPRaceBytes, v.Reason)
	}
	if len(v.Fixes) == 0 || !strings.HasPrefix(v.Fixes[0], "torch.cuda.synchronize() then time.sleep(0.2)") {
		t.Errorf("fixes %q: want the pause first", v.Fixes)
	}
}
