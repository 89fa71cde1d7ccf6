package planner

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// Request is what to plan for.
type Request struct {
	// GlobalBatch is the samples per optimizer step: DP·Micro·Accum.
	GlobalBatch int64
	// GPUs, when set, is the exact number of GPUs; otherwise layouts use
	// at most MaxGPUs (whole nodes once they span more than one).
	GPUs, MaxGPUs int64
	// NodeSize is the GPUs per node: TP stays inside one (default
	// model.NodeGPUs).
	NodeSize int64
	// Top is how many fitting layouts to return (default 10).
	Top int
	// Band is the target fill; Margin the safety margin below its upper
	// edge, as tuner.Limit takes them (defaults: tuner.DefaultBand,
	// tuner.DefaultMargin).
	Band   tuner.Band
	Margin float64
	// Zero and Checkpointing are the ZeRO stages and checkpointing modes
	// to consider (defaults: 0–3; none and every-block).
	Zero          []int64
	Checkpointing []model.Checkpointing
	// Progress, when set, is called before each estimate the search asks
	// the oracle for (a command draws a progress line with it).
	Progress func(Progress)
}

// Progress is where a search stands when it asks for an estimate.
type Progress struct {
	// Estimates counts the estimates asked for, this one included; Fits
	// the layouts found to fit so far, of the Top wanted.
	Estimates, Fits, Top int
	// Layout is the layout being estimated.
	Layout Layout
}

// Verdicts of a Candidate.
const (
	Fits         = "fits"
	Over         = "over"
	Invalid      = "invalid"
	NotSimulated = "not simulated"
	Failed       = "error"
)

// Candidate is one layout and what the planner found about it.
type Candidate struct {
	Layout Layout `json:"layout"`
	Name   string `json:"name"`
	GPUs   int64  `json:"gpus"`
	Proxy  Proxy  `json:"proxy"`
	// Verdict is Fits, Over, Invalid, NotSimulated or Failed; Reason says
	// why it does not fit.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	// Memory is the oracle's answer, or with Bound set a lower bound: the
	// memory of a layout that needs no more and already does not fit.
	Memory *Busiest `json:"memory,omitempty"`
	Bound  bool     `json:"bound,omitempty"`
	// Fill is the busiest rank's device total over the device's memory;
	// OverBytes how far it is above the limit.
	Fill      float64 `json:"fill,omitempty"`
	OverBytes int64   `json:"over_bytes,omitempty"`
}

// Stats count what the search did.
type Stats struct {
	Layouts      int `json:"layouts"`
	Invalid      int `json:"invalid"`
	NotSimulated int `json:"not_simulated"`
	Evaluated    int `json:"evaluated"`
	// OracleCalls is the estimates run: Evaluated less the layouts that
	// shared a rank program with one already estimated.
	OracleCalls int `json:"oracle_calls"`
	Pruned      int `json:"pruned"`
	// Unvisited were ranked below the last layout returned.
	Unvisited int `json:"unvisited"`
}

// Result is a plan.
type Result struct {
	Model        string     `json:"model"`
	Device       string     `json:"device"`
	DeviceMemory int64      `json:"device_memory_bytes"`
	Band         tuner.Band `json:"band"`
	// Limit is the device total a layout's busiest rank must stay at or
	// below: the band's upper edge less the safety margin.
	Limit       int64       `json:"limit_bytes"`
	GlobalBatch int64       `json:"global_batch"`
	Seq         int64       `json:"seq,omitempty"`
	Layouts     []Candidate `json:"layouts"`
	NearMisses  []Candidate `json:"near_misses"`
	// InvalidReasons counts the enumerated layouts the model's shape
	// rules out, by rule (InvalidError.Rule).
	InvalidReasons map[string]int `json:"invalid_reasons,omitempty"`
	// Skipped says which parallelisms were not enumerated for this model,
	// and why (expert parallelism of experts model.Model.EPRefusal
	// refuses).
	Skipped []string `json:"skipped,omitempty"`
	// Notes say what the reader of the layouts should know: that some of
	// them shard a block's experts over more ranks than it has, which
	// FSDP2 pads (paddedNote).
	Notes []string `json:"notes,omitempty"`
	Stats Stats    `json:"stats"`
}

// DefaultMaxGPUs is the most GPUs a Request without GPUs or MaxGPUs
// plans for.
const DefaultMaxGPUs = 1024

