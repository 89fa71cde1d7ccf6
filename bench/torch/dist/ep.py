"""Expert parallelism for train.py (--ep N): memplan's one-rank program of
docs/moe.md §4 on transformers' fused experts (Qwen3MoeExperts and the other
modules with gate_up_proj / down_proj that transformers 5 runs through
grouped_mm_experts_forward).

Each rank keeps E/ep experts of every block (experts r·E/ep to (r+1)·E/ep − 1
on rank r of its EP group: ep consecutive ranks, with their own NCCL
communicator). A block's forward, as estimate/moe_ep.go simulates it:
sort the routed (token, slot) pairs by expert; gather their rows (the
dispatch send buffer) and routing weights; exchange the per-expert counts
(a small all-to-all); all_to_all_single the rows into a receive buffer
(torch.distributed.nn.functional: its backward is the reverse all-to-all
into a buffer of the input's size); regroup the received rows by local
expert; transformers' own grouped GEMMs, gate and masks over them
(_grouped_linear, _apply_gate); restore the received order; the combine
all-to-all; the routing weights, the inverse permutation and the sum over
the top-k slots, as grouped_mm_experts_forward ends.

DDP wraps the whole model, local experts included, as memplan's model does
(their gradients sit in DDP's buckets). Numerically that averages different
experts' gradients when dp = ep; the memory is what is measured. Under FSDP2
(train.py --mode fsdp) the experts are wrapped as torchtitan's apply_fsdp
does at torch 2.11: fully_shard(experts, mesh=efsdp) inside each block, the
efsdp dimension being the dp/ep ranks that hold the same experts (a
(dp/ep, ep) device mesh), then fully_shard(block) and the root over every
rank (shard_experts).

ROUTER "zero" zeroes every router's weights (and again after every optimizer
step): every token's probabilities tie, top-k takes the same experts for all
of them, and one rank of each EP group receives every pair of its group, the
worst case (--ep-skew ep). "random" keeps transformers' random init. Each
rank records the rows it received per block and step (recv_rows).
"""
import types

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnf


def experts_modules(model):
    return [m for m in model.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "num_experts")]


def routers(model):
    # Qwen's and Mixtral's TopKRouter, DeepSeek's TopkRouter.
    return [m for m in model.modules() if type(m).__name__.lower().endswith("topkrouter")]


