//go:build !unix

package estimate

// cpuTime is not measured here; benchmarks report 0.
func cpuTime() int64 { return 0 }
