#!/usr/bin/env python3
"""A launcher that asks memplan for the batch to use and checks it before
starting the job. Usage: launcher.py SPEC [DEVICE]"""
import json
import subprocess
import sys

spec = sys.argv[1]
device = sys.argv[2] if len(sys.argv) > 2 else "h100-80gb"
memplan = ["memplan"] if len(sys.argv) <= 3 else sys.argv[3].split()

tune = subprocess.run(memplan + ["tune", spec, "--device", device, "--format", "json"],
                      capture_output=True, text=True)
if tune.returncode == 4:
    plan = json.loads(tune.stdout)
    print("does not fit; cheapest fix:", plan["fixes"][0]["change"], file=sys.stderr)
    sys.exit(4)
tune.check_returncode()
batch = json.loads(tune.stdout)["batch"]

check = subprocess.run(memplan + ["check", spec, "--batch", str(batch), "--device", device, "--format", "json"],
                       capture_output=True, text=True)
verdict = json.loads(check.stdout)
print(f"batch {batch}: {verdict['verdict']} ({100 * verdict['fill']:.1f}% of {device}), exit {check.returncode}")
sys.exit(check.returncode)
