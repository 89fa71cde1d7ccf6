"""Tensor parallelism, with or without sequence parallelism, of a transformers
causal LM run through its own forward (GPT-OSS, GLM-4 MoE, DeepSeek-V2 and
V3, Llama 4, Gemma 2 and 3, Granite, SmolLM3, StarCoder2, Cohere, Phi-3, OLMo,
OLMo 2 and 3: memplan's model.Model.RunsTransformersForward families), for tp.py
and pp.py. A tied head and embedding are tied again after the split (tp.py),
both split by vocabulary (Shard(0)); pp.HFStage applies a CausalLM's logit
softcap (Gemma 2) and scaling (Granite, Cohere) after the head.

The plan is torchtitan's apply_tp for Llama's block. Without sequence
parallelism the residual stream stays whole on every rank, as transformers'
own tp_plan leaves it. With it (sp), the residual stream is split along the
sequence as torchtitan splits it, but kept as DTensors (Shard(1)) rather
than local tensors: transformers' forward makes its rotary tables and masks
from the length of the hidden states it is handed, which a DTensor gives
whole (its global shape). So the embedding's output, the output
projections' and the blocks' are DTensors (use_local_output=False), the
norms are SequenceParallel, and the attention and dense MLP take their input
gathered to Replicate and local (as torchtitan's PrepareModuleInput does);
the head's input is gathered as ColwiseParallel(input_layouts=Shard(1))
gathers it:

- the embedding split by vocabulary, its output all-reduced
  (RowwiseParallel, input and output Replicate), and the head split by
  vocabulary with the logits gathered, or kept sharded for loss parallelism
  (ColwiseParallel);
- q, k and v projections by columns (their biases with them), the output
  projection by rows (its bias whole on every rank); GPT-OSS's attention
  sinks cut to the rank's heads; DeepSeek's latent attention as torchtitan's
  DeepSeek-V3 plan splits it: the per-head up-projections (q_proj or q_b_proj,
  kv_b_proj) by columns, the down-projections to the latents (q_a_proj,
  kv_a_proj_with_mqa) and their norms replicated, o_proj by rows
  (transformers' forward views every projection with -1 heads);
- a dense MLP's gate and up by columns (Phi-3's fused gate_up_proj too), its
  down by rows; StarCoder2's c_fc by columns (its bias with them), c_proj by
  rows (its bias whole on every rank); Phi-3's fused qkv_proj by columns,
  its attention given the rank's head counts to slice it (_local_heads);
- OLMo 2's (and 3's) query and key norms over each whole projection as
  OLMo-core's plan runs them: q_proj and k_proj by columns, their outputs
  exchanged for the sequence shard of the whole width (output_layouts=Shard(1),
  an all-to-all), the norms SequenceParallel there (their weights replicated),
  the result exchanged back to the rank's columns (_to_columns); the norms
  after each branch SequenceParallel with sp, as every norm is;
- Cohere's parallel block: the one norm's output gathered for the attention
  and again for the MLP (each module's own pre-hook), both outputs reduced;
- a mixture of experts as torchtitan splits experts without expert
  parallelism (common.TPMoE for the Llama harness): the router replicated and
  run on every token, each expert's gate/up columns and down rows cut to the
  rank's share (gate and up halves each, or GPT-OSS's interleaved pairs;
  Llama 4's dense experts, [E, h, 2I] and [E, I, h], along their last and
  middle dimensions), the shared experts (Llama 4's shared_expert) by columns
  and rows, the block's input taken as replicated
  (or gathered along the sequence, sp) and its partial output all-reduced
  (or reduce-scattered along the sequence, sp: ExpertsTP). The parameters the rank
  holds replicated but whose gradients are partial sums (the routers, the
  attention's plain parameters: q/k norms, the latent projections and their
  norms) are all-reduced after the backward (reduce_partial_grads), as DTensor
  reduces a Replicate parameter's gradient.

The model is built on the meta device with all its layers (pp.HFStage,
one stage), split there, then materialised and drawn on the GPU, as
torchtitan does (memplan's --fsdp-init meta).
"""
import torch
from torch import nn


