package diagnose

import (
	"github.com/memplan/memplan/internal/units"
)

// Cause is what made a job run out of memory.
type Cause string

// The causes Diagnose tells apart, and Unknown when the evidence cannot.
const (
	Pressure      Cause = "pressure"
	Fragmentation Cause = "fragmentation"
	Leak          Cause = "leak"
	OtherProcess  Cause = "other-process"
	Unknown       Cause = "unknown"
)

// Thresholds of the rules (docs/diagnose.md, "Rules").
const (
	// strandedShare: fragmentation needs at least this share of what the
	// allocator reserved to be free but unusable.
	strandedShare = 0.20
	// othersShare: other processes must hold at least this share of the
	// device to be blamed.
	othersShare = 0.05
	// leakFactor: allocated at the crash beyond this multiple of the
	// predicted peak (plus leakSlack) is a leak when the prediction fits.
	leakFactor = 1.25
	leakSlack  = 256 << 20
	// minHistorySteps: a snapshot history with this many step boundaries
	// and no growth rules a leak out.
	minHistorySteps = 3
)

// contextBytes is a process's device memory outside the caching allocator
// (CUDA context and lazily loaded modules), for a snapshot that does not
// say: 751–767 MiB measured on an H100 with torch 2.11 (docs/formulas.md §D).
const contextBytes = 767 << 20

// Figures are the evidence in numbers; 0 means not known. Bytes are exact
// integers as the files gave them.
type Figures struct {
	Request        int64 `json:"request_bytes,omitempty"`
	Limit          int64 `json:"limit_bytes,omitempty"`
	DeviceTotal    int64 `json:"device_total_bytes,omitempty"`
	DeviceFree     int64 `json:"device_free_bytes,omitempty"`
	Allowed        int64 `json:"allowed_bytes,omitempty"`
	NonPyTorch     int64 `json:"non_pytorch_bytes,omitempty"`
	OtherProcesses int64 `json:"other_processes_bytes,omitempty"`
	Allocated      int64 `json:"allocated_bytes,omitempty"`
	Reserved       int64 `json:"reserved_bytes,omitempty"`
	Stranded       int64 `json:"stranded_bytes,omitempty"`
	LargestFree    int64 `json:"largest_free_block_bytes,omitempty"`
	Missing        int64 `json:"missing_bytes,omitempty"`
	Retries        int64 `json:"alloc_retries,omitempty"`
	OOMs           int64 `json:"ooms,omitempty"`
	GrowthPerStep  int64 `json:"growth_per_step_bytes,omitempty"`
	GrowthSteps    int   `json:"growth_steps,omitempty"`
	// KeptPerStep is a stats series' growth over steps that freed nothing
	// (every allocation kept): not taken for a leak (docs/diagnose.md,
	// "Rules"); KeptSteps is the number of those steps.
	KeptPerStep int64 `json:"kept_per_step_bytes,omitempty"`
	KeptSteps   int   `json:"kept_steps,omitempty"`
	// CarriedBytes is memory a snapshot shows allocated before its trace
	// began by code that allocated again within it, in CarriedCopies
	// blocks (docs/diagnose.md, "Leaks in a snapshot").
	CarriedBytes  int64 `json:"carried_bytes,omitempty"`
	CarriedCopies int   `json:"carried_copies,omitempty"`
	// DDPRaceBytes is DDP's old flat gradient bucket, which a snapshot
	// shows still allocated after the bucket rebuild (docs/multigpu.md,
	// "DDP's bucket rebuild race").
	DDPRaceBytes int64 `json:"ddp_rebuild_race_bytes,omitempty"`
	// StepsRun is the number of steps a stats series logged before the
	// error; the job ran out in the step after them.
	StepsRun int `json:"steps_run,omitempty"`
	// HistorySteps is the number of step boundaries a snapshot's trace
	// holds (see docs/diagnose.md, "Confidence").
	HistorySteps int  `json:"history_steps,omitempty"`
	Expandable   bool `json:"expandable_segments,omitempty"`
}

// Verdict is the cause, its figures and what fixes it.
type Verdict struct {
	// Rank is the rank the verdict is for, or -1 when the log had none.
	Rank  int   `json:"rank"`
	Cause Cause `json:"cause"`
	// Confidence says how surely the evidence given tells the cause;
	// below high, Alternatives names the causes it cannot rule out.
	Confidence   Confidence    `json:"confidence"`
	Alternatives []Alternative `json:"alternatives,omitempty"`
	Reason       string        `json:"reason"`
	Figures      Figures       `json:"figures"`
	Predicted    *Prediction   `json:"predicted,omitempty"`
	Sites        []Site        `json:"sites,omitempty"`
	Fixes        []string      `json:"fixes"`
}

