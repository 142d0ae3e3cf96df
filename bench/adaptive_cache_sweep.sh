#!/usr/bin/env bash
# Adaptive KV-cache refresh against none / prefix / dual / refresh_every on the bundled model:
#
#   bash bench/adaptive_cache_sweep.sh                       # writes runs/pb_adaptive_cache
#   OUT=bench/results bash bench/adaptive_cache_sweep.sh     # regenerate the committed results
#
# One harness call per task, each running every cache of bench/runs/adaptive_cache.json back to
# back, so the runs share the machine's load in the same way (tokens/s side by side). Zero-shot,
# block 8, STRATIFIED (default 30) evenly spaced samples per task; LANES (default 2) processes
# take the tasks in turn (each writes the summary it knows; the last pass merges them). A rerun resumes.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs}
STRATIFIED=${STRATIFIED:-30}
LANES=${LANES:-2}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
lane() {
  for ((i = $1; i < ${#TASKS[@]}; i += LANES)); do
    "$PY" -m dllm bench parallelbench --tasks "${TASKS[$i]}" --shots 0 --runs bench/runs/adaptive_cache.json \
      --stratified-samples "$STRATIFIED" --out "$OUT/pb_adaptive_cache" -q
  done
}
pids=()
for ((l = 0; l < LANES; l++)); do lane "$l" & pids+=($!); done
wait "${pids[@]}"
# one pass over every task (all pairs are stored, none reruns) writes the summary of all lanes
"$PY" -m dllm bench parallelbench --tasks "${TASKS[@]}" --shots 0 --runs bench/runs/adaptive_cache.json \
  --stratified-samples "$STRATIFIED" --out "$OUT/pb_adaptive_cache" -q