def build(path, checkpointing):
    """The model built on meta (pp.HFStage over every layer) and its config;
    the embedding without a padding index (DTensor's sharded embedding takes
    none; no memory of its own)."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, ".."))
    import measure  # bench/torch/measure.py: the config read as measure.py reads it
    import pp
    d = pp.hf_dims(path, None)
    with torch.device("meta"):
        hf, _ = measure.build_hf(path, d["attn"])
    if checkpointing:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # The config class's default ties Gemma 2's head where the file is silent.
    d["tied"] = bool(getattr(hf.config, "tie_word_embeddings", False))
    hf.model.embed_tokens.padding_idx = None
    n = len(hf.model.layers)
    return pp.HFStage(hf, range(n), True, True), hf.config, d


def apply(model, mesh, lp, sp=False, ep=False):
    """The module docstring's plan on model (a pp.HFStage: of every layer, or
    one pipeline stage's, whose embedding, head and other stages' layers are
    absent). With ep (and sp) the mixtures of experts are left whole for
    ep.apply to split their experts over ranks, each tp rank routing its own
    sequence shard (SeqShardMoE)."""
    assert sp or not ep, "expert parallelism beside tensor parallelism needs sequence parallelism"
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    base = model.model
    seq = Shard(1) if sp else Replicate()
    if base.embed_tokens is not None:
        parallelize_module(base, mesh, {"embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq,
                                                                         use_local_output=not sp)})
    if sp and not isinstance(base.norm, nn.Identity):  # Identity before a pipeline's last stage
        parallelize_module(base, mesh, {"norm": SequenceParallel()})
    if model.lm_head is not None:
        parallelize_module(model, mesh, {"lm_head": ColwiseParallel(input_layouts=seq,
                                                                    output_layouts=Shard(-1) if lp else Replicate(),
                                                                    use_local_output=not lp)})
    t, r = mesh.size(), mesh.get_local_rank()
    for layer in base.layers:
        if type(layer).__name__ == "Skip":  # pp.Skip (pp.py runs as __main__: not the imported class)
            continue
        plan = {"self_attn." + n: ColwiseParallel()
                for n in ("q_proj", "k_proj", "v_proj", "q_b_proj", "kv_b_proj", "qkv_proj")
                if getattr(layer.self_attn, n, None) is not None}
        plan["self_attn.o_proj"] = RowwiseParallel(output_layouts=seq, use_local_output=not sp)
        if getattr(layer.self_attn, "qkv_proj", None) is not None:
            _local_heads(layer.self_attn, t)
        whole = _whole_qk_norms(layer.self_attn)
        if whole:
            # OLMo 2's norms over each whole projection, as OLMo-core's
            # plan runs them: the projection's column shard exchanged for
            # the sequence shard of the whole width (Shard(2) → Shard(1),
            # an all-to-all), normalised there (SequenceParallel, the
            # weight replicated), and exchanged back (_to_columns).
            for n in ("q", "k"):
                plan["self_attn.%s_proj" % n] = ColwiseParallel(output_layouts=Shard(1), use_local_output=False)
                plan["self_attn.%s_norm" % n] = SequenceParallel()
        # The block's feed-forward module: mlp, or Llama 4's feed_forward.
        ff = "mlp" if hasattr(layer, "mlp") else "feed_forward"
        mlp = getattr(layer, ff)
        moe = hasattr(mlp, "experts")
        down = RowwiseParallel(output_layouts=seq, use_local_output=not sp)
        if moe and ep:
            setattr(layer, ff, SeqShardMoE(mlp, mesh))
        elif moe:
            setattr(layer, ff, ExpertsTP(mlp, mesh, sp))
        elif hasattr(mlp, "c_fc"):  # StarCoder2's two-layer MLP
            plan.update({ff + ".c_fc": ColwiseParallel(), ff + ".c_proj": down})
        elif hasattr(mlp, "gate_up_proj"):  # Phi-3's fused gate and up
            plan.update({ff + ".gate_up_proj": ColwiseParallel(), ff + ".down_proj": down})
        else:
            plan.update({ff + "." + n: ColwiseParallel() for n in ("gate_proj", "up_proj")})
            plan[ff + ".down_proj"] = down
        if sp:
            # Every norm of the block works on the residual stream or a
            # branch's output (Gemma 3's four: input, post-attention,
            # pre- and post-feedforward), so every one is SequenceParallel.
            plan.update({n: SequenceParallel() for n, _ in layer.named_children() if n.endswith("layernorm")})
        parallelize_module(layer, mesh, plan)
        if whole:
            layer.self_attn.q_norm.register_forward_hook(_to_columns)
            layer.self_attn.k_norm.register_forward_hook(_to_columns)
        if sp:
            layer.self_attn.register_forward_pre_hook(_gather_input, with_kwargs=True)
            if not moe:
                getattr(layer, ff).register_forward_pre_hook(_gather_input, with_kwargs=True)
        attn = layer.self_attn
        if getattr(attn, "sinks", None) is not None:
            h = attn.sinks.shape[0] // t
            attn.sinks = nn.Parameter(attn.sinks.detach()[r * h:(r + 1) * h].clone())


def _local_heads(attn, t):
    """Phi-3's attention slices its fused qkv_proj output at
    config.num_attention_heads · head_dim and num_key_value_heads ·
    head_dim: given the rank's head counts (a config of its own), the
    column-split projection's t-th share slices into the rank's q, k and v
    (the weights are drawn at random, so which rows hold which head does
    not matter to memory). The same holds for gate_up_proj's chunk(2)."""
    import copy
    attn.config = copy.deepcopy(attn.config)
    attn.config.num_attention_heads //= t
    attn.num_key_value_heads //= t


