package estimate

import (
	"math"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestQuantStorage checks bitsandbytes' storage per parameter against
// docs/lora.md §6: nf4 0.5625 B/param, 0.5159 with double quantization
// (the QLoRA paper's 4.127 bits), int8 1 B plus 4 B per output row.
func TestQuantStorage(t *testing.T) {
	const out, in = 4096, 4096
	tests := []struct {
		kind  string
		dq    bool
		bytes int64
		per   float64 // bytes per parameter, rounded to 4 places
	}{
		{model.QuantNF4, false, out*in/2 + out*in/64*4 + 64, 0.5625},
		{model.QuantNF4, true, out*in/2 + out*in/64 + 4 + out*in/64/256*4 + 1024 + 64, 0.5159},
		{model.QuantInt8, false, out*in + out*4, 1.0010},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var b int64
			for _, p := range quantStorage(tt.kind, tt.dq, out, in) {
				b += p.elems * p.dt
			}
			if b != tt.bytes {
				t.Errorf("bytes = %d, want %d", b, tt.bytes)
			}
			if per := math.Round(float64(b)/(out*in)*1e4) / 1e4; per != tt.per {
				t.Errorf("bytes per parameter = %.4f, want %.4f", per, tt.per)
			}
		})
	}
}

// TestQuantLinearSaves checks what a frozen quantized linear keeps for
// backward: nf4 only the packed weight (never the input), int8 the input.
func TestQuantLinearSaves(t *testing.T) {
	const rows, in, out = 8, 64, 32
	tests := []struct {
		kind      string
		wantBytes int64
	}{
		{model.QuantNF4, 0},
		{model.QuantInt8, 2 * rows * in},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			s := testSim(false, half)
			defer s.al.release()
			x := s.alloc(rows*in, half, catTemp, "x")
			x.req = true
			w := s.alloc(in*out/2, u8, catParam, "packed")
			w.param = true
			y := s.quantLinear(tt.kind, true, x, w, rows, in, out, half)
			if !y.req || y.dt != half {
				t.Errorf("output requires grad %v dtype %d", y.req, y.dt)
			}
			if b, p := savedBytes(s); b != tt.wantBytes || p != 1 {
				t.Errorf("saved %d bytes and %d parameters, want %d and 1", b, p, tt.wantBytes)
			}
		})
	}
}
