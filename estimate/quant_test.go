package estimate

import (
	"math"
	"slices"
	"testing"

	"github.com/memplan/memplan/model"
)

// quantSim is a bare simulation that quantizes an attention's q_proj of
// in → out with a base loaded in load's dtype.
func quantSim(kind string, dq bool, load, in, out int64) *sim {
	s := testSim(false, half)
	s.cfg.param = load
	s.bnb = bnbState{kind: kind, dq: dq, load: load,
		attn: []model.LoRALinear{{Name: "q_proj", Group: model.TargetsAttn, In: in, Out: out, Count: 1}}}
	return s
}

// TestQuantStorage checks bitsandbytes' storage per parameter against
// docs/lora.md §6 (nf4 0.5625 B/param, 0.5159 with double quantization,
// the QLoRA paper's 4.127 bits; int8 1 B plus 4 B per output row), that
// quantMatrix allocates exactly those tensors, and that loading peaks at
// the weight in its load dtype plus the storage (the original is freed
// after quantizing, one weight at a time).
func TestQuantStorage(t *testing.T) {
	const out, in = 4096, 4096
	tests := []struct {
		kind     string
		dq       bool
		per      float64 // bytes per parameter, rounded to 4 places
		loadCopy int64   // the weight on the device before quantizing
		tmp      int64   // fp32 absmax temporaries of double quantization
	}{
		{model.QuantNF4, false, 0.5625, 2 * out * in, 0},
		{model.QuantNF4, true, 0.5159, 2 * out * in, 2 * out * in / 64 * 4},
		{model.QuantInt8, false, 1.0010, 2 * out * in, 0},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			s := quantSim(tt.kind, tt.dq, half, in, out)
			defer s.al.release()
			w := s.quantMatrix(out, in, 1, "q.weight")
			if w == nil || w.quant == nil || w.last != in || w.second != out {
				t.Fatalf("quantMatrix(q.weight) = %+v, want a quantized [%d, %d] weight", w, out, in)
			}
			want := quantStorageBytes(tt.kind, tt.dq, out, in)
			var shared int64
			if tt.dq {
				shared = 256 * 4 // quantize_blockwise's dynamic map, once per run
			}
			if got := s.live[catParam]; got != want+shared {
				t.Errorf("resident bytes = %d, want %d", got, want+shared)
			}
			if s.live[catTemp] != 0 {
				t.Errorf("%d temporary bytes left after loading", s.live[catTemp])
			}
			if per := math.Round(float64(want)/(out*in)*1e4) / 1e4; per != tt.per {
				t.Errorf("bytes per parameter = %.4f, want %.4f", per, tt.per)
			}
			if lo, hi := want+tt.loadCopy, want+shared+tt.loadCopy+tt.tmp; s.peak.allocated < lo || s.peak.allocated > hi+4<<10 {
				t.Errorf("peak while loading = %d, want between %d and %d", s.peak.allocated, lo, hi)
			}
			if s.quantMatrix(out, in, 1, "lm_head.weight") != nil {
				t.Error("lm_head quantized; transformers leaves the output head in its dtype")
			}
		})
	}
}

