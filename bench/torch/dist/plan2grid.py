#!/usr/bin/env python3
"""plan2grid.py PLAN.json SPEC [--seq S] [--top N]: the harness lines that
run the layouts of a `memplan plan ... --format json` answer, so that a
plan's answers can be measured as they stand (thirty-eighth session).

Prints, for each of the first N layouts (default 3), one comment with the
plan's name for it and its busiest rank's device total, then either the
harness line (train.py's grid format, "SPEC FLAGS", for data parallelism
alone; tp-run.sh's, "SCRIPT NPROC ARGS", for the rest) or a comment saying
why no script runs it as planned. A line's program may differ from the
plan's in what the scripts fix (tp.py, cp.py and pp.py train with AdamW
foreach and compute the loss outside autocast; pp.py has no loss
parallelism; cp.py's and tp.py's ZeRO 3 is FSDP2 with the root kept
unsharded, the plan's resharded; ZeRO 2 beside tensor parallelism, ZeRO 1
and 2 beside context parallelism, and a pipeline's ZeRO 3 have no script;
tp.py splits a transformers config on the meta device, --meta, and runs
DDP and ZeRO 1 over it since the thirty-ninth session):
predict.py
predicts each line as it runs, which is the accuracy figure; the plan's
own figure is set beside it.

Data-parallel lines run without the pause train.py makes by default
(--no-pause), as the plan predicts a loop that does not pause (its
--step-pause unset).
"""
import argparse, json, sys


def line(l, spec, seq, precision, world):
    """The harness line for layout l, or (None, why)."""
    ck = l["checkpointing"]["mode"]
    if ck not in ("none", "every-block"):
        return None, "checkpointing %s (the scripts take none or every-block)" % ck
    ckf = [] if ck == "none" else ["--checkpointing", ck]
    mb, acc = l["micro_batch"], l["grad_accum"]
    dp, tp, pp, cp, ep, zero = l["dp"], l["tp"], l["pp"], l["cp"], l["ep"], l["zero"]
    if ep > 1:
        return None, "expert parallelism (ep.py's grids take their own flags)"
    tpf = []
    if tp > 1:
        tpf = ["--tp", str(tp)] + ([] if l["sp"] else ["--no-sp"]) + (["--loss-parallel"] if l["loss_parallel"] else [])
    if pp > 1:
        if cp > 1:
            return None, "a pipeline with context parallelism (pp.py has none)"
        a = ["pp.py", str(world), spec, "--schedule", l["pp_schedule"], "--microbatches", str(acc), "--seq", str(seq),
             "--batch", str(mb)]
        if l["pp_schedule"] == "interleaved":
            a += ["--stages-per-rank", str(l["virtual_stages"])]
        if tp > 1:
            a += ["--tp", str(tp)] + ([] if l["sp"] else ["--no-sp"])  # pp.py has no loss parallelism
        if dp > 1:
            mode = {0: "ddp", 1: "zero1", 2: "fsdp"}.get(zero)
            if mode is None:
                return None, "ZeRO 3 under a pipeline (pp.py's FSDP is stage 2)"
            a += ["--dp", str(dp), "--mode", mode]
        return a + ckf, None
    if cp > 1:
        if zero in (1, 2) or (zero == 0 and dp > 1):
            return None, "context parallelism at ZeRO %d (cp.py shards with FSDP2 at stage 3 or not at all)" % zero
        a = ["cp.py", str(world), spec, "--seq", str(seq), "--batch", str(mb), "--grad-accum", str(acc)] + tpf
        if zero == 3:
            a += ["--fsdp"] + (["--dp", str(dp)] if dp > 1 else [])
        return a + ckf, None
    if tp > 1:
        if dp > 1 and zero == 2:
            return None, "tensor parallelism with data parallelism at ZeRO 2 (tp.py's FSDP2 is stage 3)"
        a = ["tp.py", str(world), spec, "--seq", str(seq), "--batch", str(mb), "--grad-accum", str(acc)]
        a += tpf + (["--dp", str(dp), "--mode", {0: "ddp", 1: "zero1", 3: "fsdp"}[zero]] if dp > 1 else [])
        if spec.endswith(".json"):
            a += ["--meta"]  # tp.py splits a transformers config on the meta device, as the plan assumes
        return a + ckf, None
    mode = {0: ["--mode", "ddp"], 1: ["--mode", "zero1"], 2: ["--mode", "fsdp", "--reshard", "false"],
            3: ["--mode", "fsdp"]}[zero]
    return [spec] + mode + ["--batch", str(mb), "--seq", str(seq), "--precision", precision,
                            "--grad-accum", str(acc), "--no-pause"] + ckf, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("spec")
    ap.add_argument("--precision", default="amp-bf16", help="train.py's --precision (the plan's)")
    ap.add_argument("--top", type=int, default=3)
    a = ap.parse_args()
    with open(a.plan) as f:
        p = json.load(f)
    for e in p["layouts"][: a.top]:
        l = e["layout"]
        world = l["dp"] * l["tp"] * l["pp"] * l["cp"]
        print("# plan: %s, %s GPUs, busiest rank %.2f GiB device total (%s, global batch %d, seq %d)" % (
            e["name"], e["gpus"], e["memory"]["device_total_bytes"] / 2**30, p["model"], p["global_batch"], p["seq"]))
        args, why = line(l, a.spec, p["seq"], a.precision, world)
        print(" ".join(args) if args else "# not run: " + why)


if __name__ == "__main__":
    sys.exit(main())
