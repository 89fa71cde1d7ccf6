package alloc_test

import (
	"fmt"

	"github.com/memplan/memplan/alloc"
)

func ExampleParse() {
	c, err := alloc.Parse("expandable_segments:True,roundup_power2_divisions:[256:1,>:4]")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.ExpandableSegments, c.RoundSize(300<<20)>>20)
	_, err = alloc.Parse("max_split_size_mb:8")
	fmt.Println(err)
	// Output:
	// true 300
	// max_split_size_mb: 8 is too small, must be >= 20
}

func ExampleAllocator() {
	a := alloc.New(alloc.Default())
	x := a.Malloc(100<<20, 0) // a 100 MiB tensor
	a.Free(x)
	a.Malloc(60<<20, 0) // reuses the cached 100 MiB block, split
	a.Malloc(50<<20, 0) // the 40 MiB remainder is too small: a new segment
	f := a.Fragmentation()
	fmt.Println(a.Allocated()>>20, a.Reserved()>>20, f.Unallocated>>20, a.Segments())
	// Output: 110 150 40 [104857600 52428800]
}

func ExampleAllocator_expandable() {
	c, _ := alloc.Parse("expandable_segments:True")
	a := alloc.New(c)
	a.Free(a.Malloc(100<<20, 0))
	a.Malloc(60<<20, 0)
	a.Malloc(50<<20, 0) // the segment grows by one 20 MiB page
	fmt.Println(a.Allocated()>>20, a.Reserved()>>20)
	// Output: 110 120
}

func ExampleAllocator_RecordStream() {
	const compute, allGather = alloc.Stream(0), alloc.Stream(1)
	a := alloc.New(alloc.Default())
	buf := a.Malloc(256<<20, allGather) // unsharded parameters, gathered on their own stream
	a.RecordStream(buf, compute)        // ... and used by the compute stream
	a.Free(buf)                         // allocated drops now; reuse waits for the compute stream
	a.Malloc(256<<20, allGather)        // the next block's gather cannot reuse it yet
	fmt.Println(a.Allocated()>>20, a.Reserved()>>20, a.Pending()>>20)
	a.ProcessEvents() // the compute stream caught up
	a.Malloc(256<<20, allGather)
	fmt.Println(a.Allocated()>>20, a.Reserved()>>20)
	// Output:
	// 256 512 256
	// 512 512
}

// Three 20 MiB tensors, each in a segment of its own; the first two are
// freed and a fourth takes one of their cached blocks. By age it takes the
// oldest; PyTorch takes the lowest address, and the driver placed the
// second segment below the first (docs/allocator.md §8).
func ExampleSegmentOrder() {
	for _, order := range []alloc.SegmentOrder{alloc.OrderAge, alloc.OrderAddress} {
		c := alloc.Default()
		c.SegmentOrder = order
		a := alloc.New(c)
		first := a.Malloc(20<<20, 0)
		second := a.Malloc(20<<20, 0)
		a.Malloc(20<<20, 0)
		a.Free(first)
		a.Free(second)
		fourth := a.Malloc(20<<20, 0)
		fmt.Println(fourth == first, fourth == second)
	}
	// Output:
	// true false
	// false true
}

// Placement says where a block lies, for traces set beside a real
// allocator history's addresses.
func ExampleAllocator_Placement() {
	a := alloc.New(alloc.Default())
	x := a.Malloc(100<<20, 0)
	a.Free(x)
	y := a.Malloc(60<<20, 0) // the front of the cached 100 MiB block
	z := a.Malloc(30<<20, 0) // the remainder's front
	for _, b := range []alloc.Block{y, z} {
		seg, off, n := a.Placement(b)
		fmt.Println(seg, off>>20, n>>20)
	}
	// Output:
	// 0 0 100
	// 0 60 100
}

// NCCL's first communicator maps chunks whose room later segments are
// carved from upwards: of two segments made after it the first lies lower,
// where otherwise the driver places each new segment below the last, and a
// request that two equal cached blocks could serve takes the lower
// (docs/allocator.md §8).
func ExampleAllocator_CommunicatorUp() {
	for _, nccl := range []bool{false, true} {
		a := alloc.New(alloc.Default())
		a.Malloc(100<<20, 0)
		if nccl {
			a.CommunicatorUp()
		}
		second, third := a.Malloc(100<<20, 0), a.Malloc(100<<20, 0)
		a.Free(second)
		a.Free(third)
		fourth := a.Malloc(100<<20, 0)
		fmt.Println(fourth == second, fourth == third)
	}
	// Output:
	// false true
	// true false
}
