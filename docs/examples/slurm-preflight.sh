#!/usr/bin/env bash
#SBATCH --job-name=train-llama
#SBATCH --gres=gpu:1
#SBATCH --time=04:00:00
# Pre-flight: refuse to start a job that memplan predicts will not fit.
# memplan check exits 0 (fits the target), 3 (fits, above the target band),
# 4 (does not fit), 2 (bad spec), 1 (could not run).
set -u
SPEC=${SPEC:-specs/llama-3.2-1b.yaml}
BATCH=${BATCH:-4}
memplan check "$SPEC" --batch "$BATCH" --device "${GPU:-h100-80gb}"
case $? in
  0) ;;
  3) echo "preflight: fits, but above the target band; continuing" >&2 ;;
  4) echo "preflight: batch $BATCH does not fit; try: memplan tune $SPEC" >&2; exit 4 ;;
  *) echo "preflight: memplan check failed" >&2; exit 1 ;;
esac
srun python train.py --batch "$BATCH"
