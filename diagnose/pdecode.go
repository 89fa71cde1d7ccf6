package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
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
	got     []uint64 // slots a GET has read, as a bitset
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
	d.got = make([]uint64, n/64+1)
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
	m := d.slot(idx)
	d.got[m/64] |= 1 << (m % 64)
	d.push(d.memo[m]) // shared, at its slot
	return i + n, nil
}

// seen reports whether v is kept in the memo and a GET has read it: then
// copies of it may sit in other containers, and folding it into a compact
// form, which changes the value rather than what it points to, would
// leave them stale. Python's pickler fills a container before anything
// reads it back, so this happens only in pickles from other writers.
func (d *decoder) seen(v *pval) bool {
	return v.shared && d.got[v.m/64]&(1<<(v.m%64)) != 0
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
