package estimate

import (
	"fmt"
	"sort"
	"sync"

	"github.com/montanaflynn/stats"

	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/model"
)

// cuDNN's convolution workspaces. A convolution takes a transient buffer
// from the caching allocator for each pass it runs: the forward, the
// gradient of its input and the gradient of its weight. Its size is what
// cuDNN's heuristics pick for the geometry, which no formula gives, so the
// sizes are measured (bench/torch/convws.py: every distinct convolution of
// torchvision's ResNets and ViT's patch embedding, in TF32 and bfloat16, at
// batch 16 to 1024; and with --dims 1 the 1-D convolutions of the audio
// encoders' stems, Whisper's and wav2vec2's, at batch 1 to 256) and looked
// up. They grow in proportion to the batch, so other batches interpolate
// between the measured ones and scale beyond them. A geometry that was not
// measured takes the median ratio of its class (1-D or 2-D, 1x1 or larger
// kernel, stride 1 or more) to the tensors the pass reads. docs/formulas.md
// §F.
//
// cuDNN's choice depends on the GPU architecture, so there is a table per
// architecture where one was measured (only sm90, on the H100, so far); a
// device of another architecture borrows the fallback's table, and the
// estimate says so in its notes when the model has a convolution.
//
// The measurements are convws.py's JSON lines in data/; they are compiled
// into cudnn_rows.go (TestCudnnRows checks it against them and rewrites it
// with -update), so that no process parses JSON: parsing them took about
// 6 ms, more than the rest of a small convolutional network's estimate
// (docs/performance.md, tenth session).

// cudnnFile is one file of measurements and where it was taken.
type cudnnFile struct {
	name string
	on   measured.Provenance
}

// cudnnSource is one architecture's measured table, from one or more
// files, built on first use: a model without a convolution never reads it.
type cudnnSource struct {
	arch  string
	files []cudnnFile // the first one's provenance is the table's
	rows  []wsGeom    // the files' rows by geometry (cudnn_rows.go)
	once  sync.Once
	data  *wsData
}

// cudnnTables are the measured tables by architecture (model.Device.Arch).
var cudnnTables = map[string]*cudnnSource{
	"hopper": {arch: "hopper", files: []cudnnFile{
		{"data/cudnn-ws-h100.jsonl", measured.CudnnHopper},
		{"data/cudnn-ws-h100-1d.jsonl", measured.CudnnHopper1D},
		{"data/cudnn-ws-h100-spec.jsonl", measured.CudnnHopperSpec},
		{"data/cudnn-ws-h200-spec-large.jsonl", measured.CudnnHopperSpecLarge},
		{"data/cudnn-ws-h200-large.jsonl", measured.CudnnHopperLarge},
		{"data/cudnn-ws-h200-fp16.jsonl", measured.CudnnHopperFP16},
		{"data/cudnn-ws-h200-fp16-spec.jsonl", measured.CudnnHopperFP16Spec},
	}, rows: cudnnRowsHopper},
}

// cudnnFallback is the architecture whose table devices without their own
// borrow.
const cudnnFallback = "hopper"

// load builds the table from its rows. The rows are compiled in and the
// package's tests build every table, so a table that does not build is a
// build defect: load panics then, as template.Must does.
func (c *cudnnSource) load() *wsData {
	c.once.Do(func() {
		var err error
		if c.data, err = buildWSTable(c.rows); err != nil {
			panic(fmt.Sprintf("estimate: cuDNN tables of %s: %v", c.arch, err))
		}
	})
	return c.data
}

// sameSide returns the points of p on the given side of 2³¹ elements
// (bigAt): all of p, or the run of them at its start or end (the side
// changes once as the batch grows).
func sameSide(p []wsPoint, big bool) []wsPoint {
	i := sort.Search(len(p), func(i int) bool { return p[i].big })
	if big {
		return p[i:]
	}
	return p[:i]
}

// rowsFor returns the measured points of geometry g: its own, or for an
// fp16 geometry with none, bf16's.
func (t *wsData) rowsFor(g convGeom) ([]wsPoint, bool) {
	p, ok := t.points[g]
	if !ok && g.fp16 {
		g.fp16 = false
		p, ok = t.points[g]
	}
	return p, ok
}

