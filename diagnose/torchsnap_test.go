package diagnose

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// This file writes snapshots the way torch.cuda.memory._dump_snapshot does:
// a Python object tree (pyDict, pyList, shared *pyStr) pickled as Python's
// pickle.dump does at protocol 4 — every str, list and dict memoized by
// identity and read back with BINGET/LONG_BINGET, SETITEMS/APPENDS in
// batches of 1000, 64 KiB FRAMEs. The shape follows the fixture snapshots
// (torch 2.11): a frame dict per distinct Python frame shared by every
// stack that holds it, the same frames list for a block's free_requested
// and free_completed entries, a fresh "N/A" and "" in every entry.

type pyDict struct{ kv []any } // key, value, key, value, …
type pyList struct{ items []any }
type pyStr struct{ s string } // a str object shared by reference
type pyTuple struct{ items []any }

// pyPickler is Python's pickle.Pickler at protocol 4, for the types above,
// Go strings (a fresh str each time), ints, bools, floats and nil.
type pyPickler struct {
	out, frame bytes.Buffer
	memo       map[any]uint32
}

func (p *pyPickler) op(b ...byte) { p.frame.Write(b) }

func (p *pyPickler) boundary() {
	if p.frame.Len() >= 64<<10 {
		p.commit()
	}
}

func (p *pyPickler) commit() {
	if p.frame.Len() == 0 {
		return
	}
	var h [9]byte
	h[0] = 0x95
	binary.LittleEndian.PutUint64(h[1:], uint64(p.frame.Len()))
	p.out.Write(h[:])
	p.out.Write(p.frame.Bytes())
	p.frame.Reset()
}

func (p *pyPickler) memoize(obj any) {
	p.op(0x94)
	if obj != nil {
		p.memo[obj] = uint32(len(p.memo))
	} else {
		p.memo[new(int)] = uint32(len(p.memo))
	}
}

func (p *pyPickler) get(i uint32) {
	if i < 256 {
		p.op('h', byte(i))
		return
	}
	p.op('j')
	binary.Write(&p.frame, binary.LittleEndian, i)
}

func (p *pyPickler) str(s string) {
	if len(s) < 256 {
		p.op(0x8c, byte(len(s)))
	} else {
		p.op('X')
		binary.Write(&p.frame, binary.LittleEndian, uint32(len(s)))
	}
	p.frame.WriteString(s)
}

func (p *pyPickler) save(v any) {
	p.boundary()
	switch x := v.(type) {
	case nil:
		p.op('N')
	case bool:
		if x {
			p.op(0x88)
		} else {
			p.op(0x89)
		}
	case float64:
		p.op('G')
		binary.Write(&p.frame, binary.BigEndian, math.Float64bits(x))
	case int:
		p.int(int64(x))
	case int64:
		p.int(x)
	case string:
		p.str(x)
		p.memoize(nil)
	case *pyStr, *pyList, *pyDict, *pyTuple:
		if i, ok := p.memo[v]; ok {
			p.get(i)
			return
		}
		p.saveObj(v)
	default:
		panic(fmt.Sprintf("pyPickler: %T", v))
	}
}

func (p *pyPickler) saveObj(v any) {
	switch x := v.(type) {
	case *pyStr:
		p.str(x.s)
		p.memoize(x)
	case *pyTuple:
		for _, it := range x.items {
			p.save(it)
		}
		p.op(0x84 + byte(len(x.items))) // TUPLE1..3
		p.memoize(x)
	case *pyList:
		p.op(']')
		p.memoize(x)
		p.batch(x.items, 1, 'a', 'e')
	case *pyDict:
		p.op('}')
		p.memoize(x)
		p.batch(x.kv, 2, 's', 'u')
	}
}

// batch writes items in batches of 1000 (of per values each), as
// Pickler._batch_appends and _batch_setitems do.
func (p *pyPickler) batch(items []any, per int, one, many byte) {
	for len(items) > 0 {
		n := min(len(items), 1000*per)
		b := items[:n]
		items = items[n:]
		if n == per {
			for _, it := range b {
				p.save(it)
			}
			p.op(one)
			continue
		}
		p.op('(')
		for _, it := range b {
			p.save(it)
		}
		p.op(many)
	}
}

