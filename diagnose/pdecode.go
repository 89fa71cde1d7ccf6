package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"unsafe"

	"github.com/nlpodyssey/gopickle/types"
)

// pval is a decoded pickle value: a scalar held inline (no allocation per
// integer or string), a list or dict behind a pointer so that a memoized
// container sees the items added after it was memoized, or one of the
// compact forms of a snapshot's history (a frame, a stack of frames, a
// trace entry, a list of trace entries) kept in traceTables.
type pval struct {
	kind pkind
	// shared is set on a value kept in the memo, at slot m: a container
	// must stay the object the memo holds, and a value folded into a
	// compact form is folded there too.
	shared bool
	m      uint32
	// i is an integer, a bool (0 or 1), a float's bits, or the id of a
	// frame, stack or event in traceTables.
	i  int64
	s  string
	l  *[]pval  // pList
	d  *[]pval  // pDict: key, value, key, value, …
	ix *[]int32 // pEvents: event ids
}

type pkind uint8

const (
	pNone pkind = iota
	pBool
	pInt
	pFloat
	pStr
	pList
	pDict
	pMark   // a MARK on the stack
	pOther  // a value digest does not read (bytes, big integers)
	pFrame  // a dict with a Python frame's three keys: frame i
	pStack  // a list of frames: stack i
	pEvent  // a dict with a trace entry's "action": event i
	pEvents // a list of trace entries: events *ix
)

// errSubset is returned by decodePickle for an opcode outside the subset
// torch.cuda.memory._dump_snapshot writes (or a use of the memo Python's
// pickler never makes); the caller falls back to gopickle.
var errSubset = errors.New("pickle opcode outside the snapshot subset")

// decoder decodes the subset of pickle protocol 2–5 that
// torch.cuda.memory._dump_snapshot produces (dicts, lists, tuples, strings,
// integers, floats, None, booleans, memo and frames). It is strict: any
// other opcode gives errSubset. Its data must have passed prescan, which
// bounds every length against the data's size and lists the memo indices
// a GET reads: only those are kept, each in a slot of its own.
//
// Strings are views of the data, not copies. A dict holding a Python frame
// or a trace entry is folded, when its SETITEMS fills it, into an id in
// traceTables; a list filled with frames becomes an interned stack, one
// filled with trace entries a list of event ids.
type decoder struct {
	data    []byte
	stack   []pval
	marks   []int
	refs    memoRefs
	rank    []uint32 // memo slots before each word of refs
	memo    []pval   // by slot
	memoLen uint64
	ids     []int32 // scratch
	t       *traceTables
}

// decodePickle decodes data (see decoder) into its top value and the
// tables that hold its history.
func decodePickle(data []byte, refs memoRefs) (pval, *traceTables, error) {
	d := &decoder{data: data, refs: refs, rank: make([]uint32, len(refs.words())), t: newTraceTables()}
	// At most one event per dict, and a trace entry takes some 100 bytes
	// (94 in the fixtures, 122 in torchSnapshot): 64 bytes an event holds
	// them all (append grows past it) without reserving one per frame for
	// a writer whose frames are each a dict of their own.
	d.t.events = make([]event, 0, min(refs.dicts(), len(data)/64))
	n := uint32(0)
	for w, bitsSet := range refs.words() {
		d.rank[w] = n
		n += uint32(bits.OnesCount64(bitsSet))
	}
	d.memo = make([]pval, n)
	v, err := d.run()
	return v, d.t, err
}

// slot is the memo slot of a referenced memo index.
func (d *decoder) slot(idx uint64) uint32 {
	w := idx / 64
	return d.rank[w] + uint32(bits.OnesCount64(d.refs.words()[w]&(1<<(idx%64)-1)))
}

func (d *decoder) push(v pval) { d.stack = append(d.stack, v) }

