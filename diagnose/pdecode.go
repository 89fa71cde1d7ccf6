package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/nlpodyssey/gopickle/types"
)

// pval is a decoded pickle value: a scalar held inline (no allocation per
// integer or string), or a list or dict behind a pointer so that a memoized
// container sees the items added after it was memoized.
type pval struct {
	kind pkind
	// shared is set on a container kept in the memo: it must stay the
	// object the memo holds.
	shared bool
	i      int64
	s      string
	l      *[]pval
	d      *[]pkv
	fr     *pframe
}

// pframe is a Python frame of a trace entry ({"name", "filename", "line"}),
// the commonest dict in a snapshot, held compactly.
type pframe struct {
	name, file string
	line       int64
}

type pkv struct{ k, v pval }

type pkind uint8

const (
	pNone pkind = iota
	pBool
	pInt
	pFloat
	pStr
	pList
	pDict
	pMark  // a MARK on the stack
	pOther // a value digest does not read (bytes, big integers)
	pFrame // a dict with a Python frame's three keys, in fr
)

// errSubset is returned by decodePickle for an opcode outside the subset
// torch.cuda.memory._dump_snapshot writes; the caller falls back to
// gopickle.
var errSubset = errors.New("pickle opcode outside the snapshot subset")

// decodePickle decodes the subset of pickle protocol 2–5 that
// torch.cuda.memory._dump_snapshot produces (dicts, lists, tuples, strings,
// integers, floats, None, booleans, memo and frames). It is strict: any
// other opcode gives errSubset. data must have passed prescan, which
// bounds every length against the data's size.
//
// Only the memo entries in refs (those a GET reads) are kept, and a dict
// or list filled by one SETITEMS or APPENDS is allocated at its size: a
// 100 MB snapshot holds millions of small dicts.
func decodePickle(data []byte, refs memoRefs) (pval, error) {
	var stack []pval
	var marks []int
	memo := map[uint64]pval{}
	memoLen := uint64(0)
	var slab []pframe
	pop := func() (pval, error) {
		if len(stack) == 0 || stack[len(stack)-1].kind == pMark {
			return pval{}, errors.New("malformed pickle (stack underflow)")
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, nil
	}
	popMark := func() ([]pval, error) {
		if len(marks) == 0 {
			return nil, errors.New("malformed pickle (no MARK)")
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := stack[m+1:]
		stack = stack[:m]
		return items, nil
	}
	need := func(i, n int) error {
		if i+n > len(data) {
			return errors.New("snapshot pickle cut short")
		}
		return nil
	}
	for i := 0; i < len(data); {
		op := data[i]
		i++
		switch op {
		case 0x80: // PROTO
			i++
		case 0x95: // FRAME
			i += 8
		case '.': // STOP
			if len(stack) != 1 {
				return pval{}, errors.New("malformed pickle (stack at STOP)")
			}
			return stack[0], nil
		case '(': // MARK
			marks = append(marks, len(stack))
			stack = append(stack, pval{kind: pMark})
		case '}':
			stack = append(stack, pval{kind: pDict}) // d is allocated when filled or memoized
		case ']':
			stack = append(stack, pval{kind: pList})
		case ')':
			stack = append(stack, pval{kind: pList, l: &[]pval{}})
		case 't', 0x85, 0x86, 0x87: // TUPLE, TUPLE1..3: read as lists
			var items []pval
			if op == 't' {
				m, err := popMark()
				if err != nil {
					return pval{}, err
				}
				items = append([]pval(nil), m...)
			} else {
				n := int(op - 0x84)
				if len(stack) < n {
					return pval{}, errors.New("malformed pickle (stack underflow)")
				}
				items = append([]pval(nil), stack[len(stack)-n:]...)
				stack = stack[:len(stack)-n]
				for _, it := range items {
					if it.kind == pMark {
						return pval{}, errors.New("malformed pickle (MARK in a tuple)")
					}
				}
			}
			stack = append(stack, pval{kind: pList, l: &items})
		case 'a', 'e': // APPEND, APPENDS
			var items []pval
			if op == 'a' {
				v, err := pop()
				if err != nil {
					return pval{}, err
				}
				items = []pval{v}
			} else {
				m, err := popMark()
				if err != nil {
					return pval{}, err
				}
				items = m
			}
			if len(stack) == 0 || stack[len(stack)-1].kind != pList {
				return pval{}, errors.New("malformed pickle (append to a non-list)")
			}
			if stack[len(stack)-1].l == nil {
				stack[len(stack)-1].l = new([]pval)
			}
			l := stack[len(stack)-1].l
			if *l == nil {
				*l = make([]pval, 0, len(items))
			}
			*l = append(*l, items...)
		case 's', 'u': // SETITEM, SETITEMS
			var items []pval
			if op == 's' {
				if len(stack) < 2 {
					return pval{}, errors.New("malformed pickle (stack underflow)")
				}
				items = stack[len(stack)-2:]
				stack = stack[:len(stack)-2]
				if items[0].kind == pMark || items[1].kind == pMark {
					return pval{}, errors.New("malformed pickle (MARK in SETITEM)")
				}
			} else {
				m, err := popMark()
				if err != nil {
					return pval{}, err
				}
				items = m
			}
			if len(items)%2 != 0 || len(stack) == 0 || stack[len(stack)-1].kind != pDict {
				return pval{}, errors.New("malformed pickle (setitems on a non-dict)")
			}
			top := &stack[len(stack)-1]
			if f, ok := asFrame(items); ok && !top.shared && top.d == nil {
				if len(slab) == cap(slab) {
					slab = make([]pframe, 0, 1024)
				}
				slab = append(slab, f)
				*top = pval{kind: pFrame, fr: &slab[len(slab)-1]}
				continue
			}
			if top.d == nil {
				top.d = new([]pkv)
			}
			d := top.d
			if *d == nil {
				*d = make([]pkv, 0, len(items)/2)
			}
			for k := 0; k < len(items); k += 2 {
				*d = append(*d, pkv{items[k], items[k+1]})
			}
		case 0x94: // MEMOIZE
			if len(stack) == 0 || stack[len(stack)-1].kind == pMark {
				return pval{}, errors.New("malformed pickle (MEMOIZE on an empty stack)")
			}
			if refs.has(memoLen) {
				top := &stack[len(stack)-1]
				top.shared = true
				if top.kind == pDict && top.d == nil {
					top.d = new([]pkv)
				}
				if top.kind == pList && top.l == nil {
					top.l = new([]pval)
				}
				memo[memoLen] = stack[len(stack)-1]
			}
			memoLen++
		case 'h', 'j': // BINGET, LONG_BINGET
			n := 1
			if op == 'j' {
				n = 4
			}
			if err := need(i, n); err != nil {
				return pval{}, err
			}
			idx := uint64(data[i])
			if n == 4 {
				idx = uint64(binary.LittleEndian.Uint32(data[i:]))
			}
			i += n
			v, ok := memo[idx]
			if !ok {
				return pval{}, fmt.Errorf("malformed pickle (memo %d not set)", idx)
			}
			stack = append(stack, v)
		case 0x8c, 'X', 0x8d: // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
			n := argLen(op)
			if err := need(i, n); err != nil {
				return pval{}, err
			}
			var l uint64
			for k := n - 1; k >= 0; k-- {
				l = l<<8 | uint64(data[i+k])
			}
			i += n
			if l > uint64(len(data)-i) {
				return pval{}, errors.New("snapshot pickle cut short")
			}
			stack = append(stack, pval{kind: pStr, s: string(data[i : i+int(l)])})
			i += int(l)
		case 'J', 'K', 'M': // BININT, BININT1, BININT2
			n := argLen(op)
			if err := need(i, n); err != nil {
				return pval{}, err
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
			i += n
			stack = append(stack, pval{kind: pInt, i: v})
		case 0x8a: // LONG1
			if err := need(i, 1); err != nil {
				return pval{}, err
			}
			n := int(data[i])
			i++
			if err := need(i, n); err != nil {
				return pval{}, err
			}
			stack = append(stack, long1(data[i:i+n]))
			i += n
		case 'G': // BINFLOAT
			if err := need(i, 8); err != nil {
				return pval{}, err
			}
			stack = append(stack, pval{kind: pFloat, i: int64(binary.BigEndian.Uint64(data[i:]))})
			i += 8
		case 'N':
			stack = append(stack, pval{kind: pNone})
		case 0x88, 0x89: // NEWTRUE, NEWFALSE
			stack = append(stack, pval{kind: pBool, i: int64(0x89 - op)})
		default:
			return pval{}, errSubset
		}
	}
	return pval{}, errors.New("snapshot pickle cut short (no STOP)")
}

// asFrame reads SETITEMS' key-value items as a Python frame: exactly the
// keys "name", "filename" (strings) and "line" (an integer).
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
// A snapshot nests a few levels deep; deeper values (a list that holds
// itself, in a hostile file) are left out.
func fromGo(v any) pval { return fromGoDepth(v, 0) }

func fromGoDepth(v any, depth int) pval {
	if depth > 32 {
		return pval{kind: pOther}
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
		return fromGoList(*x, depth)
	case *types.Tuple:
		return fromGoList(*x, depth)
	case *types.Dict:
		d := make([]pkv, 0, len(*x))
		for _, e := range *x {
			d = append(d, pkv{fromGoDepth(e.Key, depth+1), fromGoDepth(e.Value, depth+1)})
		}
		return pval{kind: pDict, d: &d}
	}
	return pval{kind: pOther}
}

func fromGoList(xs []any, depth int) pval {
	l := make([]pval, len(xs))
	for i, x := range xs {
		l[i] = fromGoDepth(x, depth+1)
	}
	return pval{kind: pList, l: &l}
}

// get is a dict lookup by string key; the zero pval (None) when absent or
// v is not a dict.
func (v pval) get(key string) pval {
	if v.kind == pFrame {
		switch key {
		case "name":
			return pval{kind: pStr, s: v.fr.name}
		case "filename":
			return pval{kind: pStr, s: v.fr.file}
		case "line":
			return pval{kind: pInt, i: v.fr.line}
		}
		return pval{}
	}
	if v.kind != pDict {
		return pval{}
	}
	if v.d == nil {
		return pval{}
	}
	for _, kv := range *v.d {
		if kv.k.kind == pStr && kv.k.s == key {
			return kv.v
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
