package alloc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
)

// probeCase is one case of bench/torch/addr/probe_va.py: cudaMalloc and
// cudaFree calls in a fresh CUDA context, with the addresses the driver
// returned (H100, driver 580.159.04; docs/allocator.md §8).
type probeCase struct {
	Case string
	Ops  [][3]json.Number // op ("alloc", "free"), bytes, address
}

func readProbe(t *testing.T) []probeCase {
	t.Helper()
	z := openGzip(t, "testdata/probe-va.jsonl.gz")
	var out []probeCase
	s := bufio.NewScanner(z)
	s.Buffer(nil, 1<<24)
	for s.Scan() {
		var c struct {
			Case string
			Ops  [][]any
		}
		d := json.NewDecoder(bytes.NewReader(s.Bytes()))
		d.UseNumber()
		if err := d.Decode(&c); err != nil {
			t.Fatal(err)
		}
		if c.Case == "machine" {
			continue
		}
		pc := probeCase{Case: c.Case}
		for _, o := range c.Ops {
			pc.Ops = append(pc.Ops, [3]json.Number{json.Number(o[0].(string)), o[1].(json.Number), o[2].(json.Number)})
		}
		out = append(out, pc)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAddressProbe replays every measured sequence of cudaMalloc and
// cudaFree through the address model: each address must be the real one
// less a constant (where the process's address space begins).
func TestAddressProbe(t *testing.T) {
	cases := readProbe(t)
	if len(cases) < 50 {
		t.Fatalf("%d probe cases, want the 53 measured", len(cases))
	}
	var allocs, frees int
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			var v vaSpace
			v.reset()
			type seg struct {
				addr  int64
				chunk int32
				n     int64
			}
			live := map[int64]seg{}
			var shift int64
			first := true
			for i, o := range c.Ops {
				n, _ := o[1].Int64()
				real, _ := o[2].Int64()
				switch o[0] {
				case "alloc":
					allocs++
					got, ch := v.alloc(n)
					if first {
						shift, first = real-got, false
					}
					if got+shift != real {
						t.Fatalf("op %d: alloc(%d MiB) = real address %+d MiB", i, n>>20, (got+shift-real)>>20)
					}
					live[real] = seg{got, ch, n}
				case "free":
					frees++
					s := live[real]
					delete(live, real)
					v.free(s.addr, s.n, s.chunk)
				}
			}
		})
	}
	t.Logf("%d allocations, %d frees", allocs, frees)
}
