package model_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/memplan/memplan/model"
)

// A spec in the explicit form: each layer written out.
func ExampleParse() {
	spec := []byte(`name: MLP
model:
  type: sequential
  input: {features: 1024}
  layers:
    - linear: {in: 1024, out: 4096}
    - gelu
    - linear: {in: 4096, out: 10}
training: {batch: 256, precision: amp-bf16}
device: a100-80gb
`)
	s, err := model.Parse("mlp.yaml", spec, model.Overrides{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Name, s.Params(), s.InputShape(), s.Training.Precision, s.Device.Name)
	// Output: MLP 4239370 [1024] amp-bf16 a100-80gb
}

// Errors about a spec carry its file and line, like a compiler's.
func ExampleParse_error() {
	spec := []byte(`name: bad
model:
  type: sequential
  input: {features: 8}
  layers:
    - linear: {in: 16, out: 4}
training: {batch: 1}
`)
	_, err := model.Parse("bad.yaml", spec, model.Overrides{})
	fmt.Println(err)
	// Output: bad.yaml:6: linear: in (16) does not match the input width (8)
}

// Overrides replace a spec's training setup, as the command line's flags do.
func ExampleLoad() {
	s, err := model.Load("../specs/gpt2-124m.yaml", model.Overrides{Batch: 16, Precision: "bf16"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Model.Type, s.Params(), s.Training.Batch, s.Training.Precision)
	// Output: gpt2 124439808 16 bf16
}

// A transformers config.json becomes a spec with default training settings.
func ExampleParseHF() {
	cfg := []byte(`{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
  "num_attention_heads": 4, "intermediate_size": 688, "vocab_size": 1000}`)
	s, err := model.ParseHF("config.json", cfg, model.Overrides{Seq: 128})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Model.Type, s.Params(), s.Training.Seq)
	// Output: llama 2094336 128
}

// Lower turns a shorthand into the layer tree the estimator simulates; L
// builds a layer of any kind by hand.
func ExampleModel_Lower() {
	m := model.Model{Type: model.Llama, NumLayers: 2, Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16,
		Intermediate: 128, Vocab: 100, Activation: model.KSiLU}
	layers := m.Lower()
	var kinds []string
	for _, l := range layers {
		kinds = append(kinds, l.Kind)
	}
	fmt.Println(strings.Join(kinds, " "))
	fmt.Println(model.Params(layers), model.Count(layers, 1000))
	head := model.L(&model.Linear{In: 64, Out: 10, Bias: true})
	fmt.Println(model.Params([]model.Layer{head}))
	// Output:
	// embedding repeat rmsnorm lm_head
	// 95040 15
	// 650
}

// Every layer kind has one line of documentation.
func ExampleLayerKinds() {
	fmt.Println(model.LayerKinds()["groupnorm"])
	// Output: GroupNorm over [channels, ...] in groups (affine defaults to true)
}

// Optimizer names accept transformers' spellings; a paged optimizer keeps
// its large states in CUDA unified memory (docs/lora.md §7).
func ExampleOptimizer_Paged() {
	s, err := model.Parse("x.yaml", []byte("name: x\nmodel: {type: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, vocab: 100}\n"+
		"training: {batch: 1, seq: 8, precision: bf16, optimizer: paged_adamw_8bit, quant: nf4, lora: {rank: 8}}\ndevice: h100-80gb\n"), model.Overrides{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Training.Optimizer, s.Training.Optimizer.Paged(), s.Training.Quant)
	// Output: paged-adamw8bit true nf4
}

// LoRA's layouts: FSDP (ZeRO 3) over the data-parallel ranks is simulated;
// tensor parallelism is not (docs/lora.md §13).
func ExampleSpec_LoRALayoutOK() {
	s := model.Spec{Training: model.Training{DP: 8, Zero: 3, LoRA: &model.LoRA{Rank: 16, Alpha: 16, Targets: model.TargetsAll}}}
	fmt.Println(s.LoRALayoutOK())
	s.Training.TP = 2
	fmt.Println(s.LoRALayoutOK())
	// Output:
	// <nil>
	// LoRA with tensor parallelism is not simulated (no PyTorch plan shards peft's adapters)
}

// RankParams counts one expert-parallel rank's share of a mixture of
// experts: E/ep of each block's routed experts, everything else whole.
func ExampleRankParams() {
	m := &model.Model{Type: model.Llama, NumLayers: 2, Hidden: 64, Heads: 8, KVHeads: 4, Intermediate: 32, Vocab: 1000,
		Experts: 8, TopK: 2}
	layers := m.Lower()
	fmt.Println(model.Params(layers), model.RankParams(layers, 1), model.RankParams(layers, 4))
	// Output:
	// 227648 227648 153920
}

// The routed experts' share of a mixture of experts: 2 blocks × 8 experts
// × 3 × 64 × 32, which expert parallelism over 4 ranks cuts to a quarter
// (RankParams above: 227,648 − ¾ × 98,304).
func ExampleRoutedParams() {
	m := &model.Model{Type: model.Llama, NumLayers: 2, Hidden: 64, Heads: 8, KVHeads: 4, Intermediate: 32, Vocab: 1000,
		Experts: 8, TopK: 2}
	fmt.Println(model.RoutedParams(m.Lower()))
	// Output:
	// 98304
}

// Which files a command may take as a transformers config where a spec
// goes, and Llama 4 Scout's experts: FSDP2 pads their shards past 16
// ranks, or past 4 under expert parallelism over 4.
func ExampleIsHFConfig() {
	const scout = "testdata/hf/llama4-scout.json"
	fmt.Println(model.IsHFConfig(scout), model.IsHFConfig("../specs/gpt2-124m.yaml"))
	s, err := model.LoadHF(scout, model.Overrides{Batch: 1, Seq: 2048})
	if err != nil {
		log.Fatal(err)
	}
	t := s.Training
	fmt.Println(s.Model.ShardedExpertRows(&t))
	t.EP = 4
	fmt.Println(s.Model.ShardedExpertRows(&t))
	// Output:
	// true false
	// 16
	// 4
}

// ExampleLookupDevice finds a device by its catalog name or another name it
// goes by (DeviceAliases).
func ExampleLookupDevice() {
	d, ok := model.LookupDevice("H100")
	fmt.Println(d.Name, ok)
	for _, a := range model.DeviceAliases()[:2] {
		fmt.Println(a[0], "->", a[1])
	}
	// Output:
	// h100-80gb true
	// 4090 -> rtx-4090
	// a100 -> a100-80gb
}

// FSDP2's reshard_after_forward=N: what memplan simulates, and why not
// where it does not.
func ExampleReshardError() {
	for _, t := range []model.Training{
		{DP: 32, Zero: 3, ReshardAfterForward: 8},
		{DP: 32, Zero: 3, ReshardAfterForward: 6},
		{DP: 16, TP: 2, Zero: 3, ReshardAfterForward: 8},
	} {
		fmt.Println(model.ReshardError(&t))
	}
	// Output:
	// <nil>
	// 6 must divide the data-parallel size 32
	// torch 2.11's FSDP2 does not reshard to fewer ranks beside tensor parallelism (tp 2): to_sharded_post_forward raises "Resharding to smaller mesh with TP is not supported yet"
}

// A run that would stop for another reason than memory: OLMo 2 under
// FSDP2's bf16 policy with checkpointing.
func ExampleKnownFailure() {
	s, err := model.LoadHF("testdata/hf/olmo2-1b.json", model.Overrides{Batch: 1, Seq: 1024, DP: 8, Zero: "3",
		Precision: model.FSDPBF16, Checkpointing: model.CkptBlock})
	if err != nil {
		log.Fatal(err)
	}
	f := model.KnownFailure(&s.Training, &s.Model)
	fmt.Println(strings.Contains(f, "CheckpointError"))
	s.Training.Checkpointing = model.Checkpointing{Mode: model.CkptNone}
	fmt.Printf("%q\n", model.KnownFailure(&s.Training, &s.Model))
	// Output:
	// true
	// ""
}