// FirstLayout is the first layout Plan ranks for req with the simulator, or
// nil when none fits: the answer tune and the report give for a job that
// none of their data-parallel changes fits.
func FirstLayout(spec *model.Spec, req Request) (*Candidate, error) {
	req.Top = 1
	r, err := Plan(spec, req, Simulator{})
	switch {
	case errors.Is(err, ErrNoLayout):
		return nil, nil
	case err != nil:
		return nil, err
	case len(r.Layouts) == 0:
		return nil, nil
	}
	return &r.Layouts[0], nil
}

// ErrNoLayout is returned (wrapped) by Plan when no layout fits; the
// Result still lists the near misses.
var ErrNoLayout = errors.New("no layout fits")

func (r *Request) defaults() error {
	if r.GlobalBatch < 1 {
		return fmt.Errorf("global batch must be positive, got %d", r.GlobalBatch)
	}
	if r.GPUs < 0 || r.MaxGPUs < 0 {
		return fmt.Errorf("GPU counts must be positive")
	}
	if r.GPUs == 0 && r.MaxGPUs == 0 {
		r.MaxGPUs = DefaultMaxGPUs
	}
	if r.NodeSize == 0 {
		r.NodeSize = model.NodeGPUs
	}
	if r.Top == 0 {
		r.Top = 10
	}
	if r.Band == (tuner.Band{}) {
		r.Band = tuner.DefaultBand
	}
	if r.Zero == nil {
		r.Zero = []int64{0, 1, 2, 3}
	}
	if r.Checkpointing == nil {
		r.Checkpointing = []model.Checkpointing{{Mode: model.CkptNone}, {Mode: model.CkptBlock}}
	}
	return nil
}

// limitBytes is the one place the planner applies the tuner's rule for
// "fits": at or below the band's upper edge less the safety margin.
func limitBytes(spec *model.Spec, band tuner.Band, margin float64) int64 {
	return int64(tuner.Limit(band, tuner.Constraints{Margin: margin}) * float64(spec.Device.Memory))
}

// Plan enumerates the layouts of req for spec, asks oracle about them in
// rank order until req.Top fit, and returns those and the near misses.
// Ranking: fewest GPUs, then the smallest Proxy.StepSeconds, then the
// larger micro-batch. It returns the Result with an error wrapping
// ErrNoLayout when none fits.
func Plan(spec *model.Spec, req Request, oracle Oracle) (*Result, error) {
	if err := req.defaults(); err != nil {
		return nil, err
	}
	if spec.Training.Precision == model.FSDPBF16 {
		// FSDP2's mixed-precision policy exists at ZeRO 2 and 3 only.
		req.Zero = slices.DeleteFunc(slices.Clone(req.Zero), func(z int64) bool { return z < 2 })
	}
	res := &Result{Model: spec.Name, Device: spec.Device.Name, DeviceMemory: spec.Device.Memory, Band: req.Band,
		Limit: limitBytes(spec, req.Band, req.Margin), GlobalBatch: req.GlobalBatch, Seq: spec.Training.Seq,
		InvalidReasons: map[string]int{}}
	if why := epRefused(&spec.Model); why != "" {
		res.Skipped = append(res.Skipped, why)
	}
	sh := shapeOf(spec, model.Params(spec.Model.Lower()))
	es := rank(spec, &req, res, sh)
	s := newSearch(spec, oracle, res.Limit)
	if req.Progress != nil {
		s.progress = func(p Progress) {
			p.Fits, p.Top = len(res.Layouts), req.Top
			req.Progress(p)
		}
	}
	misses := newMisses(req.Top)
	for n, e := range es {
		if len(res.Layouts) == req.Top {
			res.Stats.Unvisited = len(es) - n
			break
		}
		c := Candidate{Layout: e.l, GPUs: e.l.GPUs(), Proxy: e.p}
		s.judge(&c)
		if c.Verdict == Fits {
			c.Name = c.Layout.String()
			res.Layouts = append(res.Layouts, c)
		} else {
			misses.add(c)
		}
	}
	res.Stats.Evaluated, res.Stats.OracleCalls, res.Stats.Pruned = s.evaluated, s.calls, s.pruned
	res.Stats.NotSimulated = s.notSim
	res.NearMisses = misses.pick()
	if n := paddedNote(spec, res); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if len(res.Layouts) == 0 {
		return res, fmt.Errorf("%w: %d layouts of %s on %s", ErrNoLayout, res.Stats.Layouts, spec.Name, spec.Device.Name)
	}
	return res, nil
}

// ranked is a valid layout and its proxy.
type ranked struct {
	l Layout
	p Proxy
}

