package alloc

import "testing"

// TestFreePoolOrder checks the bucketed free pools against a scan of every
// free block: after random mallocs and frees on three streams, lowerBound,
// successor and lastOn must give the blocks the pools' order
// (stream, size, segment order, offset) puts there, on the stream asked
// for (every caller wants a block of its own stream).
func TestFreePoolOrder(t *testing.T) {
	for _, conf := range []string{"", "expandable_segments:True"} {
		t.Run(conf, func(t *testing.T) {
			c := Default()
			if conf != "" {
				var err error
				if c, err = Parse(conf); err != nil {
					t.Fatal(err)
				}
			}
			a := New(c)
			x := uint32(7)
			rnd := func(n uint32) uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x % n }
			var held []Block
			for step := 0; step < 4000; step++ {
				if rnd(3) > 0 || len(held) == 0 {
					n := int64(rnd(24<<20)) + 1
					if rnd(2) == 0 { // equal sizes: many blocks per bucket
						n = []int64{512, 300 << 10, 3 << 20, 6 << 20}[rnd(4)]
					}
					held = append(held, a.Malloc(n, Stream(rnd(3))))
				} else {
					i := rnd(uint32(len(held)))
					a.Free(held[i])
					held[i] = held[len(held)-1]
					held = held[:len(held)-1]
				}
				checkIndex(t, a)
				if step%50 == 0 {
					checkPools(t, a, int64(rnd(8<<20))+1, Stream(rnd(3)))
				}
			}
		})
	}
}

// keyLess is the pools' order, written out.
func keyLess(x, y *blockRec) bool {
	if x.stream != y.stream {
		return x.stream < y.stream
	}
	if x.size != y.size {
		return x.size < y.size
	}
	if x.order != y.order {
		return x.order < y.order
	}
	return x.off < y.off
}

func checkPools(t *testing.T, a *Allocator, size int64, s Stream) {
	t.Helper()
	checkIndex(t, a)
	for p := range a.index {
		var lb, last int32
		for i := int32(1); i < int32(len(a.blocks)); i++ {
			x := &a.blocks[i]
			if !x.free || poolOf(a.segs[x.seg].small) != p {
				continue
			}
			if x.stream == s && x.size >= size && (lb == 0 || keyLess(x, &a.blocks[lb])) {
				lb = i
			}
			if x.stream == s && (last == 0 || keyLess(&a.blocks[last], x)) {
				last = i
			}
		}
		if got := a.lowerBound(p, s, size); got != lb {
			t.Fatalf("pool %d lowerBound(%d, %d) = %d, want %d", p, s, size, got, lb)
		}
		if got := a.lastOn(p, s); got != last {
			t.Fatalf("pool %d lastOn(%d) = %d, want %d", p, s, got, last)
		}
		if lb == 0 {
			continue
		}
		var next int32
		for i := int32(1); i < int32(len(a.blocks)); i++ {
			x := &a.blocks[i]
			if x.free && poolOf(a.segs[x.seg].small) == p && x.stream == s && keyLess(&a.blocks[lb], x) && (next == 0 || keyLess(x, &a.blocks[next])) {
				next = i
			}
		}
		if got := a.successor(p, lb); got != next {
			t.Fatalf("pool %d successor(%d) = %d, want %d", p, lb, got, next)
		}
	}
}

// TestSearch checks sizeIndex.search against a scan on every length up to
// 40 and every probe around the stored sizes.
func TestSearch(t *testing.T) {
	for n := 0; n <= 40; n++ {
		x := &sizeIndex{}
		for i := 0; i < n; i++ {
			x.ents = append(x.ents, sizeEnt{size: int64(10*i + 10)})
		}
		for size := int64(0); size <= int64(10*n+20); size++ {
			want := 0
			for want < n && x.ents[want].size < size {
				want++
			}
			if got := x.search(size); got != want {
				t.Fatalf("search(%d) over %d sizes = %d, want %d", size, n, got, want)
			}
		}
	}
}

// checkIndex checks the size indexes: strictly increasing sizes, each
// naming a free block of that size and stream alone in its size, or a
// bucket of that size and stream that is not empty, and every free block
// in the bucket its record names, at the place it names.
func checkIndex(t *testing.T, a *Allocator) {
	t.Helper()
	a.settle()
	for p := range a.index {
		for st := range a.indexes(p) {
			x := a.on(p, Stream(st))
			for i, en := range x.ents {
				if i > 0 && x.ents[i-1].size >= en.size {
					t.Fatalf("pool %d stream %d: sizes %v not increasing", p, st, x.ents)
				}
				if en.k < 0 {
					if b := &a.blocks[-en.k]; !b.free || b.bkt != 0 || b.hpos != int32(p) || b.size != en.size || b.stream != Stream(st) {
						t.Fatalf("pool %d stream %d size %d: block %d free %v bkt %d hpos %d size %d stream %d", p, st, en.size, -en.k, b.free, b.bkt, b.hpos, b.size, b.stream)
					}
					continue
				}
				k := en.k
				bk := &a.buckets[k]
				if bk.size != en.size || bk.stream != Stream(st) || bk.pool != int32(p) {
					t.Fatalf("pool %d stream %d: bucket %d is (%d, %d, pool %d), index says (%d, %d)", p, st, k, bk.stream, bk.size, bk.pool, st, en.size)
				}
				if len(bk.heap) == 0 {
					t.Fatalf("pool %d stream %d: bucket %d of size %d is empty", p, st, k, bk.size)
				}
				for j, e := range bk.heap {
					if b := &a.blocks[e.b]; !b.free || b.bkt != k || int(b.hpos) != j || b.size != bk.size {
						t.Fatalf("bucket %d entry %d: block %d free %v bkt %d hpos %d size %d", k, j, e.b, b.free, b.bkt, b.hpos, b.size)
					}
				}
			}
		}
	}
}
