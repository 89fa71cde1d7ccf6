package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/model"
	"github.com/memplan/memplan/tuner"
)

// overrideFlags let the command line replace any training or device field
// of a spec, so a spec can be swept without editing it.
func overrideFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "batch", Usage: "micro-batch size per GPU"},
		&cli.Int64Flag{Name: "seq", Usage: "sequence length (token models)"},
		&cli.Int64Flag{Name: "image", Usage: "image side in pixels (vision models)"},
		&cli.Int64Flag{Name: "grad-accum", Usage: "gradient accumulation steps"},
		&cli.StringFlag{Name: "precision", Usage: "fp32, amp-bf16, amp-fp16, bf16 or fsdp-bf16 (FSDP2's bf16 mixed-precision policy; needs --zero 2 or 3)"},
		&cli.StringFlag{Name: "optimizer", Usage: "adamw, adam, sgd, sgd-momentum (each with -foreach, -fused or -for-loop), adafactor, adam8bit (or adamw8bit), paged-adamw8bit, paged-adamw32bit (bitsandbytes; unmeasured)"},
		&cli.StringFlag{Name: "checkpointing", Usage: "none, every-block, sqrt or every-K"},
		&cli.StringFlag{Name: "attention", Usage: "sdpa or eager"},
		&cli.StringFlag{Name: "zero-grad", Usage: "none (set_to_none=True) or zeros"},
		&cli.Int64Flag{Name: "dp", Usage: "data-parallel size: GPUs the batch is split over (memory is per GPU)"},
		&cli.StringFlag{Name: "zero", Usage: "ZeRO stage over the data-parallel GPUs: 0 (DDP), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters)"},
		&cli.Int64Flag{Name: "tp", Usage: "tensor-parallel size: torchtitan's plan (DTensor), memory per GPU of the busiest rank"},
		&cli.BoolFlag{Name: "sp", Usage: "sequence parallelism with --tp: norms and residuals split along the sequence"},
		&cli.BoolFlag{Name: "loss-parallel", Usage: "with --tp: the loss on the logits' vocabulary shards (loss_parallel)"},
		&cli.Int64Flag{Name: "cp", Usage: "context-parallel size (ring attention, load-balanced; docs/parallelism.md §3.3)"},
		&cli.Int64Flag{Name: "ep", Usage: "expert-parallel size: the experts of each MoE block split over this many of the data-parallel GPUs, with --cp of the dp·cp GPUs (docs/moe.md)"},
		&cli.StringFlag{Name: "ep-skew", Usage: "with --ep: the busiest rank's received tokens over balanced routing's, 1 to 1024 (default min(ep, 3))"},
		&cli.BoolFlag{Name: "bucket-view", Usage: "DDP with gradient_as_bucket_view=True: the gradients are views into the buckets"},
		&cli.BoolFlag{Name: "empty-cache-after-wrap", Usage: "the script calls torch.cuda.empty_cache() after fully_shard has wrapped a model built on the host or the GPU (by default the cached blocks the whole parameters leave are kept for the steps, as accelerate leaves them)"},
		&cli.StringFlag{Name: "fsdp-init", Usage: "how the model reaches FSDP2's fully_shard: host (built on the CPU, moved unit by unit: transformers' from_pretrained; the default), gpu (model.cuda() first) or meta (the meta device and to_empty: torchtitan); with --tp, gpu builds the whole model on the GPU before splitting it, host and meta allocate each shard directly"},
		&cli.StringFlag{Name: "fsdp-experts", Usage: "with --zero 2 or 3: how FSDP2 shards fused experts: dim0 (the default: along the experts, padded to whole experts per rank), dim1 (along their second dimension, a shard_placement_fn returning Shard(1)) or auto (torchtitan: dim1 when the ranks sharding them outnumber the experts)"},
		&cli.StringFlag{Name: "fsdp-root", Usage: "with --zero 3: reshard (the default: fully_shard(model, reshard_after_forward=True), torchtitan, accelerate) or keep (torch's default for the root, reshard_after_forward=None: its parameters stay unsharded from the forward to the backward)"},
		&cli.Int64Flag{Name: "dp-replicate", Usage: "with --zero 2 or 3: HSDP, the --dp GPUs as this many replicas of an FSDP group of dp/R GPUs (FSDP2 over a 2-D mesh, torchtitan's data_parallel_replicate_degree): parameters sharded within a group, gradients all-reduced across replicas (docs/multigpu.md, \"HSDP\")"},
		&cli.Int64Flag{Name: "reshard-after-forward", Usage: "with --zero 3: FSDP2's reshard_after_forward=N, N dividing --dp: after each unit's forward its parameters stay sharded over N ranks (1/N of them kept), and the backward's all-gather runs within those N (docs/multigpu.md, \"Resharding to N ranks\")"},
		&cli.BoolFlag{Name: "loss-outside-autocast", Usage: "the loop computes the loss after leaving autocast (with autocast: logits = model(x); loss = loss_fn(logits, y) outside): the cached half-precision weights are freed first"},
		&cli.StringFlag{Name: "step-pause", Usage: "seconds the loop waits once its first optimizer step has finished on the GPU (or after every step: nvidia-smi, checkpoints); 0.2 or more lets DDP free its old gradient bucket at the second step (docs/multigpu.md)"},
		&cli.Int64Flag{Name: "steps", Usage: "the run's optimizer steps (default: a long run, 1000): a run that leaks memory every step is judged at its last (docs/parallelism.md §3.1.6), and no more steps are simulated than the run has (docs/allocator.md §8)"},
		&cli.Int64Flag{Name: "pp", Usage: "pipeline stages (torch.distributed.pipelining; memory is per GPU, for the busiest stage)"},
		&cli.StringFlag{Name: "pp-schedule", Usage: "pipeline schedule: 1f1b (default), gpipe or interleaved"},
		&cli.Int64Flag{Name: "pp-virtual", Usage: "stages per rank of the interleaved schedule (default 2)"},
		&cli.Int64Flag{Name: "microbatches", Usage: "micro-batches one pipeline step runs (the same as --grad-accum)"},
		&cli.StringFlag{Name: "offload", Usage: "none, optimizer (ZeRO-Offload: optimizer state and step on the host) or params (also parameter shards; needs --zero 3)"},
		&cli.StringFlag{Name: "device", Usage: "a catalog name (memplan devices) or a size such as 80GiB"},
		&cli.StringFlag{Name: "alloc-conf", Usage: "PYTORCH_ALLOC_CONF of the job, e.g. expandable_segments:True (default: $PYTORCH_ALLOC_CONF, else $PYTORCH_CUDA_ALLOC_CONF); tune also takes auto", Action: checkAllocAuto},
		&cli.Int64Flag{Name: "lora", Usage: "train LoRA adapters of this rank over a frozen base (docs/lora.md)"},
		&cli.StringFlag{Name: "lora-targets", Usage: "linears the adapters wrap: attn, mlp, all (default) or module names such as q_proj,v_proj"},
		&cli.StringFlag{Name: "lora-alpha", Usage: "lora_alpha (default 8; changes no bytes)"},
		&cli.StringFlag{Name: "lora-dropout", Usage: "dropout on each adapter's input, in [0, 1) (default 0)"},
		&cli.StringFlag{Name: "lora-adapter-dtype", Usage: "fp32 (peft's default autocast_adapter_dtype=True) or base (the base's dtype, as QLoRA's recipe casts them)"},
		&cli.StringFlag{Name: "quant", Usage: "frozen base storage with LoRA: none, int8 or nf4 (bitsandbytes Linear8bitLt / Linear4bit; modelled from source, unmeasured)"},
		&cli.StringFlag{Name: "double-quant", Usage: "true or false: nf4's double quantization of the absmax"},
		&cli.StringFlag{Name: "hf", Usage: "read the model from a transformers config.json instead of a SPEC (then --seq is required; --batch defaults to 1)"},
	}
}

