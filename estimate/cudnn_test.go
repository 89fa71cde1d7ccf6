package estimate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/model"
)

// TestCudnnTables builds every table and checks that the first line of
// each of its files, written by bench/torch/convws.py on the GPU, names
// the machine its provenance (internal/measured) says.
func TestCudnnTables(t *testing.T) {
	for arch, src := range cudnnTables {
		t.Run(arch, func(t *testing.T) {
			if src.arch != arch {
				t.Errorf("table under %q says arch %q", arch, src.arch)
			}
			if d, err := buildWSTable(src.rows); err != nil || len(d.points) == 0 {
				t.Fatalf("buildWSTable = %d geometries, %v", len(d.points), err)
			}
			for _, f := range src.files {
				b, err := os.ReadFile(f.name)
				if err != nil {
					t.Fatal(err)
				}
				checkHeader(t, f.name, b, f.on)
			}
		})
	}
}

func checkHeader(t *testing.T, name string, b []byte, on measured.Provenance) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan()
	var h struct {
		Date, GPU, Driver, Torch string
		Cudnn                    int
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
		t.Fatal(err)
	}
	cudnn := fmt.Sprintf("%d.%d.%d", h.Cudnn/10000, h.Cudnn/100%100, h.Cudnn%100)
	got := []string{h.Date, h.GPU, h.Driver, h.Torch, cudnn}
	want := []string{on.Date, on.Device, on.Driver, on.Torch, on.CuDNN}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s header = %v, provenance %v", name, got, want)
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
	fresh := &cudnnSource{arch: saved.arch, files: saved.files, rows: saved.rows}
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

// TestCudnn1D checks the measured 1-D convolutions (Whisper's stem,
// estimate/data/cudnn-ws-h100-1d.jsonl): a measured batch gives the
// workspaces convws.py recorded, a batch between two measured ones
// interpolates, one beyond the largest scales it, and the same numbers as
// a 2-D geometry are not a measured one.
func TestCudnn1D(t *testing.T) {
	conv1 := convGeom{in: 80, out: 512, kernel: 3, stride: 1, padding: 1, h: 1, w: 3000, half: true, oneD: true}
	conv2 := convGeom{in: 512, out: 512, kernel: 3, stride: 2, padding: 1, h: 1, w: 3000, oneD: true}
	tests := []struct {
		name  string
		g     convGeom
		batch int64
		want  convWS
	}{
		// batch 64 is the held-out Whisper line's: its allocator trace has
		// the same 217.03 MiB forward workspace
		{"conv1 bf16 at 64, measured", conv1, 64, convWS{fwd: 227573907, data: 227573907, weight: 242516647}},
		{"conv1 bf16 at 32, measured", conv1, 32, convWS{fwd: 113909907, data: 113909907, weight: 128852647}},
		{"conv1 bf16 at 48, halfway", conv1, 48, convWS{fwd: 170741907, data: 170741907, weight: 185684647}},
		{"conv2 tf32 at 1, measured", conv2, 1, convWS{fwd: 9289744, data: 12361875, weight: 14328223}},
		{"conv2 tf32 at 512, twice 256's", conv2, 512, convWS{fwd: 2 * 2362441875, data: 2 * 2362441875, weight: 2 * 2368733551}},
	}
	tab := cudnnTables["hopper"].load()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := tab.points[tt.g]; !ok {
				t.Fatalf("geometry %+v is not in the table", tt.g)
			}
			if got := tab.lookup(tt.g, tt.batch, 0, 0); got != tt.want {
				t.Errorf("lookup(%+v, %d) = %+v, want %+v", tt.g, tt.batch, got, tt.want)
			}
		})
	}
	t.Run("2-D twin unmeasured", func(t *testing.T) {
		g := conv1
		g.oneD = false
		if _, ok := tab.points[g]; ok {
			t.Errorf("2-D geometry %+v found in the table", g)
		}
	})
	t.Run("1-D classes", func(t *testing.T) {
		for _, half := range []bool{false, true} {
			if _, ok := tab.ratios[convClass{unitStride: true, half: half, oneD: true}]; !ok {
				t.Errorf("no 1-D class medians for half=%v", half)
			}
		}
	})
}

