package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/report"
	"github.com/memplan/memplan/tuner"
)

// reportFailed is report's exit code when some rows or cells failed; the
// report is still written, with their errors in it.
const reportFailed = 3

func reportCmd() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "capacity planning: which GPUs run these jobs, and at what batch",
		ArgsUsage: "SPEC|CONFIG.json...",
		Description: `For every SPEC on every device (--devices, default the whole catalog): the
predicted fill at the spec's batch, the largest batch inside the target, and,
when even batch 1 misses, the fewest GPUs of that type and the data-parallel
ZeRO/FSDP layout that fit, each re-estimated (docs/report.md). Training flags
apply to every spec. A transformers config.json is read where a SPEC goes
(as --hf reads one; --seq then required).

Formats: text (one block per spec, devices as columns), json (docs/json.md),
csv, markdown, html (one self-contained page with SVG charts). -o FILE writes
any format to a file. --prices FILE adds a cost per hour (docs/report.md).
--global-batch N plans a job that nothing tried fits with memplan plan's
search (tensor, pipeline, context and expert parallelism too; up to
--max-gpus, default 1024) and gives its first layout; without it the report
names the memplan plan command to run instead.

Exit codes:
   0  every row complete
   2  bad usage
   3  some specs or cells failed: the report is written, their errors in it

Example:
   memplan report specs/llama-3.2-1b.yaml specs/gpt2-xl.yaml --devices a100-40gb,a100-80gb,h100-80gb,l40s
   memplan report specs/*.yaml --format html -o report.html
   memplan report llama4-scout/config.json llama-3-8b/config.json --seq 4096 --precision bf16`,
		Flags: append(overrideFlags(), targetFlag, marginFlag,
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, json, csv, markdown or html"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the report to `FILE` instead of standard output"},
			&cli.StringFlag{Name: "prices", Usage: "`FILE` of device names and prices per GPU-hour, one pair a line"},
			&cli.StringFlag{Name: "devices", Usage: "comma-separated catalog names (default: all)"},
			&cli.Int64Flag{Name: "global-batch", Usage: "plan the jobs nothing tried fits for `N` samples per step (memplan plan's first layout)"},
			&cli.Int64Flag{Name: "max-gpus", Usage: "with --global-batch: at most N GPUs (default 1024)"}),
		Action: runReport,
	}
}

func runReport(c *cli.Context) error {
	f := c.String("format")
	if !slices.Contains(report.Formats, f) {
		return usageError{fmt.Sprintf("--format: want one of %s, got %q", strings.Join(report.Formats, ", "), f)}
	}
	band, err := tuner.ParseBand(c.String("target"))
	if err != nil {
		return usageError{"--target: " + err.Error()}
	}
	paths := c.Args().Slice()
	if hf := c.String("hf"); hf != "" {
		paths = append(paths, hf) // one more config, read as a SPEC argument is
	}
	if len(paths) == 0 {
		return usageError{"report: missing SPEC arguments"}
	}
	hf := map[string]bool{} // which paths are configs, read once
	for _, p := range paths {
		if hf[p] = model.IsHFConfig(p); hf[p] && c.Int64("seq") == 0 {
			return noSeqError("report", p) // before any row, not in each
		}
	}
	o := report.Options{Band: band, Margin: c.Float64("margin"), Version: version(), Now: reportTime(),
		GlobalBatch: c.Int64("global-batch"), PlanMaxGPUs: c.Int64("max-gpus"),
		PlanFlags: strings.Join(planFlags(c, "device", "format", "output", "hf"), " ")}
	if o.GlobalBatch < 0 || o.PlanMaxGPUs < 0 {
		return usageError{"report: --global-batch and --max-gpus must be positive"}
	}
	if o.PlanMaxGPUs > 0 && o.GlobalBatch == 0 {
		return usageError{"report: --max-gpus needs --global-batch"}
	}
	if p := c.String("prices"); p != "" {
		if o.Prices, err = readPrices(p); err != nil {
			return usageError{err.Error()}
		}
	}
	devs := model.DeviceNames()
	if d := c.String("devices"); d != "" {
		if devs, err = reportDevices(d); err != nil {
			return err
		}
	}
	o.Progress = progressBar(c.App.ErrWriter)
	var mu sync.Mutex // report.Build loads from several goroutines
	noted := map[string]bool{}
	load := func(path, dev string) (*model.Spec, error) {
		ov := overrides(c)
		ov.Dev = dev
		spec, err := loadAs("report", path, ov, hf[path])
		mu.Lock()
		defer mu.Unlock()
		if err == nil && !noted[path] {
			noted[path] = true
			unmeasuredNote(c.App.ErrWriter, spec)
		}
		return spec, err
	}
	r, berr := report.Build(paths, devs, load, o)
	w := c.App.Writer
	if out := c.String("output"); out != "" {
		file, err := os.Create(out)
		if err != nil {
			return err
		}
		defer file.Close()
		w = file
	}
	if err := report.Write(w, r, f); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if errors.Is(berr, report.ErrSomeFailed) {
		return exitCode{reportFailed, berr}
	}
	return berr
}

// readPrices reads "DEVICE PRICE" lines (price per GPU-hour); blank lines
// and lines starting with # are skipped.
func readPrices(path string) (map[string]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 2 {
			return nil, fmt.Errorf("%s:%d: want DEVICE PRICE, got %q", path, n, line)
		}
		p, err := strconv.ParseFloat(strings.TrimPrefix(fs[1], "$"), 64)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("%s:%d: price %q: want a non-negative number", path, n, fs[1])
		}
		m[fs[0]] = p
	}
	return m, nil
}

// progressBar draws on w when w is a terminal and the report has taken
// more than a second.
func progressBar(w io.Writer) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	start := time.Now()
	return func(done, total int) {
		if time.Since(start) < time.Second {
			return
		}
		const width = 30
		k := width * done / total
		fmt.Fprintf(w, "\r[%s%s] %d/%d cells", strings.Repeat("#", k), strings.Repeat(".", width-k), done, total)
		if done == total {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}

// version is the module version memplan was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// reportTime is the report's date: SOURCE_DATE_EPOCH (seconds since 1970,
// the reproducible-builds convention) when set, so that a report can be
// regenerated byte for byte; otherwise now.
func reportTime() time.Time {
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	return time.Time{}
}

// reportDevices reads --devices: catalog names or their aliases, each once
// by its catalog name; an unknown one is a usage error naming the valid
// ones, before any row is estimated.
func reportDevices(list string) ([]string, error) {
	var devs []string
	for _, name := range strings.Split(list, ",") {
		d, ok := model.LookupDevice(name)
		if !ok {
			return nil, usageError{fmt.Sprintf("report: --devices: unknown device %q (valid: %s)",
				strings.TrimSpace(name), strings.Join(model.DeviceNames(), ", "))}
		}
		if !slices.Contains(devs, d.Name) {
			devs = append(devs, d.Name)
		}
	}
	return devs, nil
}