func overrides(c *cli.Context) model.Overrides {
	// --microbatches is --grad-accum under another name (loadSpec rejects
	// the two set apart); whichever is given, negative too, so that the
	// spec's checks refuse a bad value rather than the default take it.
	accum := c.Int64("grad-accum")
	if !c.IsSet("grad-accum") {
		accum = c.Int64("microbatches")
	}
	o := model.Overrides{
		Batch: c.Int64("batch"), Seq: c.Int64("seq"), Image: c.Int64("image"), GradAccum: accum,
		Precision: c.String("precision"), Optimizer: c.String("optimizer"), Checkpointing: c.String("checkpointing"),
		Attention: c.String("attention"), ZeroGrad: c.String("zero-grad"), Dev: c.String("device"),
		DP: c.Int64("dp"), Zero: c.String("zero"), Offload: c.String("offload"),
		PP: c.Int64("pp"), PPSchedule: c.String("pp-schedule"), PPVirtual: c.Int64("pp-virtual"),
		EP: c.Int64("ep"), EPSkew: c.String("ep-skew"), StepPause: c.String("step-pause"), Steps: c.Int64("steps"),
		AllocConf: allocConf(c), BucketView: c.Bool("bucket-view"), FSDPInit: c.String("fsdp-init"), EmptyCacheAfterWrap: c.Bool("empty-cache-after-wrap"), FSDPRoot: c.String("fsdp-root"), ReshardAfterForward: c.Int64("reshard-after-forward"), DPReplicate: c.Int64("dp-replicate"), FSDPExperts: c.String("fsdp-experts"),
		LoRA: c.Int64("lora"), LoRATargets: c.String("lora-targets"), LoRAAlpha: c.String("lora-alpha"),
		LoRADropout: c.String("lora-dropout"), Quant: c.String("quant"), DoubleQuant: c.String("double-quant"),
		TP: c.Int64("tp"), SP: c.Bool("sp"), LossParallel: c.Bool("loss-parallel"), CP: c.Int64("cp"),
		LoRAAdapterDtype: c.String("lora-adapter-dtype"), LossOutsideAutocast: c.Bool("loss-outside-autocast"),
	}
	if c.Command.Name == "plan" && o.Precision == model.FSDPBF16 {
		// plan sets the ZeRO stage per layout (it has no --zero) and keeps
		// 2 and 3 for FSDP2's mixed-precision policy (planner.Plan); the
		// spec is read at stage 3, where the policy exists.
		o.Zero = "3"
	}
	return o
}

