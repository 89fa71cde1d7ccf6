package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoRA target groups (docs/lora.md §9): the attention projections, the MLP
// projections, or every linear but the output head (peft's all-linear).
const (
	TargetsAttn = "attn"
	TargetsMLP  = "mlp"
	TargetsAll  = "all"
)

// LoRA is a low-rank adaptation of the model (peft's LoraConfig): the base
// weights are frozen and each targeted linear gets two trainable matrices
// A [rank, in] and B [out, rank] (docs/lora.md §3).
type LoRA struct {
	Rank int64 `json:"rank"`
	// Alpha is lora_alpha; the scaling alpha/rank changes no bytes.
	Alpha float64 `json:"alpha"`
	// Dropout is lora_dropout: above 0 each adapter's input goes through
	// a dropout (a copy and a one-byte mask).
	Dropout float64 `json:"dropout"`
	// Targets is attn, mlp or all, or Names lists transformers module
	// names (q_proj, v_proj, c_attn, ...) and Targets is "".
	Targets string   `json:"targets,omitempty"`
	Names   []string `json:"names,omitempty"`
	// AdapterDtype is "" for fp32 adapters (peft's default
	// autocast_adapter_dtype=True upcasts them) or AdapterBase for
	// adapters in the base's dtype (autocast_adapter_dtype=False, or the
	// QLoRA recipe's cast of the LoRA modules to bf16).
	AdapterDtype string `json:"adapter_dtype,omitempty"`
}

// AdapterBase is LoRA.AdapterDtype for adapters in the base's dtype.
const AdapterBase = "base"

// parseAdapterDtype reads fp32 (stored as "") or base.
func parseAdapterDtype(v string, dst *LoRA) error {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "fp32", "float32":
		dst.AdapterDtype = ""
	case AdapterBase:
		dst.AdapterDtype = AdapterBase
	default:
		return fmt.Errorf("want fp32 or base, got %q", v)
	}
	return nil
}

// Quantization of the frozen base weights (bitsandbytes, docs/lora.md §6).
const (
	QuantNone = "none"
	QuantInt8 = "int8"
	QuantNF4  = "nf4"
)

