#!/usr/bin/env bash
# Every ParallelBench sweep of the bundled trained model, as committed in bench/results/pb_*:
#
#   bash bench/trained_model_sweeps.sh                  # writes runs/pb_* (never the committed results)
#   QUICK=1 bash bench/trained_model_sweeps.sh          # a few minutes: 5 stratified samples per task
#   OUT=bench/results bash bench/trained_model_sweeps.sh   # regenerate the committed results
#
# Environment: OUT (default runs), QUICK=1 (STRATIFIED=5), STRATIFIED (stratified samples per
# task for every sweep: one from the middle of each of N equal strata of the length-ordered
# file, never its first N; default: the whole file for top-k), SWEEP_STRATIFIED (default 50:
# caches, schedules, SchED calibration) and STRATEGIES_STRATIFIED (default 30: FreeDave / LoPA
# forward up to 8 rows per step): stratified subsets, so the sweeps fit a shared 2-core
# machine; every summary and table names its subset. PY (python), MODEL, RETRAIN_FILTER=1.
# A rerun into the same OUT resumes: finished (run, task) pairs are skipped.
#
# 1. the Learn2PD filter for 8-position windows, shipped next to the model;
# 2. confidence top-k at 1 and 8 tokens per step under the benchmark's own protocol (its
#    one-shot example: pb_topk), then confidence and random top-k at 1, 2, 4, 8 tokens per step
#    zero-shot (pb_topk_zeroshot);
# 3. caches, schedules (+ a SchED tau calibration) and strategies (bench/runs/*.json), zero-shot:
#    the model was trained zero-shot and does not follow the one-shot format (pb_topk shows it
#    scoring about 0), so one-shot scores would sit at the floor and compare nothing.
# The tasks are the eleven the model was trained for (ten waiting-line tasks and the 4x4 Latin
# square); Sudoku is offline-scored too but not in the training set.
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-dllm/assets/models/dllm-waitingline-llada}
OUT=${OUT:-runs}
STRATIFIED=${STRATIFIED:-}
[ -n "${QUICK:-}" ] && STRATIFIED=${STRATIFIED:-5}
SWEEP_STRATIFIED=${STRATIFIED:-${SWEEP_STRATIFIED:-50}}
STRATEGIES_STRATIFIED=${STRATIFIED:-${STRATEGIES_STRATIFIED:-30}}
TASKS=(waiting_line/copy waiting_line/reverse waiting_line/sort waiting_line/shuffle
       waiting_line/insert_index waiting_line/insert_random waiting_line/remove_index
       waiting_line/remove_random waiting_line/replace_index waiting_line/replace_random
       puzzle/latin_square_n4)
subset=()
[ -n "$STRATIFIED" ] && subset=(--stratified-samples "$STRATIFIED")
pb() { "$PY" -m dllm bench parallelbench --model "$MODEL" --tasks "${TASKS[@]}" "${subset[@]}" "$@"; }

if [ ! -f "$MODEL/learn2pd-block8/filter.json" ] || [ -n "${RETRAIN_FILTER:-}" ]; then
  "$PY" -m dllm train-filter --model "$MODEL" --block-length 8 --samples 256 --out "$MODEL/learn2pd-block8"
fi
# Three lanes of one thread each, side by side: every run inside a lane shares the machine with
# the other lanes in the same way, so ratios within one sweep stay comparable (not across sweeps).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
sweep() { local name=$1 n=$2; shift 2; pb --shots 0 --runs "bench/runs/$name.json" --out "$OUT/pb_$name" --stratified-samples "$n" "$@"; }
(
  pb --policy low_confidence --tokens-per-step 1 8 --out "$OUT/pb_topk"
  sweep caches "$SWEEP_STRATIFIED"
  sweep sched_calibration "$SWEEP_STRATIFIED"
  pb --shots 0 --policy low_confidence --policy random --tokens-per-step 1 2 4 8 --out "$OUT/pb_topk_zeroshot"
) &
lanes=($!)
sweep schedules "$SWEEP_STRATIFIED" & lanes+=($!)
sweep strategies "$STRATEGIES_STRATIFIED"
wait "${lanes[@]}"
