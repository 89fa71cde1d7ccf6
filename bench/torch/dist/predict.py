#!/usr/bin/env python3
"""predict.py GRID [MEMPLAN]: memplan's per-GPU predictions for every line of
a dist grid (e.g. heldout.txt), with the memplan command each line maps to
(the mapping of train.py's memplan_command) and --device h200-141gb. Prints
one block per line: the grid line, the command, and peak allocated, peak
reserved and device total per GPU (GiB and bytes)."""
import json, shlex, subprocess, sys

grid, exe = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "memplan")
G = 1 << 30
for line in open(grid):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    args = shlex.split(line)
    if args[0].startswith("T="):
        args = args[1:]
    spec, opts = args[0], {}
    i = 1
    while i < len(args):
        k = args[i].lstrip("-")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            opts[k], i = args[i + 1], i + 2
        else:
            opts[k], i = True, i + 1
    mode = opts["mode"]
    zero = {"ddp": 0, "ddp-view": 0, "zero1": 1}.get(mode)
    if zero is None:
        zero = 2 if opts.get("reshard") == "false" else 3
    cmd = ["estimate", spec, "--batch", opts["batch"], "--seq", opts["seq"], "--precision", opts["precision"],
           "--dp", "2", "--zero", str(zero)]
    if opts.get("checkpointing", "none") != "none":
        cmd += ["--checkpointing", opts["checkpointing"]]
    if mode == "ddp-view":
        cmd += ["--bucket-view"]
    if opts.get("alloc-conf"):
        cmd += ["--alloc-conf", opts["alloc-conf"]]
    cmd += ["--device", "h200-141gb"]
    p = json.loads(subprocess.run([exe] + cmd + ["--format", "json"], capture_output=True, text=True,
                                  check=True).stdout)
    print(line)
    print("  memplan " + " ".join(cmd))
    for k, name in (("peak_allocated_bytes", "peak allocated"), ("peak_reserved_bytes", "peak reserved"),
                    ("device_total_bytes", "device total")):
        print("  %-15s %7.2f GiB  %d B" % (name, p[k] / G, p[k]))
    print()