func (p *pyPickler) int(v int64) {
	switch {
	case v >= 0 && v <= 0xff:
		p.op('K', byte(v))
	case v >= 0 && v <= 0xffff:
		p.op('M', byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.op('J')
		binary.Write(&p.frame, binary.LittleEndian, int32(v))
	default: // LONG1, two's complement, as few bytes as hold the sign
		n := (bits.Len64(uint64(v)) + 8) / 8
		if v < 0 {
			n = (bits.Len64(uint64(^v)) + 8) / 8
		}
		p.op(0x8a, byte(n))
		for k := 0; k < n; k++ {
			p.op(byte(v >> (8 * k)))
		}
	}
}

// pickleDump is pickle.dumps(v, protocol=4).
func pickleDump(v any) []byte {
	p := &pyPickler{memo: map[any]uint32{}}
	p.out.Write([]byte{0x80, 4})
	p.save(v)
	p.op('.')
	p.commit()
	return p.out.Bytes()
}

// torchSnapshot is a snapshot of a training loop as torch 2.11 dumps it,
// with history of about entries trace entries: each step allocates
// activations (stacks 20 frames deep from a model's forward), frees them
// in backward, and keeps one 20 MiB tensor (the leak, allocated in
// train.py's step). The trace ends in an oom entry.
func torchSnapshot(entries int) []byte {
	key := map[string]*pyStr{}
	k := func(s string) *pyStr {
		if key[s] == nil {
			key[s] = &pyStr{s}
		}
		return key[s]
	}
	// Distinct frames, shared by the stacks that hold them.
	frame := func(file, fn string, line int) *pyDict {
		return &pyDict{[]any{k("name"), fn, k("filename"), file, k("line"), line}}
	}
	pkg := "/opt/venv/lib/python3.12/site-packages/"
	var lib []*pyDict
	for i := 0; i < 120; i++ {
		lib = append(lib, frame(pkg+fmt.Sprintf("torch/nn/modules/m%d.py", i%17), fmt.Sprintf("forward_%d", i%23), 100+i*7))
	}
	user := []*pyDict{frame("/home/u/train.py", "step", 87), frame("/home/u/train.py", "main", 140), frame("/home/u/train.py", "<module>", 151)}
	stack := func(leaf int, leak bool) *pyList {
		l := &pyList{}
		if leak {
			l.items = append(l.items, user[0])
		}
		for d := 0; d < 17; d++ {
			l.items = append(l.items, lib[(leaf*7+d*13)%len(lib)])
		}
		l.items = append(l.items, user[0], user[1], user[2])
		return l
	}
	var trace []any
	t := int64(1795419152837214)
	entry := func(act *pyStr, addrKey string, addr, size int64, frames *pyList) {
		t += 3
		trace = append(trace, &pyDict{[]any{k("action"), act, k(addrKey), addr, k("size"), size, k("stream"), 0,
			k("time_us"), t, k("compile_context"), "N/A", k("user_metadata"), k(""), k("frames"), frames}})
	}
	alloc, freeReq, freeDone := &pyStr{"alloc"}, &pyStr{"free_requested"}, &pyStr{"free_completed"}
	base, leaked := int64(0x7f0000000000), int64(0)
	const acts = 150
	for step := 0; len(trace) < entries; step++ {
		type live struct {
			addr, size int64
			frames     *pyList
		}
		var ls []live
		for a := 0; a < acts; a++ {
			size := int64(2+(a*37+step)%38) << 20
			l := live{base + int64(a)<<26, size, stack(a, false)}
			ls = append(ls, l)
			entry(alloc, "addr", l.addr, l.size, l.frames)
		}
		entry(alloc, "addr", base+int64(1<<40)+leaked, 20<<20, stack(0, true))
		leaked += 20 << 20
		for a := len(ls) - 1; a >= 0; a-- {
			fr := &pyList{ls[a].frames.items}
			entry(freeReq, "addr", ls[a].addr, ls[a].size, fr)
			entry(freeDone, "addr", ls[a].addr, ls[a].size, fr)
		}
	}
	entry(&pyStr{"oom"}, "device_free", 1<<30, 2<<30, &pyList{})
	var segs []any
	for s := 0; s < 200; s++ {
		blocks := &pyList{[]any{
			&pyDict{[]any{k("address"), base + int64(s)<<26, k("size"), int64(20 << 20), k("requested_size"), int64(20 << 20), k("state"), "active_allocated", k("frames"), stack(s, true)}},
			&pyDict{[]any{k("address"), base + int64(s)<<26 + 20<<20, k("size"), int64(2 << 20), k("requested_size"), int64(0), k("state"), "inactive", k("frames"), &pyList{}}},
		}}
		segs = append(segs, &pyDict{[]any{k("device"), 0, k("address"), base + int64(s)<<26, k("total_size"), int64(22 << 20),
			k("allocated_size"), int64(20 << 20), k("active_size"), int64(20 << 20), k("requested_size"), int64(20 << 20), k("stream"), 0,
			k("segment_type"), "large", k("segment_pool_id"), &pyTuple{[]any{0, 0}}, k("is_expandable"), false, k("frames"), &pyList{}, k("blocks"), blocks}})
	}
	settings := &pyDict{[]any{k("PYTORCH_CUDA_ALLOC_CONF"), "", k("max_split_size"), -1, k("garbage_collection_threshold"), 0.0, k("expandable_segments"), false}}
	top := &pyDict{[]any{k("segments"), &pyList{segs}, k("device_traces"), &pyList{[]any{&pyList{trace}}},
		k("allocator_settings"), settings, k("external_annotations"), &pyList{}}}
	return pickleDump(top)
}