func (d *decoder) pop() (pval, error) {
	if len(d.stack) == 0 || d.stack[len(d.stack)-1].kind == pMark {
		return pval{}, errors.New("malformed pickle (stack underflow)")
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

// popMark pops the items above the last MARK. They stay valid until the
// next push.
func (d *decoder) popMark() ([]pval, error) {
	if len(d.marks) == 0 {
		return nil, errors.New("malformed pickle (no MARK)")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m+1:]
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) need(i, n int) error {
	if i+n > len(d.data) {
		return errors.New("snapshot pickle cut short")
	}
	return nil
}

// run executes the opcodes.
func (d *decoder) run() (pval, error) {
	data := d.data
	for i := 0; i < len(data); {
		op := data[i]
		i++
		var err error
		switch op {
		case 0x80: // PROTO
			i++
		case 0x95: // FRAME
			i += 8
		case '.': // STOP
			if len(d.stack) != 1 {
				return pval{}, errors.New("malformed pickle (stack at STOP)")
			}
			return d.stack[0], nil
		case '(': // MARK
			d.marks = append(d.marks, len(d.stack))
			d.push(pval{kind: pMark})
		case '}':
			d.push(pval{kind: pDict}) // d is allocated when filled or memoized
		case ']', ')': // EMPTY_LIST, EMPTY_TUPLE
			d.push(pval{kind: pList})
		case 't', 0x85, 0x86, 0x87: // TUPLE, TUPLE1..3: read as lists
			err = d.tuple(op)
		case 'a', 'e': // APPEND, APPENDS
			err = d.appendOp(op)
		case 's', 'u': // SETITEM, SETITEMS
			err = d.setItemsOp(op)
		case 0x94: // MEMOIZE
			err = d.memoize()
		case 'h', 'j': // BINGET, LONG_BINGET
			i, err = d.get(op, i)
		case 0x8c, 'X', 0x8d: // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
			i, err = d.str(op, i)
		case 'J', 'K', 'M', 0x8a, 'G': // BININT, BININT1, BININT2, LONG1, BINFLOAT
			i, err = d.number(op, i)
		case 'N':
			d.push(pval{kind: pNone})
		case 0x88, 0x89: // NEWTRUE, NEWFALSE
			d.push(pval{kind: pBool, i: int64(0x89 - op)})
		default:
			return pval{}, errSubset
		}
		if err != nil {
			return pval{}, err
		}
	}
	return pval{}, errors.New("snapshot pickle cut short (no STOP)")
}

func (d *decoder) tuple(op byte) error {
	var items []pval
	if op == 't' {
		m, err := d.popMark()
		if err != nil {
			return err
		}
		items = append([]pval(nil), m...)
	} else {
		n := int(op - 0x84)
		if len(d.stack) < n {
			return errors.New("malformed pickle (stack underflow)")
		}
		items = append([]pval(nil), d.stack[len(d.stack)-n:]...)
		d.stack = d.stack[:len(d.stack)-n]
		for _, it := range items {
			if it.kind == pMark {
				return errors.New("malformed pickle (MARK in a tuple)")
			}
		}
	}
	d.push(pval{kind: pList, l: &items})
	return nil
}

func (d *decoder) memoize() error {
	if len(d.stack) == 0 || d.stack[len(d.stack)-1].kind == pMark {
		return errors.New("malformed pickle (MEMOIZE on an empty stack)")
	}
	idx := d.memoLen
	d.memoLen++
	if !d.refs.has(idx) {
		return nil
	}
	top := &d.stack[len(d.stack)-1]
	if top.shared {
		return errSubset // one object memoized twice: Python never does
	}
	top.shared, top.m = true, d.slot(idx)
	switch {
	case top.kind == pDict && top.d == nil:
		top.d = new([]pval)
	case top.kind == pList && top.l == nil:
		top.l = new([]pval)
	}
	d.memo[top.m] = *top
	return nil
}

func (d *decoder) get(op byte, i int) (int, error) {
	n := 1
	if op == 'j' {
		n = 4
	}
	if err := d.need(i, n); err != nil {
		return i, err
	}
	idx := uint64(d.data[i])
	if n == 4 {
		idx = uint64(binary.LittleEndian.Uint32(d.data[i:]))
	}
	if idx >= d.memoLen || !d.refs.has(idx) {
		return i, fmt.Errorf("malformed pickle (memo %d not set)", idx)
	}
	d.push(d.memo[d.slot(idx)]) // shared, at its slot
	return i + n, nil
}

// str pushes a string: a view of the data, which outlives the decoded
// values (nothing in a Snapshot keeps one).
func (d *decoder) str(op byte, i int) (int, error) {
	n := argLen(op)
	if err := d.need(i, n); err != nil {
		return i, err
	}
	var l uint64
	for k := n - 1; k >= 0; k-- {
		l = l<<8 | uint64(d.data[i+k])
	}
	i += n
	if l > uint64(len(d.data)-i) {
		return i, errors.New("snapshot pickle cut short")
	}
	s := ""
	if l > 0 {
		s = unsafe.String(&d.data[i], int(l))
	}
	d.push(pval{kind: pStr, s: s})
	return i + int(l), nil
}

func (d *decoder) number(op byte, i int) (int, error) {
	data := d.data
	switch op {
	case 'G':
		if err := d.need(i, 8); err != nil {
			return i, err
		}
		d.push(pval{kind: pFloat, i: int64(binary.BigEndian.Uint64(data[i:]))})
		return i + 8, nil
	case 0x8a:
		if err := d.need(i, 1); err != nil {
			return i, err
		}
		n := int(data[i])
		i++
		if err := d.need(i, n); err != nil {
			return i, err
		}
		d.push(long1(data[i : i+n]))
		return i + n, nil
	}
	n := argLen(op)
	if err := d.need(i, n); err != nil {
		return i, err
	}
	var v int64
	switch n {
	case 1:
		v = int64(data[i])
	case 2:
		v = int64(binary.LittleEndian.Uint16(data[i:]))
	default:
		v = int64(int32(binary.LittleEndian.Uint32(data[i:])))
	}
	d.push(pval{kind: pInt, i: v})
	return i + n, nil
}

// update stores a changed top value back in the memo when it is kept there.
func (d *decoder) update(top *pval) {
	if top.shared {
		d.memo[top.m] = *top
	}
}

func (d *decoder) appendOp(op byte) error {
	var items []pval
	if op == 'a' {
		v, err := d.pop()
		if err != nil {
			return err
		}
		items = []pval{v}
	} else {
		m, err := d.popMark()
		if err != nil {
			return err
		}
		items = m
	}
	if len(d.stack) == 0 {
		return errors.New("malformed pickle (append to a non-list)")
	}
	top := &d.stack[len(d.stack)-1]
	switch top.kind {
	case pList:
		if top.l == nil || len(*top.l) == 0 {
			if d.compactList(top, items) {
				d.update(top)
				return nil
			}
		}
	case pStack, pEvents:
		if d.extendCompact(top, items) {
			d.update(top)
			return nil
		}
	default:
		return errors.New("malformed pickle (append to a non-list)")
	}
	if top.l == nil {
		top.l = new([]pval)
	}
	if *top.l == nil {
		*top.l = make([]pval, 0, len(items))
	}
	*top.l = append(*top.l, items...)
	d.update(top)
	return nil
}

// compactList turns an empty list filled with frames into a stack, or
// filled with trace entries into a list of events.
func (d *decoder) compactList(top *pval, items []pval) bool {
	if ids, ok := d.frameIDs(items); ok {
		top.kind, top.i, top.l = pStack, int64(d.t.stack(ids)), nil
		return true
	}
	if ix, ok := eventIDs(items, nil); ok {
		top.kind, top.l, top.ix = pEvents, nil, &ix
		return true
	}
	return false
}

// extendCompact appends to a stack or a list of events; items of another
// kind turn it back into a list (false, with top.l holding what it had).
func (d *decoder) extendCompact(top *pval, items []pval) bool {
	if top.kind == pStack {
		if ids, ok := d.frameIDs(items); ok {
			all := append(append([]int32(nil), d.t.stackFrames(int32(top.i))...), ids...)
			top.i = int64(d.t.stack(all))
			return true
		}
		var l []pval
		for _, id := range d.t.stackFrames(int32(top.i)) {
			l = append(l, pval{kind: pFrame, i: int64(id)})
		}
		top.kind, top.l = pList, &l
		return false
	}
	if ix, ok := eventIDs(items, *top.ix); ok {
		*top.ix = ix
		return true
	}
	l := make([]pval, 0, len(*top.ix)+len(items))
	for _, id := range *top.ix {
		l = append(l, pval{kind: pEvent, i: int64(id)})
	}
	top.kind, top.l, top.ix = pList, &l, nil
	return false
}

func (d *decoder) frameIDs(items []pval) ([]int32, bool) {
	d.ids = d.ids[:0]
	for _, it := range items {
		if it.kind != pFrame {
			return nil, false
		}
		d.ids = append(d.ids, int32(it.i))
	}
	return d.ids, len(items) > 0
}

func eventIDs(items []pval, to []int32) ([]int32, bool) {
	if len(items) == 0 {
		return nil, false
	}
	for _, it := range items {
		if it.kind != pEvent {
			return nil, false
		}
	}
	if to == nil {
		to = make([]int32, 0, len(items))
	}
	for _, it := range items {
		to = append(to, int32(it.i))
	}
	return to, true
}

func (d *decoder) setItemsOp(op byte) error {
	var items []pval
	if op == 's' {
		if len(d.stack) < 2 {
			return errors.New("malformed pickle (stack underflow)")
		}
		items = d.stack[len(d.stack)-2:]
		d.stack = d.stack[:len(d.stack)-2]
		if items[0].kind == pMark || items[1].kind == pMark {
			return errors.New("malformed pickle (MARK in SETITEM)")
		}
	} else {
		m, err := d.popMark()
		if err != nil {
			return err
		}
		items = m
	}
	if len(items)%2 != 0 || len(d.stack) == 0 {
		return errors.New("malformed pickle (setitems on a non-dict)")
	}
	top := &d.stack[len(d.stack)-1]
	switch top.kind {
	case pEvent:
		if !d.t.foldEvent(&d.t.events[top.i], items) {
			return errSubset
		}
		return nil
	case pDict:
	default:
		return errors.New("malformed pickle (setitems on a non-dict)")
	}
	if top.d == nil || len(*top.d) == 0 {
		if d.compactDict(top, items) {
			d.update(top)
			return nil
		}
	}
	if top.d == nil {
		top.d = new([]pval)
	}
	if *top.d == nil {
		*top.d = make([]pval, 0, len(items))
	}
	*top.d = append(*top.d, items...)
	d.update(top)
	return nil
}

// compactDict folds an empty dict filled with a frame's keys, or a trace
// entry's, into an id in the tables.
func (d *decoder) compactDict(top *pval, items []pval) bool {
	if f, ok := asFrame(items); ok {
		top.kind, top.i, top.d = pFrame, int64(d.t.frame(f)), nil
		return true
	}
	if hasAction(items) {
		e := event{stack: -1}
		if d.t.foldEvent(&e, items) {
			top.kind, top.i, top.d = pEvent, int64(len(d.t.events)), nil
			d.t.events = append(d.t.events, e)
			return true
		}
	}
	return false
}

// asFrame reads a dict's items (key, value, …) as a Python frame: exactly
// the keys "name", "filename" (strings) and "line" (an integer).
func asFrame(items []pval) (pframe, bool) {
	var f pframe
	if len(items) != 6 {
		return f, false
	}
	seen := 0
	for k := 0; k < 6; k += 2 {
		key, v := items[k], items[k+1]
		switch {
		case key.kind != pStr:
			return f, false
		case key.s == "name" && v.kind == pStr:
			f.name, seen = v.s, seen|1
		case key.s == "filename" && v.kind == pStr:
			f.file, seen = v.s, seen|2
		case key.s == "line" && v.kind == pInt:
			f.line, seen = v.i, seen|4
		default:
			return f, false
		}
	}
	return f, seen == 7
}

// argLen is the size of an opcode's fixed argument or length prefix.
func argLen(op byte) int {
	switch op {
	case 'K', 0x8c:
		return 1
	case 'M':
		return 2
	case 'J', 'X':
		return 4
	}
	return 8
}

// long1 is a little-endian two's-complement integer; beyond 8 bytes it is
// a value digest does not read.
func long1(b []byte) pval {
	if len(b) > 8 {
		return pval{kind: pOther}
	}
	var v uint64
	for k := len(b) - 1; k >= 0; k-- {
		v = v<<8 | uint64(b[k])
	}
	if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
		v |= ^uint64(0) << (8 * len(b))
	}
	return pval{kind: pInt, i: int64(v)}
}

// fromGo converts what gopickle decoded into a pval (the fallback path).
// A container reached twice (the memo shares it, or it holds itself) is
// converted once and shared, as in the pickle: converting it at each
// reference would take time exponential in the sharing (the fuzzer found
// a file of 98 KB that never finished). A snapshot nests a few levels deep;
// values deeper than 32 are left out.
func fromGo(v any) pval { return goConv{}.conv(v, 0) }

// goConv is a conversion's containers already converted, by identity.
type goConv map[any]pval

func (c goConv) conv(v any, depth int) pval {
	if depth > 32 {
		return pval{kind: pOther}
	}
	switch v.(type) {
	case *types.List, *types.Tuple, *types.Dict: // pointers: by identity
		if pv, ok := c[v]; ok {
			return pv
		}
	}
	switch x := v.(type) {
	case nil:
		return pval{kind: pNone}
	case bool:
		if x {
			return pval{kind: pBool, i: 1}
		}
		return pval{kind: pBool}
	case int:
		return pval{kind: pInt, i: int64(x)}
	case int64:
		return pval{kind: pInt, i: x}
	case *big.Int:
		if x.IsInt64() {
			return pval{kind: pInt, i: x.Int64()}
		}
	case float64:
		return pval{kind: pFloat, i: int64(math.Float64bits(x))}
	case string:
		return pval{kind: pStr, s: x}
	case *types.List:
		return c.list(v, *x, depth)
	case *types.Tuple:
		return c.list(v, *x, depth)
	case *types.Dict:
		d := make([]pval, 2*len(*x))
		pv := pval{kind: pDict, d: &d}
		c[v] = pv
		for i, e := range *x {
			d[2*i], d[2*i+1] = c.conv(e.Key, depth+1), c.conv(e.Value, depth+1)
		}
		return pv
	}
	return pval{kind: pOther}
}

func (c goConv) list(v any, xs []any, depth int) pval {
	l := make([]pval, len(xs))
	pv := pval{kind: pList, l: &l}
	c[v] = pv
	for i, x := range xs {
		l[i] = c.conv(x, depth+1)
	}
	return pv
}

// get is a dict lookup by string key; the zero pval (None) when absent or
// v is not a dict.
func (v pval) get(key string) pval {
	if v.kind != pDict || v.d == nil {
		return pval{}
	}
	items := *v.d
	for k := 0; k+1 < len(items); k += 2 {
		if items[k].kind == pStr && items[k].s == key {
			return items[k+1]
		}
	}
	return pval{}
}

// num is an integer (a bool as 0 or 1); anything else is -1.
func (v pval) num() int64 {
	if v.kind == pInt || v.kind == pBool {
		return v.i
	}
	return -1
}

func (v pval) list() []pval {
	if v.kind != pList || v.l == nil {
		return nil
	}
	return *v.l
}
