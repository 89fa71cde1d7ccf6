"""peft_targets.py: which parameters peft's LoRA adapts in transformers' mixtures
of experts, for each target choice lora.py offers (all-linear, its attn and mlp
names), on tiny models built on the CPU. Prints one JSON line per (model type,
targets): the adapters' parameter count, the adapted module and parameter names
(layer numbers folded to *), and peft's rank_pattern after its conversion of
transformers v4 names to v5's fused experts (peft/utils/transformers_weight_conversion.py).

    python3 bench/torch/peft_targets.py > OUT.jsonl
"""
import json
import re

import peft
import torch
import transformers

import lora  # FAMILIES, FAMILY_OF

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=128)
MLA = dict(kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, head_dim=8,
           n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
           first_k_dense_replace=1, n_group=1, topk_group=1)
CONFIGS = {
    "deepseek_v2": dict(MLA),
    "deepseek_v3": dict(MLA),
    "qwen2_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48),
    "qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16),
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
    "gpt_oss": dict(num_local_experts=8, num_experts_per_tok=2, head_dim=16, layer_types=["sliding_attention", "full_attention"]),
    # Llama 4's router is an nn.Linear subclass; its experts fused parameters.
    "llama4_text": dict(num_local_experts=8, num_experts_per_tok=1, head_dim=16, intermediate_size_mlp=128),
}


def fold(name):
    return re.sub(r"\.\d+\.", ".*.", name)


def main():
    for mt, extra in CONFIGS.items():
        cfg = transformers.AutoConfig.for_model(mt, **BASE, **extra)
        fam = lora.FAMILIES.get(lora.FAMILY_OF.get(mt, ""), ([], []))
        for name, targets in (("all", "all-linear"), ("attn", fam[0]), ("mlp", fam[1])):
            rec = {"model_type": mt, "targets": name, "target_modules": targets}
            if not targets:
                continue
            try:
                torch.manual_seed(0)
                model = transformers.AutoModelForCausalLM.from_config(cfg)
                conf = peft.LoraConfig(r=16, lora_alpha=16, target_modules=targets)
                pm = peft.get_peft_model(model, conf)
                trainable = sum(p.numel() for p in pm.parameters() if p.requires_grad)
                names = sorted({fold(n) for n, p in pm.named_parameters() if p.requires_grad})
                c = pm.peft_config["default"]
                rec.update(trainable=trainable, adapters=names,
                           target_modules_after=sorted(c.target_modules) if isinstance(c.target_modules, (set, list)) else c.target_modules,
                           target_parameters=sorted(c.target_parameters or []), rank_pattern=c.rank_pattern,
                           params={fold(n): list(p.shape) for n, p in model.named_parameters() if "experts" in n or n.endswith("gate.weight")})
            except Exception as e:  # noqa: BLE001 (the record says what failed)
                rec["error"] = "%s: %s" % (type(e).__name__, e)
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
