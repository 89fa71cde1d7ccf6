// Command predictdump writes the JSON of memplan's estimate for every
// bundled spec, every imported transformers config and every configuration
// of every committed results file, one line each, so that a refactoring
// can be checked to leave every prediction byte-identical:
//
//	go run ./internal/predictdump > /tmp/before.jsonl
//	... change the code ...
//	go run ./internal/predictdump > /tmp/after.jsonl && cmp /tmp/before.jsonl /tmp/after.jsonl
//
// Run it from the repository root. Each spec and config is also estimated
// under a set of training variants (precisions, checkpointing, eager
// attention, optimizers, ZeRO) so that every simulated path is exercised.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/memplan/memplan/bench"
	"github.com/memplan/memplan/estimate"
	"github.com/memplan/memplan/model"
)

// variants are overrides applied on top of each spec and config.
var variants = []model.Overrides{
	{},
	{Precision: "amp-bf16"},
	{Precision: "amp-fp16", Checkpointing: "every-block"},
	{Precision: "bf16", Optimizer: "sgd-momentum"},
	{Checkpointing: "sqrt", Attention: "eager"},
	{Precision: "amp-bf16", Attention: "eager", Checkpointing: "every-2"},
	{Optimizer: "adamw-for-loop", ZeroGrad: "zeros", GradAccum: 2},
	{Optimizer: "adafactor", DP: 4, Zero: "1"},
	{Optimizer: "adam8bit", DP: 8, Zero: "3", Precision: "amp-bf16"},
	{Optimizer: "adamw-fused", DP: 8, Zero: "2", Offload: "optimizer"},
	{DP: 2, Dev: "a100-40gb"},
}

type line struct {
	Source    string            `json:"source"`
	Variant   string            `json:"variant"`
	Error     string            `json:"error,omitempty"`
	Result    *estimate.Result  `json:"result,omitempty"`
	Segments  []int64           `json:"segments,omitempty"`
	Overrides model.Overrides   `json:"overrides"`
	Extra     map[string]string `json:"extra,omitempty"`
}

func main() {
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	emit := func(src string, load func(string, model.Overrides) (*model.Spec, error), o model.Overrides, variant string) {
		l := line{Source: src, Variant: variant, Overrides: o}
		spec, err := load(src, o)
		if err == nil {
			var r *estimate.Result
			if r, err = estimate.Estimate(spec); err == nil {
				l.Result, l.Segments = r, r.Segments
			}
		}
		if err != nil {
			l.Error = err.Error()
		}
		if err := enc.Encode(l); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	specs, _ := filepath.Glob("specs/*.yaml")
	hfs, _ := filepath.Glob("model/testdata/hf/*.json")
	for _, f := range specs {
		for i, v := range variants {
			emit(f, model.Load, v, fmt.Sprint("variant ", i))
		}
	}
	for _, f := range hfs {
		vs := variants
		if strings.Contains(f, "30b") || strings.Contains(f, "8x7b") || strings.Contains(f, "moe-a2.7b") {
			vs = vs[:3] // large mixtures of experts take seconds each
		}
		for i, v := range vs {
			v.Seq = 512
			emit(f, model.LoadHF, v, fmt.Sprint("hf variant ", i))
		}
	}
	results, _ := filepath.Glob("bench/results/*.jsonl")
	sort.Strings(results)
	for _, f := range results {
		recs, err := bench.ReadRecords(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, r := range recs {
			if r.Spec == "" {
				continue // not a measurement of a spec (cuDNN workspace sweeps)
			}
			load := model.Load
			if r.IsHF() {
				load = model.LoadHF
			}
			emit(r.Spec, load, r.Overrides(), f+" "+r.Label)
		}
	}
}