// Confidence is how surely a verdict's evidence tells its cause.
type Confidence string

// The confidence levels (docs/diagnose.md, "Confidence").
const (
	// High: the evidence rules the other causes out.
	High Confidence = "high"
	// Medium: the cause is the likely one, but a named alternative fits
	// the same figures.
	Medium Confidence = "medium"
	// Low: the figures fit the alternatives about as well; more evidence
	// (the job's description, a stats series, a longer history) decides.
	Low Confidence = "low"
)

// Alternative is a cause the evidence cannot rule out, and why.
type Alternative struct {
	Cause Cause  `json:"cause"`
	Why   string `json:"why"`
}

// Job is what is known about the job besides its evidence files.
type Job struct {
	// DeviceMemory is the device's memory (from the job's description or
	// --device), used when no message gives the capacity.
	DeviceMemory int64
	// Fraction is the job's torch.cuda.set_per_process_memory_fraction.
	Fraction float64
	// Predicted is memplan's prediction for the described job.
	Predicted *Prediction
}

// Report is Diagnose's answer: one verdict per rank of a multi-rank log
// (the first also at the top), else one.
type Report struct {
	Verdict
	Ranks []Verdict  `json:"ranks,omitempty"`
	Files []FileKind `json:"files"`
}

// FileKind names an evidence file and its kind.
type FileKind struct {
	File string `json:"file"`
	Kind Kind   `json:"kind"`
}

// Diagnose merges the evidence and decides the cause.
func Diagnose(evs []*Evidence, job Job) *Report {
	r := &Report{}
	var ooms []OOM
	for _, e := range evs {
		r.Files = append(r.Files, FileKind{e.File, e.Kind})
		ooms = append(ooms, e.OOMs...)
	}
	if len(ooms) == 0 {
		ooms = []OOM{{Rank: -1}}
	}
	byRank := map[int]bool{}
	for _, o := range ooms {
		if byRank[o.Rank] {
			continue
		}
		byRank[o.Rank] = true
		v := decide(figures(o, evs, job), evs, job)
		v.Rank = o.Rank
		if noOOMRecorded(evs) {
			v.Confidence = Low
			v.Reason = "no out-of-memory error is recorded in these files (the figures are memory when they were written); " + v.Reason
		}
		r.Ranks = append(r.Ranks, v)
	}
	r.Verdict = r.Ranks[0]
	if len(r.Ranks) == 1 {
		r.Ranks = nil
	}
	return r
}

// figures gathers the numbers: the message first, then stats, summary and
// snapshot for what it lacks.
func figures(o OOM, evs []*Evidence, job Job) Figures {
	f := Figures{Request: o.Request, DeviceTotal: o.Total, DeviceFree: o.Free, Allowed: o.Allowed,
		Allocated: o.Allocated, Reserved: o.Reserved, OtherProcesses: o.Others}
	if o.InUse > 0 {
		f.NonPyTorch = max(o.InUse-o.Reserved, 0)
		if f.OtherProcesses == 0 {
			f.OtherProcesses = max(o.Total-o.Free-o.InUse, 0)
		}
	}
	for _, e := range evs {
		if len(e.Stats) > 0 && (e.Kind == KindStats || f.OOMs == 0) {
			s := e.Stats[len(e.Stats)-1]
			f.Retries, f.OOMs = s.Retries, s.OOMs
			if o.Format == "" {
				f.Allocated, f.Reserved = s.Allocated, s.Reserved
			}
		}
		if e.Kind == KindStats && len(e.Stats) > 1 {
			f.StepsRun = stepsRun(e.Stats)
		}
		if g, keptAll := seriesGrowth(e.Stats); g != nil && keptAll {
			f.KeptPerStep, f.KeptSteps = g.PerStep, g.Steps
		} else if g != nil && f.GrowthPerStep == 0 {
			f.GrowthPerStep, f.GrowthSteps = g.PerStep, g.Steps
		}
		if s := e.Snapshot; s != nil {
			f.LargestFree, f.Expandable = s.LargestFree, s.Expandable
			if o.Format == "" && f.Reserved == 0 {
				f.Allocated, f.Reserved, f.Request, f.DeviceFree = s.Allocated, s.Reserved, s.Request, s.DeviceFree
			}
			f.HistorySteps = s.HistorySteps
			if s.Growth != nil {
				f.GrowthPerStep, f.GrowthSteps = s.Growth.PerStep, s.Growth.Steps
			}
			if s.Carried != nil {
				f.CarriedBytes, f.CarriedCopies = s.Carried.Bytes, s.Carried.Allocs
			}
			if s.DDPRace != nil {
				f.DDPRaceBytes = s.DDPRace.Old
			}
		}
	}
	if f.DeviceTotal == 0 {
		f.DeviceTotal = job.DeviceMemory
	}
	if f.Allowed == 0 && job.Fraction > 0 && f.DeviceTotal > 0 {
		f.Allowed = int64(job.Fraction * float64(f.DeviceTotal))
	}
	if o.Format == "" && f.OtherProcesses == 0 && f.DeviceTotal > 0 && f.DeviceFree > 0 {
		// A snapshot and a device size: what is neither free nor this
		// allocator's, less the process's own context and modules.
		f.NonPyTorch = contextBytes
		f.OtherProcesses = max(f.DeviceTotal-f.DeviceFree-f.Reserved-contextBytes, 0)
	}
	f.Stranded = max(f.Reserved-f.Allocated, 0)
	f.Limit = limit(f, job)
	if o.Format == "" && f.Allowed == 0 && f.Request > 0 && f.DeviceFree >= f.Request {
		// A snapshot whose failed request was smaller than what the device
		// had free: a memory fraction capped the process at about what it
		// had reserved.
		f.Limit = f.Reserved
	}
	if f.Request > 0 && f.Limit > 0 {
		f.Missing = max(f.Request-(f.Limit-f.Reserved), 0)
	}
	return f
}