def apply(model, ep, router, group=None):
    """Splits the experts of model over EP groups of ep consecutive ranks
    (group: this rank's, when a device mesh made it). Returns the list the
    forwards append (block, rows received, rows sent) to."""
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % ep == 0, "ep must divide the world size"
    for g in range(world // ep if group is None else 0):
        ranks = list(range(g * ep, (g + 1) * ep))
        pg = dist.new_group(ranks)
        if rank in ranks:
            group = pg
    er = rank % ep
    log = []
    for i, m in enumerate(experts_modules(model)):
        e = m.num_experts
        assert e % ep == 0, "ep must divide the experts"
        el = e // ep
        lo, hi = er * el, (er + 1) * el
        m.gate_up_proj = torch.nn.Parameter(m.gate_up_proj.data[lo:hi].clone())
        m.down_proj = torch.nn.Parameter(m.down_proj.data[lo:hi].clone())
        if getattr(m, "gate_up_proj_bias", None) is not None:
            # GPT-OSS's experts: their biases go with them.
            m.gate_up_proj_bias = torch.nn.Parameter(m.gate_up_proj_bias.data[lo:hi].clone())
            m.down_proj_bias = torch.nn.Parameter(m.down_proj_bias.data[lo:hi].clone())
        m.ep, m.ep_group, m.num_local, m.ep_log, m.block = ep, group, el, log, i
        m.forward = types.MethodType(ep_forward, m)
    if router == "zero":
        zero_routers(model)
    return log


def zero_routers(model):
    with torch.no_grad():
        for r in routers(model):
            r.weight.zero_()
            if getattr(r, "bias", None) is not None:
                r.bias.zero_()  # GPT-OSS's router: a tie needs its bias zero too


def ep_forward(self, hidden_states, top_k_index, top_k_weights):
    from transformers.integrations.moe import _grouped_linear
    dev = hidden_states.device
    k, h = top_k_index.size(-1), hidden_states.size(-1)
    e, el, ep, grp = self.num_experts, self.num_local, self.ep, self.ep_group
    sample_weights = top_k_weights.reshape(-1)
    expert_ids = top_k_index.reshape(-1)
    expert_ids_g, perm = torch.sort(expert_ids)
    pk = perm // k
    send = hidden_states[pk]
    del pk
    sample_weights_g = sample_weights[perm]
    # The per-expert counts first: each rank learns what every rank sends it.
    counts = torch.histc(expert_ids_g.int(), bins=e, min=0, max=e - 1).long()
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=grp)
    in_splits = counts.view(ep, el).sum(1).tolist()
    rc = recv_counts.view(ep, el)
    out_splits = rc.sum(1).tolist()
    r = sum(out_splits)
    self.ep_log.append((self.block, r, send.size(0)))
    recv = dnf.all_to_all_single(send.new_empty(r, h), send, out_splits, in_splits, group=grp)
    del send
    # Received rows come by source rank, each source's by local expert:
    # regroup them by local expert.
    local_ids = torch.repeat_interleave(torch.arange(el, device=dev).repeat(ep), rc.reshape(-1))
    lid_g, lp = torch.sort(local_ids, stable=True)
    del local_ids
    rows_g = recv[lp]
    del recv
    tokens_per_expert = torch.histc(lid_g.int(), bins=el, min=0, max=el - 1)
    offsets = torch.cumsum(tokens_per_expert, dim=0, dtype=torch.int32)
    sentinel_mask = (lid_g >= el).unsqueeze(-1)
    # Biased experts (GPT-OSS): each row's expert bias gathered before the
    # pre-mask, as grouped_mm_experts_forward does (selected_biases, held
    # until the down projection's replaces it).
    has_bias = getattr(self, "gate_up_proj_bias", None) is not None
    selected_biases = self.gate_up_proj_bias[lid_g] if has_bias else None
    rows_g.masked_fill_(sentinel_mask, 0.0)
    proj = _grouped_linear(rows_g, self.gate_up_proj, offsets, bias=selected_biases, is_transposed=self.is_transposed)
    proj = proj.masked_fill(sentinel_mask, 0.0)
    proj = self._apply_gate(proj)
    selected_biases = self.down_proj_bias[lid_g] if has_bias else None
    proj = _grouped_linear(proj, self.down_proj, offsets, bias=selected_biases, is_transposed=self.is_transposed)
    proj = proj.masked_fill(sentinel_mask, 0.0)
    del selected_biases
    del rows_g
    inv_lp = torch.empty_like(lp)
    inv_lp[lp] = torch.arange(lp.size(0), device=dev)
    back = proj[inv_lp]
    del proj
    comb = dnf.all_to_all_single(back.new_empty(sum(in_splits), h), back, in_splits, out_splits, group=grp)
    del back
    weighted = comb * sample_weights_g.unsqueeze(-1)
    del comb
    inv_perm = torch.empty_like(perm)
    inv_perm[perm] = torch.arange(perm.size(0), device=dev)
    weighted = weighted[inv_perm]
    out = weighted.view(-1, k, h).sum(dim=1)
    return out.to(hidden_states.dtype)


def mesh(ep):
    """The (efsdp, ep) device mesh of dp/ep × ep ranks: EP groups of ep
    consecutive ranks, and the ranks that hold the same experts."""
    from torch.distributed.device_mesh import init_device_mesh
    world = dist.get_world_size()
    return init_device_mesh("cuda", (world // ep, ep), mesh_dim_names=("efsdp", "ep"))


def shard_experts(block, edp_mesh, **kw):
    """fully_shard on the experts modules inside block, over edp_mesh."""
    from torch.distributed.fsdp import fully_shard
    for m in experts_modules(block):
        fully_shard(m, mesh=edp_mesh, **kw)
