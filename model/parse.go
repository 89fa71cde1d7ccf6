package model

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/memplan/memplan/alloc"
	"github.com/memplan/memplan/internal/units"
)

// Overrides replace training and device fields of a spec, as the command
// line's --batch, --seq and friends do. Zero values leave the spec alone.
type Overrides struct {
	Batch, Seq, Image, GradAccum, DP                              int64
	Precision, Optimizer, Checkpointing, Attention, ZeroGrad, Dev string
	// Zero is a ZeRO stage, "0" to "3" ("" leaves the spec's); Offload
	// is none, optimizer or params.
	Zero, Offload string
	// AllocConf replaces the spec's alloc_conf (PYTORCH_ALLOC_CONF syntax).
	AllocConf string
	// BucketView sets bucket_view (DDP's gradient_as_bucket_view=True).
	BucketView bool
	// LossOutsideAutocast sets loss_outside_autocast.
	LossOutsideAutocast bool `json:",omitempty"`
	// FSDPInit replaces fsdp_init (host, gpu or meta; "" leaves it).
	FSDPInit string `json:",omitempty"`
	// EmptyCacheAfterWrap sets empty_cache_after_wrap.
	EmptyCacheAfterWrap bool `json:",omitempty"`
	// FSDPRoot replaces fsdp_root (reshard or keep; "" leaves it).
	FSDPRoot string `json:",omitempty"`
	// FSDPExperts replaces fsdp_experts (dim0, dim1 or auto; "" leaves it).
	FSDPExperts string `json:",omitempty"`
	// ReshardAfterForward replaces reshard_after_forward (0 leaves it).
	ReshardAfterForward int64 `json:",omitempty"`
	// DPReplicate replaces dp_replicate (0 leaves it).
	DPReplicate int64 `json:",omitempty"`
	// PP is the pipeline stages (0 leaves the spec's); PPSchedule the
	// pipeline schedule ("" leaves it).
	PP         int64
	PPSchedule string
	// PPVirtual is the stages per rank of the interleaved schedule (0
	// leaves the spec's; left out of JSON when 0, as dumps of overrides
	// predate it).
	PPVirtual int64 `json:",omitempty"`
	// LoRA is a LoRA rank (0 leaves the spec's); LoRATargets, LoRAAlpha,
	// LoRADropout, Quant and DoubleQuant replace training.lora's fields
	// and training.quant/double_quant ("" leaves them).
	LoRA                                                    int64
	LoRATargets, LoRAAlpha, LoRADropout, Quant, DoubleQuant string
	// TP and CP are tensor- and context-parallel sizes (0 leaves the
	// spec's); SP and LossParallel switch those on.
	TP, CP           int64
	SP, LossParallel bool
	// LoRAAdapterDtype replaces training.lora.adapter_dtype: fp32 or base.
	LoRAAdapterDtype string
	// EP is the expert-parallel size (0 leaves the spec's); EPSkew
	// replaces ep_skew ("" leaves it).
	EP     int64
	EPSkew string
	// StepPause replaces step_pause, in seconds ("" leaves it).
	StepPause string
	// Steps replaces steps, the run's optimizer steps (0 leaves it).
	Steps int64
}

// Load reads and parses a spec file.
func Load(path string, o Overrides) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	return Parse(path, data, o)
}

// Parse parses a spec. file names it in errors. Errors about the content
// are *Error or ErrorList values carrying file and line.
func Parse(file string, data []byte, o Overrides) (*Spec, error) { return parse(file, data, o, false) }

// parse is Parse; transformers marks a spec rendered from a transformers
// config (ParseHF: Model.Transformers), set before the training's layouts
// are checked against the model's program.
func parse(file string, data []byte, o Overrides, transformers bool) (*Spec, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, &Error{File: file, Msg: "empty spec: want fields name, model, training and device"}
		}
		return nil, syntaxError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Msg: "more than one YAML document; a spec is one"}
	}
	e := &errs{file: file}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	s := &Spec{File: file}
	top := newMapping(e, doc, "spec")
	top.str("name", &s.Name)
	if n := top.get("model"); n != nil {
		decodeModel(e, n, &s.Model)
		s.Model.Transformers = transformers
	} else {
		e.add(doc.Line, "spec: missing required field \"model\"")
	}
	tn := top.get("training")
	if tn == nil {
		e.add(doc.Line, "spec: missing required field \"training\"")
		tn = &yaml.Node{Kind: yaml.MappingNode, Line: doc.Line}
	}
	decodeTraining(e, tn, &s.Training, &s.Model, o)
	decodeDevice(e, top.get("device"), s, o.Dev)
	top.finish()
	if err := e.err(); err != nil {
		return nil, err
	}
	validate(e, s, lineOf(top, "model"), lineOf(top, "training"))
	if err := e.err(); err != nil {
		return nil, err
	}
	if f := KnownFailure(&s.Training, &s.Model); f != "" {
		s.Notes = append(s.Notes, f)
	}
	return s, nil
}