// limit is what this process's allocator could have reserved: the cap, or
// what the driver had free plus what it held, or the device less the
// memory outside the allocator.
func limit(f Figures, job Job) int64 {
	switch {
	case f.Allowed > 0:
		return f.Allowed
	case f.DeviceFree > 0 && (f.DeviceTotal == 0 || f.DeviceFree+f.Reserved <= f.DeviceTotal):
		return f.DeviceFree + f.Reserved
	case f.DeviceTotal > 0 && job.Predicted != nil:
		return f.DeviceTotal - (job.Predicted.DeviceTotal - job.Predicted.PeakReserved)
	}
	return f.DeviceTotal
}

func stepsRun(ss []Stats) int {
	n := 0
	for _, s := range ss {
		if s.OOMs == 0 {
			n++
		}
	}
	return n
}

// seriesGrowth is growth in a memory_stats series taken before the error
// (lines with no error counted): the last points each higher than the one
// before, by at least a quarter of the final allocated memory in all
// (a tenth, over four or more steps). keptAll reports that the series
// counts allocations and the growing steps made some but freed none.
func seriesGrowth(ss []Stats) (g *Growth, keptAll bool) {
	var pts []int64
	var counts []Stats
	for _, s := range ss {
		if s.OOMs == 0 {
			pts = append(pts, s.Allocated)
			counts = append(counts, s)
		}
	}
	k := 0
	for i := len(pts) - 1; i > 0 && pts[i] > pts[i-1]+1<<20; i-- {
		k++
	}
	if k < 2 {
		return nil, false
	}
	last := pts[len(pts)-1]
	rise := last - pts[len(pts)-1-k]
	if float64(rise) < 0.25*float64(last) && (k < 4 || float64(rise) < 0.10*float64(last)) {
		return nil, false
	}
	from, to := counts[len(counts)-1-k], counts[len(counts)-1]
	keptAll = to.Allocs > from.Allocs && to.Frees == from.Frees
	return &Growth{PerStep: rise / int64(k), Steps: k}, keptAll
}

func gib(v int64) string { return units.Format(v) }

// noOOMRecorded reports whether the evidence shows that no out-of-memory
// error happened: no log message, memory_stats or a summary counting no
// OOMs, a snapshot whose history holds no oom event; and no file that
// cannot tell (a snapshot without history). A dump taken from a healthy
// job can still be read, but what it shows is not the cause of a crash.
func noOOMRecorded(evs []*Evidence) bool {
	for _, e := range evs {
		switch {
		case len(e.OOMs) > 0:
			return false
		case e.Snapshot != nil && (e.Snapshot.Events == 0 || e.Snapshot.Request > 0):
			return false
		}
		for _, st := range e.Stats {
			if st.OOMs > 0 {
				return false
			}
		}
		if e.Kind == KindLog {
			return false
		}
	}
	return len(evs) > 0
}
