package estimate

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memplan/memplan/model"
)

func testSim(amp bool, compute int64) *sim {
	return &sim{cfg: &config{amp: amp, compute: compute, param: f32}, cache: map[*tensor]*tensor{}, saving: true}
}

// savedBytes sums the bytes the tape holds for backward that are not
// parameters, and counts the saved parameter aliases.
func savedBytes(s *sim) (bytes int64, params int) {
	seen := map[*tensor]bool{}
	for _, n := range s.tape {
		for _, t := range n.saved {
			if seen[t] {
				continue
			}
			seen[t] = true
			if t.param {
				params++
			} else {
				bytes += t.bytes()
			}
		}
	}
	return bytes, params
}

// TestMatmulSavesByRequiresGrad checks docs/lora.md §2's rule: a linear
// saves its input only if its weight requires grad and its weight (or
// autocast's half copy) only if its input requires grad; autocast caches
// casts of weights that require grad only.
func TestMatmulSavesByRequiresGrad(t *testing.T) {
	const rows, in, out = 8, 16, 4
	tests := []struct {
		name            string
		amp, xReq, wReq bool
		wantNodes       int
		wantBytes       int64 // non-parameter bytes saved
		wantParams      int   // parameter aliases saved
		wantCached      bool
	}{
		{"trainable weight, input requires grad", false, true, true, 1, 4 * rows * in, 1, false},
		{"frozen weight saves its weight, not its input", false, true, false, 1, 0, 1, false},
		{"trainable weight, input without grad saves the input only", false, false, true, 1, 4 * rows * in, 0, false},
		{"nothing requires grad: no node", false, false, false, 0, 0, 0, false},
		{"autocast, frozen fp32 weight: a new half copy saved, not cached", true, true, false, 1, 2 * in * out, 0, false},
		{"autocast, frozen weight, input without grad: nothing", true, false, false, 0, 0, 0, false},
		{"autocast, trainable weight: cached copy saved with the half input", true, true, true, 2, 2*in*out + 2*rows*in, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSim(tt.amp, map[bool]int64{true: half, false: f32}[tt.amp])
			defer s.al.release()
			x := s.alloc(rows*in, f32, catTemp, "x")
			x.req = tt.xReq
			w := s.alloc(in*out, f32, catParam, "w")
			w.param, w.req = true, tt.wReq
			s.unref(s.matmul(x, w, nil, rows, out))
			nodes := 0
			for _, n := range s.tape {
				if n.name == "Mm" || n.name == "Addmm" {
					nodes++
				}
			}
			if tt.amp && tt.wReq {
				nodes++ // the weight's ToCopy
			}
			if nodes != tt.wantNodes {
				t.Errorf("nodes = %d, want %d", nodes, tt.wantNodes)
			}
			b, p := savedBytes(s)
			if b != tt.wantBytes || p != tt.wantParams {
				t.Errorf("saved %d bytes and %d parameters, want %d and %d", b, p, tt.wantBytes, tt.wantParams)
			}
			if _, ok := s.cache[w]; ok != tt.wantCached {
				t.Errorf("cached = %v, want %v", ok, tt.wantCached)
			}
		})
	}
}

// TestLoRALinearSaves checks one wrapped linear against docs/lora.md §3's
// table: a bf16 base with fp32 adapters saves the fp32 copy of the input
// (4·in per row) and lora_A's fp32 output (4·r per row), plus the dropout
// mask (1·in per row) when dropout is on; the base saves only its weight.
func TestLoRALinearSaves(t *testing.T) {
	const rows, in, out, r = 8, 16, 32, 4
	for _, tt := range []struct {
		name    string
		dropout float64
		want    int64
	}{
		{"no dropout", 0, rows * (4*in + 4*r)},
		{"dropout", 0.1, rows * (4*in + 4*r + in)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testSim(false, half)
			s.cfg.param = half
			defer s.al.release()
			x := s.alloc(rows*in, half, catTemp, "x")
			x.req = true
			w := s.alloc(in*out, half, catParam, "w")
			w.param = true
			w.lora = &adapter{rank: r, dropout: tt.dropout, a: s.adapterParam(r, in, f32, "A"), b: s.adapterParam(out, r, f32, "B")}
			y := s.matmul(x, w, nil, rows, out)
			if y.dt != half || !y.req {
				t.Errorf("output dtype %d requires grad %v, want bf16 requiring grad", y.dt, y.req)
			}
			if b, _ := savedBytes(s); b != tt.want {
				t.Errorf("saved %d bytes, want %d", b, tt.want)
			}
		})
	}
}

