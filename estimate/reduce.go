package estimate

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
	s.used.sms = true // from here the SM count sizes the scratch
	target := s.cfg.sms * (s.cfg.threadsSM / (bw * bh))
	grid := divUp(dim0, stepOut)
	if grid > target {
		return 0
	}
	ctas := max(min(divUp(target, grid), divUp(vpt, 16)), divUp(vpt, 256))
	if ctas <= 1 {
		return 0
	}
	// The semaphores (4 bytes per block column) are a second, small
	// allocation, left out.
	return f32 * cols * ctas * bw * vec
}
