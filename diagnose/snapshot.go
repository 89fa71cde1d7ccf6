package diagnose

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
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
	// Request and DeviceFree are from the trace's last "oom" entry.
	Request    int64 `json:"request_bytes,omitempty"`
	DeviceFree int64 `json:"device_free_bytes,omitempty"`
	// Growth is set when the trace shows allocated memory rising from one
	// step to the next (see docs/diagnose.md, "Leaks in a snapshot").
	Growth *Growth `json:"growth,omitempty"`
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

type event struct {
	action     string
	addr, size int64
	free       int64
	frames     *types.List
}

// ReadSnapshot unpickles a memory snapshot and digests it.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if err := prescan(data); err != nil {
		return nil, err
	}
	v, err := unpickle(bytes.NewReader(data))
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("snapshot pickle cut short")
		}
		return nil, fmt.Errorf("snapshot pickle: %w", err)
	}
	top, ok := v.(*types.Dict)
	if !ok {
		return nil, errors.New("snapshot pickle: not a dict (is this torch.cuda.memory._dump_snapshot()?)")
	}
	s := &Snapshot{}
	segs, ok := get(top, "segments").(*types.List)
	if !ok {
		return nil, errors.New(`snapshot pickle: no "segments" list`)
	}
	for _, sv := range *segs {
		if err := s.addSegment(sv); err != nil {
			return nil, err
		}
	}
	if set, ok := get(top, "allocator_settings").(*types.Dict); ok {
		if b, ok := get(set, "expandable_segments").(bool); ok && b {
			s.Expandable = true
		}
	}
	evs, err := traceEvents(get(top, "device_traces"))
	if err != nil {
		return nil, err
	}
	s.Events = len(evs)
	for _, e := range evs {
		if e.action == "oom" {
			s.Request, s.DeviceFree = e.size, e.free
		}
	}
	s.Growth = growth(evs)
	return s, nil
}

// unpickle loads a pickle. gopickle v0.2.0 panics on some malformed input
// (a FRAME opcode with an impossible length, found by FuzzReadSnapshot):
// that is a bad file, not a bug to crash on.
func unpickle(r io.Reader) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("malformed pickle (%v)", p)
		}
	}()
	u := pickle.NewUnpickler(r)
	return u.Load()
}

func (s *Snapshot) addSegment(sv any) error {
	seg, ok := sv.(*types.Dict)
	if !ok {
		return errors.New("snapshot pickle: a segment is not a dict")
	}
	s.Segments++
	total, alloc := num(get(seg, "total_size")), num(get(seg, "allocated_size"))
	if total < 0 || alloc < 0 {
		return errors.New("snapshot pickle: a segment without sizes")
	}
	s.Reserved += total
	s.Allocated += alloc
	if b, ok := get(seg, "is_expandable").(bool); ok && b {
		s.Expandable = true
	}
	blocks, _ := get(seg, "blocks").(*types.List)
	if blocks == nil {
		return nil
	}
	for _, bv := range *blocks {
		b, ok := bv.(*types.Dict)
		if !ok {
			return errors.New("snapshot pickle: a block is not a dict")
		}
		if st, _ := get(b, "state").(string); st == "inactive" {
			n := max(num(get(b, "size")), 0)
			s.Free += n
			s.LargestFree = max(s.LargestFree, n)
		}
	}
	return nil
}

func traceEvents(v any) ([]event, error) {
	traces, ok := v.(*types.List)
	if !ok {
		return nil, nil
	}
	var out []event
	for _, tv := range *traces {
		tr, ok := tv.(*types.List)
		if !ok {
			return nil, errors.New("snapshot pickle: a device trace is not a list")
		}
		for _, ev := range *tr {
			d, ok := ev.(*types.Dict)
			if !ok {
				return nil, errors.New("snapshot pickle: a trace entry is not a dict")
			}
			e := event{}
			for _, kv := range *d {
				k, _ := kv.Key.(string)
				switch k {
				case "action":
					e.action, _ = kv.Value.(string)
				case "addr":
					e.addr = num(kv.Value)
				case "size":
					e.size = max(num(kv.Value), 0)
				case "device_free":
					e.free = max(num(kv.Value), 0)
				case "frames":
					e.frames, _ = kv.Value.(*types.List)
				}
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// get is a dict lookup by string key (types.Dict.Get compares with
// reflect.DeepEqual, which is slow on large snapshots).
func get(d *types.Dict, key string) any {
	for _, kv := range *d {
		if k, ok := kv.Key.(string); ok && k == key {
			return kv.Value
		}
	}
	return nil
}

// num reads a pickled integer; anything else (or out of range) is -1.
func num(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
	case bool:
		if x {
			return 1
		}
		return 0
	}
	return -1
}
