package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"
)

// A snapshot's history can hold a million trace entries, each with a stack
// of some twenty Python frames. They are kept compactly: an entry as an
// event of integers, its stack as the id of an interned sequence of frame
// ids, each distinct frame once. Nothing here holds a pointer per entry, so
// the collector has little to scan.

// action is a trace entry's "action", as far as diagnose reads it.
type action uint8

const (
	actOther action = iota // free_requested, segment_alloc, snapshot, …
	actAlloc
	actFreeCompleted
	actOOM
)

func actionOf(s string) action {
	switch s {
	case "alloc":
		return actAlloc
	case "free_completed":
		return actFreeCompleted
	case "oom":
		return actOOM
	}
	return actOther
}

// event is a trace entry: its action, the block's address and size (for an
// oom entry, the request and what the device had free) and its stack.
type event struct {
	act   action
	stack int32 // id in traceTables, or -1 when the entry has no frames
	addr  int64
	size  int64
	free  int64
}

// pframe is a Python frame ({"name", "filename", "line"}).
type pframe struct {
	name, file string
	line       int64
}

// traceTables holds a snapshot's events, its distinct frames and its
// distinct stacks (sequences of frame ids, innermost first).
type traceTables struct {
	events   []event
	frames   []pframe
	frameID  map[pframe]int32
	stackID  map[string]int32 // key: the frame ids, 4 bytes each
	stackAt  []int32          // stack s is stackFr[stackAt[s]:stackAt[s+1]]
	stackFr  []int32
	scratch  []byte
	userMemo map[int32]string
}

func newTraceTables() *traceTables {
	return &traceTables{frameID: map[pframe]int32{}, stackID: map[string]int32{}, stackAt: []int32{0}}
}

// frame interns a frame and returns its id.
func (t *traceTables) frame(f pframe) int32 {
	if id, ok := t.frameID[f]; ok {
		return id
	}
	id := int32(len(t.frames))
	t.frames = append(t.frames, f)
	t.frameID[f] = id
	return id
}

// stack interns a sequence of frame ids and returns the stack's id.
func (t *traceTables) stack(ids []int32) int32 {
	t.scratch = t.scratch[:0]
	for _, id := range ids {
		t.scratch = binary.LittleEndian.AppendUint32(t.scratch, uint32(id))
	}
	if id, ok := t.stackID[string(t.scratch)]; ok {
		return id
	}
	id := int32(len(t.stackAt) - 1)
	t.stackFr = append(t.stackFr, ids...)
	t.stackAt = append(t.stackAt, int32(len(t.stackFr)))
	t.stackID[string(t.scratch)] = id
	return id
}

// stackFrames is the frame ids of stack s.
func (t *traceTables) stackFrames(s int32) []int32 {
	if s < 0 || int(s)+1 >= len(t.stackAt) {
		return nil
	}
	return t.stackFr[t.stackAt[s]:t.stackAt[s+1]]
}

// stackOf interns the frames of a trace entry's "frames" value: a stack
// already interned, or a list of frames (decoded or generic dicts).
// Items that are not frames are left out.
func (t *traceTables) stackOf(v pval) int32 {
	if v.kind == pStack {
		return int32(v.i)
	}
	var ids []int32
	for _, f := range v.list() {
		switch f.kind {
		case pFrame:
			ids = append(ids, int32(f.i))
		case pDict:
			if f.d == nil {
				continue // an empty dict
			}
			if fr, ok := asFrame(*f.d); ok {
				ids = append(ids, t.frame(fr))
			}
		}
	}
	if len(ids) == 0 {
		return -1
	}
	return t.stack(ids)
}

// foldEvent sets e's fields from a trace entry's items (key, value, …). It
// reports false (and leaves e as it may be) when an item that diagnose
// reads has a type a trace entry does not give it.
func (t *traceTables) foldEvent(e *event, items []pval) bool {
	for k := 0; k+1 < len(items); k += 2 {
		key, v := items[k], items[k+1]
		if key.kind != pStr {
			return false
		}
		switch key.s {
		case "action":
			if v.kind != pStr {
				return false
			}
			e.act = actionOf(v.s)
		case "addr", "size", "device_free":
			if v.kind != pInt {
				return false
			}
			switch key.s {
			case "addr":
				e.addr = v.i
			case "size":
				e.size = max(v.i, 0)
			default:
				e.free = max(v.i, 0)
			}
		case "frames":
			if v.kind != pStack && v.kind != pList {
				return false
			}
			e.stack = t.stackOf(v)
		}
	}
	return true
}

// hasAction reports whether a dict's items (key, value, …) name a trace
// entry's action.
func hasAction(items []pval) bool {
	for k := 0; k+1 < len(items); k += 2 {
		if items[k].kind == pStr && items[k].s == "action" && items[k+1].kind == pStr {
			return true
		}
	}
	return false
}

// traceEvents is the events of a snapshot's "device_traces": lists of
// entries, decoded as events or (from the gopickle fallback) as dicts.
func (t *traceTables) traceEvents(v pval) ([]event, error) {
	if v.kind != pList {
		return nil, nil
	}
	if trs := v.list(); len(trs) == 1 && trs[0].kind == pEvents && t.inOrder(*trs[0].ix) {
		ix := *trs[0].ix
		return t.events[ix[0] : ix[0]+int32(len(ix))], nil
	}
	n := 0
	for _, tr := range v.list() {
		n += len(tr.list())
		if tr.kind == pEvents {
			n += len(*tr.ix)
		}
	}
	out := make([]event, 0, n)
	for _, tr := range v.list() {
		switch tr.kind {
		case pEvents:
			for _, i := range *tr.ix {
				out = append(out, t.events[i])
			}
			continue
		case pList:
		default:
			return nil, errors.New("snapshot pickle: a device trace is not a list")
		}
		for _, d := range tr.list() {
			switch {
			case d.kind == pEvent:
				out = append(out, t.events[d.i])
			case d.kind == pDict:
				e := event{stack: -1}
				if d.d != nil && !t.foldEvent(&e, *d.d) {
					e = event{stack: -1}
				}
				out = append(out, e)
			default:
				return nil, errors.New("snapshot pickle: a trace entry is not a dict")
			}
		}
	}
	return out, nil
}

// inOrder reports whether ix is a run of consecutive event ids, as the
// one device trace of most snapshots is: its events need no copy.
func (t *traceTables) inOrder(ix []int32) bool {
	for k, id := range ix {
		if id != ix[0]+int32(k) {
			return false
		}
	}
	return len(ix) > 0
}

// userFrame is stack s's innermost frame outside installed packages, as
// "dir/file.py:line in func".
func (t *traceTables) userFrame(s int32) string {
	if u, ok := t.userMemo[s]; ok {
		return u
	}
	ids := t.stackFrames(s)
	u := "(no Python frames recorded)"
	for k, id := range ids {
		f := t.frames[id]
		str := fmt.Sprintf("%s:%d in %s", path.Join(path.Base(path.Dir(f.file)), path.Base(f.file)), f.line, f.name)
		if k == 0 {
			u = str
		}
		if !strings.Contains(f.file, "-packages/") && !strings.HasPrefix(f.file, "<") {
			u = str
			break
		}
	}
	if t.userMemo == nil {
		t.userMemo = map[int32]string{}
	}
	t.userMemo[s] = u
	return u
}