// checkAttention refuses the attention implementations a model's layers
// are not simulated under: attention sinks run in eager attention only
// (transformers' GPT-OSS has no SDPA path), and multi-head latent
// attention is simulated under SDPA only.
func checkAttention(e *errs, tm *mapping, t *Training, m *Model, o Overrides) {
	var why, want string
	switch {
	case m.AttnSinks && t.Attention != AttnEager:
		why, want = "the model's attention sinks run in eager attention only, as transformers runs GPT-OSS (no SDPA path)", AttnEager
	case m.KVLoRARank > 0 && t.Attention == AttnEager:
		why, want = "multi-head latent attention is simulated under SDPA (transformers' default for DeepSeek-V2 and V3), not eager attention", AttnSDPA
	default:
		return
	}
	var s string
	line, _ := tm.str("attention", &s)
	use := "attention: " + want
	if o.Attention != "" {
		line, use = 0, "--attention "+want
	}
	e.add(line, "attention: %s: use %s", why, use)
}

func lineOf(m *mapping, key string) int {
	if v := m.vals[key]; v != nil {
		return v.Line
	}
	return m.line
}

func decodeTraining(e *errs, n *yaml.Node, t *Training, m *Model, o Overrides) {
	tm := newMapping(e, n, "training")
	*t = Training{Precision: FP32, Optimizer: Optimizer{AdamW, ImplForeach}, Checkpointing: Checkpointing{Mode: CkptNone},
		Attention: AttnSDPA, ZeroGrad: ZeroGradNone, GradAccum: 1, DP: 1, Offload: OffloadNone}
	tm.int("batch", &t.Batch, o.Batch == 0)
	tm.int("seq", &t.Seq, false)
	tm.int("image", &t.Image, false)
	tm.int("grad_accum", &t.GradAccum, false)
	tm.int("dp", &t.DP, false)
	tm.bool("bucket_view", &t.BucketView)
	t.BucketView = t.BucketView || o.BucketView
	var s string
	set := func(key, flag string, parse func(string) error) {
		line, ok := tm.str(key, &s)
		if flag != "" {
			if err := parse(flag); err != nil {
				e.add(0, "--%s: %v", strings.ReplaceAll(key, "_", "-"), err)
			}
			return
		}
		if ok {
			if err := parse(s); err != nil {
				e.add(line, "%s: %v", key, err)
			}
		}
	}
	set("precision", o.Precision, func(v string) error { return parsePrecision(v, &t.Precision) })
	set("optimizer", o.Optimizer, func(v string) error { return parseOptimizer(v, &t.Optimizer) })
	set("checkpointing", o.Checkpointing, func(v string) error { return parseCheckpointing(v, &t.Checkpointing) })
	set("attention", o.Attention, func(v string) error { return parseChoice(v, &t.Attention, "attention", AttnSDPA, AttnEager) })
	checkAttention(e, tm, t, m, o)
	set("zero_grad", o.ZeroGrad, func(v string) error {
		return parseChoice(v, &t.ZeroGrad, "zero_grad mode", ZeroGradNone, ZeroGradZeros)
	})
	set("zero", o.Zero, func(v string) error { return parseZero(v, &t.Zero) })
	set("fsdp_init", o.FSDPInit, func(v string) error { return parseFSDPInit(v, &t.FSDPInit) })
	set("fsdp_root", o.FSDPRoot, func(v string) error { return parseFSDPRoot(v, &t.FSDPRoot) })
	set("fsdp_experts", o.FSDPExperts, func(v string) error { return parseFSDPExperts(v, &t.FSDPExperts) })
	set("offload", o.Offload, func(v string) error {
		return parseChoice(v, &t.Offload, "offload mode", OffloadNone, OffloadOptimizer, OffloadParams)
	})
	set("alloc_conf", o.AllocConf, func(v string) error {
		if _, err := alloc.Parse(v); err != nil {
			return err
		}
		t.AllocConf = v
		return nil
	})
	zline, _ := tm.str("offload", &s)
	pline, _ := tm.str("precision", &s)
	bline, _ := tm.str("bucket_view", &s)
	if o.BucketView {
		bline = 0
	}
	decodeLoRA(e, tm, t, m, o)
	decodePipeline(tm, t, o)
	decodeLayout(e, tm, t, m, o)
	epLine := decodeEP(e, tm, t, o)
	reshardLine := decodeReshard(e, tm, t, o)
	hsdpLine := decodeHSDP(e, tm, t, o)
	decodeLoop(e, tm, t, o)
	tm.finish()
	checkStages(e, t, zline, pline, bline, o.Precision != "")
	applySizes(e, t, o)
	checkLoRALayout(e, lineOf(tm, "lora"), &Spec{Model: *m, Training: *t})
	if len(e.list) == 0 {
		checkEP(e, t, m, epLine)
		checkCP(e, t, m, tm, o)
		checkReshard(e, t, reshardLine)
		checkHSDP(e, t, hsdpLine)
	}
	if m.SeqInput() && t.Seq == 0 && m.Type != "" {
		e.add(n.Line, "training: missing required field \"seq\" (the sequence length)")
	}
	if m.ImageInput() && t.Image == 0 {
		t.Image = 224
	}
	checkPipeline(e, tm, t, m, o)
}

