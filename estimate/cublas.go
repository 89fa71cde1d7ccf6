package estimate

// gemm notes a matrix product on the current thread: the first one creates
// that thread's cuBLAS handle and its workspace, which is never freed.
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
		s.alloc(s.cfg.cublasWorkspace, u8, catWorkspace, "cublas workspace")
	}
	if bias && !s.lt[th] {
		s.lt[th] = true
		s.alloc(cublasLtWorkspace, u8, catWorkspace, "cublasLt workspace")
	}
}