// TestQuantLinear checks what a frozen quantized linear keeps for backward
// and allocates transiently (docs/lora.md §6): nf4 saves only the packed
// weight, never the input, and its forward holds a dequantized weight in
// the input's dtype; int8 saves the input itself and holds the fp16 copy,
// int8 rows, |x| and the outlier mask of the input.
func TestQuantLinear(t *testing.T) {
	const rows, in, out = 4096, 1024, 512
	tests := []struct {
		kind       string
		wantSaved  int64
		wantTransB int64 // the largest transient set beyond input and output
	}{
		{model.QuantNF4, 0, 2 * in * out},
		// fp16 copy, int8 rows and fp32 row scales, then |x| and the mask;
		// later the int32 and fp16 products (as large here) with the output.
		{model.QuantInt8, 2 * rows * in, 2*rows*in + rows*in + 4*rows + 2*rows*in + rows*in},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			s := quantSim(tt.kind, false, half, in, out)
			defer s.al.release()
			w := s.quantMatrix(out, in, 1, "q.weight")
			w.req = false
			x := s.alloc(rows*in, half, catTemp, "x")
			x.req = true
			base := s.al.allocated
			y := s.matmul(x, w, nil, rows, out)
			if !y.req || y.dt != half || y.elems != rows*out {
				t.Errorf("output: requires grad %v, dtype %d, %d elements", y.req, y.dt, y.elems)
			}
			if b, p := savedBytes(s); b != tt.wantSaved || p != 1 {
				t.Errorf("saved %d bytes and %d parameters, want %d and 1", b, p, tt.wantSaved)
			}
			// peak - base - workspace - output ≥ the transients (allocator rounding aside)
			got := s.peak.allocated - base - s.live[catWorkspace] - 2*rows*out
			if got < tt.wantTransB || got > tt.wantTransB+tt.wantTransB/100+64<<10 {
				t.Errorf("forward transients = %d, want %d", got, tt.wantTransB)
			}
		})
	}
}

// TestQuantLoRAEstimate estimates a Llama with LoRA over bf16, nf4 and int8
// bases: the frozen storage shrinks by the ratios of §6, the adapters'
// bytes do not change, the result says the quantized figures are
// unmeasured, and nf4's 4-bit forward is never above the bf16 base's peak.
func TestQuantLoRAEstimate(t *testing.T) {
	run := func(quant string) *Result {
		return estimateSpec(t, "../specs/llama-3.2-1b.yaml", model.Overrides{Precision: "bf16", LoRA: 16,
			Quant: quant, Checkpointing: "every-block", Batch: 1})
	}
	none, nf4, int8 := run(""), run("nf4"), run("int8")
	// Llama-3.2-1B: 16 layers of q, k, v, o, gate, up, down.
	const linears = 16 * (2048*2048*2 + 2048*512*2 + 3*2048*8192)
	const rowsOut = 16 * (2048*2 + 512*2 + 8192*2 + 2048)
	for _, c := range []struct {
		name string
		r    *Result
		want int64
	}{
		{"nf4", nf4, none.ParamBytes - 2*linears + linears/2 + linears/64*4 + 16*7*16*4},
		{"int8", int8, none.ParamBytes - 2*linears + linears + rowsOut*4},
	} {
		if c.r.ParamBytes != c.want {
			t.Errorf("%s: parameter bytes = %d, want %d", c.name, c.r.ParamBytes, c.want)
		}
		if !slices.Contains(c.r.Unmeasured, "quant") {
			t.Errorf("%s: unmeasured = %v, want quant listed", c.name, c.r.Unmeasured)
		}
		if c.r.Trainable != none.Trainable || c.r.Params != none.Params {
			t.Errorf("%s: parameters %d (%d trainable), want %d (%d)", c.name, c.r.Params, c.r.Trainable, none.Params, none.Trainable)
		}
	}
	if none.Unmeasured != nil {
		t.Errorf("bf16 base: unmeasured = %v, want none", none.Unmeasured)
	}
	if nf4.PeakAllocated >= none.PeakAllocated {
		t.Errorf("nf4 peak %d not below the bf16 base's %d", nf4.PeakAllocated, none.PeakAllocated)
	}
}