// parseZero reads a ZeRO stage, 0 to 3.
func parseZero(v string, out *int64) error {
	z, err := strconv.ParseInt(v, 10, 64)
	if err != nil || z < 0 || z > 3 {
		return fmt.Errorf("want a ZeRO stage 0, 1, 2 or 3, got %q", v)
	}
	*out = z
	return nil
}

// applySizes applies the command line's batch, seq, image, grad-accum and
// dp over the spec's.
func applySizes(e *errs, t *Training, o Overrides) {
	for _, ov := range []struct {
		v    int64
		dst  *int64
		flag string
	}{{o.Batch, &t.Batch, "batch"}, {o.Seq, &t.Seq, "seq"}, {o.Image, &t.Image, "image"}, {o.GradAccum, &t.GradAccum, "grad-accum"}, {o.DP, &t.DP, "dp"}} {
		if ov.v < 0 {
			e.add(0, "--%s: must be positive, got %d", ov.flag, ov.v)
		} else if ov.v > 0 {
			*ov.dst = ov.v
		}
	}
}

func parseChoice(v string, dst *string, what string, valid ...string) error {
	v = strings.ToLower(v)
	for _, c := range valid {
		if v == c {
			*dst = c
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q (valid: %s)", what, v, strings.Join(valid, ", "))
}

func parsePrecision(v string, dst *string) error {
	switch strings.ToLower(v) {
	case "amp", "amp-bf16", "bf16-mixed":
		*dst = AMPBF16
	case "amp-fp16", "fp16-mixed", "16-mixed":
		*dst = AMPFP16
	case "fp32", "32", "float32":
		*dst = FP32
	case "bf16", "bf16-true", "pure-bf16":
		*dst = BF16
	case "fsdp-bf16":
		*dst = FSDPBF16
	default:
		return fmt.Errorf("unknown precision %q (valid: %s)", v, strings.Join(Precisions, ", "))
	}
	return nil
}

// parseOptimizer reads "adamw", "adamw-fused", "adam-for-loop", "sgd",
// "sgd-momentum-foreach", "adafactor", "adam8bit" (or "adamw8bit"),
// "paged-adamw8bit" or "paged-adamw32bit" (transformers' spellings with
// underscores too: paged_adamw_8bit).
func parseOptimizer(v string, dst *Optimizer) error {
	s := strings.ReplaceAll(strings.ToLower(v), "_", "-")
	switch s {
	case PagedAdamW8bit, "paged-adamw-8bit", "paged-adam8bit":
		*dst = Optimizer{Name: PagedAdamW8bit, Impl: ImplFused}
		return nil
	case PagedAdamW32bit, "paged-adamw-32bit", "paged-adamw":
		*dst = Optimizer{Name: PagedAdamW32bit, Impl: ImplFused}
		return nil
	}
	impl := ImplForeach
	for _, suf := range []string{ImplForeach, ImplFused, ImplForLoop, "forloop"} {
		if strings.HasSuffix(s, "-"+suf) {
			impl, s = suf, strings.TrimSuffix(s, "-"+suf)
			if impl == "forloop" {
				impl = ImplForLoop
			}
			break
		}
	}
	switch s {
	case Adam, AdamW, SGD, SGDMomentum:
	case Adafactor, Adam8bit, "adamw8bit", "adam-8bit", "adamw-8bit":
		if impl != ImplForeach || strings.Contains(strings.ToLower(v), "-"+ImplForeach) {
			return fmt.Errorf("optimizer %q takes no implementation suffix", s)
		}
		if s != Adafactor {
			s = Adam8bit
		}
		impl = ImplForLoop
		if s == Adam8bit {
			impl = ImplFused
		}
	default:
		return fmt.Errorf("unknown optimizer %q (valid: %s; adam, adamw and sgd take -foreach, -fused or -for-loop)", v, strings.Join(OptimizerNames, ", "))
	}
	*dst = Optimizer{Name: s, Impl: impl}
	return nil
}

func parseCheckpointing(v string, dst *Checkpointing) error {
	s := strings.ToLower(v)
	switch s {
	case "none", "off", "false":
		*dst = Checkpointing{Mode: CkptNone}
	case "every-block", "block", "full", "true", "on":
		*dst = Checkpointing{Mode: CkptBlock}
	case "sqrt", "sqrt-n":
		*dst = Checkpointing{Mode: CkptSqrt}
	default:
		if k, ok := strings.CutPrefix(s, "every-"); ok {
			n, err := strconv.ParseInt(k, 10, 64)
			if err == nil && n > 0 {
				*dst = Checkpointing{Mode: CkptEveryK, K: n}
				if n == 1 {
					dst.Mode = CkptBlock
				}
				return nil
			}
		}
		return fmt.Errorf("unknown checkpointing %q (valid: none, every-block, sqrt, every-K such as every-2)", v)
	}
	return nil
}

func decodeDevice(e *errs, n *yaml.Node, s *Spec, flag string) {
	name, mem := "", ""
	line := 0
	if flag != "" {
		name = flag
		if strings.ContainsAny(flag, "0123456789") && !isCatalog(flag) {
			if _, err := units.ParseBytes(flag); err == nil {
				name, mem = "custom", flag
			}
		}
	} else if n == nil {
		name = "h100-80gb"
		s.Notes = append(s.Notes, "no device given: planning for h100-80gb")
	} else if n.Kind == yaml.ScalarNode {
		name, line = n.Value, n.Line
	} else {
		dm := newMapping(e, n, "device")
		dm.str("name", &name)
		dm.str("memory", &mem)
		dm.finish()
		line = n.Line
		if v := dm.vals["memory"]; v != nil {
			line = v.Line
		}
	}
	if mem == "" {
		d, ok := LookupDevice(name)
		if !ok {
			msg := fmt.Sprintf("unknown device %q (valid: %s; or give {name, memory: 80GiB})", name, strings.Join(DeviceNames(), ", "))
			if flag != "" {
				e.add(0, "--device: %s", msg)
			} else {
				e.add(line, "device: %s", msg)
			}
			return
		}
		s.Device = d
		return
	}
	p, err := units.ParseBytes(mem)
	if err != nil {
		e.add(line, "device memory: %v", err)
		return
	}
	s.Device = Device{Name: name, Memory: p.Bytes, Arch: "unknown", Vendor: NVIDIA}
	if d, ok := LookupDevice(name); ok {
		s.Device.Product, s.Device.Arch, s.Device.Vendor = d.Product, d.Arch, d.Vendor
	}
	if p.Decimal {
		s.Notes = append(s.Notes, fmt.Sprintf("device memory %q taken as decimal: %d bytes (%s); write %sGiB for binary units",
			mem, p.Bytes, units.Format(p.Bytes), strings.TrimRight(strings.ToLower(mem), "gbtmk ")))
	}
}

func isCatalog(name string) bool { _, ok := LookupDevice(name); return ok }

// checkStages reports settings that need a ZeRO stage the run does not
// have: offload (at the offload line), fsdp-bf16 (at the precision line;
// 0 where a flag set it) and DDP's bucket views (at the bucket_view line).
func checkStages(e *errs, t *Training, zline, pline, bline int, precisionFlag bool) {
	if precisionFlag {
		pline = 0
	}
	if t.Offload == OffloadParams && t.Zero != 3 {
		e.add(zline, "offload: params needs ZeRO stage 3 (zero: 3), got stage %d", t.Zero)
	}
	if t.Precision == FSDPBF16 && t.Zero < 2 {
		e.add(pline, "precision: fsdp-bf16 is FSDP's mixed-precision policy and needs ZeRO stage 2 or 3 (zero: 2 or 3), got stage %d", t.Zero)
	}
	if t.Offload == OffloadOptimizer && t.Zero == 0 {
		e.add(zline, "offload: optimizer needs a ZeRO stage (zero: 1, 2 or 3)")
	}
	if t.BucketView && t.Zero >= 2 {
		e.add(bline, "bucket_view: DDP's gradient_as_bucket_view needs ZeRO stage 0 or 1 (DDP, ZeroRedundancyOptimizer over DDP), got stage %d", t.Zero)
	}
}
