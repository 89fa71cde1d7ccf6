package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gcSettings reads GOGC and the memory limit without changing them.
func gcSettings() (percent, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// TestTuneGC: with neither GOGC nor GOMEMLIMIT set, nothing is collected
// until the process holds firstCollection bytes, and after the first
// collection the collector runs at GOGC 400 under a 1 GiB limit; a GOGC
// the user set is left as it is.
func TestTuneGC(t *testing.T) {
	p0, l0 := gcSettings()
	t.Cleanup(func() {
		debug.SetGCPercent(int(p0))
		debug.SetMemoryLimit(l0)
	})
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC()
	if p, l := gcSettings(); p != -1 || l != firstCollection {
		t.Fatalf("before the first collection: GOGC %d, limit %d; want off, %d", p, l, int64(firstCollection))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		if p, l := gcSettings(); p == 400 && l == 1<<30 {
			break
		}
		if time.Now().After(deadline) {
			p, l := gcSettings()
			t.Fatalf("after collections: GOGC %d, limit %d; want 400, 1 GiB", p, l)
		}
		time.Sleep(time.Millisecond)
	}

	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200)
	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC()
	if p, l := gcSettings(); p != 200 || l != 1<<30 {
		t.Errorf("with GOGC=200 set: GOGC %d, limit %d; want 200, 1 GiB", p, l)
	}
}
