#!/usr/bin/env bash
# Every ParallelBench sweep of the bundled trained model, as committed in bench/results/pb_*:
#
#   bash bench/trained_model_sweeps.sh            # from the repository root, ../shared beside it
#   LIMIT=5 OUT=/tmp/pb bash bench/trained_model_sweeps.sh   # a quick dry run
#
# 1. the Learn2PD filter for 8-position windows, shipped next to the model (issue: schedules);
# 2. top-k at 1, 2, 4, 8 tokens per step, confidence and random order, all 100 samples per task
#    (issue: trained model + harness);
# 3. caches, schedules (+ a SchED tau calibration) and strategies on the first SWEEP_LIMIT samples
#    per task (bench/runs/*.json).
# The tasks are the eleven the model was trained for (ten waiting-line tasks and the 4x4 Latin
# square); Sudoku is offline-scored too but not in the training set.
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-dllm/assets/models/dllm-waitingline-llada}
OUT=${OUT:-bench/results}
LIMIT=${LIMIT:-}
SWEEP_LIMIT=${LIMIT:-${SWEEP_LIMIT:-50}}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
limit_all=()
[ -n "$LIMIT" ] && limit_all=(--limit "$LIMIT")

if [ ! -f "$MODEL/learn2pd-block8/filter.json" ] || [ -n "${RETRAIN_FILTER:-}" ]; then
  "$PY" -m dllm train-filter --model "$MODEL" --block-length 8 --samples 256 --out "$MODEL/learn2pd-block8"
fi
# Two lanes of one thread each, side by side on a 2-core machine: every run inside a lane shares
# the machine with the other lane in the same way, so ratios within one sweep stay comparable.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" "${limit_all[@]}" \
  --policy low_confidence --policy random --tokens-per-step 1 2 4 8 --out "$OUT/pb_topk" &
topk=$!
for sweep in caches schedules sched_calibration strategies; do
  "$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" --limit "$SWEEP_LIMIT" \
    --runs "bench/runs/$sweep.json" --out "$OUT/pb_$sweep"
done
wait "$topk"
