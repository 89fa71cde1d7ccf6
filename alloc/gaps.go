package alloc

// gapTreap holds the gaps between the driver's chunks of address space
// (address.go): a treap keyed by start address over a slab indexed by
// int32, each node carrying the largest gap of its subtree, so that the
// highest gap of at least n bytes is found in O(log n).
type gapTreap struct {
	nodes []gapNode // slab; index 0 is nil
	spare []int32
	root  int32
	seed  uint32
}

type gapNode struct {
	start, size int64
	max         int64 // largest size in the subtree
	left, right int32
	prio        uint32
}

func (t *gapTreap) reset() {
	t.nodes = append(t.nodes[:0], gapNode{})
	t.spare = t.spare[:0]
	t.root = 0
	t.seed = 2463534242
}

// highest returns the gap of highest address of at least n bytes, or 0.
func (t *gapTreap) highest(n int64) int32 {
	x := t.root
	for x != 0 && t.nodes[x].max >= n {
		r := t.nodes[x].right
		switch {
		case r != 0 && t.nodes[r].max >= n:
			x = r
		case t.nodes[x].size >= n:
			return x
		default:
			x = t.nodes[x].left
		}
	}
	return 0
}

// floor returns the gap of highest start below addr, or 0.
func (t *gapTreap) floor(addr int64) int32 {
	var best int32
	for x := t.root; x != 0; {
		if t.nodes[x].start < addr {
			best, x = x, t.nodes[x].right
		} else {
			x = t.nodes[x].left
		}
	}
	return best
}

// find returns the gap that starts at addr, or 0.
func (t *gapTreap) find(addr int64) int32 {
	for x := t.root; x != 0; {
		switch s := t.nodes[x].start; {
		case s == addr:
			return x
		case s < addr:
			x = t.nodes[x].right
		default:
			x = t.nodes[x].left
		}
	}
	return 0
}

func (t *gapTreap) fix(x int32) {
	n := &t.nodes[x]
	n.max = n.size
	if l := n.left; l != 0 {
		n.max = max(n.max, t.nodes[l].max)
	}
	if r := n.right; r != 0 {
		n.max = max(n.max, t.nodes[r].max)
	}
}

// split divides treap x into the gaps starting below addr and the rest.
func (t *gapTreap) split(x int32, addr int64) (int32, int32) {
	if x == 0 {
		return 0, 0
	}
	if t.nodes[x].start < addr {
		l, r := t.split(t.nodes[x].right, addr)
		t.nodes[x].right = l
		t.fix(x)
		return x, r
	}
	l, r := t.split(t.nodes[x].left, addr)
	t.nodes[x].left = r
	t.fix(x)
	return l, x
}

// merge joins treaps l and r, every gap of l below every gap of r.
func (t *gapTreap) merge(l, r int32) int32 {
	switch {
	case l == 0:
		return r
	case r == 0:
		return l
	case t.nodes[l].prio > t.nodes[r].prio:
		t.nodes[l].right = t.merge(t.nodes[l].right, r)
		t.fix(l)
		return l
	}
	t.nodes[r].left = t.merge(l, t.nodes[r].left)
	t.fix(r)
	return r
}

// insert adds the gap [start, start+size).
func (t *gapTreap) insert(start, size int64) {
	if len(t.nodes) == 0 {
		t.reset()
	}
	t.seed ^= t.seed << 13
	t.seed ^= t.seed >> 17
	t.seed ^= t.seed << 5
	var x int32
	if n := len(t.spare); n > 0 {
		x = t.spare[n-1]
		t.spare = t.spare[:n-1]
	} else {
		t.nodes = append(t.nodes, gapNode{})
		x = int32(len(t.nodes) - 1)
	}
	t.nodes[x] = gapNode{start: start, size: size, max: size, prio: t.seed}
	l, r := t.split(t.root, start)
	t.root = t.merge(t.merge(l, x), r)
}

// remove takes out the gap starting at addr.
func (t *gapTreap) remove(addr int64) { t.root = t.del(t.root, addr) }

func (t *gapTreap) del(x int32, addr int64) int32 {
	if x == 0 {
		return 0
	}
	switch s := t.nodes[x].start; {
	case s == addr:
		t.spare = append(t.spare, x)
		return t.merge(t.nodes[x].left, t.nodes[x].right)
	case s < addr:
		t.nodes[x].right = t.del(t.nodes[x].right, addr)
	default:
		t.nodes[x].left = t.del(t.nodes[x].left, addr)
	}
	t.fix(x)
	return x
}