// rank enumerates req's layouts for spec and returns the valid ones in
// rank order (fewest GPUs, the smallest proxy step time, the larger
// micro-batch), counting them and the invalid ones in res.
func rank(spec *model.Spec, req *Request, res *Result, sh shape) []ranked {
	es := make([]ranked, 0, 1<<16)
	req.enumerate(spec, func(l Layout) {
		res.Stats.Layouts++
		if err := Validate(spec, l); err != nil {
			res.Stats.Invalid++
			var ie *InvalidError
			if errors.As(err, &ie) {
				res.InvalidReasons[ie.Rule]++
			}
			return
		}
		es = append(es, ranked{l, proxyOf(sh, l, req.NodeSize)})
	})
	// Sort indices: the entries are large.
	idx := make([]int32, len(es))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.Slice(idx, func(i, j int) bool {
		a, b := &es[idx[i]], &es[idx[j]]
		if ga, gb := a.l.GPUs(), b.l.GPUs(); ga != gb {
			return ga < gb
		}
		if a.p.StepSeconds != b.p.StepSeconds {
			return a.p.StepSeconds < b.p.StepSeconds
		}
		if a.l.Micro != b.l.Micro {
			return a.l.Micro > b.l.Micro
		}
		return idx[i] < idx[j]
	})
	out := make([]ranked, len(es))
	for n, i := range idx {
		out[n] = es[i]
	}
	return out
}

// ranksBefore is the ranking Plan sorts by, for tests.
func ranksBefore(a, b *Candidate) bool {
	if a.GPUs != b.GPUs {
		return a.GPUs < b.GPUs
	}
	if a.Proxy.StepSeconds != b.Proxy.StepSeconds {
		return a.Proxy.StepSeconds < b.Proxy.StepSeconds
	}
	return a.Layout.Micro > b.Layout.Micro
}

// misses keeps the near misses as the search meets them: those over the
// limit (one per reason: layouts pruned by the same failing layout say the
// same thing) and the first n of the others, one per mesh. Layouts known
// to be over only from an estimate that stopped (Busiest.Stopped) are far
// over, whatever their bound says: they come after the others.
type misses struct {
	n     int
	seen  map[any]bool
	over  []Candidate
	far   []Candidate
	other []Candidate
}

func newMisses(n int) *misses { return &misses{n: n, seen: map[any]bool{}} }

func (m *misses) add(c Candidate) {
	type mesh struct{ dp, tp, pp, cp, ep int64 }
	l := c.Layout
	var key any = c.Reason
	switch {
	case c.Verdict != Over:
		if len(m.other) == m.n {
			return
		}
		key = mesh{l.DP, l.TP, l.PP, l.CP, l.EP}
	case c.Bound:
		key = c.Memory.DeviceTotal
	}
	if m.seen[key] {
		return
	}
	m.seen[key] = true
	switch {
	case c.Verdict == Over && c.Memory.Stopped:
		m.far = append(m.far, c)
	case c.Verdict == Over:
		m.over = append(m.over, c)
	default:
		m.other = append(m.other, c)
	}
}

// pick returns the n over the limit closest to fitting, then the others,
// best-ranked first.
func (m *misses) pick() []Candidate {
	for _, l := range [][]Candidate{m.over, m.far} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].OverBytes < l[j].OverBytes })
	}
	over := append(m.over, m.far...)
	out := append(over[:min(m.n, len(over))], m.other...)
	for i := range out {
		out[i].Name = out[i].Layout.String()
	}
	return out
}

// paddedNote says, when some of res's layouts or near misses shard a
// block's experts along their first dimension over more ranks than it has
// (program.padded, the search's rule), that FSDP2 pads them there and that
// --fsdp-experts auto plans them as torchtitan shards them; else "".
func paddedNote(spec *model.Spec, res *Result) string {
	experts := spec.Model.ShardedExpertRows(&model.Training{})
	for _, cs := range [][]Candidate{res.Layouts, res.NearMisses} {
		for _, c := range cs {
			if programOf(c.Layout, experts, spec.Training.FSDPExperts).padded {
				return fmt.Sprintf("layouts whose ZeRO 2 or 3 spans more than %d ranks (dp·cp·tp) pad each block's %d experts, which FSDP2 shards along their first dimension: every shard holds a whole expert or its padding and every all-gather moves the padding too (docs/multigpu.md, \"FSDP2's padded shards\"); --fsdp-experts auto plans them sharded along their second dimension, as torchtitan shards them", experts, experts)
			}
		}
	}
	return ""
}
