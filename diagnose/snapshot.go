package diagnose

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/nlpodyssey/gopickle/pickle"
)

// Snapshot is the digest of a torch.cuda.memory._dump_snapshot() pickle:
// the allocator's segments at the dump and, when history was recorded
// (torch.cuda.memory._record_memory_history), what its trace shows.
type Snapshot struct {
	Segments int `json:"segments"`
	// Reserved is the segments' total size, Allocated the blocks in use.
	Reserved  int64 `json:"reserved_bytes"`
	Allocated int64 `json:"allocated_bytes"`
	// Free is the bytes in inactive blocks, LargestFree the largest one.
	Free        int64 `json:"free_bytes"`
	LargestFree int64 `json:"largest_free_block_bytes"`
	Expandable  bool  `json:"expandable_segments"`
	// Events is the number of trace entries; 0 means no history.
	Events int `json:"trace_events"`
	// HistorySteps is the number of step boundaries the trace holds.
	HistorySteps int `json:"history_steps,omitempty"`
	// Request and DeviceFree are from the trace's last "oom" entry.
	Request    int64 `json:"request_bytes,omitempty"`
	DeviceFree int64 `json:"device_free_bytes,omitempty"`
	// Growth is set when the trace shows allocated memory rising from one
	// step to the next (see docs/diagnose.md, "Leaks in a snapshot").
	Growth *Growth `json:"growth,omitempty"`
	// Carried is set when blocks allocated before the trace began, by
	// code that allocated again within it, are still live (see
	// docs/diagnose.md, "Leaks in a snapshot").
	Carried *Site `json:"carried,omitempty"`
	// DDPRace is set when DDP's construction bucket is still allocated
	// after its rebuild (ddprace.go).
	DDPRace *DDPRace `json:"ddp_rebuild_race,omitempty"`
}

// Growth is memory that rises step over step.
type Growth struct {
	// PerStep is the mean rise of the low point between steps, over Steps
	// steps.
	PerStep int64 `json:"per_step_bytes"`
	Steps   int   `json:"steps"`
	// Sites are the Python frames that allocated what was never freed,
	// most bytes first (snapshots only).
	Sites []Site `json:"sites,omitempty"`
}

// Site is a place in the user's code that allocated memory never freed.
type Site struct {
	Frame  string `json:"frame"`
	Allocs int    `json:"allocations"`
	Bytes  int64  `json:"bytes"`
}

// ReadSnapshot unpickles a memory snapshot and digests it. The subset of
// pickle torch writes is decoded by decodePickle; anything else falls back
// to gopickle.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	hint := int64(0)
	if br, ok := r.(*bytes.Reader); ok {
		hint = int64(br.Len())
	}
	return readSnapshot(r, hint)
}

// readSnapshot is ReadSnapshot with the data's size when known (hint > 0),
// read into one buffer rather than one grown step by step.
func readSnapshot(r io.Reader, hint int64) (*Snapshot, error) {
	buf := bytes.NewBuffer(make([]byte, 0, max(hint, 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return decodeSnapshot(buf.Bytes())
}

// decodeSnapshot decodes and digests a snapshot's bytes.
func decodeSnapshot(data []byte) (*Snapshot, error) {
	refs, err := prescan(data)
	if err != nil {
		return nil, err
	}
	top, tabs, err := decodePickle(data, refs)
	if errors.Is(err, errSubset) {
		var v any
		v, err = unpickle(bytes.NewReader(data))
		top, tabs = fromGo(v), newTraceTables()
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("snapshot pickle cut short")
		}
		return nil, fmt.Errorf("snapshot pickle: %w", err)
	}
	return digest(top, tabs)
}

// digest reads what diagnose needs from a decoded snapshot.
func digest(top pval, t *traceTables) (*Snapshot, error) {
	if top.kind != pDict {
		return nil, errors.New("snapshot pickle: not a dict (is this torch.cuda.memory._dump_snapshot()?)")
	}
	s := &Snapshot{}
	segs := top.get("segments")
	if segs.kind != pList {
		return nil, errors.New(`snapshot pickle: no "segments" list`)
	}
	var blocks []liveBlock
	for _, sv := range segs.list() {
		if err := s.addSegment(sv, t, &blocks); err != nil {
			return nil, err
		}
	}
	if set := top.get("allocator_settings").get("expandable_segments"); set.kind == pBool && set.i == 1 {
		s.Expandable = true
	}
	evs, err := t.traceEvents(top.get("device_traces"))
	if err != nil {
		return nil, err
	}
	s.Events = len(evs)
	for _, e := range evs {
		if e.act == actOOM {
			s.Request, s.DeviceFree = e.size, e.free
		}
	}
	s.DDPRace = ddpRace(t, blocks)
	var live map[int64]int
	s.Growth, s.HistorySteps, live = growth(evs, t)
	if s.HistorySteps > 0 {
		s.Carried = carried(evs, t, live, blocks, s.Allocated)
	}
	return s, nil
}

// unpickle loads a pickle with gopickle. gopickle v0.2.0 panics on some
// malformed input (a FRAME opcode with an impossible length, found by
// FuzzReadSnapshot): that is a bad file, not a bug to crash on.
func unpickle(r io.Reader) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("malformed pickle (%v)", p)
		}
	}()
	u := pickle.NewUnpickler(r)
	return u.Load()
}

// addSegment adds a segment's sizes and appends its allocated blocks.
func (s *Snapshot) addSegment(seg pval, t *traceTables, blocks *[]liveBlock) error {
	if seg.kind != pDict {
		return errors.New("snapshot pickle: a segment is not a dict")
	}
	s.Segments++
	total, alloc := seg.get("total_size").num(), seg.get("allocated_size").num()
	if total < 0 || alloc < 0 {
		return errors.New("snapshot pickle: a segment without sizes")
	}
	s.Reserved += total
	s.Allocated += alloc
	if e := seg.get("is_expandable"); e.kind == pBool && e.i == 1 {
		s.Expandable = true
	}
	for _, b := range seg.get("blocks").list() {
		if b.kind != pDict {
			return errors.New("snapshot pickle: a block is not a dict")
		}
		st := b.get("state")
		if st.kind != pStr {
			continue
		}
		switch n := max(b.get("size").num(), 0); st.s {
		case "inactive":
			s.Free += n
			s.LargestFree = max(s.LargestFree, n)
		case "active_allocated":
			*blocks = append(*blocks, liveBlock{addr: b.get("address").num(), size: n, stack: t.stackOf(b.get("frames"))})
		}
	}
	return nil
}