// wsTable is the cuDNN table one estimate uses: its device's own, or the
// fallback's. It records whether a convolution looked it up, to say so
// when the table was borrowed.
type wsTable struct {
	src    *cudnnSource
	device model.Device
	used   bool
}

// cudnnFor picks the table for a device.
func cudnnFor(d model.Device) *wsTable {
	src, ok := cudnnTables[d.Arch]
	if !ok {
		src = cudnnTables[cudnnFallback]
	}
	return &wsTable{src: src, device: d}
}

// lookup gives the workspaces of a convolution at a batch; inBytes and
// outBytes are the whole input and output in the compute dtype.
func (t *wsTable) lookup(g convGeom, batch, inBytes, outBytes int64) convWS {
	t.used = true
	return t.src.load().lookup(g, batch, inBytes, outBytes)
}

// measured says whether the table has this exact geometry (otherwise a
// lookup estimates it from the class medians).
func (t *wsTable) measured(g convGeom) bool {
	_, ok := t.src.load().rowsFor(g)
	return ok
}

// notes says when the estimate's convolutions used another architecture's
// table.
func (t *wsTable) notes() []string {
	if t == nil || !t.used || t.src.arch == t.device.Arch {
		return nil
	}
	arch := t.device.Arch
	if arch == "" {
		arch = "an unknown architecture"
	}
	on := t.src.files[0].on
	return []string{fmt.Sprintf("cuDNN convolution workspaces were measured on %s only (%s, cuDNN %s, %s); %s (%s) borrows that table, and its cuDNN may pick other algorithms with other workspaces",
		t.src.arch, on.Device, on.CuDNN, on.Date, t.device.Name, arch)}
}

// convGeom is what cuDNN's choice depends on, for the convolutions memplan
// builds (no groups, no dilation). A 1-D convolution (oneD) is the 2-D one
// cuDNN runs, of height 1 and a 1×kernel filter: h is 1, w its length.
type convGeom struct {
	in, out, kernel, stride, padding, h, w int64
	half, oneD                             bool
	// fp16 marks a half convolution in fp16 (amp-fp16), whose choices
	// cuDNN makes apart from bf16's (the ResNets' 7×7 stem takes 5,118
	// MiB in fp16 at batch 2,700 and 6,142 MiB in bf16); a geometry with
	// no fp16 measurement takes bf16's (rowsFor).
	fp16 bool
}

// convWS is the workspace of each pass, in bytes.
type convWS struct {
	fwd, data, weight int64
}

type wsPoint struct {
	batch int64
	ws    convWS
	big   bool // past 2³¹ elements (bigAt)
}

// bigAt says whether a convolution of geometry g at a batch has an input
// or output of more than 2³¹ − 1 elements. cuDNN chooses other algorithms
// past that size, with workspaces that do not follow the smaller batches'
// (a ResNet's 1×1 convolutions at 56×56 take none at batch 2,600 and 5 to
// 12 GiB from 2,700 on, their input passing 2³¹ elements at 2,675;
// wav2vec2's 10 s stem, docs/formulas.md §F)
// and stay the same as the batch grows, so the table uses measurements
// only on a batch's own side of it.
func bigAt(g convGeom, batch int64) bool {
	const intMax = 1<<31 - 1
	in, out := g.elems(batch)
	return in > intMax || out > intMax
}

// elems returns the elements of the input and output of a convolution of
// geometry g at a batch.
func (g convGeom) elems(batch int64) (in, out int64) {
	oh, ow := int64(1), (g.w+2*g.padding-g.kernel)/g.stride+1
	if !g.oneD {
		oh = (g.h+2*g.padding-g.kernel)/g.stride + 1
	}
	return batch * g.in * g.h * g.w, batch * g.out * oh * ow
}

type convClass struct {
	pointwise, unitStride, half, oneD bool
}

// wsData is a parsed table.
type wsData struct {
	points map[convGeom][]wsPoint // by batch, ascending
	// ratios are the class medians: forward workspace per output byte,
	// input-gradient and weight-gradient workspaces per input byte.
	ratios map[convClass][3]float64
}

// wsGeom is one geometry's measurements (convws.py's lines for it, in
// order).
type wsGeom struct {
	g    convGeom
	rows []wsRow
}