// TestCudnnSides checks that the table uses measurements only on a
// batch's side of 2³¹ elements, and holds them unscaled past it where they
// are flat: a
// ResNet's 1×1 256→64 convolution at 56×56 in bf16 takes no forward
// workspace to speak of up to batch 2,600 and the same 5 GiB at every
// batch measured from 2,700 to 3,072 (bench/results/
// 2026-11-27-h200-convws-large/ and 2026-11-27-h200-resnet-2p31/), its
// input passing 2³¹ elements from batch 2,675 on.
func TestCudnnSides(t *testing.T) {
	g := convGeom{in: 256, out: 64, kernel: 1, stride: 1, padding: 0, h: 56, w: 56, half: true}
	tab := cudnnTables["hopper"].load()
	if bigAt(g, 2674) || !bigAt(g, 2675) {
		t.Fatalf("bigAt: 2674 %v, 2675 %v; want the side to change at 2675", bigAt(g, 2674), bigAt(g, 2675))
	}
	big := convWS{fwd: 5366825107, data: 5366825107, weight: 5368660112}
	tests := []struct {
		batch int64
		want  convWS
	}{
		{2600, convWS{fwd: 272, data: 272, weight: 170393872}},                                           // measured
		{2674, convWS{fwd: 272 * 2674 / 2600, data: 272 * 2674 / 2600, weight: 170393872 * 2674 / 2600}}, // 2,600's, scaled
		{2675, big}, // 2,700's, not scaled
		{2760, big}, // between two measured, the same
		{4000, big}, // beyond the largest, held
	}
	for _, tt := range tests {
		if got := tab.lookup(g, tt.batch, 0, 0); got != tt.want {
			t.Errorf("lookup at batch %d = %+v, want %+v", tt.batch, got, tt.want)
		}
	}
	// wav2vec2's 10 s stem (its second convolution, in TF32) was measured
	// past 2³¹ elements at batch 256 only: below it that measurement
	// stands, beyond it it is scaled (one point shows no plateau).
	w := convGeom{in: 512, out: 512, kernel: 3, stride: 2, h: 1, w: 31999, oneD: true}
	at256 := convWS{fwd: 12880433299, data: 12880433299, weight: 12886724975}
	if !bigAt(w, 200) || bigAt(w, 128) {
		t.Fatalf("bigAt: 128 %v, 200 %v; want the side to change between them", bigAt(w, 128), bigAt(w, 200))
	}
	if got := tab.lookup(w, 200, 0, 0); got != at256 {
		t.Errorf("wav2vec2 stem at 200 = %+v, want 256's %+v", got, at256)
	}
	if got, want := tab.lookup(w, 512, 0, 0), (convWS{2 * at256.fwd, 2 * at256.data, 2 * at256.weight}); got != want {
		t.Errorf("wav2vec2 stem at 512 = %+v, want twice 256's %+v", got, want)
	}
}

// TestCudnnRowBytes checks the element counts bigAt compares, computed
// from the geometry, against the tensor bytes convws.py recorded for every
// row.
func TestCudnnRowBytes(t *testing.T) {
	for _, src := range cudnnTables {
		for _, x := range src.rows {
			el := int64(4)
			if x.g.half {
				el = 2
			}
			for _, r := range x.rows {
				if in, out := x.g.elems(r.batch); in*el != r.inBytes || out*el != r.outBytes {
					t.Errorf("%+v at batch %d: %d and %d elements, recorded %d and %d bytes", x.g, r.batch, in, out, r.inBytes, r.outBytes)
				}
			}
		}
	}
}
