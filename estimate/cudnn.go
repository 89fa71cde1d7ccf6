package estimate

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/montanaflynn/stats"
)

// cuDNN's convolution workspaces. A convolution takes a transient buffer
// from the caching allocator for each pass it runs: the forward, the
// gradient of its input and the gradient of its weight. Its size is what
// cuDNN's heuristics pick for the geometry, which no formula gives, so the
// sizes are measured (bench/torch/convws.py: every distinct convolution of
// torchvision's ResNets and ViT's patch embedding, in TF32 and bfloat16, at
// batch 16, 64, 128 and 256, on the H100 with cuDNN 9.19) and looked up.
// They grow in proportion to the batch, so other batches interpolate
// between the measured ones and scale beyond them. A geometry that was not
// measured takes the median ratio of its class (1x1 or larger kernel,
// stride 1 or more) to the tensors the pass reads. docs/formulas.md §E.
//
//go:embed data/cudnn-ws-h100.jsonl
var cudnnTable []byte

// convGeom is what cuDNN's choice depends on, for the convolutions memplan
// builds (no groups, no dilation).
type convGeom struct {
	in, out, kernel, stride, padding, h, w int64
	half                                   bool
}

// convWS is the workspace of each pass, in bytes.
type convWS struct {
	fwd, data, weight int64
}

type wsPoint struct {
	batch int64
	ws    convWS
}

type convClass struct {
	pointwise, unitStride, half bool
}

type wsTable struct {
	points map[convGeom][]wsPoint // by batch, ascending
	// ratios are the class medians: forward workspace per output byte,
	// input-gradient and weight-gradient workspaces per input byte.
	ratios map[convClass][3]float64
}

var (
	cudnnOnce sync.Once
	cudnnWS   *wsTable
	cudnnErr  error
)

func loadCudnn() (*wsTable, error) {
	cudnnOnce.Do(func() { cudnnWS, cudnnErr = parseWSTable(cudnnTable) })
	return cudnnWS, cudnnErr
}

// parseWSTable reads convws.py's JSON lines (the first line describes the
// machine).
func parseWSTable(data []byte) (*wsTable, error) {
	t := &wsTable{points: map[convGeom][]wsPoint{}, ratios: map[convClass][3]float64{}}
	samples := map[convClass][3][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			continue
		}
		var r struct {
			In, Out, Kernel, Stride, Padding, H, W, Batch int64
			Dtype                                         string
			InputBytes                                    int64   `json:"input_bytes"`
			OutputBytes                                   int64   `json:"output_bytes"`
			Forward                                       []int64 `json:"forward"`
			Backward                                      []int64 `json:"backward"`
			WeightOnly                                    []int64 `json:"backward_weight_only"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("cudnn table line %d: %w", line, err)
		}
		g := convGeom{r.In, r.Out, r.Kernel, r.Stride, r.Padding, r.H, r.W, r.Dtype != "float32"}
		ws := convWS{fwd: maxOf(r.Forward), weight: maxOf(r.WeightOnly), data: maxOf(without(r.Backward, r.WeightOnly))}
		t.points[g] = append(t.points[g], wsPoint{r.Batch, ws})
		c := classOf(g)
		s := samples[c]
		s[0] = append(s[0], float64(ws.fwd)/float64(r.OutputBytes))
		s[1] = append(s[1], float64(ws.data)/float64(r.InputBytes))
		s[2] = append(s[2], float64(ws.weight)/float64(r.InputBytes))
		samples[c] = s
	}
	if err := sc.Err(); err != nil {
		return nil, err
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
	return convClass{pointwise: g.kernel == 1, unitStride: g.stride == 1, half: g.half}
}

// lookup gives the workspaces of a convolution at a batch; inBytes and
// outBytes are the whole input and output in the compute dtype.
func (t *wsTable) lookup(g convGeom, batch, inBytes, outBytes int64) convWS {
	p, ok := t.points[g]
	if !ok {
		r, ok := t.ratios[classOf(g)]
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
	if batch <= p[0].batch {
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

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// without removes from xs one occurrence of each element of ys.
func without(xs, ys []int64) []int64 {
	left := append([]int64(nil), xs...)
	for _, y := range ys {
		for i, x := range left {
			if x == y {
				left = append(left[:i], left[i+1:]...)
				break
			}
		}
	}
	return left
}