// LoRANames returns the module names LoRA targets can name in the model
// (transformers' names of its linears, LoRALinears), sorted; nil when its
// type has no named linears.
func (m *Model) LoRANames() []string {
	var out []string
	for _, x := range m.LoRALinears() {
		// A fused parameter answers to the names peft converts to it.
		for _, n := range append([]string{x.Name}, x.From...) {
			if (x.Group != "" || x.From != nil) && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Enabled reports whether the spec trains LoRA adapters.
func (l *LoRA) Enabled() bool { return l != nil && l.Rank > 0 }

// String is the targets as the user wrote them.
func (l *LoRA) String() string {
	if l.Targets != "" {
		return l.Targets
	}
	return strings.Join(l.Names, ",")
}

// parseTargets reads attn, mlp, all, or a comma list of module names that
// must exist in the model type.
func parseTargets(v string, m *Model, dst *LoRA) error {
	s := strings.ToLower(strings.TrimSpace(v))
	switch s {
	case TargetsAttn, TargetsMLP, TargetsAll:
		dst.Targets, dst.Names = s, nil
		return nil
	case "all-linear":
		dst.Targets, dst.Names = TargetsAll, nil
		return nil
	}
	valid, modelType := m.LoRANames(), m.Type
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			return fmt.Errorf("empty module name in %q", v)
		}
		if !slices.Contains(valid, n) {
			if valid == nil {
				return fmt.Errorf("model type %s has no named linears: use attn, mlp or all, got %q", modelType, n)
			}
			return fmt.Errorf("no linear named %q in a %s model (valid: attn, mlp, all, %s)", n, modelType, strings.Join(valid, ", "))
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, x := range m.LoRALinears() {
		// peft's _convert_peft_config_moe refuses half of a fused pair.
		var have, miss []string
		for _, n := range x.From {
			if slices.Contains(names, n) {
				have = append(have, n)
			} else {
				miss = append(miss, n)
			}
		}
		if len(have) > 0 && len(miss) > 0 {
			return fmt.Errorf("%s without %s: peft fuses them into %s and refuses half of the pair", strings.Join(have, ", "), strings.Join(miss, ", "), x.Name)
		}
	}
	dst.Targets, dst.Names = "", names
	return nil
}

// maxRank bounds a LoRA rank so that adapter counts cannot overflow.
const maxRank = 1 << 16

// decodeLoRA reads training.lora and the --lora flags, then training.quant.
func decodeLoRA(e *errs, tm *mapping, t *Training, m *Model, o Overrides) {
	l := &LoRA{Alpha: 8, Targets: TargetsAll}
	line := tm.line
	if n := tm.get("lora"); n != nil {
		line = n.Line
		lm := newMapping(e, n, "training.lora")
		lm.int("rank", &l.Rank, true)
		lm.float("alpha", &l.Alpha, 0, 1e9)
		lm.float("dropout", &l.Dropout, 0, 0.999999)
		if s := ""; lm.vals["adapter_dtype"] != nil {
			if ln, ok := lm.str("adapter_dtype", &s); ok {
				if err := parseAdapterDtype(s, l); err != nil {
					e.add(ln, "adapter_dtype: %v", err)
				}
			}
		}
		if tn := lm.vals["targets"]; tn != nil && tn.Kind == yaml.SequenceNode {
			lm.known["targets"] = true
			var parts []string
			for _, c := range tn.Content {
				parts = append(parts, c.Value)
			}
			if err := parseTargets(strings.Join(parts, ","), m, l); err != nil {
				e.add(tn.Line, "targets: %v", err)
			}
		} else if s := ""; tn != nil {
			if ln, ok := lm.str("targets", &s); ok {
				if err := parseTargets(s, m, l); err != nil {
					e.add(ln, "targets: %v", err)
				}
			}
		}
		lm.finish()
	}
	loraFlags(e, l, m, o)
	if l.Rank > maxRank {
		e.add(line, "lora: rank %d is above %d", l.Rank, maxRank)
		l.Rank = 0
	}
	if l.Rank > 0 {
		t.LoRA = l
	} else if o.LoRATargets != "" || o.LoRAAlpha != "" || o.LoRADropout != "" || o.LoRAAdapterDtype != "" {
		e.add(0, "--lora-targets, --lora-alpha, --lora-dropout and --lora-adapter-dtype need a rank (--lora R or training.lora.rank)")
	}
	if t.LoRA.Enabled() && m.LoRANames() == nil && m.Type != "" {
		e.add(line, "lora: adapters are modelled for gpt2, llama, bert and neox models, not %s", m.Type)
	}
	switch {
	case !t.LoRA.Enabled() || m.Experts == 0:
	case t.LoRA.Targets == TargetsMLP && m.SharedExpert == 0 && m.denseCount() == 0 && !m.LoRAFusedExperts:
		e.add(line, "lora: a mixture of experts without a shared expert or dense layers has no MLP linears to adapt (its experts are fused parameters, which peft adapts here only through target_parameters, not modelled for this model); use attn or all")
	case t.LoRA.Targets == TargetsAll && m.DenseExperts:
		// Measured: bench/results/2026-11-28-h200-llama4-lora.jsonl.
		e.add(line, "lora: peft's all-linear (targets all, the default) wraps Llama 4's router, an nn.Linear whose forward returns a tuple, and peft 0.21's LoRA forward then fails on it (AttributeError: 'tuple' object has no attribute 'dtype'); use attn, mlp or module names")
	}
	decodeQuant(e, tm, t, o)
}

// UnsimulatedLoRA is a layout LoRA is not simulated over: What is the
// layout (a noun phrase), Why the reason when there is more to say than
// that it is not simulated, Hint what to use instead.
type UnsimulatedLoRA struct{ What, Why, Hint string }

func (e *UnsimulatedLoRA) Error() string {
	s := e.What + " is not simulated"
	if e.Why != "" {
		s += " (" + e.Why + ")"
	}
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

// LoRALayoutOK says why LoRA is not simulated over this layout (an
// *UnsimulatedLoRA), or nil.
// Tensor parallelism is refused: no PyTorch plan shards peft's adapters
// (parallelize_module's styles apply to the nn.Linear peft wraps). Under
// ZeRO 2 or 3 LoRA is simulated as FSDP2 over the data-parallel ranks
// alone (fully_shard on every block and the root, the frozen base sharded
// beside the adapters; docs/lora.md §13), with the states on the GPU and a
// base in a torch dtype. Adapters on fused experts (peft's ParamWrapper,
// Model.LoRAFusedExperts) are simulated on one GPU and under DDP and
// ZeRO-1 only. The spec parser, the estimator and the planner ask it.
func (s *Spec) LoRALayoutOK() error {
	t := &s.Training
	if !t.LoRA.Enabled() {
		return nil
	}
	if s.Model.wrapsFusedExperts(t.LoRA) && (t.Zero >= 2 || t.EP > 1 || t.Quant != "") {
		return &UnsimulatedLoRA{What: "LoRA on fused experts under FSDP, expert parallelism or a quantized base",
			Why:  "peft's ParamWrapper over the experts is modelled on one GPU and under DDP and ZeRO-1",
			Hint: "use zero: 0 or 1, or attention targets (attn)"}
	}
	if t.TP > 1 {
		return &UnsimulatedLoRA{What: "LoRA with tensor parallelism", Why: "no PyTorch plan shards peft's adapters"}
	}
	if t.Zero < 2 {
		return nil
	}
	e := &UnsimulatedLoRA{Hint: "use zero: 0 or 1"}
	switch {
	case t.CP > 1:
		e.What = fmt.Sprintf("LoRA at ZeRO stage %d with context parallelism", t.Zero)
	case t.DP <= 1:
		e.What = fmt.Sprintf("LoRA at ZeRO stage %d on one GPU", t.Zero)
		e.Why = "FSDP2 shards over the data-parallel ranks: give dp > 1"
	case t.Offload != OffloadNone && t.Offload != "":
		e.What = fmt.Sprintf("LoRA at ZeRO stage %d with offload", t.Zero)
	case t.Quant != "":
		e.What = fmt.Sprintf("LoRA at ZeRO stage %d over a quantized base", t.Zero)
		e.Why = "bitsandbytes' storage under fully_shard"
	default:
		return nil
	}
	return e
}

// checkLoRALayout reports LoRALayoutOK's refusal at the spec's line.
func checkLoRALayout(e *errs, line int, s *Spec) {
	if err := s.LoRALayoutOK(); err != nil {
		e.add(line, "lora: %v", err)
	}
}

// wrapsFusedExperts says whether l adapts any of m's fused parameters
// (Model.LoRAFusedExperts).
func (m *Model) wrapsFusedExperts(l *LoRA) bool {
	if !m.LoRAFusedExperts {
		return false
	}
	for _, x := range m.LoRALinears() {
		if x.From != nil && l.Wraps(x) {
			return true
		}
	}
	return false
}

// loraFlags applies --lora, --lora-targets, --lora-alpha and --lora-dropout.
func loraFlags(e *errs, l *LoRA, m *Model, o Overrides) {
	if o.LoRA < 0 {
		e.add(0, "--lora: rank must be positive, got %d", o.LoRA)
	} else if o.LoRA > 0 {
		l.Rank = o.LoRA
	}
	if o.LoRATargets != "" {
		if err := parseTargets(o.LoRATargets, m, l); err != nil {
			e.add(0, "--lora-targets: %v", err)
		}
	}
	if o.LoRAAdapterDtype != "" {
		if err := parseAdapterDtype(o.LoRAAdapterDtype, l); err != nil {
			e.add(0, "--lora-adapter-dtype: %v", err)
		}
	}
	for _, f := range []struct {
		name, v string
		dst     *float64
		hi      float64
	}{{"lora-alpha", o.LoRAAlpha, &l.Alpha, 1e9}, {"lora-dropout", o.LoRADropout, &l.Dropout, 0.999999}} {
		if f.v == "" {
			continue
		}
		x, err := strconv.ParseFloat(f.v, 64)
		if err != nil || x != x || x < 0 || x > f.hi {
			e.add(0, "--%s: want a number between 0 and %g, got %q", f.name, f.hi, f.v)
			continue
		}
		*f.dst = x
	}
}

// decodeQuant reads training.quant and training.double_quant (and their
// flags): bitsandbytes storage for the frozen base, which needs LoRA.
func decodeQuant(e *errs, tm *mapping, t *Training, o Overrides) {
	var s string
	ql, ok := tm.str("quant", &s)
	if o.Quant != "" {
		s, ok, ql = o.Quant, true, 0
	}
	if ok {
		if err := parseChoice(s, &t.Quant, "quant", QuantNone, QuantInt8, QuantNF4); err != nil {
			if ql == 0 {
				e.add(0, "--quant: %v", err)
			} else {
				e.add(ql, "quant: %v", err)
			}
		}
	}
	if t.Quant == QuantNone {
		t.Quant = "" // none: left out of the JSON, as before quantization existed
	}
	tm.bool("double_quant", &t.DoubleQuant)
	if o.DoubleQuant != "" {
		switch strings.ToLower(o.DoubleQuant) {
		case "true", "on", "yes":
			t.DoubleQuant = true
		case "false", "off", "no":
			t.DoubleQuant = false
		default:
			e.add(0, "--double-quant: want true or false, got %q", o.DoubleQuant)
		}
	}
	if t.Quant != "" && !t.LoRA.Enabled() {
		e.add(ql, "quant: a %s base is frozen and needs LoRA adapters to train (training.lora or --lora R)", t.Quant)
	}
	if t.DoubleQuant && t.Quant != QuantNF4 {
		e.add(ql, "double_quant: applies to nf4 only (quant: nf4)")
	}
}
