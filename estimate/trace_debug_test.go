package estimate

import (
	"fmt"
	"os"
	"testing"

	"github.com/memplan/memplan/model"
)

// TestTraceDebug prints the simulator's allocations for MEMPLAN_TRACE=spec.
func TestTraceDebug(t *testing.T) {
	f := os.Getenv("MEMPLAN_TRACE")
	if f == "" {
		t.Skip("set MEMPLAN_TRACE=specs/x.yaml")
	}
	s, err := model.Load(f, model.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	estimateWith(s, func(*sim) {}, func(sm *sim) {
		sm.trace = func(x *tensor, alloc bool) {
			a := "free "
			if alloc {
				a = "alloc"
			}
			fmt.Printf("%s %d live %8.1f  %s  [%s]\n", a, x.bytes(), float64(sm.al.allocated)/(1<<20), x.label(), sm.phase.Stage)
		}
	})
}
