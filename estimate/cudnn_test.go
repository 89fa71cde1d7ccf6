package estimate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestCudnnTables parses every embedded table and checks that its first
// line, written by bench/torch/convws.py on the GPU, names the machine its
// provenance (internal/measured) says.
func TestCudnnTables(t *testing.T) {
	for arch, src := range cudnnTables {
		t.Run(arch, func(t *testing.T) {
			if src.arch != arch {
				t.Errorf("table under %q says arch %q", arch, src.arch)
			}
			b, err := cudnnData.ReadFile(src.file)
			if err != nil {
				t.Fatal(err)
			}
			d, err := parseWSTable(b)
			if err != nil || len(d.points) == 0 {
				t.Fatalf("parseWSTable(%s) = %d geometries, %v", src.file, len(d.points), err)
			}
			sc := bufio.NewScanner(bytes.NewReader(b))
			sc.Scan()
			var h struct {
				Date, GPU, Driver, Torch string
				Cudnn                    int
			}
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatal(err)
			}
			on := src.on
			cudnn := fmt.Sprintf("%d.%d.%d", h.Cudnn/10000, h.Cudnn/100%100, h.Cudnn%100)
			got := []string{h.Date, h.GPU, h.Driver, h.Torch, cudnn}
			want := []string{on.Date, on.Device, on.Driver, on.Torch, on.CuDNN}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s header = %v, provenance %v", src.file, got, want)
			}
		})
	}
}

const convSpec = `name: small-resnet
model:
  type: resnet
  depth: 18
training:
  batch: 8
  image: 64
  precision: amp-bf16
  optimizer: sgd-momentum
`

const mlpSpec = `name: mlp
model:
  type: sequential
  input: {features: 256}
  layers:
    - linear: {in: 256, out: 512}
    - relu
    - linear: {in: 512, out: 10}
training:
  batch: 8
  precision: fp32
  optimizer: adamw
`

// TestCudnnBorrowedNote checks that an estimate says when its device
// borrows another architecture's table, only for a model with a
// convolution, and that the table is parsed only then.
func TestCudnnBorrowedNote(t *testing.T) {
	saved := cudnnTables[cudnnFallback]
	defer func() { cudnnTables[cudnnFallback] = saved }()
	fresh := &cudnnSource{arch: saved.arch, file: saved.file, on: saved.on}
	cudnnTables[cudnnFallback] = fresh
	tests := []struct {
		name, spec, device string
		note, parsed       bool
	}{
		{"mlp on ampere", mlpSpec, "a100-40gb", false, false},
		{"resnet on hopper", convSpec, "h100-80gb", false, true},
		{"resnet on h200", convSpec, "h200-141gb", false, true},
		{"resnet on ampere", convSpec, "a100-40gb", true, true},
		{"resnet on a size", convSpec, "24GiB", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := model.Parse(tt.name+".yaml", []byte(tt.spec), model.Overrides{Dev: tt.device})
			if err != nil {
				t.Fatal(err)
			}
			r, err := Estimate(spec)
			if err != nil {
				t.Fatal(err)
			}
			var note bool
			for _, n := range r.Notes {
				note = note || strings.Contains(n, "borrows that table")
			}
			if note != tt.note {
				t.Errorf("borrowed-table note = %v, want %v (notes %q)", note, tt.note, r.Notes)
			}
			if parsed := fresh.data != nil; parsed != tt.parsed {
				t.Errorf("table parsed = %v, want %v", parsed, tt.parsed)
			}
		})
	}
}