// allocConf is --alloc-conf, or else the allocator settings in the
// environment, read in PyTorch's order (c10/core/AllocatorConfig.cpp):
// PYTORCH_ALLOC_CONF, then the older PYTORCH_CUDA_ALLOC_CONF.
func allocConf(c *cli.Context) string {
	if c.IsSet("alloc-conf") {
		if v := c.String("alloc-conf"); v != allocAuto {
			return v
		}
		return "" // tune searches (allocAuto); the spec's own is a candidate
	}
	v, _ := allocConfEnv()
	return v
}

func allocConfEnv() (value, name string) {
	for _, name := range []string{"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"} {
		if v, ok := os.LookupEnv(name); ok {
			return v, name
		}
	}
	return "", ""
}

// allocConfNote says where the allocator settings came from when they came
// from the environment.
func allocConfNote(c *cli.Context, spec *model.Spec) {
	if c.IsSet("alloc-conf") {
		return
	}
	if v, name := allocConfEnv(); name != "" {
		spec.Notes = append(spec.Notes, fmt.Sprintf("allocator settings from %s: %q", name, v))
	}
}

// probeFlags are the flags of commands that can ask the real device.
func probeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "probe", Usage: "measure on the real GPU (needs the NVIDIA driver) instead of predicting"},
		&cli.IntFlag{Name: "device-index", Usage: "CUDA device ordinal for --probe"},
	}
}

