#!/usr/bin/env python3
"""compare.py RESULTS.jsonl [MEMPLAN]: the busiest rank's measured peaks
(allocated, reserved, device total) against memplan's prediction for the
command each result line records, run with --device h200-141gb.

Reads both record formats: train.py's data-parallel lines (ddp-view lines
with --bucket-view) and common.report's lines from tp.py, pp.py and cp.py
(every rank's peak_allocated, peak_reserved and device_used, per step and
at the end; those scripts train with AdamW foreach, so --optimizer adamw is
added). Prints a markdown table; errors are (predicted - measured) /
measured, per metric against the largest of the ranks; lines memplan
refuses are listed with its message. The last column is the memory outside
the caching allocator in MiB: measured, every rank's device in use less
its peak reserved (the largest), and memplan's device total less peak
reserved (context, kernel modules, NCCL; the largest over its kinds)."""
import json, subprocess, sys

res, exe = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "memplan")
G = 1 << 30


def measured(d):
    """Per metric, the largest over the ranks (and over the steps)."""
    ranks = d["ranks"]
    if "peak_allocated_bytes" in ranks[0]:  # train.py
        keys = ("peak_allocated_bytes", "peak_reserved_bytes", "device_total_used_bytes")
        return [max(r[k] for r in ranks) for k in keys], max(r["peak_allocated_bytes"] for r in ranks) - min(
            r["peak_allocated_bytes"] for r in ranks)
    out = []
    for k in ("peak_allocated", "peak_reserved", "device_used"):
        out.append(max(max([r[k]] + [s[k] for s in r.get("steps", [])]) for r in ranks))
    al = [r["peak_allocated"] for r in ranks]
    return out, max(al) - min(al)


def command(d):
    cmd = d["memplan"].split()[2:]
    if d.get("mode") == "ddp-view" and "--bucket-view" not in cmd:
        cmd.append("--bucket-view")  # records made before memplan had the flag
    if "config" in d and "--optimizer" not in cmd:
        cmd += ["--optimizer", "adamw"]  # tp.py, pp.py, cp.py: AdamW foreach
    c = d.get("config", {})
    if c.get("script") in ("tp", "cp") and (c.get("tp", 1) > 1 or c.get("fsdp")) and "--fsdp-init" not in cmd:
        # tp.py and cp.py build the model whole on the GPU before splitting
        # it (records made before the flag said so under tensor parallelism).
        cmd += ["--fsdp-init", "gpu"]
    if ("config" not in d and d.get("mode") == "fsdp" and not d.get("keep_cache") and "--fsdp-init" not in cmd
            and "--empty-cache-after-wrap" not in cmd):
        # train.py empties the cache after wrapping (records made before
        # memplan had the flag).
        cmd.append("--empty-cache-after-wrap")
    if "config" not in d and "--step-pause" not in cmd and d.get("step_pause", 0.2) > 0:
        # train.py runs nvidia-smi after every step (unless --no-pause, whose
        # records say step_pause 0): DDP's rebuild frees its old flat bucket
        # (docs/multigpu.md, "DDP's bucket rebuild race").
        cmd += ["--step-pause", "0.2"]
    return cmd + ["--device", "h200-141gb", "--format", "json"]


print("| configuration | alloc meas | alloc err | reserved meas | res err | device meas | dev err | rank spread (alloc) | outside MiB meas / memplan |")
print("|---|---|---|---|---|---|---|---|---|")
refused = []
for line in open(res):
    d = json.loads(line)
    if not d.get("ok"):
        continue
    lab = d.get("label") or d["memplan"]
    lab = lab.replace("specs/", "").replace(".yaml", "").replace("--precision ", "").replace("--mode ", "")
    run = subprocess.run([exe, "estimate"] + command(d), capture_output=True, text=True)
    if run.returncode != 0:
        refused.append((lab, run.stderr.strip()))
        continue
    p = json.loads(run.stdout)
    m, spread = measured(d)
    pred = (p["peak_allocated_bytes"], p["peak_reserved_bytes"], p["device_total_bytes"])
    # Pipelines' stages and skewed expert parallelism's receiving and
    # sending ranks: the prediction is the largest over the kinds.
    kinds = (p.get("pipeline") or {}).get("kinds") or (p.get("experts") or {}).get("kinds")
    if kinds:
        # A pipeline's top-level figures are the stage (rank) with the largest
        # device total; the measured ones are per metric over the ranks.
        pred = tuple(max(k[key] for k in kinds) for key in
                     ("peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes"))
    err = lambda pr, me: "%+.1f%%" % (100.0 * (pr - me) / me)
    rk = d["ranks"]
    if "device_used" in rk[0]:  # common.report's records
        mine = [k["device_total_bytes"] - k["peak_reserved_bytes"] for k in kinds or [p]]
        outside = "%d / %d" % (max(r["device_used"] - r["peak_reserved"] for r in rk) >> 20, max(mine) >> 20)
    else:
        outside = ""
    print("| %s | %.2f | %s | %.2f | %s | %.2f | %s | %.2f | %s |" % (
        lab, m[0] / G, err(pred[0], m[0]), m[1] / G, err(pred[1], m[1]), m[2] / G, err(pred[2], m[2]), spread / G,
        outside))
for lab, msg in refused:
    print("\nnot predicted: %s: %s" % (lab, msg))
