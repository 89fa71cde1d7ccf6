package estimate

// config is what the ops need to know about the run.
type config struct {
	amp     bool  // autocast over fp32 weights
	fp16    bool  // the half dtype is fp16 (amp-fp16), not bf16
	compute int64 // dtype of matmul outputs
	param   int64 // dtype of parameters
	// master is the dtype of FSDP's sharded parameters, their gradients and
	// the optimizer state: param, or fp32 under fsdp-bf16, whose compute
	// and gathered parameters are bf16 (docs/multigpu.md).
	master          int64
	bucketView      bool // DDP's gradient_as_bucket_view
	lossOutside     bool // the loop leaves autocast before the loss (lossAfterAutocast)
	mayRace         bool // DDP's rebuild can race the first step's all-reduce (ddp.go, MayRace)
	midStep         bool // DDP rebuilds inside the first step, at its second micro-batch (ddp.go, racesMidStep)
	cublasWorkspace int64
	eager           bool // eager (math) attention instead of SDPA
	batch           int64
	sms, threadsSM  int64 // the GPU's SM count and threads per SM
	// cudnn is cuDNN's table of convolution workspaces for the device,
	// parsed by the first convolution (cudnn.go).
	cudnn *wsTable
	// dp, zero and offload are the data-parallel size, ZeRO stage and
	// offload mode (sharding.go).
	dp, zero int64
	offload  string
	// ep and epSkew are expert parallelism (moe_ep.go): the experts of a
	// block split over ep ranks, the busiest's rows scaled by epSkew (0:
	// the default allowance); epRole is the kind of rank simulated
	// (estimateExperts): the busiest receiver, a balanced one, or one that
	// receives what the busiest leaves to the others.
	ep     int64
	epSkew float64
	epRole epRole
	// efsdp is the ranks FSDP shards a block's experts over under expert
	// parallelism: the rank's data-parallel ranks (dp·cp) times its
	// tensor-parallel ones, over ep (torchtitan's efsdp mesh).
	efsdp int64
	// fsdpExperts is how FSDP2 shards fused experts
	// (model.Training.FSDPExperts).
	fsdpExperts string
	// inputGrads is enable_input_require_grads: the frozen embedding's
	// output requires grad (LoRA with checkpointing, docs/lora.md §5).
	inputGrads bool
	// modelRope says that the model's forward makes its attention mask
	// and rotary tables before its first block, as transformers' decoders
	// do (prologue); the tensor-, context- and pipeline-parallel programs
	// (bench/torch/dist/common.py) keep the tables as a buffer instead.
	modelRope bool
	// bwdAutocast says that backward runs inside the autocast region:
	// the engine carries the thread-local autocast state of the call that
	// starts it, and a pipeline schedule's step() runs the micro-batches'
	// backward inside the step's region (bench/torch/dist/pp.py, as
	// torchtitan does), so an op of autocast's fp32 list in a backward
	// formula makes an fp32 result from half gradients, which
	// validate_outputs casts back (measured: repeat_kv's ExpandBackward0
	// summing into fp32, 8 MiB, then the 4 MiB bf16 gradient, in every
	// layer of Llama 4's pipeline stages; C++ stacks,
	// bench/results/2026-11-28-h200x2-pp-stacks; the thirty-sixth
	// session).
	bwdAutocast bool
}