// TestBnbOptimizerState checks Optimizer2State.init_state's sizes
// (docs/lora.md §7): fp32 states below min_8bit_size, uint8 states with an
// fp32 absmax per 256 above, the two shared maps once, and paged states
// (tensors of at least 1e5 elements) outside the allocator, counted in
// 64 KiB pages.
func TestBnbOptimizerState(t *testing.T) {
	sizes := []int64{4095, 4096, 99_999, 100_000}
	maps := int64(2 * 256 * 4)
	blocks := func(n int64) int64 { return 2 * 4 * ((n + 255) / 256) }
	page := func(b int64) int64 { return (b + 65535) / 65536 * 65536 }
	tests := []struct {
		opt          string
		alloc, paged int64
	}{
		{model.Adam8bit, 2*4095*4 + maps + 2*4096 + blocks(4096) + 2*99_999 + blocks(99_999) + 2*100_000 + blocks(100_000), 0},
		{model.PagedAdamW8bit, 2*4095*4 + maps + 2*4096 + blocks(4096) + 2*99_999 + blocks(99_999) + blocks(100_000), 2 * page(100_000)},
		{model.PagedAdamW32bit, 2 * 4 * (4095 + 4096 + 99_999), 2 * page(400_000)},
	}
	for _, tt := range tests {
		t.Run(tt.opt, func(t *testing.T) {
			s := testSim(false, f32)
			defer s.al.release()
			var ps []*tensor
			for _, n := range sizes {
				ps = append(ps, &tensor{elems: n, dt: f32, param: true, req: true})
			}
			s.bnbStep(model.Optimizer{Name: tt.opt}, ps, true)
			if got := s.live[catOptState]; got != tt.alloc {
				t.Errorf("allocated state = %d, want %d", got, tt.alloc)
			}
			if s.bnb.paged != tt.paged {
				t.Errorf("paged state = %d, want %d", s.bnb.paged, tt.paged)
			}
			before, peak := s.al.allocated, s.peak.allocated
			s.bnbStep(model.Optimizer{Name: tt.opt}, ps, false)
			if s.al.allocated != before || s.peak.allocated != peak {
				t.Error("a later step allocated state or temporaries")
			}
		})
	}
}

// TestQLoRASpecs estimates specs/qlora (the QLoRA paper's recipe,
// docs/accuracy.md): every adapter tensor has ≥ 1e5 elements, so the
// paged 32-bit state is two fp32 buffers per tensor in 64 KiB pages,
// outside the allocator and inside the device total; the bf16 adapters
// take 2 B each; the result lists both bitsandbytes parts as unmeasured.
func TestQLoRASpecs(t *testing.T) {
	for _, m := range []struct {
		name         string
		layers, d, f int64
	}{{"7b", 32, 4096, 11008}, {"65b", 80, 8192, 22016}} {
		t.Run(m.name, func(t *testing.T) {
			r := estimateSpec(t, "../specs/qlora/llama-"+m.name+".yaml", model.Overrides{})
			page := func(n int64) int64 { return (4*n + 65535) / 65536 * 65536 }
			// q, k, v, o: A 64×d, B d×64; gate, up: A 64×d, B f×64; down: A 64×f, B d×64.
			perLayer := 4*2*page(64*m.d) + 2*(page(64*m.d)+page(64*m.f)) + page(64*m.f) + page(64*m.d)
			var paged int64
			for _, o := range r.Overhead {
				if o.Name == OverheadPaged {
					paged = o.Bytes
				}
			}
			if want := 2 * m.layers * perLayer; paged != want {
				t.Errorf("paged state = %d, want %d", paged, want)
			}
			if r.OptimizerBytes != 0 {
				t.Errorf("optimizer state in the allocator = %d, want 0 (all paged)", r.OptimizerBytes)
			}
			if r.GradBytes != 2*r.Trainable {
				t.Errorf("adapter gradients = %d, want 2 B × %d", r.GradBytes, r.Trainable)
			}
			if !slices.Equal(r.Unmeasured, []string{"quant", "bnb_optimizer"}) {
				t.Errorf("unmeasured = %v", r.Unmeasured)
			}
			if r.DeviceTotal < r.PeakReserved+paged {
				t.Errorf("device total %d does not hold reserved %d + paged %d", r.DeviceTotal, r.PeakReserved, paged)
			}
		})
	}
}
