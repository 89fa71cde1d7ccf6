package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/planner"
	"github.com/memplan/memplan/tuner"
)

// allocAuto is the --alloc-conf value with which tune searches over the
// allocator settings (tuner.TuneAllocConf, docs/allocator.md §9).
const allocAuto = "auto"

// checkAllocAuto refuses --alloc-conf auto outside tune: only tune
// searches.
func checkAllocAuto(c *cli.Context, v string) error {
	if v == allocAuto && c.Command.Name != "tune" {
		return usageError{fmt.Sprintf("--alloc-conf auto: only tune searches over allocator settings; %s needs one setting, e.g. --alloc-conf expandable_segments:True", c.Command.Name)}
	}
	return nil
}

// allocAutoArg says whether tune was given --alloc-conf auto, and refuses
// it with --probe, which measures under the setting this process runs
// with.
func allocAutoArg(c *cli.Context) (bool, error) {
	auto := c.String("alloc-conf") == allocAuto
	if auto && c.Bool("probe") {
		return false, usageError{"--alloc-conf auto: --probe measures under the setting this process runs with and cannot search; give one setting"}
	}
	return auto, nil
}

// tuneAlloc is tuner.Tune, or with auto tuner.TuneAllocConf.
func tuneAlloc(spec *model.Spec, band tuner.Band, cons tuner.Constraints, oracle tuner.Oracle, auto bool) (*tuner.Result, *tuner.AllocChoice, error) {
	if auto {
		return tuner.TuneAllocConf(spec, band, cons, oracle)
	}
	r, err := tuner.Tune(spec, band, cons, oracle)
	return r, nil, err
}

// tuneJSON is tune's --format json: the result, and with --alloc-conf auto
// the setting chosen and the largest batch under each (docs/json.md).
type tuneJSON struct {
	*tuner.Result
	AllocConf *tuner.AllocChoice `json:"alloc_conf_auto,omitempty"`
	IfPaused  *pausedBatch       `json:"if_paused,omitempty"`
	// Planned is memplan plan's first layout at --global-batch when no
	// change tune tries fits (planFallback; added 2026-11-27).
	Planned *planner.Candidate `json:"planned_layout,omitempty"`
}

// printAllocChoice prints what tune --alloc-conf auto tried and chose.
func printAllocChoice(w io.Writer, ch *tuner.AllocChoice) {
	if ch == nil {
		return
	}
	fmt.Fprintln(w, "  allocator settings tried (--alloc-conf auto), largest micro-batch under each:")
	for _, t := range ch.Candidates {
		mark := ""
		if t.AllocConf == ch.Chosen {
			mark = "  ← chosen"
		}
		fmt.Fprintf(w, "    %-40s %6d  %9s  %5.1f%%%s\n", confName(t.AllocConf), t.Batch, units.Format(t.DeviceTotal), 100*t.Fill, mark)
	}
	if ch.Chosen == "" {
		fmt.Fprintln(w, "  chosen: PyTorch's default (leave PYTORCH_ALLOC_CONF unset)")
		return
	}
	fmt.Fprintf(w, "  chosen: PYTORCH_ALLOC_CONF=%s\n", ch.Chosen)
}

// confName names an allocator setting, "" being PyTorch's default.
func confName(conf string) string {
	if conf == "" {
		return "default"
	}
	return conf
}
