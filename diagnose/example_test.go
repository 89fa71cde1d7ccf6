package diagnose_test

import (
	"fmt"
	"strings"

	"github.com/memplan/memplan/diagnose"
)

// A log with the out-of-memory message of torch 2.11 is enough to tell
// fragmentation: half of what the allocator reserved was free, in pieces.
func ExampleDiagnose() {
	log := `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 71.66 GiB is free. Including non-PyTorch memory, this process has 7.51 GiB memory in use. 7.92 GiB allowed; Of the allocated memory 3.46 GiB is allocated by PyTorch, and 3.54 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.`
	e, err := diagnose.Parse("train.log", strings.NewReader(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := diagnose.Diagnose([]*diagnose.Evidence{e}, diagnose.Job{})
	fmt.Println(r.Cause)
	fmt.Println(r.Reason)
	// Output:
	// fragmentation
	// 3.54 GiB of the 7.00 GiB reserved was free but in pieces; the 1.00 GiB request needed 81.92 MiB more than the limit allowed
}

// ParseLog reads the older message format too (torch 1.x and 2.0).
func ExampleParseLog() {
	ooms, err := diagnose.ParseLog([]byte("[rank3]: RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.12 MiB free; 14.63 GiB reserved in total by PyTorch)"))
	if err != nil {
		fmt.Println(err)
		return
	}
	o := ooms[0]
	fmt.Println(o.Rank, o.Format, o.Request, o.Reserved-o.Allocated)
	// Output:
	// 3 legacy 20971520 75161928
}