// wsRow is one measured convolution of a geometry: its batch, the bytes of
// its input and output, and the workspace of each pass (the largest
// request of each pass).
type wsRow struct {
	batch             int64
	inBytes, outBytes int64
	ws                convWS
}

// buildWSTable makes a table of the measured geometries: each one's points
// by batch, and each class's median ratios of workspace to the tensors a
// pass reads.
func buildWSTable(geoms []wsGeom) (*wsData, error) {
	t := &wsData{points: map[convGeom][]wsPoint{}, ratios: map[convClass][3]float64{}}
	samples := map[convClass][3][]float64{}
	for _, g := range geoms {
		for _, r := range g.rows {
			t.points[g.g] = append(t.points[g.g], wsPoint{r.batch, r.ws, bigAt(g.g, r.batch)})
		}
		if g.g.fp16 {
			continue // the class medians are bf16's and TF32's (rowsFor)
		}
		c := classOf(g.g)
		s := samples[c]
		for _, r := range g.rows {
			s[0] = append(s[0], float64(r.ws.fwd)/float64(r.outBytes))
			s[1] = append(s[1], float64(r.ws.data)/float64(r.inBytes))
			s[2] = append(s[2], float64(r.ws.weight)/float64(r.inBytes))
		}
		samples[c] = s
	}
	for g := range t.points {
		p := t.points[g]
		sort.Slice(p, func(i, j int) bool { return p[i].batch < p[j].batch })
	}
	for c, s := range samples {
		var r [3]float64
		for i := range s {
			m, err := stats.Median(s[i])
			if err != nil {
				return nil, err
			}
			r[i] = m
		}
		t.ratios[c] = r
	}
	return t, nil
}

func classOf(g convGeom) convClass {
	return convClass{pointwise: g.kernel == 1, unitStride: g.stride == 1, half: g.half, oneD: g.oneD}
}

// lookup gives the workspaces of a convolution at a batch; inBytes and
// outBytes are the whole input and output in the compute dtype.
func (t *wsData) lookup(g convGeom, batch, inBytes, outBytes int64) convWS {
	p, ok := t.rowsFor(g)
	if !ok {
		c := classOf(g)
		r, ok := t.ratios[c]
		if !ok && c.oneD {
			// no 1-D convolution of this class was measured: the 2-D
			// class's ratios
			c.oneD = false
			r, ok = t.ratios[c]
		}
		if !ok {
			return convWS{}
		}
		return convWS{
			fwd:    int64(r[0] * float64(outBytes)),
			data:   int64(r[1] * float64(inBytes)),
			weight: int64(r[2] * float64(inBytes)),
		}
	}
	scale := func(w convWS, num, den int64) convWS {
		return convWS{w.fwd * num / den, w.data * num / den, w.weight * num / den}
	}
	big := bigAt(g, batch)
	if side := sameSide(p, big); len(side) > 0 {
		p = side
	} else {
		big = false // none measured on its side: the other side's, scaled
	}
	if big {
		// Past 2³¹ elements every workspace measured at two or more
		// batches is the same at each (docs/formulas.md §F): below the
		// first measurement its value, between two the line, beyond the
		// last its value where the measurements are flat, scaled where
		// only one was made.
		last := p[len(p)-1]
		if batch >= last.batch {
			if len(p) > 1 && p[0].ws == last.ws {
				return last.ws
			}
			return scale(last.ws, batch, last.batch)
		}
		if batch <= p[0].batch {
			return p[0].ws
		}
	} else if batch <= p[0].batch {
		return scale(p[0].ws, batch, p[0].batch)
	}
	last := p[len(p)-1]
	if batch >= last.batch {
		return scale(last.ws, batch, last.batch)
	}
	i := sort.Search(len(p), func(i int) bool { return p[i].batch >= batch })
	lo, hi := p[i-1], p[i]
	lerp := func(a, b int64) int64 { return a + (b-a)*(batch-lo.batch)/(hi.batch-lo.batch) }
	return convWS{lerp(lo.ws.fwd, hi.ws.fwd), lerp(lo.ws.data, hi.ws.data), lerp(lo.ws.weight, hi.ws.weight)}
}
