#!/usr/bin/env bash
# The adaptive cache against no cache and the dual cache on one model, side by side (issue 30):
#
#   MODEL=dllm/assets/models/dllm-waitingline-llada NAME=llada OUT=bench/results bash bench/adaptive_cache_check.sh
#
# Runs bench/runs/adaptive_cache_read.json (threshold 0.9, block 8, zero-shot: none, dual, the
# adaptive defaults, cover 0.95, and the first version's choice, select=window) on the whole
# official files ($OUT/pb_adaptive_${NAME}_official) and on FRESH (default 20) fresh samples per
# task drawn with seed 1000000 ($OUT/pb_adaptive_${NAME}_fresh). One process: each task runs every
# cache back to back, so their tokens/s share the machine's load. The adaptive defaults were
# chosen on fresh samples of seed 2000000 (validation), never on these. Table per folder:
#   python bench/cache_pareto.py $OUT/pb_adaptive_${NAME}_official/summary.json
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:?set MODEL to a model directory}
NAME=${NAME:?set NAME, the results suffix}
OUT=${OUT:-runs}
FRESH=${FRESH:-20}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
"$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --shots 0 \
  --runs bench/runs/adaptive_cache_read.json --out "$OUT/pb_adaptive_${NAME}_official" -q
"$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --shots 0 \
  --runs bench/runs/adaptive_cache_read.json --fresh-samples "$FRESH" --fresh-seed 1000000 \
  --out "$OUT/pb_adaptive_${NAME}_fresh" -q
