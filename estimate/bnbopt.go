package estimate

import "github.com/memplan/memplan/model"

// bitsandbytes' Adam optimizers (bitsandbytes/optim/optimizer.py,
// Optimizer2State; docs/lora.md §7), modelled from source, unmeasured.

const (
	// minEightBit is Optimizer2State's min_8bit_size: smaller tensors keep
	// fp32 state.
	minEightBit = 4096
	// stateBlock is the 8-bit state's block: one fp32 absmax per 256
	// elements per state (2048 before bitsandbytes 0.44).
	stateBlock = 256
	// minPaged is get_state_buffer's threshold: state of tensors with
	// fewer elements is an ordinary torch.zeros_like even when paged.
	minPaged = 100_000
	// uvmPage is the granularity a paged buffer is counted in on the
	// device: the GPU's 64 KiB page of unified memory (an assumption, not
	// a measurement: docs/lora.md §7).
	uvmPage = 64 << 10
)

// bnbStep is init_state on the first step: per parameter, the quantization
// maps (once, shared by all), then two states, uint8 for tensors of at
// least min_8bit_size elements (with an fp32 absmax per block each) and
// fp32 otherwise (and always for the 32-bit optimizer). Paged optimizers
// take states of tensors with at least 1e5 elements from
// cudaMallocManaged: outside PyTorch's allocator, counted in s.bnb.paged.
// The update kernels are fused: no temporaries.
func (s *sim) bnbStep(o model.Optimizer, params []*tensor, first bool) {
	if !first {
		return
	}
	paged := o.Paged()
	for _, p := range params {
		n := p.elems
		dt := int64(f32)
		if o.Name != model.PagedAdamW32bit && n >= minEightBit {
			dt = u8
		}
		if dt == u8 && !s.bnb.qmaps {
			s.bnb.qmaps = true
			s.alloc(256, f32, catOptState, "dynamic map (qmap1)")
			s.alloc(256, f32, catOptState, "unsigned dynamic map (qmap2)")
		}
		for range 2 {
			if paged && n >= minPaged {
				s.bnb.paged += (n*dt + uvmPage - 1) / uvmPage * uvmPage
				continue
			}
			s.alloc(n, dt, catOptState, "optimizer state")
		}
		if dt == u8 {
			blocks := (n + stateBlock - 1) / stateBlock
			s.alloc(blocks, f32, catOptState, "optimizer state absmax")
			s.alloc(blocks, f32, catOptState, "optimizer state absmax")
		}
	}
}

// bnbResult adds what bitsandbytes contributes to a result: the paged
// state as device memory outside the allocator, and what is unmeasured.
func (s *sim) bnbResult(r *Result) {
	if s.bnb.kind != "" {
		r.Unmeasured = append(r.Unmeasured, "quant")
	}
	switch o := r.Training.Optimizer; o.Name {
	case model.Adam8bit, model.PagedAdamW8bit, model.PagedAdamW32bit:
		r.Unmeasured = append(r.Unmeasured, "bnb_optimizer")
		r.Notes = append(r.Notes, "bitsandbytes is not installed on the measuring machines: "+o.Name+" is modelled from its source (docs/lora.md §7), unmeasured")
		if s.bnb.paged > 0 {
			r.Overhead = append(r.Overhead, Item{OverheadPaged, s.bnb.paged})
			r.Notes = append(r.Notes, "paged optimizer state is in CUDA unified memory: counted in the device total as resident, but the driver moves it to host memory when the device is full, so a run over by at most that much still runs, slower")
		}
	}
}
