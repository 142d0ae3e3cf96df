#!/usr/bin/env bash
# Every policy under every cache on one bundled model (grids from bench/policy_grid.py):
#
#   MODEL=dllm/assets/models/dllm-waitingline-dream NAME=dream DREAM_RULES=1 bash bench/policy_sweeps.sh
#   MODEL=dllm/assets/models/dllm-waitingline-bd NAME=bd SUB_BLOCK=1 OUT=bench/results bash bench/policy_sweeps.sh
#
# Writes $OUT/pb_${NAME}_policies (default OUT: runs): top-k 1-8, threshold 0.7-0.95, factor, EB,
# SchED, Learn2PD (+ EoTP), FreeDave, FreeDave++ and LoPA, each with no cache, prefix, dual and adaptive
# cache (bench/runs/policies_caches.json); SUB_BLOCK=1 adds the dual cache over 4-token
# sub-blocks (policies_subblock.json), DREAM_RULES=1 Dream's own rules (dream_rules_caches.json);
# GRID=policies_block_causal runs a block-causal model's grid (no cache and adaptive: its caches are exact).
# Zero-shot, 8-token blocks, the eleven training tasks, STRATIFIED (default 20) stratified
# samples per task: one process of one thread, so it fits a shared 2-core machine; a rerun
# into the same OUT resumes (finished (run, task) pairs are skipped).
# Trains the model's Learn2PD filters first when missing (block 8; block 4 with SUB_BLOCK=1).
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:?set MODEL to a model directory}
NAME=${NAME:?set NAME, the results prefix (pb_NAME_policies)}
OUT=${OUT:-runs}
STRATIFIED=${STRATIFIED:-20}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
widths=(8)
grids=("${GRID:-policies_caches}")
[ -n "${SUB_BLOCK:-}" ] && widths+=(4) && grids+=(policies_subblock)
[ -n "${DREAM_RULES:-}" ] && grids+=(dream_rules_caches)
for w in "${widths[@]}"; do
  if [ ! -f "$MODEL/learn2pd-block$w/filter.json" ]; then
    "$PY" -m dllm train-filter --model "$MODEL" --block-length "$w" --samples 256 --out "$MODEL/learn2pd-block$w" -q
  fi
done
for grid in "${grids[@]}"; do
  "$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --shots 0 \
    --runs "bench/runs/$grid.json" --stratified-samples "$STRATIFIED" --out "$OUT/pb_${NAME}_policies" -q
done
