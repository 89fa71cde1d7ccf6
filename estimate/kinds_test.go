package estimate

import (
	"slices"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestGroupNormSaves checks what a GroupNorm holds for backward in fp32:
// conv(x) saves x (1,024 bytes); group_norm saves its input (the conv's
// output, 1,024), its weight and the fp32 mean and rstd per (sample,
// group) (8 + 8); the linear saves its flattened input (1,024); the loss
// saves the 2 log-probabilities (8). Parameters are counted as parameters.
func TestGroupNormSaves(t *testing.T) {
	spec := `name: gn
model:
  type: sequential
  input: {image: {channels: 4}}
  layers:
    - conv2d: {in: 4, out: 4, kernel: 1, bias: false}
    - groupnorm: {groups: 2, channels: 4}
    - flatten
    - linear: {in: 256, out: 2, bias: false}
training: {batch: 1, image: 8, precision: fp32, optimizer: sgd}
`
	s, err := model.Parse("gn.yaml", []byte(spec), model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Estimate(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.ActivationBytes, int64(1024+1024+8+8+1024+8); got != want {
		t.Errorf("ActivationBytes = %d, want %d", got, want)
	}
	if got, want := r.Params, int64(16+8+512); got != want {
		t.Errorf("Params = %d, want %d", got, want)
	}
}

// TestConv1dNote checks that a conv1d whose cuDNN workspace the table
// does not hold says so, and that a measured one or a model without one
// does not.
func TestConv1dNote(t *testing.T) {
	tests := []struct {
		name, file string
		ov         model.Overrides
		want       bool
	}{
		{"whisper measured", "whisper-base-encoder.yaml", model.Overrides{}, false},
		{"whisper at 2000 frames", "whisper-base-encoder.yaml", model.Overrides{Seq: 2000}, true},
		{"no conv1d", "cnn-groupnorm.yaml", model.Overrides{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Estimate(load(t, tt.file, tt.ov))
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(r.Notes, conv1dUnmeasured); got != tt.want {
				t.Errorf("note present = %v, want %v (notes %q)", got, tt.want, r.Notes)
			}
		})
	}
}
