package diagnose

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// job is a crash fixture's description, as run by bench/torch/crash/crash.py
// (AMP bf16, AdamW foreach, on an H100 80GB).
type job struct {
	hf         string
	batch, seq int64
	fraction   float64
}

// fixtures are the crash artifacts in testdata/crashes, each with the cause
// recorded in its case.json (bench/results/2026-11-23-h100-crashes), and
// the verdict expected from each file alone ("" where that file alone
// cannot tell; see docs/diagnose.md).
var fixtures = []struct {
	name                  string
	job                   *job
	log, stats, sum, snap Cause
	// snapDevice: the snapshot is read with the device's size (--device),
	// which a snapshot does not record.
	snapDevice bool
	// alt: files whose evidence alone cannot decide, with the cause the
	// verdict must name as its alternative (at less than high confidence).
	alt map[string]Cause
}{
	// The pressure snapshots (no job description) end in the first step:
	// a full memory without a history of steps could be a leak that
	// filled it, so pressure is named at low confidence with leak beside it.
	{name: "pressure-gpt2-b160", job: &job{"gpt2", 160, 1024, 0}, log: Pressure, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	{name: "pressure-gpt2-b160+expandable", job: &job{"gpt2", 160, 1024, 0}, log: Pressure, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	{name: "pressure-qwen2.5-0.5b-b48", job: &job{"qwen2.5-0.5b", 48, 2048, 0}, log: Pressure, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	{name: "pressure-qwen3-0.6b-b16-frac0.25", job: &job{"qwen3-0.6b", 16, 2048, 0.25}, log: Pressure, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	{name: "ranks-rank0", job: &job{"gpt2", 40, 1024, 0.2}, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	{name: "ranks-rank1", job: &job{"gpt2", 40, 1024, 0.2}, stats: Pressure, sum: Pressure, snap: Pressure, alt: map[string]Cause{"snapshot.pickle.gz": Leak}},
	// DDP's rebuild race (bench/results/2026-11-26-h100x2-ddp-race-crash):
	// the racing rank's second backward ran past its cap. No job
	// description (a toy model): pressure, leak beside it; the snapshot
	// also names the race (TestDDPRaceCrash).
	{name: "ddp-race-rank0", stats: Pressure, sum: Pressure, snap: Pressure,
		alt: map[string]Cause{"stats.jsonl": Leak, "summary.txt": Leak, "snapshot.pickle.gz": Leak}},
	// A snapshot's growth without the job's description could be memory
	// kept by design: leak at medium confidence, pressure beside it.
	{name: "leak-outputs-gpt2", job: &job{"gpt2", 4, 512, 0.12}, log: Leak, stats: Leak, sum: Leak, snap: Leak, alt: map[string]Cause{"snapshot.pickle.gz": Pressure}},
	{name: "leak-val-loss", job: &job{"gpt2", 4, 512, 0.12}, log: Leak, stats: Leak, sum: Leak, snap: Leak, alt: map[string]Cause{"snapshot.pickle.gz": Pressure}},
	{name: "leak-cache", job: &job{"gpt2", 4, 512, 0.12}, log: Leak, stats: Leak, sum: Leak, snap: Leak, alt: map[string]Cause{"snapshot.pickle.gz": Pressure}},
	// Six steps to the cap: at the error allocated is only 1.2× the
	// predicted peak (1.1× in the summary), which memplan under-predicting
	// would explain as well: leak at low confidence, pressure beside it.
	// The snapshot's 20000 trace entries hold only 1.2 steps, too few to
	// see growth, but five logits blocks allocated before the trace began
	// by the forward that allocated again within it are still held: leak
	// at low confidence, pressure (a buffer kept on purpose) beside it.
	{name: "leak-outputs-qwen3", job: &job{"qwen3-0.6b", 2, 1024, 0.25}, log: Leak, stats: Leak, sum: Leak, snap: Leak,
		alt: map[string]Cause{"log.txt": Pressure, "summary.txt": Pressure, "snapshot.pickle.gz": Pressure}},
	{name: "other-gpt2", job: &job{"gpt2", 16, 1024, 0}, log: OtherProcess, stats: OtherProcess, sum: OtherProcess, snap: OtherProcess, snapDevice: true},
	{name: "other-qwen2.5", job: &job{"qwen2.5-0.5b", 8, 2048, 0}, log: OtherProcess, stats: OtherProcess, sum: OtherProcess, snap: OtherProcess, snapDevice: true},
	{name: "frag-carve", log: Fragmentation, stats: Fragmentation, sum: Fragmentation, snap: Fragmentation},
	{name: "frag-mixed", log: Fragmentation, stats: Fragmentation, sum: Fragmentation, snap: Fragmentation},
	{name: "frag-mixed+expandable", log: Fragmentation, stats: Fragmentation, sum: Fragmentation, snap: Fragmentation},
	// Truth is pressure (the manifest: with expandable segments the carve
	// no longer fragments, and the loop after it keeps every 1 GiB tensor
	// until the cap is full of allocated memory). No job description is
	// given. The message, summary and snapshot see a full cap: pressure,
	// leak beside it. The stats series sees 1 GiB more allocated each
	// step, but over steps that freed nothing (allocation.all.freed
	// unchanged): every allocation kept, which is not a loop's residue:
	// pressure at low confidence, leak beside it.
	{name: "frag-carve+expandable", log: Pressure, stats: Pressure, sum: Pressure, snap: Pressure,
		alt: map[string]Cause{"log.txt": Leak, "stats.jsonl": Leak, "summary.txt": Leak, "snapshot.pickle.gz": Leak}},
}

var predictions = map[job]*Prediction{}

func predictionFor(t *testing.T, j *job) Job {
	t.Helper()
	if j == nil {
		return Job{}
	}
	p, ok := predictions[*j]
	if !ok {
		spec, err := model.LoadHF(filepath.Join("..", "model", "testdata", "hf", j.hf+".json"),
			model.Overrides{Batch: j.batch, Seq: j.seq, Precision: "amp-bf16", Optimizer: "adamw", Dev: "h100-80gb"})
		if err != nil {
			t.Fatal(err)
		}
		if p, err = Predict(spec, j.fraction); err != nil {
			t.Fatal(err)
		}
		predictions[*j] = p
	}
	return Job{DeviceMemory: p.DeviceMemory, Fraction: j.fraction, Predicted: p}
}

// TestFixtures checks every crash's verdict from each kind of file alone:
// the message, stats and summary with the job's description, the snapshot
// with none.
func TestFixtures(t *testing.T) {
	for _, fx := range fixtures {
		for _, k := range []struct {
			file string
			want Cause
			job  bool
		}{{"log.txt", fx.log, true}, {"stats.jsonl", fx.stats, true}, {"summary.txt", fx.sum, true}, {"snapshot.pickle.gz", fx.snap, false}} {
			if k.want == "" {
				continue
			}
			t.Run(fx.name+"/"+k.file, func(t *testing.T) {
				path := filepath.Join("testdata", "crashes", fx.name, k.file)
				e, err := Read(path)
				if err != nil {
					t.Fatal(err)
				}
				var j Job
				if k.job {
					j = predictionFor(t, fx.job)
				} else if fx.snapDevice {
					dev, _ := model.LookupDevice("h100-80gb")
					j.DeviceMemory = dev.Memory
				}
				r := Diagnose([]*Evidence{e}, j)
				if r.Cause != k.want {
					t.Errorf("Diagnose(%s) = %s (%s), want %s", path, r.Cause, r.Reason, k.want)
				}
				alt, ok := fx.alt[k.file]
				if !ok {
					if r.Confidence != High && len(r.Alternatives) == 0 {
						t.Errorf("Diagnose(%s): confidence %s with no alternatives", path, r.Confidence)
					}
					return
				}
				if r.Confidence == High || !hasAlt(r.Alternatives, alt) {
					t.Errorf("Diagnose(%s) = %s at %s confidence, alternatives %v; want %s beside it, below high", path, r.Cause, r.Confidence, r.Alternatives, alt)
				}
			})
		}
	}
}

func hasAlt(as []Alternative, c Cause) bool {
	for _, a := range as {
		if a.Cause == c {
			return true
		}
	}
	return false
}

// TestRanks checks a torchrun log with both ranks' messages.
func TestRanks(t *testing.T) {
	e, err := Read("testdata/crashes/ranks/log.txt")
	if err != nil {
		t.Fatal(err)
	}
	r := Diagnose([]*Evidence{e}, Job{})
	if len(r.Ranks) != 2 {
		t.Fatalf("Diagnose(ranks log) gave %d ranks, want 2", len(r.Ranks))
	}
	for _, v := range r.Ranks {
		if v.Cause != Pressure {
			t.Errorf("rank %d: cause %s, want pressure", v.Rank, v.Cause)
		}
	}
}

// TestBadFiles checks that cut-short and unknown files give an error that
// names the file.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	full, err := os.ReadFile("testdata/crashes/frag-carve/snapshot.pickle.gz")
	if err != nil {
		t.Fatal(err)
	}
	big := torchSnapshot(60000) // above mapAbove: read mapped into memory
	if len(big) < mapAbove {
		t.Fatalf("torchSnapshot(60000) is %d bytes, want above %d", len(big), mapAbove)
	}
	cases := map[string][]byte{
		"cut.pickle.gz":   full[:len(full)/2],
		"cut-big.pickle":  big[:len(big)/2],
		"cut-stop.pickle": big[:len(big)-1],
		"stats.json":      []byte(`{"allocated_bytes.all.current": 5, "reserved`),
		"summary.txt":     []byte("|  PyTorch CUDA memory summary, device ID 0  |\n| Allocated memory | 3 MiB |"),
		"notes.txt":       []byte("hello"),
		"log.txt":         []byte("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total"),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(p)
			var ie *InputError
			if err == nil || !asInput(err, &ie) || ie.File != p {
				t.Errorf("Read(%s) = %v, want an InputError naming the file", name, err)
			}
		})
	}
}

// TestSnapshotWithoutDevice: a snapshot does not record the device's size.
// Alone, a full device is pressure at low confidence with other-process
// among the alternatives; with the device's size, the other-process
// snapshots are decided and the pressure one no longer names it.
func TestSnapshotWithoutDevice(t *testing.T) {
	dev, _ := model.LookupDevice("h100-80gb")
	for _, c := range []struct {
		name      string
		device    int64
		want      Cause
		otherAlt  bool
		wantConfd Confidence
	}{
		{"other-gpt2", 0, Pressure, true, Low},
		{"other-qwen2.5", 0, Pressure, true, Low},
		{"pressure-gpt2-b160", 0, Pressure, true, Low},
		{"other-gpt2", dev.Memory, OtherProcess, false, High},
		{"pressure-gpt2-b160", dev.Memory, Pressure, false, Low},
	} {
		t.Run(fmt.Sprintf("%s/device=%d", c.name, c.device), func(t *testing.T) {
			e, err := Read(filepath.Join("testdata", "crashes", c.name, "snapshot.pickle.gz"))
			if err != nil {
				t.Fatal(err)
			}
			r := Diagnose([]*Evidence{e}, Job{DeviceMemory: c.device})
			if r.Cause != c.want || r.Confidence != c.wantConfd || hasAlt(r.Alternatives, OtherProcess) != c.otherAlt {
				t.Errorf("Diagnose = %s at %s, alternatives %v; want %s at %s, other-process among them %v",
					r.Cause, r.Confidence, r.Alternatives, c.want, c.wantConfd, c.otherAlt)
			}
		})
	}
}

// TestPredictStepPause: for a DDP job that runs out by the old bucket DDP's
// rebuild keeps, the pause after the first step is among the changes, and
// it fits; a job that already pauses is not offered it.
func TestPredictStepPause(t *testing.T) {
	spec, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{Batch: 1, Seq: 1024, DP: 2, Zero: "0", Dev: "6200MiB"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Predict(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range p.Changes {
		if strings.HasPrefix(c.Change, "--step-pause 0.2 ") {
			found = true
			if !c.Fits || c.Bytes >= p.Asked {
				t.Errorf("%+v: want it to fit, below the %d B asked", c, p.Asked)
			}
		}
	}
	if !found {
		t.Errorf("changes %+v, want the pause after the first step", p.Changes)
	}
	spec.Training.StepPause = 0.2
	if p, err = Predict(spec, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Changes {
		if strings.HasPrefix(c.Change, "--step-pause") {
			t.Errorf("a job that pauses was offered %q", c.Change)
		}
	}
}
