package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

func TestZZExp(t *testing.T) {
	jobs, devs := fiftyJobs(t), model.DeviceNames()
	more, _ := filepath.Glob("../model/testdata/hf/*.json")
	for _, h := range more {
		if strings.Contains(h, "moe") || strings.Contains(h, "mixtral") || strings.Contains(h, "a3b") {
			continue
		}
		jobs = append(jobs, h+"?seq=2048")
	}
	out, _ := os.Create(os.Getenv("ZZOUT"))
	defer out.Close()
	total := 0
	for _, p := range jobs {
		memo := map[cacheKey]int64{}
		for _, d := range devs {
			s, err := benchLoad(p, d)
			if err != nil {
				continue
			}
			for _, capped := range []bool{false, true} {
				or := tuner.Analytic
				if capped {
					or = tuner.Capped(tuner.Limit(tuner.DefaultBand, tuner.Constraints{Margin: tuner.DefaultMargin}))
				}
				n := 0
				o := func(x *model.Spec) (int64, error) {
					k := cacheKey{x.Training, x.Device}
					if capped {
						k.device.Name += "cap"
					}
					if v, ok := memo[k]; ok {
						return v, nil
					}
					n++
					v, err := or(x)
					memo[k] = v
					return v, err
				}
				r, err := tuner.Tune(s, tuner.DefaultBand, tuner.Constraints{Margin: tuner.DefaultMargin, FirstFix: true, Bound: func(*model.Spec) int64 { return 1 << 62 }}, o)
				b := int64(-1)
				if r != nil {
					b = r.Batch
				}
				_ = err
				total += len(r.Trials)
				fmt.Fprintf(out, "%s %s %v %d %d\n", p, d, capped, b, len(r.Trials))
			}
		}
	}
	fmt.Fprintln(out, "TOTAL", total)
}