def _whole_qk_norms(attn):
    """Whether attn normalises each whole query and key projection (OLMo 2's
    q_norm over num_heads · head_dim), not each head."""
    q_norm, q_proj = getattr(attn, "q_norm", None), getattr(attn, "q_proj", None)
    return (q_norm is not None and q_proj is not None and getattr(q_norm, "weight", None) is not None
            and q_norm.weight.shape[0] == q_proj.weight.shape[0])


def _to_columns(module, args, output):
    """OLMo-core's SequenceParallel(output_layouts=Shard(2),
    use_local_output=True) on a whole-width norm: its sequence-sharded output
    exchanged back to the rank's columns, the rank's heads, local."""
    from torch.distributed.tensor import Shard
    return output.redistribute(placements=(Shard(2),)).to_local()


def _gather_input(module, args, kwargs):
    """torchtitan's PrepareModuleInput(input_layouts=Shard(1),
    desired_input_layouts=Replicate()) for a module called with its hidden
    states by position or by name (transformers' blocks call the attention
    with hidden_states=): every DTensor argument gathered along the sequence
    and handed over as a local tensor."""
    from torch.distributed.tensor import DTensor, Replicate

    def local(x):
        return x.redistribute(placements=(Replicate(),)).to_local() if isinstance(x, DTensor) else x
    return tuple(local(a) for a in args), {k: local(v) for k, v in kwargs.items()}


def _rows(lin, r, c):
    lin.weight = nn.Parameter(lin.weight.detach()[r * c:(r + 1) * c].clone())


def _cols(lin, r, c):
    lin.weight = nn.Parameter(lin.weight.detach()[:, r * c:(r + 1) * c].clone())


class ExpertsTP(nn.Module):
    """A transformers mixture-of-experts block split by columns over the tp
    ranks (the module docstring). Returns what the block returns (GPT-OSS's
    a tuple with the router's scores)."""

    def __init__(self, moe, mesh, sp=False):
        super().__init__()
        self.inner, self.mesh, self.sp = moe, mesh, sp
        t, r = mesh.size(), mesh.get_local_rank()
        ex = moe.experts
        with torch.no_grad():
            if hasattr(ex, "gate_up_proj_bias"):
                # GPT-OSS: gate_up [E, h, 2I] with gate and up interleaved
                # (pairs stay together in a contiguous cut), down [E, I, h],
                # the down bias whole.
                c2 = ex.gate_up_proj.shape[2] // t
                ex.gate_up_proj = nn.Parameter(ex.gate_up_proj[:, :, r * c2:(r + 1) * c2].clone())
                ex.gate_up_proj_bias = nn.Parameter(ex.gate_up_proj_bias[:, r * c2:(r + 1) * c2].clone())
                c = c2 // 2
                ex.down_proj = nn.Parameter(ex.down_proj[:, r * c:(r + 1) * c].clone())
            elif type(ex).__name__ == "Llama4TextExperts":
                # Llama 4: gate_up [E, h, 2I] (the gate's I columns, then
                # the up's: chunk(2, dim=-1)), down [E, I, h]; no biases.
                gu = ex.gate_up_proj
                i = gu.shape[2] // 2
                assert i % t == 0, f"the experts' intermediate size {i} does not split over {t} ranks"
                c = i // t
                ex.gate_up_proj = nn.Parameter(torch.cat((gu[:, :, r * c:(r + 1) * c],
                                                          gu[:, :, i + r * c:i + (r + 1) * c]), dim=2))
                del gu
                ex.down_proj = nn.Parameter(ex.down_proj[:, r * c:(r + 1) * c].clone())
            else:
                # [E, 2I, h]: the gate's I rows, then the up's; down [E, h, I].
                gu = ex.gate_up_proj
                i = gu.shape[1] // 2
                assert i % t == 0, f"the experts' intermediate size {i} does not split over {t} ranks"
                c = i // t
                ex.gate_up_proj = nn.Parameter(torch.cat((gu[:, r * c:(r + 1) * c], gu[:, i + r * c:i + (r + 1) * c]),
                                                         dim=1))
                del gu
                ex.down_proj = nn.Parameter(ex.down_proj[:, :, r * c:(r + 1) * c].clone())
            sh = getattr(moe, "shared_experts", None) or getattr(moe, "shared_expert", None)
            if sh is not None:
                c = sh.gate_proj.weight.shape[0] // t
                _rows(sh.gate_proj, r, c)
                _rows(sh.up_proj, r, c)
                _cols(sh.down_proj, r, c)

    def forward(self, x):
        # As common.TPMoE: under sp the norm before the block hands it a
        # DTensor sharded along the sequence, gathered here; the output is
        # reduce-scattered back to a DTensor (the residual stream's form).
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
        if self.sp:
            xd = x.redistribute(placements=(Replicate(),))
        else:
            xd = DTensor.from_local(x, self.mesh, (Replicate(),), run_check=False)
        xl = xd.to_local(grad_placements=(Partial(),))
        out = self.inner(xl)
        y = out[0] if isinstance(out, tuple) else out
        # Llama4TextMoe returns its tokens flattened ([b·s, h]), which the
        # decoder layer views as the residual's shape: viewed back here, so
        # that Shard(1) is the sequence (on the flattened rows it would cut
        # the hidden width, which the residual's addition then exchanges
        # all-to-all).
        if y.dim() != xl.dim():
            y = y.view(xl.shape)
        y = DTensor.from_local(y, self.mesh, (Partial(),), run_check=False).redistribute(
            placements=(Shard(1),) if self.sp else (Replicate(),))
        if not self.sp:
            y = y.to_local()
        return (y,) + tuple(out[1:]) if isinstance(out, tuple) else y


