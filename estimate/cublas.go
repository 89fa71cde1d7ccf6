package estimate

import "github.com/memplan/memplan/alloc"

// gemm notes a matrix product on the current thread: the first one creates
// that thread's cuBLAS handle and its workspace, which is never freed. The
// handle is made when the product runs, after its output is allocated
// (measured: GPT-2 XL, bench/results/2026-11-23-h100-traces/gpt2xl-bf16ckpt;
// the forward's first linear layer and the backward's first product), so
// callers note it after allocating the output.
func (s *sim) gemm(dt int64, bias bool) {
	if s.stop.stopped {
		return // the op never runs (earlyStop)
	}
	if dt != f32 {
		s.used.gemmHalf = true
	}
	th := s.thread
	if !s.ws[th] {
		s.ws[th] = true
		// cuBLAS's first kernels free room in the context's address
		// space, the workspace the first segment carved from it.
		s.libraryLoaded(alloc.CuBLAS)
		s.alloc(s.cfg.cublasWorkspace, u8, catWorkspace, "cublas workspace")
	}
	if bias && !s.lt[th] {
		s.lt[th] = true
		s.alloc(cublasLtWorkspace, u8, catWorkspace, "cublasLt workspace")
	}
}
