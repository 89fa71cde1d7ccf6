#!/usr/bin/env python3
"""predict.py GRID [MEMPLAN]: memplan's per-GPU predictions for every line of
a dist grid, with the memplan command each line maps to and --device
$DEVICE (default h200-141gb). Prints one block per line: the grid line, the command, and peak
allocated, peak reserved and device total per GPU (GiB and bytes), or the
reason memplan gives for not predicting it.

Two grid formats: train.py's (heldout.txt: SPEC --mode ... lines, mapped as
train.py's memplan_command does) and tp-run.sh's (tp-heldout.txt: SCRIPT
NPROC ARGS lines, mapped as common.memplan_cmd does, with --optimizer adamw
because tp.py, pp.py and cp.py train with AdamW foreach)."""
import json, os, shlex, subprocess, sys

grid, exe = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "memplan")
# train.py's grids run on every GPU of the machine (run.sh's NGPU): the world
# size, unless a line starts with W=N (grid-ep.txt, run by ep-run.sh).
WORLD = os.environ.get("NGPU", "2")
G = 1 << 30


def options(args):
    opts, i = {}, 0
    while i < len(args):
        k = args[i].lstrip("-")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            opts[k], i = args[i + 1], i + 2
        else:
            opts[k], i = True, i + 1
    return opts


def train_cmd(args, world):
    spec, opts = args[0], options(args[1:])
    mode = opts["mode"]
    zero = {"ddp": 0, "ddp-view": 0, "zero1": 1}.get(mode)
    r = opts.get("reshard", "true")
    to = int(r) if r.isdigit() else 0
    if zero is None:
        zero = 2 if r == "false" or to == 1 else 3  # FSDP2 turns 1 into False, the world into True
    src = ["--hf", spec] if spec.endswith(".json") else [spec]
    cmd = ["estimate"] + src + ["--batch", opts["batch"], "--seq", opts["seq"], "--precision", opts["precision"],
                                "--dp", world, "--zero", str(zero)]
    rep = int(opts.get("replicate", "1"))
    if mode == "fsdp" and 1 < to < int(world) // rep:
        cmd += ["--reshard-after-forward", str(to)]
    if mode == "fsdp" and rep > 1:
        cmd += ["--dp-replicate", str(rep)]  # train.py --replicate: HSDP
    if int(opts.get("ep", "1")) > 1:
        # The tied router (--router zero) sends one rank all its group's
        # pairs: the skew is ep. Random routing: memplan's default allowance.
        cmd += ["--ep", opts["ep"]] + (["--ep-skew", opts["ep"]] if opts.get("router") == "zero" else [])
    if int(opts.get("grad-accum", "1")) > 1:
        cmd += ["--grad-accum", opts["grad-accum"]]
    if "checkpointing" in opts:
        # As given, none too: a spec's own checkpointing would stand otherwise
        # (train.py applies the line's over the spec's).
        cmd += ["--checkpointing", opts["checkpointing"]]
    if opts.get("attention", "sdpa") != "sdpa":
        cmd += ["--attention", opts["attention"]]
    if mode == "ddp-view":
        cmd += ["--bucket-view"]
    if "meta-init" in opts:
        cmd += ["--fsdp-init", "meta"]
    elif zero >= 2 and "keep-cache" not in opts:
        cmd += ["--empty-cache-after-wrap"]  # train.py empties the cache after wrapping unless --keep-cache
    if opts.get("fsdp-experts", "dim0") != "dim0":
        cmd += ["--fsdp-experts", opts["fsdp-experts"]]
    if opts.get("lora"):
        cmd += ["--lora", opts["lora"], "--lora-targets", opts.get("targets", "all"), "--lora-alpha", opts["lora"]]
        if opts.get("lora-dropout"):
            cmd += ["--lora-dropout", opts["lora-dropout"]]
        if opts.get("adapter-dtype", "fp32") != "fp32":
            cmd += ["--lora-adapter-dtype", opts["adapter-dtype"]]
    # train.py pauses after every step (nvidia-smi, synchronize, sleep
    # 0.2 s) unless --no-pause (docs/multigpu.md, "DDP's bucket rebuild race").
    if "no-pause" not in opts:
        cmd += ["--step-pause", "0.2"]
    if opts.get("alloc-conf"):
        cmd += ["--alloc-conf", opts["alloc-conf"]]
    return cmd