// TestLoRAState checks a LoRA estimate's model state: gradients and AdamW
// state for the fp32 adapters only, the base counted as frozen.
func TestLoRAState(t *testing.T) {
	spec, err := model.Load(filepath.Join("..", "specs", "llama-3.2-1b.yaml"),
		model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, LoRA: 16, LoRATargets: "all"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Estimate(spec)
	if err != nil {
		t.Fatal(err)
	}
	const adapters = 11_272_192 // docs/lora.md §10
	if r.Trainable != adapters || r.Frozen != 1_235_814_400 || r.Params != adapters+1_235_814_400 {
		t.Errorf("trainable %d frozen %d all %d", r.Trainable, r.Frozen, r.Params)
	}
	if r.GradBytes != 4*adapters || r.OptimizerBytes != 8*adapters {
		t.Errorf("gradients %d optimizer %d, want %d and %d", r.GradBytes, r.OptimizerBytes, 4*adapters, 8*adapters)
	}
	if want := int64(2*1_235_814_400 + 4*adapters); r.ParamBytes != want {
		t.Errorf("parameter bytes %d, want %d", r.ParamBytes, want)
	}
}

// A LoRA fine-tune: rank 16 adapters on every linear of a frozen bf16
// Llama-3.2-1B.
func ExampleEstimate_lora() {
	spec, err := model.Load("../specs/llama-3.2-1b.yaml",
		model.Overrides{Batch: 1, Seq: 256, Precision: model.BF16, LoRA: 16, LoRATargets: "all"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := Estimate(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("trainable %d, frozen %d, gradients %d bytes\n", r.Trainable, r.Frozen, r.GradBytes)
	// Output: trainable 11272192, frozen 1235814400, gradients 45088768 bytes
}

// TestAdapterDtypeBase checks adapter_dtype: base: the adapters, their
// gradients and AdamW's state in the base's dtype (bf16: half of fp32's
// bytes), and bitsandbytes' 32-bit state fp32 whatever the parameter's.
func TestAdapterDtypeBase(t *testing.T) {
	run := func(adt, opt string) *Result {
		return estimateSpec(t, "../specs/llama-3.2-1b.yaml", model.Overrides{Precision: "bf16", LoRA: 16,
			LoRAAdapterDtype: adt, Optimizer: opt, Checkpointing: "every-block", Batch: 1})
	}
	f32r, bf := run("fp32", "adamw"), run("base", "adamw")
	n := bf.Trainable
	if got, want := f32r.ParamBytes-bf.ParamBytes, 2*n; got != want {
		t.Errorf("parameter bytes differ by %d, want %d (2 B per adapter element)", got, want)
	}
	if bf.GradBytes != 2*n || f32r.GradBytes != 4*n {
		t.Errorf("gradient bytes %d (base), %d (fp32), want %d and %d", bf.GradBytes, f32r.GradBytes, 2*n, 4*n)
	}
	if bf.OptimizerBytes >= f32r.OptimizerBytes {
		t.Errorf("AdamW state %d over bf16 adapters not below %d over fp32", bf.OptimizerBytes, f32r.OptimizerBytes)
	}
	p32, p16 := run("fp32", "paged-adamw32bit"), run("base", "paged-adamw32bit")
	if p32.OptimizerBytes != p16.OptimizerBytes || !slices.Equal(p32.Overhead, p16.Overhead) {
		t.Errorf("paged 32-bit state differs with the adapters' dtype: %d %v vs %d %v", p32.OptimizerBytes, p32.Overhead, p16.OptimizerBytes, p16.Overhead)
	}
}

// TestLoRAForwardLifetimes checks peft's Linear.forward lifetimes
// (docs/lora.md §3): under autocast a bf16 input (o_proj's) is cast to
// fp32 and that copy, a local until the function returns, is freed after
// the sum; the base output goes when result is rebound to the sum, before
// the final cast. The measured GPT-2 amp-bf16 grid line's second-step
// reserved memory depends on it (docs/accuracy.md, LoRA section).
func TestLoRAForwardLifetimes(t *testing.T) {
	const rows, in, out, r = 64, 32, 16, 4
	for _, amp := range []bool{true, false} {
		t.Run(fmt.Sprintf("amp %v", amp), func(t *testing.T) {
			s := testSim(amp, half)
			if !amp {
				s.cfg.param = half
			}
			defer s.al.release()
			x := s.alloc(rows*in, half, catTemp, "x")
			x.req = true
			wdt := int64(f32)
			if !amp {
				wdt = half
			}
			w := s.alloc(in*out, wdt, catParam, "w")
			w.param = true
			w.lora = &adapter{rank: r, a: s.adapterParam(r, in, f32, "A"), b: s.adapterParam(out, r, f32, "B")}
			type event struct {
				alloc bool
				t     *tensor
			}
			var events []event
			s.trace = func(t *tensor, alloc bool) { events = append(events, event{alloc, t}) }
			s.unref(s.matmul(x, w, nil, rows, out))
			// find returns the index of the n-th allocation named name, or
			// of t's free.
			find := func(alloc bool, name string, n int, t0 *tensor) (int, *tensor) {
				for i, e := range events {
					if e.alloc == alloc && (t0 == nil && e.t.name == name || e.t == t0) {
						if n--; n < 0 {
							return i, e.t
						}
					}
				}
				return len(events), nil
			}
			_, base := find(true, "matmul out", 0, nil)
			sumAt, sum := find(true, "add", 0, nil)
			if amp {
				_, xa := find(true, "x", 0, nil)
				if xa == nil || xa.dt != f32 {
					t.Fatalf("no fp32 copy of the half input: %v", events)
				}
				if freeAt, _ := find(false, "", 0, xa); freeAt < sumAt {
					t.Errorf("the fp32 copy of the input was freed (event %d) before the sum (event %d)", freeAt, sumAt)
				}
				return
			}
			castAt, _ := find(true, "add", 1, nil)
			if freeAt, _ := find(false, "", 0, base); sum == nil || freeAt > castAt {
				t.Errorf("the base output was freed (event %d) after the sum's cast (event %d)", freeAt, castAt)
			}
		})
	}
}

// TestGPT2EmbeddingsHeldUntilHead checks GPT2Model.forward's lifetimes
// (docs/pytorch-memory.md §4, docs/lora.md §10.1): inputs_embeds (wte's
// output) and position_embeds stay allocated through the blocks and ln_f
// and are freed before the LM head's logits, with LoRA (where nothing
// saves them) and without.
func TestGPT2EmbeddingsHeldUntilHead(t *testing.T) {
	const batch, seq = 2, 128
	for _, o := range []model.Overrides{
		{Batch: batch, Seq: seq, Precision: "amp-bf16", LoRA: 64, LoRATargets: "all"},
		{Batch: batch, Seq: seq, Precision: "bf16"},
	} {
		t.Run(fmt.Sprintf("%s lora %d", o.Precision, o.LoRA), func(t *testing.T) {
			spec, err := model.Load(filepath.Join("..", "specs", "gpt2-124m.yaml"), o)
			if err != nil {
				t.Fatal(err)
			}
			m := spec.Model
			// Tensors are recycled once freed: keep what each event saw.
			type event struct {
				alloc       bool
				t           *tensor
				elems       int64
				name, stage string
			}
			var ev []event
			_, err = estimateWith(spec, func(*sim) {}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					ev = append(ev, event{alloc, x, x.elems, x.name, s.phase.Stage})
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			logits := slices.IndexFunc(ev, func(e event) bool {
				return e.alloc && e.elems == batch*seq*m.Vocab && e.stage == StageForward
			})
			lastNorm := -1
			for i, e := range ev[:max(logits, 0)] {
				if e.alloc && e.name == "rstd" { // ln_f's statistics

					lastNorm = i
				}
			}
			if logits < 0 || lastNorm < 0 {
				t.Fatalf("no logits (%d) or final norm (%d) in the first forward", logits, lastNorm)
			}
			for _, rows := range []int64{batch * seq, seq} { // inputs_embeds, position_embeds
				at := slices.IndexFunc(ev, func(e event) bool {
					return e.alloc && e.name == "embedding" && e.elems == rows*m.Hidden
				})
				free := -1
				if at >= 0 {
					free = at + slices.IndexFunc(ev[at:], func(e event) bool { return !e.alloc && e.t == ev[at].t })
				}
				if at < 0 || free < lastNorm || free > logits {
					t.Errorf("embedding of %d rows allocated at event %d, freed at %d: want freed between ln_f (%d) and the logits (%d)",
						rows, at, free, lastNorm, logits)
				}
			}
		})
	}
}

// TestLoRAFSDP checks LoRA under FSDP2 against the buffers FSDP2 made on
// 2 x H100 (rank 0's allocator history, bench/results/
// 2026-11-26-h100x2-lora-snapshots: c4, c5, c6): a block's all-gather
// moves its frozen base and its adapters (in bytes when their dtypes
// differ: bf16 base, fp32 adapters), the root's the frozen embedding and
// norm, and the reduce-scatter only the adapters' gradients; the shards,
// gradients and optimizer state are what FSDP2 and AdamW keep of them.
func TestLoRAFSDP(t *testing.T) {
	for _, tc := range []struct {
		name, spec  string
		hf          bool
		o           model.Overrides
		block, root int64   // all-gather outputs, bytes
		cast        []int64 // the block's and root's all-gather inputs under the policy
		rsIn, rsOut int64   // a block's reduce-scatter input and output
	}{
		{"c4 bf16 all", "../specs/llama-3.2-1b.yaml", false,
			model.Overrides{Precision: "bf16", Zero: "3", LoRA: 16, LoRATargets: "all"},
			124_461_056, 525_340_672, nil, 2_818_048, 1_409_024},
		{"c5 fsdp-bf16 all", "../specs/llama-3.2-1b.yaml", false,
			model.Overrides{Precision: "fsdp-bf16", Zero: "3", LoRA: 64, LoRATargets: "all", Checkpointing: "every-block"},
			127_279_104, 525_340_672, []int64{63_639_552, 262_670_336}, 11_272_192, 5_636_096},
		{"c6 amp-bf16 mlp", "../model/testdata/hf/qwen2.5-0.5b.json", true,
			model.Overrides{Precision: "amp-bf16", Zero: "2", LoRA: 16, LoRATargets: "mlp"},
			60_755_456, 544_542_208, nil, 1_105_920, 552_960},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Batch, o.Seq, o.DP = 1, 64, 2
			load := model.Load
			if tc.hf {
				load = model.LoadHF
			}
			spec, err := load(tc.spec, o)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]map[int64]bool{}
			var adapterShards, frozenShards int64
			r, err := estimateWith(spec, func(s *sim) {
				for _, p := range s.params {
					adapterShards += s.shardOf(p) * s.shardDt(p)
				}
				for _, p := range s.frozen {
					frozenShards += s.shardOf(p) * s.shardDt(p)
				}
			}, func(s *sim) {
				s.trace = func(x *tensor, alloc bool) {
					if alloc && s.phase.Iteration == 1 {
						if seen[x.name] == nil {
							seen[x.name] = map[int64]bool{}
						}
						seen[x.name][x.bytes()] = true
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]int64{
				"all-gather output (FSDP)":    {tc.block, tc.root},
				"reduce-scatter input (FSDP)": {tc.rsIn},
				"gradient shard":              {tc.rsOut},
			}
			if tc.cast != nil {
				want["all-gather input (FSDP)"] = tc.cast
			}
			for name, sizes := range want {
				for _, n := range sizes {
					if !seen[name][n] {
						t.Errorf("no %s of %d bytes; simulated sizes %v", name, n, seen[name])
					}
				}
				if len(seen[name]) != len(sizes) {
					t.Errorf("%s: simulated sizes %v, want %v", name, seen[name], sizes)
				}
			}
			if r.GradBytes != adapterShards || r.ParamBytes != adapterShards+frozenShards || r.OptimizerBytes != 2*adapterShards {
				t.Errorf("parameters %d, gradients %d, optimizer %d; want %d, %d, %d", r.ParamBytes, r.GradBytes,
					r.OptimizerBytes, adapterShards+frozenShards, adapterShards, 2*adapterShards)
			}
		})
	}
}

// TestBERTChunkHolds: BertLayer.feed_forward_chunk keeps intermediate_output
// (the activation's output) and its caller attention_output bound while
// BertOutput's LayerNorm runs (model.Residual.HoldChunk). Under LoRA over a
// frozen base nothing saves them, so the allocator sees them freed only
// after that norm's output is made (measured: rank 0's history of the
// held-out BERT FSDP2 LoRA line, bench/results/
// 2026-11-26-h100x2-lora-heldout-snapshots, c2).
func TestBERTChunkHolds(t *testing.T) {
	spec, err := model.LoadHF("../model/testdata/hf/bert-base-uncased.json",
		model.Overrides{Batch: 2, Seq: 128, Precision: "amp-bf16", LoRA: 8, LoRATargets: "all"})
	if err != nil {
		t.Fatal(err)
	}
	born := map[*tensor]int{} // each activation output: layernorm outputs made before it
	norms, checked := 0, 0
	_, err = estimateWith(spec, nil, func(s *sim) {
		s.trace = func(x *tensor, alloc bool) {
			if s.phase.Iteration != 0 || s.phase.Stage != "forward" {
				return
			}
			switch {
			case alloc && x.name == "layernorm":
				norms++
			case alloc && x.name == "gelu" && x.prefix == "":
				born[x] = norms
			case !alloc && x.prefix == "": // not peft's cast of it, named after it once made
				if n, ok := born[x]; ok {
					checked++
					if norms-n < 1 {
						t.Errorf("activation output %d (%d bytes) freed before the block's LayerNorm made its output", checked, x.bytes())
					}
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 12 {
		t.Errorf("checked %d activation outputs, want one per layer (12)", checked)
	}
}

// TestLoRAFSDPFamilies runs LoRA under FSDP2 over every family LoRA is
// modelled for, each precision, both stages and both adapter dtypes: each
// estimate completes, the gradients are the adapters' shards in the
// adapters' dtype, AdamW keeps two moments of them, and the parameters add
// the frozen base's shards in the master dtype.
func TestLoRAFSDPFamilies(t *testing.T) {
	type src struct {
		path string
		hf   bool
	}
	for _, m := range []src{{"../specs/gpt2-124m.yaml", false}, {"../specs/llama-3.2-1b.yaml", false},
		{"../model/testdata/hf/bert-base-uncased.json", true}, {"../model/testdata/hf/pythia-160m.json", true},
		{"../model/testdata/hf/gemma-2-2b.json", true}} {
		for _, prec := range []string{"bf16", "amp-bf16", "fsdp-bf16"} {
			for _, zero := range []string{"2", "3"} {
				for _, adt := range []string{"fp32", "base"} {
					name := fmt.Sprintf("%s/%s/zero%s/%s", filepath.Base(m.path), prec, zero, adt)
					t.Run(name, func(t *testing.T) {
						load := model.Load
						if m.hf {
							load = model.LoadHF
						}
						spec, err := load(m.path, model.Overrides{Batch: 1, Seq: 64, DP: 2, Zero: zero, Precision: prec,
							LoRA: 8, LoRATargets: "all", LoRAAdapterDtype: adt, Optimizer: "adamw"})
						if err != nil {
							t.Fatal(err)
						}
						var adapters, base int64
						r, err := estimateWith(spec, func(s *sim) {
							for _, p := range s.params {
								adapters += s.shardOf(p) * s.shardDt(p)
							}
							for _, p := range s.frozen {
								base += s.shardOf(p) * s.cfg.master
							}
						}, nil)
						if err != nil {
							t.Fatal(err)
						}
						if adapters == 0 || r.GradBytes != adapters || r.OptimizerBytes != 2*adapters || r.ParamBytes != adapters+base {
							t.Errorf("parameters %d, gradients %d, optimizer %d; adapters' shards %d, base's %d",
								r.ParamBytes, r.GradBytes, r.OptimizerBytes, adapters, base)
						}
					})
				}
			}
		}
	}
}

// TestMaskedLMHoldsEncoderOutput checks model.Linear.Head in BERT's
// lowering: transformers' *ForMaskedLM.forward keeps the encoder's output
// bound in `outputs` while its head runs, so it is still allocated when
// the loss's log-softmax is, and freed before the forward ends (RoBERTa's
// allocator history on 2 × H100, docs/lora.md §13). With LoRA on every
// linear nothing saves it for the backward (peft's adapters save their
// fp32 cast, the base linear its bf16 one), so only the hold keeps it.
func TestMaskedLMHoldsEncoderOutput(t *testing.T) {
	for _, path := range []string{"../specs/bert-base.yaml", "../model/testdata/hf/roberta-base.json"} {
		load := model.Load
		if strings.HasSuffix(path, ".json") {
			load = model.LoadHF
		}
		spec, err := load(path, model.Overrides{Batch: 2, Seq: 128, Precision: "amp-bf16", LoRA: 16, LoRATargets: "all"})
		if err != nil {
			t.Fatal(err)
		}
		var norms []*tensor // forward 0's layernorm outputs, in order
		live := map[*tensor]bool{}
		var atLoss map[*tensor]bool
		freedInForward := false
		_, err = estimateWith(spec, nil, func(s *sim) {
			s.trace = func(x *tensor, alloc bool) {
				if s.phase.Iteration != 0 || s.phase.Stage != "forward" {
					return
				}
				switch {
				case alloc && x.name == "layernorm" && x.dt == f32: // not a half copy, named after it once made
					norms = append(norms, x)
					live[x] = true
				case alloc && x.name == "LogSoftmax" && atLoss == nil:
					atLoss = maps.Clone(live)
				case !alloc && live[x]:
					delete(live, x)
					if atLoss != nil && len(norms) >= 2 && x == norms[len(norms)-2] {
						freedInForward = true
					}
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(norms) < 2 || atLoss == nil {
			t.Fatalf("%s: %d layernorm outputs, loss seen %v", path, len(norms), atLoss != nil)
		}
		if enc := norms[len(norms)-2]; !atLoss[enc] {
			t.Errorf("%s: the encoder's output (%d elements) was freed before the loss", path, enc.elems)
		}
		if !freedInForward {
			t.Errorf("%s: the encoder's output was not freed by the end of the forward", path)
		}
	}
}

// TestLoRAAdaptersMatchCount checks that the adapters the simulation
// allocates are the ones spec.Trainable counts, on models where peft
// converts the experts: GLM-4.5-Air's shared expert, one expert wide, has
// the fused down_proj's widths and must stay frozen (its allocator history,
// bench/results/2026-11-27-h200-glm-traces).
func TestLoRAAdaptersMatchCount(t *testing.T) {
	for _, f := range []string{"glm-4.5-air-4layer.json", "deepseek-v2-lite-4layer.json", "glm4-moe-test-4layer.json"} {
		spec, err := model.LoadHF(filepath.Join("..", "model", "testdata", "hf", f),
			model.Overrides{Batch: 1, Seq: 256, Precision: "bf16", LoRA: 16, LoRATargets: model.TargetsAll})
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		if _, err := estimateWith(spec, func(s *sim) {
			for _, p := range s.params {
				got += p.elems
			}
		}, nil); err != nil {
			t.Fatal(err)
		}
		if want := spec.Trainable(); got != want {
			t.Errorf("%s: adapters of %d elements simulated, %d counted", f, got, want)
		}
	}
}
