#!/usr/bin/env bash
# memplan plan at a base commit and at HEAD on fourteen requests (dense
# models from GPT-2 to Llama-3-70B on four devices, long sequences, two
# mixtures of experts), GOMAXPROCS=1: for each, whether the listed layouts
# (names and device totals) and the near misses are the same, the
# estimates each ran and the wall time of each.
# Usage: bash bench/results/2026-11-27-devvm-speed-19th/run-a.sh BASE > out-a.txt
set -u
base=$1
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add -q --detach "$w/base" "$base"
(cd "$w/base" && go build -o "$w/memplan-base" ./cmd/memplan)
(cd "$root" && go build -o "$w/memplan-head" ./cmd/memplan)
git -C "$root" worktree remove --force "$w/base"
echo "== base $(git -C "$root" rev-parse --short "$base") head $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root"
i=0
while read -r args; do
	i=$((i + 1))
	for v in base head; do
		t0=$(date +%s.%N)
		GOMAXPROCS=1 "$w/memplan-$v" plan $args --format json >"$w/$v-$i.json" 2>/dev/null
		echo "$(date +%s.%N) - $t0" | bc >"$w/$v-$i.time"
	done
	python3 - "$w" "$i" "$args" <<'PY'
import json, sys
w, i, args = sys.argv[1:]
r = {v: json.load(open(f"{w}/{v}-{i}.json")) for v in ("base", "head")}
t = {v: float(open(f"{w}/{v}-{i}.time").read()) for v in ("base", "head")}
lay = {v: [(x["name"], x["memory"]["device_total_bytes"]) for x in r[v].get("layouts", [])] for v in r}
miss = {v: [x["name"] for x in r[v].get("near_misses", [])] for v in r}
print(f"{i:2} {args}\n   layouts {'same' if lay['base'] == lay['head'] else 'DIFFER'} ({len(lay['head'])}),"
      f" near misses {'same' if miss['base'] == miss['head'] else 'differ'},"
      f" estimates {r['base']['stats']['oracle_calls']} -> {r['head']['stats']['oracle_calls']},"
      f" {t['base']:.2f} -> {t['head']:.2f} s")
PY
done <<'LIST'
specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024
specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024 --precision bf16
specs/llama-3-70b.yaml --device a100-40gb --global-batch 512 --max-gpus 256
specs/llama-3-8b.yaml --global-batch 512 --max-gpus 64
specs/llama-3-8b.yaml --device h100-80gb --global-batch 256 --gpus 16
specs/llama-3-8b.yaml --device a100-40gb --global-batch 128 --max-gpus 32
specs/mistral-7b.yaml --device h100-80gb --global-batch 64 --max-gpus 16
specs/gpt2-xl.yaml --device a100-40gb --global-batch 512 --max-gpus 16
specs/gpt2-124m.yaml --device h100-80gb --global-batch 1024 --max-gpus 8
specs/llama-3.2-1b.yaml --device a100-40gb --global-batch 256 --max-gpus 8
specs/llama-3-70b.yaml --device h200-141gb --global-batch 256 --max-gpus 64 --seq 8192
specs/llama-3-8b.yaml --device h100-80gb --global-batch 64 --max-gpus 32 --seq 32768
--hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 --device h100-80gb --global-batch 256 --max-gpus 32
--hf model/testdata/hf/mixtral-8x7b.json --seq 4096 --device h200-141gb --global-batch 128 --max-gpus 32
LIST
rm -rf "$w"
