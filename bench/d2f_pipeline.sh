#!/usr/bin/env bash
# D2F pipelined decoding and LoPA on it against one block at a time, on a D2F-trained (block-causal)
# checkpoint, over the official ParallelBench files (every sample):
#
#   MODEL=path/to/d2f-checkpoint bash bench/d2f_pipeline.sh          # writes runs/pb_d2f_pipeline
#   MODEL=dllm-waitingline-bd STRATIFIED=2 bash bench/d2f_pipeline.sh # a quick check: 2 samples per task
#
# Runs: bench/runs/d2f_pipeline.json (threshold 0.9 block by block; the pipeline at D2F's add 0.1 /
# decoded 0.95; LoPA's released loop on it at branching factor 2 and 4). The summary gives each
# run's tokens per forward (TPF) and score per task; a rerun resumes.
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-dllm-waitingline-bd}
OUT=${OUT:-runs}
SAMPLES=()
if [[ -n "${STRATIFIED:-}" ]]; then SAMPLES=(--stratified-samples "$STRATIFIED"); fi
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --shots 0 \
  --runs bench/runs/d2f_pipeline.json "${SAMPLES[@]}" --out "$OUT/pb_d2f_pipeline" -q