var formatFlag = &cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"}

func format(c *cli.Context) (string, error) {
	f := c.String("format")
	if f != "text" && f != "json" {
		return "", usageError{fmt.Sprintf("--format: want text or json, got %q", f)}
	}
	return f, nil
}

// targetArgs reads --format, --target and the SPEC argument, the preamble
// of tune, check and probe.
func targetArgs(c *cli.Context) (f string, band tuner.Band, spec *model.Spec, err error) {
	if f, err = format(c); err != nil {
		return
	}
	if band, err = tuner.ParseBand(c.String("target")); err != nil {
		err = usageError{"--target: " + err.Error()}
		return
	}
	spec, err = loadSpec(c)
	if err == nil {
		unmeasuredNote(c.App.ErrWriter, spec)
		// What the spec's reading noted (an environment's allocator
		// settings, a config's quantization), as estimate prints it.
		for _, n := range spec.Notes {
			fmt.Fprintf(c.App.ErrWriter, "memplan: note: %s\n", n)
		}
	}
	return
}

// loadSpec reads the SPEC argument, or the --hf config, with the command
// line's overrides.
func loadSpec(c *cli.Context) (*model.Spec, error) {
	if a, m := c.Int64("grad-accum"), c.Int64("microbatches"); a > 0 && m > 0 && a != m {
		return nil, usageError{fmt.Sprintf("%s: --microbatches %d and --grad-accum %d disagree (they are the same setting)", c.Command.Name, m, a)}
	}
	if hf := c.String("hf"); hf != "" {
		if c.NArg() > 0 {
			return nil, usageError{fmt.Sprintf("%s: give either SPEC or --hf, not both", c.Command.Name)}
		}
		if c.Int64("seq") == 0 {
			return nil, usageError{fmt.Sprintf("%s --hf: --seq is required (a config has no sequence length)", c.Command.Name)}
		}
		o := overrides(c)
		if o.Batch == 0 {
			o.Batch = 1
		}
		spec, err := model.LoadHF(hf, o)
		if err == nil {
			allocConfNote(c, spec)
		}
		return spec, err
	}
	path, err := specArg(c)
	if err != nil {
		return nil, err
	}
	spec, err := loadPath(c.Command.Name, path, overrides(c))
	if err == nil {
		allocConfNote(c, spec)
	}
	return spec, err
}

// loadPath reads path with overrides o: a spec, or a transformers
// config.json given where a spec goes (model.IsHFConfig), read as --hf
// reads one: --seq required, batch 1 unless given.
func loadPath(cmd, path string, o model.Overrides) (*model.Spec, error) {
	return loadAs(cmd, path, o, model.IsHFConfig(path))
}

// loadAs is loadPath once it is known whether path is a config (hf).
func loadAs(cmd, path string, o model.Overrides, hf bool) (*model.Spec, error) {
	if !hf {
		return model.Load(path, o)
	}
	if o.Seq == 0 {
		return nil, noSeqError(cmd, path)
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	return model.LoadHF(path, o)
}

// noSeqError is the usage error for a transformers config read where a
// SPEC goes without --seq.
func noSeqError(cmd, path string) error {
	return usageError{fmt.Sprintf("%s: %s is a transformers config: --seq is required (a config has no sequence length)", cmd, path)}
}

// specArg returns the single SPEC argument of a command.
func specArg(c *cli.Context) (string, error) {
	switch c.NArg() {
	case 1:
		return c.Args().First(), nil
	case 0:
		return "", usageError{fmt.Sprintf("%s: missing SPEC argument (see memplan %s --help)", c.Command.Name, c.Command.Name)}
	}
	return "", usageError{fmt.Sprintf("%s: want one SPEC argument, got %d", c.Command.Name, c.NArg())}
}
