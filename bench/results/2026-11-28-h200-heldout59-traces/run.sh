export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=0 python3 bench/torch/measure.py model/testdata/hf/llama4-test-4layer.json --hf --batch 4 --seq 2048 --precision bf16 --checkpointing every-block --steps 6 --trace $OUT/t1.json --label "model/testdata/hf/llama4-test-4layer.json --hf --batch 4 --seq 2048 --precision bf16 --checkpointing every-block --steps 6" > $OUT/runs.jsonl 2>$OUT/t1.err &
CUDA_VISIBLE_DEVICES=1 python3 bench/torch/measure.py model/testdata/hf/llama4-test-maverick-4layer.json --hf --batch 1 --seq 8192 --precision amp-bf16 --checkpointing every-block --steps 6 --trace $OUT/t2.json --label "model/testdata/hf/llama4-test-maverick-4layer.json --hf --batch 1 --seq 8192 --precision amp-bf16 --checkpointing every-block --steps 6" > $OUT/runs2.jsonl 2>$OUT/t2.err &
wait
gzip -f $OUT/t1.json $OUT/t2.json
cat $OUT/runs2.jsonl >> $OUT/runs.jsonl; rm $OUT/runs2.jsonl
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt; date >> $OUT/env.txt
python3 -c "
import json
for l in open('$OUT/runs.jsonl'):
    d=json.loads(l); print(d['label'][:80], d.get('peak_reserved_bytes'), d.get('ok'))
"
tail -2 $OUT/t1.err $OUT/t2.err
