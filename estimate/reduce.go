package estimate

import (
	"slices"

	"github.com/memplan/memplan/model"
)

// columnSumScratch is the scratch PyTorch's reduction kernel allocates to
// sum a [rows, cols] tensor over its rows (a bias gradient) when it splits
// the rows across thread blocks: setReduceConfig and global_memory_size in
// ATen's native/cuda/Reduce.cuh, ported for this one case (a contiguous
// output, reduced over the slower dimension, fp32 accumulator). It returns
// the buffer, or 0. Measured sizes (bench/results traces, H100, 4096 rows):
// 24, 72, 96 MiB for 768, 2304, 3072 columns, 64 MiB for 2048 fp32
// columns; 31,254,528 B for BERT's 30,522-column decoder bias over 8,192
// rows (output vectorised by 2).
func (s *sim) columnSumScratch(rows, cols, dt int64) int64 {
	const maxThreads = 512
	if s.cfg.sms == 0 {
		return 0
	}
	// get_output_vec_size: 4, halved until it divides the output's size
	// (the allocator's 512-byte alignment leaves the base address aligned).
	vec := int64(4)
	for cols%vec != 0 {
		vec /= 2
	}
	lastPow2 := func(n int64) int64 {
		p := int64(1)
		for p*2 <= n {
			p *= 2
		}
		return p
	}
	divUp := func(a, b int64) int64 { return (a + b - 1) / b }
	mnt := int64(maxThreads / vec)
	dim0, dim1 := cols/vec, rows
	p0, p1 := mnt, mnt
	if dim0 < mnt {
		p0 = lastPow2(dim0)
	}
	if dim1 < mnt {
		p1 = lastPow2(dim1)
	}
	bw := min(p0, 32)
	bh := min(p1, mnt/bw)
	bw = min(p0, mnt/bh)
	stepOut, stepIn := bw, int64(1)
	vpt := divUp(rows, stepIn)
	if !(vpt >= bh*16 || vpt >= 256) {
		return 0
	}
	stepIn *= bh
	vpt = divUp(rows, stepIn)
	if vpt < 256 {
		return 0
	}
	// From here the SM count sizes the scratch: the reduction is kept so
	// that Result.SharesWith can size it for another device.
	r := smReduce{grid: divUp(dim0, stepOut), vpt: vpt, block: bw * bh, unit: f32 * cols * bw * vec}
	if !slices.Contains(s.smReds, r) {
		s.smReds = append(s.smReds, r)
	}
	return r.scratch(s.cfg.sms, s.cfg.threadsSM)
}

// smReduce is a column sum whose scratch the SM count sizes
// (columnSumScratch): its grid of output columns, values per thread,
// threads per block, and scratch bytes per block row.
type smReduce struct{ grid, vpt, block, unit int64 }

// scratch is the reduction's scratch on a GPU of sms SMs of threadsSM
// threads each, or 0.
func (r smReduce) scratch(sms, threadsSM int64) int64 {
	divUp := func(a, b int64) int64 { return (a + b - 1) / b }
	target := sms * (threadsSM / r.block)
	if r.grid > target {
		return 0
	}
	ctas := max(min(divUp(target, r.grid), divUp(r.vpt, 16)), divUp(r.vpt, 256))
	if ctas <= 1 {
		return 0
	}
	// The semaphores (4 bytes per block column) are a second, small
	// allocation, left out.
	return r.unit * ctas
}

// deviceSizing records what sized an estimate by its device: a cuDNN
// table, or the SM count through reduction scratch (smReduce), on a GPU
// of sms SMs of threadsSM threads.
type deviceSizing struct {
	cudnn          bool
	reds           []smReduce
	sms, threadsSM int64
}

// SharesWith reports whether r, estimated on one device, is also the
// estimate on device d when d has the same cuBLAS workspace (Hopper()):
// no cuDNN table sized it, and every reduction scratch the SM count sized
// comes out the same size on d. Then r holds for d but for Fill, Fits,
// Device and the notes (report/cache.go shares it).
func (r *Result) SharesWith(d model.Device) bool {
	if r.sized.cudnn {
		return false
	}
	for _, x := range r.sized.reds {
		if x.scratch(int64(d.SMs), int64(d.ThreadsPerSM)) != x.scratch(r.sized.sms, r.sized.threadsSM) {
			return false
		}
	}
	return true
}