class SeqShardMoE(nn.Module):
    """A transformers mixture-of-experts block beside tensor and sequence
    parallelism with its experts split over ranks (ep.py), as torchtitan's
    plan with EP keeps it (common.SeqShardMoE for the Llama harness): the
    norm before it hands it the residual stream's DTensor, sharded along the
    sequence; the block routes the rank's shard (its local tensor), its
    router and shared experts whole on every tp rank, and its output is
    wrapped back as a DTensor sharded along the sequence."""

    def __init__(self, moe, mesh):
        super().__init__()
        self.inner, self.mesh = moe, mesh

    def forward(self, x):
        from torch.distributed.tensor import DTensor, Shard
        out = self.inner(x.to_local())
        y = out[0] if isinstance(out, tuple) else out
        y = DTensor.from_local(y, self.mesh, (Shard(1),), run_check=False)
        return (y,) + tuple(out[1:]) if isinstance(out, tuple) else y


def reduce_partial_grads(model, group, only=None):
    """All-reduces, in place, the gradients of the replicated parameters that
    only the rank's heads, experts or tokens fed: the routers' (inside
    ExpertsTP; with the shared experts' inside SeqShardMoE) and
    the attention's plain ones but for the sinks (GLM-4 MoE's q/k norms,
    DeepSeek's latent projections and norms). Under FSDP the gradient is the
    rank's dp shard. only, when given, is the set of the parameters' ids to
    consider (partial_params before DDP's _pre_dp_module_transform made
    every parameter a plain local tensor)."""
    import torch.distributed as dist
    for p in partial_params(model, only):
        if p.grad is not None:
            g = p.grad
            dist.all_reduce(g.to_local() if hasattr(g, "to_local") else g, group=group)


def partial_params(model, only=None):
    """The parameters reduce_partial_grads all-reduces (their ids in only,
    when given)."""
    from torch.distributed.tensor import DTensor
    out = []
    for m in model.modules():
        ps = []
        if isinstance(m, ExpertsTP):
            router = getattr(m.inner, "gate", None) or getattr(m.inner, "router", None)
            ps = list(router.parameters())
        elif isinstance(m, SeqShardMoE):
            # Each tp rank routed its own tokens: the router's and the
            # shared experts' gradients are partial sums; the routed
            # experts (ep.py's, split over ranks) are the rank's own.
            experts = set(map(id, m.inner.experts.parameters()))
            ps = [p for p in m.inner.parameters() if id(p) not in experts]
        elif hasattr(m, "o_proj") and hasattr(m, "layer_idx"):  # an attention module
            ps = [p for n, p in m.named_parameters() if n != "sinks" and not isinstance(p, DTensor)]
        out += [p for p in ps if only is None or id(p) in only]
    return out


def materialise(model, config):
    """to_empty on the GPU, the weights drawn, the buffers zeroed (GLM's
    router correction bias) and the rotary tables made again there (a
    second one, Gemma 3's local table, only if its class takes the config
    alone; its values do not change memory), Gemma 3's embedding scale
    set again."""
    rots = [(n, m) for n, m in model.model.named_children() if type(m).__name__.endswith("RotaryEmbedding")]
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
        for b in model.buffers():
            b.zero_()
        emb = model.model.embed_tokens
        if emb is not None and getattr(emb, "embed_scale", None) is not None:
            emb.embed_scale.fill_(config.hidden_size ** 0.5)
    with torch.device("cuda"):
        for n, m in rots:
            try:
                setattr(model.model, n, type(m)(config=config))
            except TypeError:
                pass
    return model.train()