def script_cmd(script, nproc, args):
    spec, opts = args[0], options(args[1:])
    src = ["--hf", spec] if spec.endswith(".json") else [spec]
    cmd = ["estimate"] + src + ["--batch", opts.get("batch", "1"), "--seq", opts["seq"], "--precision", "amp-bf16",
           "--optimizer", "adamw"]
    if script == "tp.py":
        cmd += ["--tp", opts["tp"]]
        if "no-sp" not in opts:
            cmd += ["--sp"]
        if "loss-parallel" in opts:
            cmd += ["--loss-parallel"]
        if int(opts.get("dp", "1")) > 1 and opts.get("mode", "fsdp") != "fsdp":
            # DDP over the tensor-parallel shards, with AdamW or ZeroRedundancyOptimizer.
            cmd += ["--dp", opts["dp"], "--zero", {"ddp": "0", "zero1": "1"}[opts["mode"]]]
        elif int(opts.get("dp", "1")) > 1:
            # fully_shard(model) without reshard_after_forward: the root stays unsharded.
            cmd += ["--dp", opts["dp"], "--zero", "3", "--fsdp-root", "keep"]
            if 1 < int(opts.get("reshard", "0")) < int(opts["dp"]):
                cmd += ["--reshard-after-forward", opts["reshard"]]  # the blocks' (tp.py --reshard)
        # tp.py builds the model whole on the GPU first, or with --meta on the meta device.
        cmd += ["--fsdp-init", "meta" if "meta" in opts else "gpu"]
    elif script == "cp.py":
        # cp.py's mapping (its memplan_cmd): cp is what dp × tp leave.
        tp, dp = int(opts.get("tp", "1")), int(opts.get("dp", "1"))
        cmd += ["--cp", str(int(nproc) // (tp * dp))]
        if tp > 1:
            cmd += ["--tp", str(tp)] + ([] if "no-sp" in opts else ["--sp"])
            if "loss-parallel" in opts:
                cmd += ["--loss-parallel"]
        if "fsdp" in opts:
            cmd += (["--dp", str(dp)] if dp > 1 else []) + ["--zero", "3", "--fsdp-root", "keep"]
        if spec.endswith(".json") and ("fsdp" in opts or tp > 1):
            cmd += ["--fsdp-init", "meta"]  # a transformers config: split on meta, then materialised
        elif "fsdp" in opts or tp > 1:
            cmd += ["--fsdp-init", "gpu"]  # cp.py builds the model whole on the GPU first
    elif script == "pp.py":
        tp, dp = int(opts.get("tp", "1")), int(opts.get("dp", "1"))
        cmd += ["--pp", str(int(nproc) // (tp * dp)), "--pp-schedule", opts["schedule"],
                "--grad-accum", opts["microbatches"]]
        if opts["schedule"] == "interleaved":
            cmd += ["--pp-virtual", opts.get("stages-per-rank", opts.get("virtual", "2"))]
        if tp > 1:
            cmd += ["--tp", str(tp)] + ([] if "no-sp" in opts else ["--sp"])
        if dp > 1:
            # pp.py's ZERO: FSDP under a pipeline is memplan's stage 2.
            cmd += ["--dp", str(dp), "--zero", str({"ddp": 0, "zero1": 1, "fsdp": 2}[opts.get("mode", "ddp")])]
        if "step-pause" in opts:
            cmd += ["--step-pause", opts["step-pause"]]
    if script in ("pp.py", "cp.py", "tp.py") and int(opts.get("ep", "1")) > 1:
        # pp.py's, cp.py's and tp.py's default router (zero) sends one rank all its group's pairs.
        cmd += ["--ep", opts["ep"]] + (["--ep-skew", opts["ep"]] if opts.get("router", "zero") == "zero" else [])
    if script in ("tp.py", "cp.py") and int(opts.get("grad-accum", "1")) > 1:
        cmd += ["--grad-accum", opts["grad-accum"]]
    if script in ("tp.py", "cp.py"):
        # Their loops compute the loss after leaving autocast.
        cmd += ["--loss-outside-autocast"]
    # The run's length (common.py's --steps, 3 by default): a run that
    # leaks is predicted at its last step (memplan's --steps).
    cmd += ["--steps", opts.get("steps", "3")]
    # Always: a spec's own checkpointing (llama-3-8b.yaml: every-block) is
    # not what the script runs without --checkpointing.
    cmd += ["--checkpointing", opts.get("checkpointing", "none")]
    return cmd


for line in open(grid):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    args = shlex.split(line)
    world, fake = WORLD, False
    while args[0][:2] in ("W=", "T=", "F="):
        if args[0].startswith("W="):  # grid-ep.txt, run.sh's fake lines: the line's own world size
            world = args[0][2:]
        # F=R: rank R alone on a fake process group (tp-run.sh, run.sh);
        # T=S: run.sh's timeout.
        fake = fake or args[0].startswith("F=")
        args = args[1:]
    cmd = script_cmd(args[0], args[1], args[2:]) if args[0].endswith(".py") else train_cmd(args, world)
    cmd += ["--device", os.environ.get("DEVICE", "h200-141gb")]
    print(line)
    print("  memplan " + " ".join(cmd))
    run = subprocess.run([exe] + cmd + ["--format", "json"], capture_output=True, text=True)
    if run.returncode != 0:
        print("  not predicted: " + run.stderr.strip())
        print()
        continue
    p = json.loads(run.stdout)
    if fake:
        # A fake process group creates no NCCL communicator: the device
        # total it measures holds none of NCCL's memory.
        nccl = sum(o["bytes"] for o in p.get("overhead", []) if o["name"] == "NCCL communicators")
        p["device_total_bytes"] -= nccl
        print("  (a fake process group: the device figure leaves out NCCL's %d B)" % nccl)
    for k, name in (("peak_allocated_bytes", "peak allocated"), ("peak_reserved_bytes", "peak reserved"),
                    ("device_total_bytes", "device total")):
        print("  %-15s %7.2f GiB  %d B" % (name, p[k] / G, p[k]))
    # Pipelines: every kind of stage (one per rank with two ranks; under the
    # interleaved schedule the kinds are ranks), pipeline rank r = kind r.
    for kd in (p.get("pipeline") or {}).get("kinds", []):
        print("  %s %d (%d blocks): allocated %d B, reserved %d B, device %d B" % (
            kd["kind"], kd["stage"], kd["blocks"], kd["peak_allocated_bytes"], kd["peak_reserved_bytes"],
            kd["device_total_bytes"]))
    # Skewed expert parallelism: the receiving and the sending rank.
    for kd in (p.get("experts") or {}).get("kinds", []):
        print("  %s rank: allocated %d B, reserved %d B, device %d B" % (
            kd["kind"], kd["peak_allocated_bytes"], kd["peak_reserved_bytes"], kd["device_total_bytes"]))
    print()
